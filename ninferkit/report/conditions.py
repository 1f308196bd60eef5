"""Run conditions from telemetry.jsonl: power, SM clock, temperature and throttling per GPU, and each card's
memory once the server was up.

Numbers measured on a GPU that throttled, or at a different power cap, are not the card's numbers;
the write-up states the conditions beside every benchmark. Samples are taken while requests were in
flight (first send to last byte) when requests.jsonl exists, so idle time does not dilute them.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections import defaultdict
from dataclasses import dataclass, replace

from ninferkit.report.data import RunData
from ninferkit.report.fmt import gib
from ninferkit.rundir.records import TelemetrySample


@dataclass(frozen=True)
class GpuConditions:
    gpu: str
    samples: int
    window: str
    power_median_w: float | None
    power_max_w: float | None
    sm_clock_median_mhz: float | None
    sm_clock_max_mhz: float | None
    temperature_max_c: float | None
    throttled_fraction: float
    throttle_reasons: tuple[str, ...]
    idle_samples: int = 0
    """Samples while no request was in flight (seed 000 §2.7's "空载"), beside the load figures."""
    idle_temperature_c: tuple[float, float] | None = None
    idle_power_median_w: float | None = None


def load_window(run: RunData) -> tuple[float, float] | None:
    """(first t_send, last t_done) of the measured requests, on the telemetry clock (time.monotonic)."""
    starts = [row.t_send for row in run.requests if row.t_send is not None]
    ends = [row.t_done for row in run.requests if row.t_done is not None]
    return (min(starts), max(ends)) if starts and ends else None


def gpu_conditions(run: RunData) -> list[GpuConditions]:
    """One summary per GPU from the nvml rows; an empty list when none were recorded (a CPU run)."""
    rows = run.nvml()
    window = load_window(run)
    in_window = [row for row in rows if window and window[0] <= row.t_mono <= window[1]]
    label = "while requests were in flight" if in_window else "whole run"
    chosen = in_window or rows
    by_gpu: dict[str, list[TelemetrySample]] = defaultdict(list)
    for row in chosen:
        by_gpu[str(row.gpu or 0)].append(row)
    idle = _idle(run, rows)
    return [_with_idle(_summarise(gpu, samples, label), idle.get(gpu, [])) for gpu, samples in sorted(by_gpu.items())]


def _idle(run: RunData, rows: list[TelemetrySample]) -> dict[str, list[TelemetrySample]]:
    """Per GPU, the samples taken while no request of the run was in flight."""
    spans = sorted((row.t_send, row.t_done) for row in run.requests
                   if row.t_send is not None and row.t_done is not None)
    out: dict[str, list[TelemetrySample]] = defaultdict(list)
    for row in rows:
        if not any(start <= row.t_mono <= end for start, end in spans):
            out[str(row.gpu or 0)].append(row)
    return out


def _with_idle(found: GpuConditions, idle: list[TelemetrySample]) -> GpuConditions:
    temperature = [float(row.temperature_c) for row in idle if row.temperature_c is not None]
    power = [float(row.power_w) for row in idle if row.power_w is not None]
    return replace(found, idle_samples=len(idle),
                   idle_temperature_c=(min(temperature), max(temperature)) if temperature else None,
                   idle_power_median_w=statistics.median(power) if power else None)


def _summarise(gpu: str, rows: list[TelemetrySample], window: str) -> GpuConditions:
    power = [float(row.power_w) for row in rows if row.power_w is not None]
    clock = [float(row.sm_clock_mhz) for row in rows if row.sm_clock_mhz is not None]
    temperature = [float(row.temperature_c) for row in rows if row.temperature_c is not None]
    reasons = sorted({reason for row in rows for reason in row.throttle_reasons or []})
    throttled = sum(1 for row in rows if row.throttled)
    return GpuConditions(
        gpu, len(rows), window,
        statistics.median(power) if power else None, max(power) if power else None,
        statistics.median(clock) if clock else None, max(clock) if clock else None,
        max(temperature) if temperature else None,
        throttled / len(rows), tuple(reasons),
    )


@dataclass(frozen=True)
class CardMemory:
    """One GPU's memory in use as NVML counts it (every process on the card, nvidia-smi's memory.used)."""

    gpu: str
    used_bytes: int
    """At the first sample at or after the server was ready (the run's first sample where no ready time is known)."""
    after_ready_s: float | None
    """How long after ready that sample was taken; None: the run knows no ready time (a server it did not start)."""
    most_bytes: int
    """The most any sample of the run read."""


def _utc(text: str | None) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def ready_at(run: RunData) -> dt.datetime | None:
    """When the run's server answered ready: server.json's start (to the second) plus its ready time."""
    server = run.server
    started = _utc(server.started) if server else None
    if started is None or server is None or server.ready_s is None:
        return None
    return started + dt.timedelta(seconds=float(server.ready_s))


def memory_after_ready(run: RunData) -> list[CardMemory]:
    """Per GPU, the memory in use once the server was ready, as seed 004 §四 reads nvidia-smi after start ("双卡各占
    13.5 GB") and 001 §5.2 ("25 GB+"): the first NVML sample at or after ready, and the most the run read; a GPU
    with no memory reading is left out (not sampled, never 0)."""
    ready = ready_at(run)
    by_gpu: dict[str, list[tuple[dt.datetime | None, int]]] = defaultdict(list)
    for row in run.nvml():
        if row.memory_used_bytes is not None:
            by_gpu[str(row.gpu or 0)].append((_utc(row.t_utc), row.memory_used_bytes))
    out = []
    for gpu, samples in sorted(by_gpu.items()):
        after = [(at, used) for at, used in samples if ready is None or (at is not None and at >= ready)]
        if not after:
            continue
        at, used = after[0]
        out.append(CardMemory(gpu, used, (at - ready).total_seconds() if ready and at else None,
                              max(used for _, used in samples)))
    return out


MEMORY_FACT = "GPU memory used after start"


def memory_row(run: RunData) -> tuple[str, str] | None:
    """The Environment's row of GPU memory in use after start, in GiB (the unit nvidia-smi's MiB add up to): each
    card, their total where there are several, when it was sampled and the most the run read; "not sampled" on a
    GPU run with no memory reading, no row on a CPU run."""
    cards = memory_after_ready(run)
    if not cards:
        return (MEMORY_FACT, "not sampled (telemetry.jsonl has no NVML memory reading after the server was ready)") \
            if run.gpu_available else None
    each = "; ".join(f"GPU {card.gpu} {gib(card.used_bytes)}" for card in cards)
    total = f"; total {gib(sum(card.used_bytes for card in cards))}" if len(cards) > 1 else ""
    gaps = [card.after_ready_s for card in cards if card.after_ready_s is not None]
    unknown = "ninferkit did not start this server" if run.server and run.server.external else \
        "server.json records no ready time"
    when = (f"the first sample after the server was ready, {max(gaps):.0f} s after" if gaps
            else f"the run's first sample ({unknown})")
    grew = [card for card in cards if gib(card.most_bytes) != gib(card.used_bytes)]
    most = f"; at most {', '.join(f'GPU {card.gpu} {gib(card.most_bytes)}' for card in grew)} during the run" \
        if grew else "; no more during the run"
    return (MEMORY_FACT, f"{each}{total} (NVML's used memory, every process on the card, as nvidia-smi shows it): "
            f"{when}{most}")
