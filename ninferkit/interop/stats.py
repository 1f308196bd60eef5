"""A cell's figures as the peers print them: latencies in milliseconds, with the mean beside the percentiles.

ninferkit's sweep tables give seconds and medians (latency.py); every peer gives milliseconds and means too.
These are the same samples (`latency.samples`), the same percentiles (numpy's linear interpolation, as vLLM
and latency.py) and the population standard deviation, only in ms and with the mean.
"""

from __future__ import annotations

from dataclasses import dataclass

from ninferkit.interop.base import Cell
from ninferkit.measure.latency import peak_in_flight, requests_per_s, wall_s
from ninferkit.rundir.records import RequestRow

STATS = ("mean", "median", "std", "p90", "p99")
"""The statistics the peers print of a latency, by their names (`latency.Distribution.value`)."""

__all__ = ["STATS", "Throughput", "last_token_s", "throughput"]


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
