"""The context sweep: prompt length against prefill rate, TTFT, decode rate and acceptance, one request at
a time, each prompt cold (a unique salt at its front defeats the prefix cache)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ninferkit.measure.workloads import exact_prompt, user_messages
from ninferkit.params.sweeps import ContextSweep
from ninferkit.sweeps.cell import Cell, CellParams, Label, Planner, sent_output_tokens
from ninferkit.sweeps.execute import Recorder, SweepContext, request_spec
from ninferkit.sweeps.kinds import columns
from ninferkit.sweeps.kinds.base import SweepKind
from ninferkit.sweeps.kinds.columns import ViewColumn


@dataclass(frozen=True, kw_only=True)
class ContextCell(CellParams):
    target_prompt_tokens: int
    repetitions: int
    warmup: int


class Context(SweepKind[ContextSweep, ContextCell]):
    name = "context"
    params = ContextCell
    table_keys = ("target_prompt_tokens", "api")
    labels = (Label("target_prompt_tokens", "{} prompt tokens"),)
    view = (ViewColumn("prompt tokens", "target_prompt_tokens"), columns.PROMPT, columns.API, columns.REQUESTS,
            replace(columns.PREFILL, decimals=columns.RATE_DECIMALS),
            replace(columns.TTFT_SERVER, decimals=columns.TIME_DECIMALS),
            replace(columns.DECODE, decimals=columns.RATE_DECIMALS), columns.ENGINE, columns.ACCEPTANCE,
            columns.PER_ROUND, columns.TTFT, columns.ANSWER, columns.GPU)
    """Seed 000 §2.1's columns (target, prompt tokens, prefill, TTFT as the engine's prompt time, decode, MTP
    acceptance with its counts) at the report's precision, then what the report has elsewhere."""

    def plan(self, section: ContextSweep, planner: Planner) -> list[Cell[ContextCell]]:
        cells = []
        for target in section.targets:
            planner.fits("sweeps.context.targets", target, sent_output_tokens(section.api, section.output_tokens))
            cells.append(planner.cell(self, ContextCell(
                target_prompt_tokens=target, output_tokens=section.output_tokens, api=section.api,
                pin_output=section.pin_output, repetitions=section.repetitions, warmup=section.warmup,
                **planner.common)))
        return cells

    async def run(self, ctx: SweepContext, cell: Cell[ContextCell], record: Recorder) -> None:
        params = cell.params
        async with ctx.client() as client:
            for index in range(params.warmup + params.repetitions):
                prompt = exact_prompt(ctx.tokenizer, params.target_prompt_tokens)
                result = await client.send(request_spec(ctx, cell, user_messages(prompt.text)))
                await record(result, index - params.warmup, index < params.warmup,
                             prompt_content_tokens=prompt.content_tokens)


KIND = Context()
