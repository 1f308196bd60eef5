"""The prefix reuse sweep: which changes to a prompt keep the prefix cache, cached tokens and TTFT per
scenario. Each repetition seeds the cache (except `cold`) with a request whose row has `prefix_role: seed`,
then sends the measured request (`prefix_role: measured`), whose row says what seeded it (`seeded_by`). A
scenario that measures a request field (a cache breakpoint, `previous_response_id`) is planned as skipped
on an engine that does not read it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ninferkit.measure.client import RequestSpec, StreamingClient
from ninferkit.measure.latency import Targets
from ninferkit.measure.workloads import exact_prompt, exact_text, new_salt, user_messages
from ninferkit.params.sweeps import ALL_SCENARIOS, Api, PrefixReuseSweep
from ninferkit.rundir.records import RequestRow
from ninferkit.sweeps.cell import Cell, CellParams, Label, Planner, sent_output_tokens
from ninferkit.sweeps.execute import Recorder, SweepContext, request_spec
from ninferkit.sweeps.kinds import columns
from ninferkit.sweeps.kinds.base import SweepKind
from ninferkit.sweeps.kinds.columns import ViewColumn
from ninferkit.sweeps.metrics import hit_tokens, numbers

APPENDED_SENTENCE = " The board will publish its next record in the spring."
SCENARIO_APIS: dict[str, Api] = {"anthropic_cache_control": "messages", "responses_previous_response_id": "responses"}
SCENARIO_FIELDS = {"prompt_cache_breakpoint": "prompt_cache_breakpoint", "anthropic_cache_control": "cache_control",
                   "responses_previous_response_id": "previous_response_id"}
"""The request field each scenario measures: planned as skipped on an engine that does not read it."""
SEEDED_PROMPT_TOKENS = 32
"""What a scenario's seed may add to the prompt (an appended sentence, a session marker)."""


@dataclass(frozen=True, kw_only=True)
class PrefixCell(CellParams):
    scenario: str
    prompt_tokens: int
    repetitions: int


class PrefixReuse(SweepKind[PrefixReuseSweep, PrefixCell]):
    name = "prefix_reuse"
    params = PrefixCell
    table_keys = ("scenario", "api")
    labels = (Label("scenario"),)
    view = (ViewColumn("scenario", "scenario"), columns.API, columns.REQUESTS,
            ViewColumn("prompt tokens", "prompt_tokens_median", "plain"), ViewColumn("hit tokens", shape="hit_tokens"),
            ViewColumn("cached share", "cached_share_median", "percent"), columns.TTFT,
            ViewColumn("prompt time, s (server)", "prompt_s_server_median", "plain"),
            ViewColumn("cache seeded by", "seeded_by", "plain"))
    orders = {"scenario": ALL_SCENARIOS}

    def plan(self, section: PrefixReuseSweep, planner: Planner) -> list[Cell[PrefixCell]]:
        outputs = [sent_output_tokens(SCENARIO_APIS.get(s, "chat"), section.output_tokens) for s in section.scenarios]
        planner.fits("sweeps.prefix_reuse.prompt_tokens", section.prompt_tokens + SEEDED_PROMPT_TOKENS,
                     2 * max(outputs, default=0))
        return [planner.cell(self, PrefixCell(
            scenario=scenario, prompt_tokens=section.prompt_tokens, output_tokens=section.output_tokens,
            api=SCENARIO_APIS.get(scenario, "chat"), pin_output=section.pin_output, repetitions=section.repetitions,
            **planner.common), needs=SCENARIO_FIELDS.get(scenario)) for scenario in section.scenarios]

    async def run(self, ctx: SweepContext, cell: Cell[PrefixCell], record: Recorder) -> None:
        """Per repetition: seed the cache (except `cold`), then send the measured request."""
        async with ctx.client() as client:
            for repetition in range(cell.params.repetitions):
                await SCENARIOS[cell.params.scenario](ctx, cell, client, record, repetition)

    def sort_key(self, column: pd.Series) -> pd.Series:
        return column.map(lambda v: ALL_SCENARIOS.index(v) if v in ALL_SCENARIOS else len(ALL_SCENARIOS))

    def measured(self, rows: pd.DataFrame) -> pd.DataFrame:
        """The measured request of each pair, not the one that seeded the cache."""
        return rows[rows["prefix_role"] == "measured"] if "prefix_role" in rows else rows

    def metrics(self, ok: pd.DataFrame, finished: Sequence[RequestRow], sent: Sequence[RequestRow],
                measured: pd.DataFrame, targets: Targets) -> dict[str, Any]:
        """Cache hit tokens and share (the usage's count, else the engine's own, and which), and what seeded
        the cache; a refused scenario says what the server answered."""
        prompt = numbers(ok, "prompt_tokens")
        cached, source = hit_tokens(ok)
        shares = (cached / prompt.reindex(cached.index)).dropna()
        hit = float(shares.median()) if len(shares) else None
        errors = measured[measured["status"] != "ok"] if len(measured) else measured
        answer = None
        if len(errors):
            first = errors.iloc[0]
            answer = f"HTTP {first.get('http_status')}: {str(first.get('error'))[:200]}"
        seeded = ok["seeded_by"].dropna() if "seeded_by" in ok else pd.Series(dtype=object)
        return {"cached_share_median": hit, "hit_tokens_median": float(cached.median()) if len(cached) else None,
                "hit_tokens_min": float(cached.min()) if len(cached) else None,
                "hit_tokens_max": float(cached.max()) if len(cached) else None, "hit_tokens_source": source,
                "seeded_by": seeded.iloc[0] if len(seeded) else None,
                "server_answer_when_failed": answer}


PrefixCellOf = Cell[PrefixCell]
ScenarioRun = Callable[[SweepContext, PrefixCellOf, StreamingClient, Recorder, int], Awaitable[None]]


async def _send_pair(ctx: SweepContext, cell: PrefixCellOf, client: StreamingClient, record: Recorder, repetition: int,
                     seed: RequestSpec, measured: RequestSpec, seeded_by: str) -> None:
    seed_result = await record(await client.send(seed), repetition, False, prefix_role="seed")
    await record(await client.send(measured), repetition, False, prefix_role="measured", seeded_by=seeded_by,
                 seed_prompt_tokens=seed_result.prompt_tokens)


async def _cold(ctx: SweepContext, cell: PrefixCellOf, client: StreamingClient, record: Recorder,
                repetition: int) -> None:
    prompt = exact_prompt(ctx.tokenizer, cell.params.prompt_tokens)
    await record(await client.send(request_spec(ctx, cell, user_messages(prompt.text))), repetition, False,
                 prefix_role="measured", seeded_by=None)


async def _identical(ctx: SweepContext, cell: PrefixCellOf, client: StreamingClient, record: Recorder,
                     repetition: int) -> None:
    text = exact_prompt(ctx.tokenizer, cell.params.prompt_tokens).text
    spec = request_spec(ctx, cell, user_messages(text))
    await _send_pair(ctx, cell, client, record, repetition, spec, spec, "the same request, sent just before")


async def _max_tokens_changed(ctx: SweepContext, cell: PrefixCellOf, client: StreamingClient, record: Recorder,
                              repetition: int) -> None:
    text = exact_prompt(ctx.tokenizer, cell.params.prompt_tokens).text
    output = cell.params.output_tokens
    await _send_pair(ctx, cell, client, record, repetition, request_spec(ctx, cell, user_messages(text), output),
                     request_spec(ctx, cell, user_messages(text), 2 * output),
                     f"the same prompt with max_tokens {output} (measured: {2 * output})")


async def _sentence_appended(ctx: SweepContext, cell: PrefixCellOf, client: StreamingClient, record: Recorder,
                             repetition: int) -> None:
    text = exact_prompt(ctx.tokenizer, cell.params.prompt_tokens).text
    await _send_pair(ctx, cell, client, record, repetition, request_spec(ctx, cell, user_messages(text)),
                     request_spec(ctx, cell, user_messages(text + APPENDED_SENTENCE)),
                     "the prompt without its last sentence")


async def _session_marker(ctx: SweepContext, cell: PrefixCellOf, client: StreamingClient, record: Recorder,
                          repetition: int) -> None:
    tokens = cell.params.prompt_tokens
    first = exact_text(ctx.tokenizer, tokens, new_salt()).text
    second = exact_text(ctx.tokenizer, tokens, new_salt()).text
    await _send_pair(ctx, cell, client, record, repetition, request_spec(ctx, cell, user_messages(first)),
                     request_spec(ctx, cell, user_messages(second)), "the same document behind another session marker")


async def _cache_control(ctx: SweepContext, cell: PrefixCellOf, client: StreamingClient, record: Recorder,
                         repetition: int) -> None:
    """Seed 000 §2.6: a Messages request writes the document behind a `cache_control` breakpoint, then
    the same blocks with a sentence appended read it."""
    text = exact_prompt(ctx.tokenizer, cell.params.prompt_tokens).text
    written = {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}
    seed = [{"role": "user", "content": [written]}]
    measured = [{"role": "user", "content": [written, {"type": "text", "text": APPENDED_SENTENCE}]}]
    await _send_pair(ctx, cell, client, record, repetition, request_spec(ctx, cell, seed, api="messages"),
                     request_spec(ctx, cell, measured, api="messages"),
                     "a Messages request writing the document behind a cache_control breakpoint")


async def _cache_breakpoint(ctx: SweepContext, cell: PrefixCellOf, client: StreamingClient, record: Recorder,
                            repetition: int) -> None:
    """Seed 000 §2.6 ('显式 prompt_cache_breakpoint 写入后再追加读取'): a chat request writes the document
    behind an explicit breakpoint (IF §4: content part `prompt_cache_breakpoint: {"mode": "explicit"}`),
    then the same parts with a sentence appended read it."""
    text = exact_prompt(ctx.tokenizer, cell.params.prompt_tokens).text
    written = {"type": "text", "text": text, "prompt_cache_breakpoint": {"mode": "explicit"}}
    seed = [{"role": "user", "content": [written]}]
    measured = [{"role": "user", "content": [written, {"type": "text", "text": APPENDED_SENTENCE}]}]
    await _send_pair(ctx, cell, client, record, repetition, request_spec(ctx, cell, seed),
                     request_spec(ctx, cell, measured),
                     "a chat request writing the document behind an explicit prompt_cache_breakpoint")


async def _previous_response(ctx: SweepContext, cell: PrefixCellOf, client: StreamingClient, record: Recorder,
                             repetition: int) -> None:
    text = exact_prompt(ctx.tokenizer, cell.params.prompt_tokens).text
    seed = await record(await client.send(request_spec(ctx, cell, user_messages(text), api="responses")), repetition,
                        False, prefix_role="seed")
    if seed.response_id is None:
        return  # the seed failed (its row says why); there is no response to continue
    follow_up = request_spec(ctx, cell, user_messages("Continue."), api="responses",
                      previous_response_id=seed.response_id)
    await record(await client.send(follow_up), repetition, False, prefix_role="measured",
                 seeded_by="the response named by previous_response_id", seed_prompt_tokens=seed.prompt_tokens)


SCENARIOS: dict[str, ScenarioRun] = {
    "cold": _cold, "identical_resend": _identical, "max_tokens_changed": _max_tokens_changed,
    "sentence_appended": _sentence_appended, "session_marker_changed": _session_marker,
    "prompt_cache_breakpoint": _cache_breakpoint, "anthropic_cache_control": _cache_control,
    "responses_previous_response_id": _previous_response,
}


KIND = PrefixReuse()
