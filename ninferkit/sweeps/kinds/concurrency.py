"""The concurrency sweep: N closed-loop clients, each sending its next request when its previous one ends;
per-request and aggregate rates, the wait before prefill, and the engine's own batching lines."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pandas as pd

from ninferkit.errors import ProfileError
from ninferkit.measure.latency import Targets
from ninferkit.measure.workloads import exact_prompt, user_messages
from ninferkit.params.sweeps import ConcurrencySweep
from ninferkit.rundir.records import RequestRow, TelemetrySample
from ninferkit.sweeps.cell import Cell, CellParams, Label, Planner, sent_output_tokens
from ninferkit.sweeps.execute import Recorder, SweepContext, gather_or_cancel, request_spec
from ninferkit.sweeps.kinds import columns
from ninferkit.sweeps.kinds.base import SweepKind
from ninferkit.sweeps.kinds.columns import ViewColumn
from ninferkit.sweeps.metrics import aggregate, cell_span


@dataclass(frozen=True, kw_only=True)
class ConcurrencyCell(CellParams):
    concurrency: int
    requests_per_client: int
    prompt_tokens: int
    warmup: int
    cached: bool | None = None
    """True: every request sends the one prompt the warm-up cached (`sweeps.concurrency.cached`); absent (None) on a
    cell of cold prompts, so those keep their ids."""

    OMITTED_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"cached"})


class Concurrency(SweepKind[ConcurrencySweep, ConcurrencyCell]):
    name = "concurrency"
    params = ConcurrencyCell
    table_keys = ("concurrency", "requests_per_client", "prompt_tokens_target", "api")
    labels = (Label("concurrency", "{} clients", one="{} client"),)
    view = (ViewColumn("clients", "concurrency"), ViewColumn("prompt tokens", "prompt_tokens_target"), columns.API,
            columns.REQUESTS, ViewColumn("aggregate output, tok/s (client)", "aggregate_output_tok_s_client", "plain"),
            columns.DECODE, columns.ENGINE, columns.TTFT, columns.END_TO_END,
            ViewColumn("wait before prefill, s", shape="wait_before_prefill"), columns.GPU)
    loads_server = True

    def plan(self, section: ConcurrencySweep, planner: Planner) -> list[Cell[ConcurrencyCell]]:
        planner.fits("sweeps.concurrency.prompt_tokens", section.prompt_tokens,
                     sent_output_tokens(section.api, section.output_tokens))
        if section.cached and section.warmup < 1:
            raise ProfileError("sweeps.concurrency.cached: true needs a warm-up to put the prompt in the prefix cache "
                               f"(sweeps.concurrency.warmup is {section.warmup}); allowed: warmup >= 1")
        cells = []
        for level in section.levels:
            if level < 1:
                raise ProfileError(f"sweeps.concurrency.levels: {level} is not a client count; allowed: >= 1")
            cells.append(planner.cell(self, ConcurrencyCell(
                concurrency=level, requests_per_client=section.requests_per_client,
                prompt_tokens=section.prompt_tokens, output_tokens=section.output_tokens, api=section.api,
                pin_output=section.pin_output, warmup=section.warmup, cached=section.cached or None,
                **planner.common)))
        return cells

    async def run(self, ctx: SweepContext, cell: Cell[ConcurrencyCell], record: Recorder) -> None:
        """All prompts are built (tokenized) before the clock starts, so the load is not paced by the
        tokenizer. Warm-up requests go first, one at a time (a cached cell's put its one prompt in the cache). The
        load weighed for the client's processes is every client's stream at the run's gap so far (ctx.client): at a
        higher level the server's gaps only grow, so it errs towards more processes."""
        params = cell.params
        level, per_client = params.concurrency, params.requests_per_client
        count = params.warmup + level * per_client
        prompts = [exact_prompt(ctx.tokenizer, params.prompt_tokens)] * count if params.cached else \
            [exact_prompt(ctx.tokenizer, params.prompt_tokens) for _ in range(count)]
        gap = ctx.stream_gap_s()
        async with ctx.load_client(record, None if gap is None else level / gap, max(level, 1) + 1) as client:
            for index in range(params.warmup):
                result = await client.send(request_spec(ctx, cell, user_messages(prompts[index].text)))
                await record(result, index - params.warmup, True, prompt_content_tokens=prompts[index].content_tokens)
            queue = prompts[params.warmup:]

            async def closed_loop(client_index: int) -> None:
                for repetition in range(per_client):
                    prompt = queue[client_index * per_client + repetition]
                    result = await client.send(request_spec(ctx, cell, user_messages(prompt.text)))
                    await record(result, repetition, False, client_index=client_index,
                                 prompt_content_tokens=prompt.content_tokens)

            await gather_or_cancel([closed_loop(i) for i in range(level)])

    def metrics(self, ok: pd.DataFrame, finished: Sequence[RequestRow], sent: Sequence[RequestRow],
                measured: pd.DataFrame, targets: Targets) -> dict[str, Any]:
        return aggregate(ok, finished)

    def condition_columns(self, cell_rows: pd.DataFrame, telemetry: Sequence[TelemetrySample]) -> dict[str, Any]:
        """Medians of the numbers in the engine's periodic throughput lines during the cell (decode batching
        as the engine reports it), in the order of their names; nothing for an engine that prints no such lines."""
        start, end = cell_span(cell_rows)
        lines = pd.DataFrame([r.as_dict() for r in telemetry if r.source == "engine_log" and start <= r.t_mono <= end])
        numeric = lines.drop(columns=["t_mono"], errors="ignore").select_dtypes("number") if len(lines) else lines
        return {f"engine_log_{name}_median": numeric[name].median() for name in sorted(numeric.columns)}


KIND = Concurrency()
