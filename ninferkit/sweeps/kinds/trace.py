"""Trace replay: a Mooncake-style trace (ninferkit/measure/traces.py) sent open loop, each request at its timestamp
divided by `speed`, whether or not earlier ones have ended, so a lab replays yesterday's load
(`ninferkit trace RUN_DIR`) on today's build. The trace is read and checked whole when the plan is made:
a bad trace is one clear error before anything is sent.

A request's prompt is built block by block from its `hash_ids`: each id is `block_tokens` tokens of the
shipped document behind that id's marker (the last block cut to the request's `input_length`; a first
block also carries the cell's own marker), so two requests whose leading ids agree share that prefix and no
earlier run shares any; rows carry the content's length as the server counts it (`prompt_content_tokens`).
Its output is pinned to `output_length`. The table is the rate sweep's (goodput, the most in
flight, whether the server kept up, the client's send lag) with the cached share the trace's sharing earned.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ninferkit.errors import ProfileError
from ninferkit.measure.latency import Targets
from ninferkit.measure.traces import (
    BLOCK_TOKENS,
    SHIPPED,
    SHIPPED_BLOCK_TOKENS,
    TraceRequest,
    read_trace,
    shipped_trace,
)
from ninferkit.measure.workloads import Tokenizer, concurrently, exact_text, new_salt, user_messages
from ninferkit.params.sweeps import TraceSweep
from ninferkit.rundir.records import RequestRow
from ninferkit.sweeps.cell import Cell, CellParams, Label, Planner, sent_output_tokens
from ninferkit.sweeps.execute import Recorder, SweepContext, gather_or_cancel, request_spec
from ninferkit.sweeps.kinds import columns
from ninferkit.sweeps.kinds.base import SweepKind
from ninferkit.sweeps.kinds.columns import ViewColumn
from ninferkit.sweeps.kinds.rate import KIND as RATE
from ninferkit.sweeps.metrics import numbers

SHIPPED_NAME = f"shipped:{SHIPPED}"
"""The `trace` parameter of a cell replaying the trace ninferkit ships."""


@dataclass(frozen=True, kw_only=True)
class TraceCell(CellParams):
    trace: str
    trace_sha256: str
    """The trace file's: a changed trace is another cell."""
    requests: int
    speed: float
    block_tokens: int


def trace_file(params: TraceCell) -> Path:
    return shipped_trace() if params.trace == SHIPPED_NAME else Path.cwd() / params.trace


class Trace(SweepKind[TraceSweep, TraceCell]):
    name = "trace"
    params = TraceCell
    table_keys = ("trace", "speed", "api")
    labels = (Label("trace"), Label("speed", "speed x{}"))
    view = (ViewColumn("trace", "trace"), ViewColumn("speed", "speed"), columns.API, columns.REQUESTS,
            ViewColumn("finished, requests/s", "requests_per_s", "plain"),
            ViewColumn("goodput, requests/s", shape="goodput"),
            ViewColumn("most in flight", "peak_in_flight", "plain"),
            ViewColumn("kept up (latency growth)", shape="kept_up"),
            ViewColumn("send lag p99, ms", "schedule_lag_s_p99", "plain", 1000),
            ViewColumn("cached share", "cached_share_median", "percent"), columns.TTFT, columns.DECODE)
    loads_server = True

    def plan(self, section: TraceSweep, planner: Planner) -> list[Cell[TraceCell]]:
        """One cell: the trace read and checked against the served context before anything is sent."""
        path = shipped_trace() if section.path is None else Path.cwd() / section.path
        block = section.block_tokens or (SHIPPED_BLOCK_TOKENS if section.path is None else BLOCK_TOKENS)
        try:
            requests = read_trace(path, block, planner.profile.serve.max_context)
        except ProfileError as exc:
            raise ProfileError(f"sweeps.trace.path: {exc}") from None
        return [planner.cell(self, TraceCell(
            trace=SHIPPED_NAME if section.path is None else section.path,
            trace_sha256=hashlib.sha256(path.read_bytes()).hexdigest(), requests=len(requests), speed=section.speed,
            block_tokens=block, output_tokens=max(r.output_length for r in requests), api=section.api,
            pin_output=True, **planner.common))]

    async def run(self, ctx: SweepContext, cell: Cell[TraceCell], record: Recorder) -> None:
        """Prompts are built before the clock starts; each request leaves at its scheduled time on a
        connection of its own (rows: `trace_index`, `scheduled_s`, `schedule_lag_s`)."""
        params = cell.params
        trace = read_trace(trace_file(params), params.block_tokens)
        prompts = _prompts(ctx.tokenizer, trace, params.block_tokens)
        first = trace[0].timestamp_ms
        async with ctx.client(connections=len(trace) + 1, metered=False) as client:
            start = time.monotonic()

            async def arrive(index: int, request: TraceRequest) -> None:
                at = (request.timestamp_ms - first) / 1000 / params.speed
                await asyncio.sleep(start + at - time.monotonic())
                output = sent_output_tokens(params.api, request.output_length)
                result = await client.send(request_spec(ctx, cell, user_messages(prompts[index][0]), output))
                await record(result, index, False, trace_index=index, scheduled_s=at,
                             schedule_lag_s=result.t_send - (start + at), prompt_content_tokens=prompts[index][1])

            await gather_or_cancel([arrive(index, request) for index, request in enumerate(trace)])

    def metrics(self, ok: pd.DataFrame, finished: Sequence[RequestRow], sent: Sequence[RequestRow],
                measured: pd.DataFrame, targets: Targets) -> dict[str, Any]:
        """The rate sweep's open-loop columns, and the share of each prompt the prefix cache served."""
        prompt, cached = numbers(ok, "prompt_tokens"), numbers(ok, "cached_tokens")
        share = (cached / prompt).median() if len(prompt) and len(cached) == len(prompt) else None
        return {**RATE.metrics(ok, finished, sent, measured, targets), "cached_share_median": share}


def _prompts(tokenizer: Tokenizer, trace: Sequence[TraceRequest], block_tokens: int) -> list[tuple[str, int]]:
    """Each request's prompt and its length by the server's count: its blocks, each the same text wherever
    its id comes (at the front, with the cell's marker), the last cut to what input_length leaves. Each
    distinct block is built once and the blocks (then the prompts) are counted concurrently (`concurrently`)."""
    salt = new_salt()

    def block(key: tuple[int, int, bool]) -> str:
        hash_id, tokens, first = key
        marker = (salt if first else "") + f"[block {hash_id}]\n"
        return exact_text(tokenizer, tokens, marker if tokens > 2 * tokenizer.count(marker) else "").text

    def keys(request: TraceRequest) -> list[tuple[int, int, bool]]:
        ids, last = request.hash_ids, request.input_length - (len(request.hash_ids) - 1) * block_tokens
        return [(h, block_tokens if i < len(ids) - 1 else last, i == 0) for i, h in enumerate(ids)]

    wanted = list(dict.fromkeys(key for request in trace for key in keys(request)))
    texts = dict(zip(wanted, concurrently(block, wanted), strict=True))
    prompts = ["".join(texts[key] for key in keys(request)) for request in trace]
    return list(zip(prompts, tokenizer.counts(prompts), strict=True))


KIND = Trace()
