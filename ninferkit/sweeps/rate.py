"""The open-loop rate sweep: when each request leaves, and whether the server kept up.

Arrivals are a Poisson process: exponential gaps drawn from `random.Random(seed)`, so a seed gives the
same schedule on every run and machine, and every rate gets the same unit-rate schedule divided by the
rate (the bursts fall at the same places, scaled). The first request leaves at 0. A count of requests,
or the arrivals that fall inside a duration.

A server keeps up when a request's latency counted from its scheduled arrival (queueing at the server
included) does not grow as requests keep arriving. When it cannot keep up, requests pile up: request i
arrives at i / offered and ends at about i / served, so that latency grows by (offered / served - 1)
seconds per second of arrivals. The least-squares slope of latency over arrival time
(`backlog_growth`) is about 0 below the server's limit; above it the server served about
1 / (1 + growth) of the offered rate. A cell with a failed request did not keep up either, whatever the
slope: a request refused at once reads as served fast, and one that timed out leaves no end to fit. Near
the server's limit a few dozen Poisson arrivals leave the slope uncertain, so a growth within two standard
errors of the threshold is "unclear", not a verdict.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np

from ninferkit.measure.latency import number
from ninferkit.rundir.records import RequestRow

KEPT_UP_GROWTH = 0.1
"""Above this backlog growth (the server served less than 1 / 1.1, about 91%, of the offered rate) it did not
keep up."""


def poisson_arrivals(rate_rps: float, requests: int | None, duration_s: float | None, seed: int) -> list[float]:
    """Arrival times in seconds from the cell's start: `requests` of them, or those before `duration_s`."""
    draw = random.Random(seed)
    times, now = [0.0], 0.0
    while True:
        now += draw.expovariate(1.0) / rate_rps
        if (requests is not None and len(times) >= requests) or (duration_s is not None and now >= duration_s):
            return times
        times.append(now)


def backlog_growth(rows: Sequence[RequestRow]) -> float | None:
    """The slope of (end - scheduled send) over scheduled send, over the requests given (the finished ones:
    a request refused at once would read as served fast); None below 3 requests or without a schedule."""
    fit = _growth_fit(rows)
    return None if fit is None else fit[0]


def kept_up(sent: Sequence[RequestRow]) -> tuple[bool | None, float | None]:
    """(whether the server kept up with the cell's offered rate, its backlog growth) over the cell's measured
    requests, failed ones included: not when latency grew faster than KEPT_UP_GROWTH, nor when any request
    failed. The verdict is None ("unclear") when the growth lies within two standard errors of the threshold:
    near the server's limit, 32 Poisson arrivals leave the slope that uncertain; and (None, None) when fewer
    than 3 requests finished."""
    fit = _growth_fit([row for row in sent if row.status == "ok"])
    if fit is None:
        return None, None
    growth, error = fit
    if any(row.status != "ok" for row in sent):
        return False, growth
    if error is not None and abs(growth - KEPT_UP_GROWTH) <= 2 * error:
        return None, growth
    return growth <= KEPT_UP_GROWTH, growth


def _growth_fit(rows: Sequence[RequestRow]) -> tuple[float, float | None] | None:
    """The least-squares slope of latency over scheduled arrival and its standard error (None below 4 points,
    where the residuals leave no degree of freedom to estimate it)."""
    points = []
    for row in rows:
        scheduled, done, sent, lag = (number(value) for value in (row.scheduled_s, row.t_done, row.t_send,
                                                                   row.schedule_lag_s))
        if scheduled is not None and done is not None and sent is not None and lag is not None:
            points.append((scheduled, done - sent + lag))
    if len(points) < 3:
        return None
    arrivals = np.array([p[0] for p in points])
    if float(arrivals.max() - arrivals.min()) <= 0:
        return None
    latency = np.array([p[1] for p in points])
    line = np.polyfit(arrivals, latency, 1)
    slope = float(line[0])
    if len(points) < 4:
        return slope, None
    residuals = latency - np.polyval(line, arrivals)
    spread = float(((arrivals - arrivals.mean()) ** 2).sum())
    return slope, math.sqrt(float((residuals ** 2).sum()) / (len(points) - 2) / spread)
