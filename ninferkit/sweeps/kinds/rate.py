"""The rate sweep: open loop, requests arriving at each offered rate on seeded Poisson arrivals
(sweeps/rate.py), whether or not earlier ones have ended.

Its table adds goodput under the profile's latency targets (`sweeps.rate.slo`, read when the table is built,
so new targets need no rerun: they are not parameters of its cells), the most requests in flight at once, how
late the client sent (schedule lag) and whether the server kept up with the offered rate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ninferkit.errors import ProfileError
from ninferkit.measure.latency import Targets, distribution, goodput, peak_in_flight, samples
from ninferkit.measure.workloads import exact_prompt, user_messages
from ninferkit.params.sweeps import MAX_COUNT, RateSweep
from ninferkit.rundir.records import RequestRow
from ninferkit.sweeps.cell import Cell, CellParams, Label, Planner, sent_output_tokens
from ninferkit.sweeps.execute import Recorder, SweepContext, gather_or_cancel, request_spec
from ninferkit.sweeps.kinds import columns
from ninferkit.sweeps.kinds.base import SweepKind
from ninferkit.sweeps.kinds.columns import ViewColumn
from ninferkit.sweeps.metrics import aggregate
from ninferkit.sweeps.rate import kept_up, poisson_arrivals


@dataclass(frozen=True, kw_only=True)
class RateCell(CellParams):
    rate_rps: float
    requests: int | None
    duration_s: float | None
    arrival_seed: int
    prompt_tokens: int
    warmup: int


class Rate(SweepKind[RateSweep, RateCell]):
    name = "rate"
    params = RateCell
    table_keys = ("rate_rps", "requests", "duration_s", "prompt_tokens_target", "api")
    labels = (Label("rate_rps", "{} requests/s"),)
    view = (ViewColumn("offered, requests/s", "rate_rps"), ViewColumn("prompt tokens", "prompt_tokens_target"),
            columns.API, columns.REQUESTS, ViewColumn("finished, requests/s", "requests_per_s", "plain"),
            ViewColumn("goodput, requests/s", shape="goodput"),
            ViewColumn("most in flight", "peak_in_flight", "plain"),
            ViewColumn("kept up (latency growth)", shape="kept_up"),
            ViewColumn("send lag p99, ms", "schedule_lag_s_p99", "plain", 1000), columns.DECODE, columns.GPU)
    loads_server = True

    def plan(self, section: RateSweep, planner: Planner) -> list[Cell[RateCell]]:
        planner.fits("sweeps.rate.prompt_tokens", section.prompt_tokens,
                     sent_output_tokens(section.api, section.output_tokens))
        cells = []
        for offered in section.rates:
            # drawn only up to one past the limit: 10,000 requests/s for a day would be 864 million
            count = len(poisson_arrivals(offered, section.requests or MAX_COUNT + 1, section.duration_s,
                                         section.arrival_seed))
            if count > MAX_COUNT:
                raise ProfileError(f"sweeps.rate: {offered:g} requests/s for {section.duration_s:g} s is more than "
                                   f"{MAX_COUNT} requests; allowed: at most {MAX_COUNT} per rate (a shorter "
                                   "duration_s)")
            cells.append(planner.cell(self, RateCell(
                rate_rps=offered, requests=section.requests, duration_s=section.duration_s,
                arrival_seed=section.arrival_seed, prompt_tokens=section.prompt_tokens,
                output_tokens=section.output_tokens, api=section.api, pin_output=section.pin_output,
                warmup=section.warmup, **planner.common)))
        return cells

    async def run(self, ctx: SweepContext, cell: Cell[RateCell], record: Recorder) -> None:
        """Each request leaves at its arrival time on a connection of its own. Prompts are built before the
        clock starts; warm-up requests go first, one at a time. Rows carry the schedule (`scheduled_s`) and how
        late the send was (`schedule_lag_s`: the client's own delay, which would otherwise hide in the server's
        latency)."""
        params = cell.params
        arrivals = poisson_arrivals(params.rate_rps, params.requests, params.duration_s, params.arrival_seed)
        prompts = [exact_prompt(ctx.tokenizer, params.prompt_tokens) for _ in range(params.warmup + len(arrivals))]
        events_per_s = params.rate_rps * params.output_tokens  # what the offered rate brings, if served
        async with ctx.load_client(record, events_per_s, len(arrivals) + 1, metered=False) as client:
            for index, prompt in enumerate(prompts[:params.warmup]):
                result = await client.send(request_spec(ctx, cell, user_messages(prompt.text)))
                await record(result, index - params.warmup, True, prompt_content_tokens=prompt.content_tokens)
            start = time.monotonic()

            async def arrive(index: int, at: float) -> None:
                await asyncio.sleep(start + at - time.monotonic())
                prompt = prompts[params.warmup + index]
                result = await client.send(request_spec(ctx, cell, user_messages(prompt.text)))
                await record(result, index, False, scheduled_s=at, schedule_lag_s=result.t_send - (start + at),
                             prompt_content_tokens=prompt.content_tokens)

            await gather_or_cancel([arrive(index, at) for index, at in enumerate(arrivals)])

    def metrics(self, ok: pd.DataFrame, finished: Sequence[RequestRow], sent: Sequence[RequestRow],
                measured: pd.DataFrame, targets: Targets) -> dict[str, Any]:
        """Whole-cell rates, goodput under the targets, the most requests in flight at once, the client's
        schedule lag and whether the server kept up with the offered rate (sweeps/rate.py)."""
        verdict, growth = kept_up(sent)
        lag = distribution(samples(sent, "schedule_lag_s"))
        return {**aggregate(ok, finished), **goodput(sent, targets), "slo": targets.describe(),
                "peak_in_flight": peak_in_flight(sent), "schedule_lag_s_p99": lag.p99, "backlog_growth": growth,
                "kept_up": verdict}


KIND = Rate()
