"""Per-request latencies and their distributions, named and computed as the peer tools compute them.

The same name means different formulas in different tools (reference/peer-benchmark-tools.md §0), so
each metric here is one formula, under vLLM's name (`vllm bench serve`), with the other tools' names:

- `ttft_client_s`: send to the first event that carries generated text (a role-only chunk does not).
- `tpot_client_s`, time per output token: per request, (t_last_token - t_first_token) /
  (completion_tokens - 1), the tokens from the server's usage. vLLM's, SGLang's and inference-perf's
  TPOT; AIPerf's and GuideLLM's "ITL". Right under speculative decoding, where one event carries
  several tokens.
- `itl_client_s`, inter-token latency: the gaps between consecutive events that carry text, pooled over
  the requests. vLLM's and SGLang's ITL; AIPerf's ICL (inter-chunk latency). Under speculative decoding
  a gap spans every token its event carries, so ITL exceeds TPOT by about the tokens per event; two
  events read from the socket together have a gap of 0.
- `e2e_client_s`: send to the end of the stream, its final usage event included (vLLM's E2EL stops at
  the last text event).

Statistics (`Distribution`, one type for the sweep tables in s and the peers' summaries in ms): p50, p90 and
p99 interpolated linearly between samples (numpy's default, as vLLM; p50 is the peers' median), the population
standard deviation (numpy's `std`, as vLLM), the mean, min and max. `requests_per_s` is vLLM's request throughput:
finished requests over the wall time from the first send to the last end. Goodput counts the requests
that met every latency target set, per second of the wall time of everything sent: vLLM's `request_goodput`
(`vllm bench serve --goodput`, after DistServe's per-request SLOs; DistServe's own figure is the highest rate
whose share of such requests reaches a goal, which the rate sweep's cells show as `good_fraction` per rate);
`goodput_tok_s` counts their output tokens instead. `good_fraction` divides by every request sent, errored ones
included (AIPerf: a server that drops requests cannot look good).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ninferkit.rundir.records import Number, RequestRow

METRICS = ("ttft_client_s", "tpot_client_s", "itl_client_s", "e2e_client_s")
PERCENTILES = (50, 90, 99)


MS = 1000.0
"""Seconds to milliseconds: every peer writes latencies in ms, ninferkit's rows in s."""


@dataclass(frozen=True)
class Distribution:
    """One metric's samples summarised, in the unit they were given in (`distribution(..., scale=MS)`: ms, as
    the peers print them): how many, the mean, p50 (the median), p90, p99, the population standard deviation,
    min and max; all None where there is no sample. The sweep tables show the percentiles and the deviation;
    interop and an imported run's write-up the peers' mean, median, min and max beside them."""

    n: int
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None

    def columns(self, name: str) -> dict[str, float | None]:
        """`{name}_p50`, `_p90`, `_p99`, `_std`: the sweep tables' columns."""
        return {f"{name}_p50": self.p50, f"{name}_p90": self.p90, f"{name}_p99": self.p99, f"{name}_std": self.std}

    def value(self, stat: str) -> float | None:
        """A statistic by the peers' name (interop.stats.STATS): `median` is p50."""
        found: float | None = getattr(self, "p50" if stat == "median" else stat)
        return found


def distribution(values: Sequence[float], scale: float = 1.0) -> Distribution:
    """Mean, p50/p90/p99 (linear interpolation), population standard deviation, min and max of `values` times
    `scale` (none: all None)."""
    if not values:
        return Distribution(0)
    data = np.asarray(values, dtype=float) * scale
    p50, p90, p99 = (float(v) for v in np.percentile(data, PERCENTILES))
    return Distribution(len(values), float(data.mean()), p50, p90, p99, float(data.std()), float(data.min()),
                        float(data.max()))


def number(value: Number) -> float | None:
    """A row's number as a float; None for an absent one (None, or a NaN JSON let through)."""
    return None if value is None or math.isnan(value) else float(value)


def tpot_s(row: RequestRow) -> float | None:
    """A request's time per output token after the first; rows written before the client recorded
    `tpot_client_s` have it as the inverse of their `decode_tok_s_client` (the same formula)."""
    value = number(row.tpot_client_s)
    if value is not None:
        return value
    rate = number(row.decode_tok_s_client)
    return 1 / rate if rate else None


def gaps(row: RequestRow) -> list[float] | None:
    """A request's ITL gaps; None for a row written before the client stamped every text event."""
    return None if row.itl_client_s is None else [float(gap) for gap in row.itl_client_s]


def samples(rows: Iterable[RequestRow], metric: str) -> list[float]:
    """The metric's samples over `rows` (a number field of RequestRow): one per request, except ITL, whose
    gaps are pooled."""
    out: list[float] = []
    for row in rows:
        if metric == "itl_client_s":
            out.extend(gaps(row) or ())
            continue
        value = tpot_s(row) if metric == "tpot_client_s" else number(getattr(row, metric))
        if value is not None:
            out.append(value)
    return out


def wait_before_prefill_s(row: RequestRow) -> float | None:
    """Client TTFT minus the server's prompt time: HTTP, queueing and the first chunk's trip, which the
    engine's own timings leave out (None without both)."""
    if row.ttft_client_s is None or row.prompt_s_server is None:
        return None
    return row.ttft_client_s - row.prompt_s_server


def recorded_itl(rows: Iterable[RequestRow]) -> bool:
    """Whether any of the rows carries ITL gaps (rows from before the client stamped every event do not)."""
    return any(row.itl_client_s is not None for row in rows)


def wall_s(rows: Sequence[RequestRow]) -> float | None:
    """First send to last end of the rows, on the client's monotonic clock."""
    sends = [t for t in (number(row.t_send) for row in rows) if t is not None]
    ends = [t for t in (number(row.t_done) for row in rows) if t is not None]
    return max(ends) - min(sends) if sends and ends and max(ends) > min(sends) else None


def peak_in_flight(rows: Sequence[RequestRow]) -> int:
    """The most requests in flight at once (sent, not yet ended), from their send and end times."""
    edges = sorted((time, step) for row in rows
                   for time, step in ((number(row.t_send), 1), (number(row.t_done), -1))
                   if time is not None)
    peak = current = 0
    for _, step in edges:  # at a tie an end sorts before a send: a slot freed and taken again is not two
        current += step
        peak = max(peak, current)
    return peak


def requests_per_s(ok: Sequence[RequestRow], sent: Sequence[RequestRow]) -> float | None:
    """Finished (ok) requests over the wall time of every request sent, failed ones included (vLLM's
    request throughput: completed requests over the benchmark's duration)."""
    wall = wall_s(sent)
    return len(ok) / wall if ok and wall else None


@dataclass(frozen=True)
class Targets:
    """Latency targets (None: not set); a request is good when it finished and met every one set."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    itl_s: float | None = None
    """The longest gap between two text events of a request: no stall longer than this."""

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.ttft_s, self.tpot_s, self.itl_s))

    def describe(self) -> str:
        parts = [f"{name} <= {value:g} s" for name, value in
                 (("TTFT", self.ttft_s), ("TPOT", self.tpot_s), ("every ITL gap", self.itl_s)) if value is not None]
        return ", ".join(parts) or "none set"

    def met(self, row: RequestRow) -> bool:
        """Finished, and within every target set. A request of one token has no TPOT and no gap, so it meets
        those targets (as vLLM counts its TPOT as 0); a target set on rows that never recorded gaps is not met."""
        if row.status != "ok":
            return False
        ttft = number(row.ttft_client_s)
        if self.ttft_s is not None and (ttft is None or ttft > self.ttft_s):
            return False
        tpot = tpot_s(row)
        if self.tpot_s is not None and tpot is not None and tpot > self.tpot_s:
            return False
        found = gaps(row)
        return self.itl_s is None or (found is not None and max(found, default=0.0) <= self.itl_s)


def goodput(sent: Sequence[RequestRow], targets: Targets) -> dict[str, float | None]:
    """`goodput_rps` (good requests over the wall time of all sent: vLLM's `request_goodput`), `goodput_tok_s`
    (their output tokens, the server's count, over that time) and `good_fraction` (good over sent); all None when
    no target is set: without targets every finished request would count."""
    if not targets.any or not sent:
        return {"goodput_rps": None, "goodput_tok_s": None, "good_fraction": None}
    good = [row for row in sent if targets.met(row)]
    wall = wall_s(sent)
    tokens = sum(int(row.completion_tokens or 0) for row in good)
    return {"goodput_rps": len(good) / wall if wall else None, "goodput_tok_s": tokens / wall if wall else None,
            "good_fraction": len(good) / len(sent)}


def distributions_ms(rows: Sequence[RequestRow]) -> dict[str, Distribution]:
    """ttft, tpot, itl and e2e (METRICS) of the finished rows, in ms, as the peers summarise them."""
    ok = [row for row in rows if row.status == "ok"]
    return {metric: distribution(samples(ok, metric), MS) for metric in METRICS}
