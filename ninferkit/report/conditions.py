"""Run conditions from telemetry.jsonl: power, SM clock, temperature and throttling per GPU.

Numbers measured on a GPU that throttled, or at a different power cap, are not the card's numbers;
the write-up states the conditions beside every benchmark. Samples are taken while requests were in
flight (first send to last byte) when requests.jsonl exists, so idle time does not dilute them.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, replace

from ninferkit.report.data import RunData
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
