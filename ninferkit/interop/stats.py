"""A cell's figures as the peers print them: latencies in milliseconds, with the mean beside the percentiles.

ninferkit's sweep tables give seconds and medians (latency.py); every peer gives milliseconds and means too.
These are the same samples (`latency.samples`), the same percentiles (numpy's linear interpolation, as vLLM
and latency.py) and the population standard deviation, only in ms and with the mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ninferkit.interop.base import MS, Cell
from ninferkit.measure.latency import METRICS, peak_in_flight, requests_per_s, samples, wall_s
from ninferkit.rundir.records import RequestRow

STATS = ("mean", "median", "std", "p90", "p99")


@dataclass(frozen=True)
class Block:
    """One metric over a cell, in ms; all None where the cell has no sample."""

    n: int
    mean: float | None = None
    median: float | None = None
    std: float | None = None
    p90: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None

    def value(self, stat: str) -> float | None:
        found: float | None = getattr(self, stat)
        return found


def block_ms(values_s: Sequence[float]) -> Block:
    """Samples in seconds summarised in milliseconds."""
    if not values_s:
        return Block(0)
    data = np.asarray(values_s, dtype=float) * MS
    p90, p99 = (float(v) for v in np.percentile(data, (90, 99)))
    return Block(len(values_s), float(data.mean()), float(np.median(data)), float(data.std()), p90, p99,
                 float(data.min()), float(data.max()))


def latency_blocks(rows: Sequence[RequestRow]) -> dict[str, Block]:
    """ttft, tpot, itl and e2e (latency.METRICS) of the finished rows, in ms."""
    ok = [row for row in rows if row.status == "ok"]
    return {metric: block_ms(samples(ok, metric)) for metric in METRICS}


def last_token_s(row: RequestRow) -> float | None:
    """Send to the last text event: vLLM's E2EL, AIPerf's and GuideLLM's request latency."""
    if row.t_send is None or row.t_last_token is None:
        return None
    return float(row.t_last_token) - float(row.t_send)


@dataclass(frozen=True)
class Throughput:
    duration_s: float | None
    completed: int
    failed: int
    input_tokens: int
    output_tokens: int
    requests_per_s: float | None
    output_tok_s: float | None
    total_tok_s: float | None
    peak_in_flight: int


def throughput(cell: Cell) -> Throughput:
    """The cell's request and token throughput over its wall time (latency.wall_s: first send to last end)."""
    ok = cell.ok
    wall = wall_s(cell.rows)
    inputs = sum(row.prompt_tokens or 0 for row in ok)
    outputs = sum(row.completion_tokens or 0 for row in ok)
    return Throughput(wall, len(ok), len(cell.rows) - len(ok), inputs, outputs, requests_per_s(ok, cell.rows),
                      outputs / wall if wall else None, (inputs + outputs) / wall if wall else None,
                      peak_in_flight(cell.rows))
