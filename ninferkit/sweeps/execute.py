"""Running one cell: build its prompts, send its requests, append one row per finished request.

Every row is appended to `requests.jsonl` and flushed the moment its request ends. A cell ends as
`done` (at least one measured request succeeded: a cell is done only when it measured something),
`failed` (none did, a stop rule fired, or the server died; with the server's answer and the adapter's
diagnosis of it, or of its log) or `skipped` (planned so: the engine cannot serve it); the outcome is
appended to `sweeps/cells.jsonl`. A 401 or 403 fails the cell and stops the sweep (SweepFailed): every
other cell would be refused the same way. Rows carry
the cell's `attempt`, so the tables use only the attempt that finished, and a retried cell never
counts twice while nothing written is ever deleted. After a cell's requests end, and before its
outcome is recorded, the engine's own per-request record is joined to its rows (truth.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ninferkit import server
from ninferkit.client import RequestResult, RequestSpec, StreamingClient, error_summary
from ninferkit.engines.base import EngineAdapter
from ninferkit.engines.part import EnginePart
from ninferkit.errors import Diagnosis, RequestFailed, ServerExited, SweepFailed
from ninferkit.records import RequestRow
from ninferkit.runs import Run, append_jsonl, utc_now
from ninferkit.sweeps.plan import Cell
from ninferkit.sweeps.rate import poisson_arrivals
from ninferkit.sweeps.rules import CellTally, StopRule
from ninferkit.sweeps.truth import MeteredClient, record_log_truth
from ninferkit.workloads import Tokenizer, exact_prompt, exact_text, load_task, new_salt, task_request, user_messages

APPENDED_SENTENCE = " The board will publish its next record in the spring."
ACCESS_REFUSED = (401, 403)


@dataclass
class SweepContext:
    """What every cell needs: the run, the server, the tokenizer, the stop rules, the fixed row fields."""

    run: Run
    adapter: EngineAdapter
    url: str
    model_id: str
    headers: dict[str, str]
    tokenizer: Tokenizer
    rules: list[StopRule]
    base_row: dict[str, Any]
    timeout_s: float
    log_path: Path | None

    def client(self, connections: int = 8, metered: bool = True) -> StreamingClient:
        """A client per cell; it reads the engine's per-request counters around requests that run alone
        when the engine has such counters (truth.MeteredClient), unless `metered` is off: the open loop's
        sends keep their schedule, and a read of /metrics before each would delay them."""
        kind = MeteredClient if metered and self.adapter.request_metrics_path is not None else StreamingClient
        return kind(self.url, self.adapter, self.model_id, headers=self.headers,
                    timeout_s=self.timeout_s, max_connections=connections)


class CellStopped(Exception):
    """A stop rule fired inside a cell (internal: becomes a failed cell, never leaves this module)."""


class AccessRefused(CellStopped):
    """The server refused a request's credentials (internal: fails the cell, then stops the sweep)."""

    def __init__(self, http_status: int, body: str | None) -> None:
        self.body = body
        super().__init__(f"the server refused the request's credentials: {_answer(http_status, body)}")


@dataclass
class CellOutcome:
    cell_id: str
    status: str  # done | failed | skipped
    attempt: str
    reason: str | None = None
    diagnosis: dict[str, Any] | None = None
    tally: CellTally = field(default_factory=CellTally)


class Recorder:
    """Turns a finished request into a row, appends it, and applies the stop rules.

    The row is written and fsynced in a worker thread, one row at a time: on the event loop, a write that
    waits for the disk (milliseconds, more on a busy one) would delay every other stream's reads, and their
    inter-token gaps and first tokens would carry it."""

    def __init__(self, ctx: SweepContext, cell: Cell, attempt: str,
                 on_request: Callable[[CellTally], None] | None = None) -> None:
        self.ctx, self.cell, self.attempt, self.on_request = ctx, cell, attempt, on_request
        self.tally = CellTally()
        self.measured = CellTally()  # without warm-up and cache seeds: what the table reports
        self._writing = asyncio.Lock()

    async def __call__(self, result: RequestResult, repetition: int, warmup: bool, **extra: Any) -> RequestResult:
        row = {**self.ctx.base_row, "sweep": self.cell.sweep, "cell_id": self.cell.cell_id, "cell": self.cell.params,
               "attempt": self.attempt, "request_uid": uuid.uuid4().hex, "repetition": repetition, "warmup": warmup,
               **result.row(), **extra}
        async with self._writing:  # one append at a time: a torn-tail repair must never see another's half row
            await asyncio.to_thread(append_jsonl, self.ctx.run.dir.requests, row)
        self.tally.add(result.status, result.error, result.http_status)
        if self.on_request is not None:
            self.on_request(self.tally)
        if not warmup and extra.get("prefix_role") != "seed":
            self.measured.add(result.status, result.error, result.http_status)
        if result.status == "errored" and result.http_status is None:
            server.ensure_running(self.ctx.run.dir)  # raises ServerExited when the server died
        if result.http_status is not None and result.http_status in ACCESS_REFUSED:
            raise AccessRefused(result.http_status, result.error)
        for rule in self.ctx.rules:
            reason = rule.check(self.tally)
            if reason:
                raise CellStopped(reason)
        return result


def run_cell(ctx: SweepContext, cell: Cell, on_request: Callable[[CellTally], None] | None = None) -> CellOutcome:
    """Run one cell to its outcome and append it to the ledger; ServerExited is re-raised after that, and a
    refused credential becomes SweepFailed. `on_request` sees the cell's tally after each request (progress)."""
    attempt = uuid.uuid4().hex[:8]
    if cell.skip:
        outcome = CellOutcome(cell.cell_id, "skipped", attempt, cell.skip)
        _append_outcome(ctx, cell, outcome)
        return outcome
    record = Recorder(ctx, cell, attempt, on_request)
    try:
        try:
            _run_async(RUNNERS[cell.sweep](ctx, cell, record))
        except RequestFailed as failed:  # the tokenizer could not be reached or was refused
            answer = failed.__cause__.response if isinstance(failed.__cause__, httpx.HTTPStatusError) else None
            if answer is not None and answer.status_code in ACCESS_REFUSED:
                raise AccessRefused(answer.status_code, answer.text) from failed
            server.ensure_running(ctx.run.dir)  # is the server gone?
            raise CellStopped(str(failed)) from failed
    except AccessRefused as refused:
        outcome = _failed(ctx, record, str(refused), _access_diagnosis(ctx, refused.body))
        record_log_truth(ctx.run, ctx.adapter)
        _append_outcome(ctx, cell, outcome)
        fix = (outcome.diagnosis or {}).get("fix")
        raise SweepFailed(f"cell {cell.label} failed and the sweep stopped (every other cell would be refused "
                          f"the same way): {refused}" + (f". Fix: {fix}" if fix else "")) from None
    except CellStopped as stopped:
        outcome = _failed(ctx, record, str(stopped))
    except ServerExited as exc:
        diagnosis = _diagnose(ctx)
        exc.diagnosis = exc.diagnosis or diagnosis
        reason = "the server died during this cell" + (f": {diagnosis}" if diagnosis else "")
        outcome = CellOutcome(cell.cell_id, "failed", attempt, reason,
                              diagnosis=None if diagnosis is None else diagnosis.__dict__, tally=record.tally)
        record_log_truth(ctx.run, ctx.adapter)
        _append_outcome(ctx, cell, outcome)
        raise
    else:
        outcome = ended_outcome(ctx, record)
    record_log_truth(ctx.run, ctx.adapter)  # before the outcome: a done cell has its truth
    _append_outcome(ctx, cell, outcome)
    return outcome


def ended_outcome(ctx: SweepContext, record: Recorder) -> CellOutcome:
    """The outcome of a cell whose requests all ended: done when a measured request (not a warm-up, not a
    cache seed) succeeded, else failed with the server's last answer and the adapter's diagnosis of it."""
    if record.measured.ok:
        return CellOutcome(record.cell.cell_id, "done", record.attempt, tally=record.tally)
    return _failed(ctx, record, _nothing_measured(record.measured, record.tally))


def _failed(ctx: SweepContext, record: Recorder, reason: str, diagnosis: Diagnosis | None = None) -> CellOutcome:
    """A failed outcome, with the adapter's diagnosis of the server's last answer when none is given."""
    error = record.tally.last_error
    diagnosis = diagnosis or (ctx.adapter.diagnose(error) if error else None)
    return CellOutcome(record.cell.cell_id, "failed", record.attempt, reason,
                       diagnosis=None if diagnosis is None else diagnosis.__dict__, tally=record.tally)


def _nothing_measured(measured: CellTally, tally: CellTally) -> str:
    """Why a cell whose requests all ended measured nothing: what was sent, and the server's last answer."""
    statuses = tally.http_statuses
    answer = _answer(statuses[-1] if statuses else None, tally.last_error) if tally.last_error else "no answer"
    return (f"no measured request succeeded ({measured.sent} measured of {tally.sent} sent: {tally.errored} errored, "
            f"{tally.incomplete} incomplete); the server answered {answer}")


def _answer(http_status: int | None, error: str | None) -> str:
    return (f"HTTP {http_status}: " if http_status is not None else "") + error_summary(error)


def _access_diagnosis(ctx: SweepContext, body: str | None) -> Diagnosis:
    """The adapter's diagnosis of a 401/403 answer, or the HTTP meaning of one: no engine serves a client
    whose key it refuses, so the fix is the key."""
    found = ctx.adapter.diagnose(body or "")
    if found is not None:
        return found
    variable = ctx.run.profile.serve.api_key_env
    fix = (f"export {variable} with the key the server was started with" if variable else
           "set serve.api_key_env to the name of the variable that holds the server's key, and export it")
    return Diagnosis("access_refused", "the server refused the request's API key", fix, error_summary(body))


def _diagnose(ctx: SweepContext) -> Diagnosis | None:
    if ctx.log_path is None or not ctx.log_path.exists():
        return None
    return ctx.adapter.diagnose(ctx.log_path.read_text(errors="replace"))


def _append_outcome(ctx: SweepContext, cell: Cell, outcome: CellOutcome) -> None:
    tally = outcome.tally
    append_jsonl(ctx.run.dir.sweep_cells, {
        "cell_id": cell.cell_id, "sweep": cell.sweep, "cell": cell.params, "status": outcome.status,
        "attempt": outcome.attempt, "reason": outcome.reason, "diagnosis": outcome.diagnosis,
        "notes": list(cell.notes), "request_fields": cell.request,
        "profile_hash": ctx.run.profile_hash, "finished_utc": utc_now(),
        "requests_sent": tally.sent, "requests_ok": tally.ok, "requests_errored": tally.errored,
        "requests_incomplete": tally.incomplete,
    })


def _run_async(coro: Awaitable[None]) -> None:
    """Run a coroutine to the end, also from a Jupyter kernel whose event loop is already running."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(_as_coroutine(coro))
        return
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, _as_coroutine(coro)).result()


async def _as_coroutine(awaitable: Awaitable[None]) -> None:
    await awaitable


def _spec(ctx: SweepContext, cell: Cell, messages: list[dict[str, Any]], max_tokens: int | None = None,
          api: str | None = None, tools: list[dict[str, Any]] | None = None, **extra: Any) -> RequestSpec:
    """A request of the cell: its sampling, the engine extensions the plan chose (cell.request), output
    pinning where asked, then what this request adds."""
    params = cell.params
    pin = ctx.adapter.output_pin_fields() if params.get("pin_output") else {}
    return RequestSpec(api or params["api"], messages, max_tokens or params["output_tokens"],  # type: ignore[arg-type]
                       temperature=params["temperature"], seed=params["seed"], tools=tools,
                       extra={**cell.request, **pin, **extra})


async def _context(ctx: SweepContext, cell: Cell, record: Recorder) -> None:
    params = cell.params
    async with ctx.client() as client:
        for index in range(params["warmup"] + params["repetitions"]):
            prompt = exact_prompt(ctx.tokenizer, params["target_prompt_tokens"])
            result = await client.send(_spec(ctx, cell, user_messages(prompt.text)))
            warmup = index < params["warmup"]
            await record(result, index - params["warmup"], warmup, prompt_content_tokens=prompt.content_tokens)


async def _tasks(ctx: SweepContext, cell: Cell, record: Recorder) -> None:
    params = cell.params
    task = load_task(params["task"])
    async with ctx.client() as client:
        for index in range(params["warmup"] + params["repetitions"]):
            request = task_request(ctx.tokenizer, task, params["context_depth"])
            result = await client.send(_spec(ctx, cell, request.messages, tools=request.tools))
            await record(result, index - params["warmup"], index < params["warmup"],
                         prompt_content_tokens=request.prompt.content_tokens)


async def _concurrency(ctx: SweepContext, cell: Cell, record: Recorder) -> None:
    """N closed-loop clients: each sends its next request when its previous one ends.

    All prompts are built (tokenized) before the clock starts, so the load is not paced by the
    tokenizer. Warm-up requests go first, one at a time.
    """
    params = cell.params
    level, per_client = params["concurrency"], params["requests_per_client"]
    count = params["warmup"] + level * per_client
    prompts = [exact_prompt(ctx.tokenizer, params["prompt_tokens"]) for _ in range(count)]
    async with ctx.client(connections=max(level, 1) + 1) as client:
        for index in range(params["warmup"]):
            result = await client.send(_spec(ctx, cell, user_messages(prompts[index].text)))
            await record(result, index - params["warmup"], True, prompt_content_tokens=prompts[index].content_tokens)
        queue = prompts[params["warmup"]:]

        async def closed_loop(client_index: int) -> None:
            for repetition in range(per_client):
                prompt = queue[client_index * per_client + repetition]
                result = await client.send(_spec(ctx, cell, user_messages(prompt.text)))
                await record(result, repetition, False, client_index=client_index,
                             prompt_content_tokens=prompt.content_tokens)

        await _gather_or_cancel([closed_loop(i) for i in range(level)])


async def _rate(ctx: SweepContext, cell: Cell, record: Recorder) -> None:
    """Open loop: each request leaves at its seeded Poisson arrival time (rate.py), whether or not earlier
    ones have ended, on a connection of its own. Prompts are built before the clock starts; warm-up requests
    go first, one at a time. Rows carry the schedule (`scheduled_s`) and how late the send was
    (`schedule_lag_s`: the client's own delay, which would otherwise hide in the server's latency)."""
    params = cell.params
    arrivals = poisson_arrivals(params["rate_rps"], params["requests"], params["duration_s"], params["arrival_seed"])
    prompts = [exact_prompt(ctx.tokenizer, params["prompt_tokens"]) for _ in range(params["warmup"] + len(arrivals))]
    async with ctx.client(connections=len(arrivals) + 1, metered=False) as client:
        for index, prompt in enumerate(prompts[:params["warmup"]]):
            result = await client.send(_spec(ctx, cell, user_messages(prompt.text)))
            await record(result, index - params["warmup"], True, prompt_content_tokens=prompt.content_tokens)
        start = time.monotonic()

        async def arrive(index: int, at: float) -> None:
            await asyncio.sleep(start + at - time.monotonic())
            prompt = prompts[params["warmup"] + index]
            result = await client.send(_spec(ctx, cell, user_messages(prompt.text)))
            await record(result, index, False, scheduled_s=at, schedule_lag_s=result.t_send - (start + at),
                         prompt_content_tokens=prompt.content_tokens)

        await _gather_or_cancel([arrive(index, at) for index, at in enumerate(arrivals)])


async def _gather_or_cancel(coroutines: list[Awaitable[None]]) -> None:
    """Run all; on the first exception cancel the rest (their finished requests are already rows)."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


ScenarioRun = Callable[[SweepContext, Cell, StreamingClient, Recorder, int], Awaitable[None]]


async def _prefix_reuse(ctx: SweepContext, cell: Cell, record: Recorder) -> None:
    """Per repetition: seed the cache (except `cold`), then send the measured request."""
    async with ctx.client() as client:
        for repetition in range(cell.params["repetitions"]):
            await SCENARIOS[cell.params["scenario"]](ctx, cell, client, record, repetition)


async def _send_pair(ctx: SweepContext, cell: Cell, client: StreamingClient, record: Recorder, repetition: int,
                     seed: RequestSpec, measured: RequestSpec, seeded_by: str) -> None:
    seed_result = await record(await client.send(seed), repetition, False, prefix_role="seed")
    await record(await client.send(measured), repetition, False, prefix_role="measured", seeded_by=seeded_by,
                 seed_prompt_tokens=seed_result.prompt_tokens)


async def _cold(ctx: SweepContext, cell: Cell, client: StreamingClient, record: Recorder, repetition: int) -> None:
    prompt = exact_prompt(ctx.tokenizer, cell.params["prompt_tokens"])
    await record(await client.send(_spec(ctx, cell, user_messages(prompt.text))), repetition, False,
                 prefix_role="measured", seeded_by=None)


async def _identical(ctx: SweepContext, cell: Cell, client: StreamingClient, record: Recorder,
                     repetition: int) -> None:
    text = exact_prompt(ctx.tokenizer, cell.params["prompt_tokens"]).text
    spec = _spec(ctx, cell, user_messages(text))
    await _send_pair(ctx, cell, client, record, repetition, spec, spec, "the same request, sent just before")


async def _max_tokens_changed(ctx: SweepContext, cell: Cell, client: StreamingClient, record: Recorder,
                              repetition: int) -> None:
    text = exact_prompt(ctx.tokenizer, cell.params["prompt_tokens"]).text
    output = cell.params["output_tokens"]
    await _send_pair(ctx, cell, client, record, repetition, _spec(ctx, cell, user_messages(text), output),
                     _spec(ctx, cell, user_messages(text), 2 * output),
                     f"the same prompt with max_tokens {output} (measured: {2 * output})")


async def _sentence_appended(ctx: SweepContext, cell: Cell, client: StreamingClient, record: Recorder,
                             repetition: int) -> None:
    text = exact_prompt(ctx.tokenizer, cell.params["prompt_tokens"]).text
    await _send_pair(ctx, cell, client, record, repetition, _spec(ctx, cell, user_messages(text)),
                     _spec(ctx, cell, user_messages(text + APPENDED_SENTENCE)),
                     "the prompt without its last sentence")


async def _session_marker(ctx: SweepContext, cell: Cell, client: StreamingClient, record: Recorder,
                          repetition: int) -> None:
    tokens = cell.params["prompt_tokens"]
    first = exact_text(ctx.tokenizer, tokens, new_salt()).text
    second = exact_text(ctx.tokenizer, tokens, new_salt()).text
    await _send_pair(ctx, cell, client, record, repetition, _spec(ctx, cell, user_messages(first)),
                     _spec(ctx, cell, user_messages(second)), "the same document behind another session marker")


async def _cache_control(ctx: SweepContext, cell: Cell, client: StreamingClient, record: Recorder,
                         repetition: int) -> None:
    """Seed 000 §2.6: a Messages request writes the document behind a `cache_control` breakpoint, then
    the same blocks with a sentence appended read it."""
    text = exact_prompt(ctx.tokenizer, cell.params["prompt_tokens"]).text
    written = {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}
    seed = [{"role": "user", "content": [written]}]
    measured = [{"role": "user", "content": [written, {"type": "text", "text": APPENDED_SENTENCE}]}]
    await _send_pair(ctx, cell, client, record, repetition, _spec(ctx, cell, seed, api="messages"),
                     _spec(ctx, cell, measured, api="messages"),
                     "a Messages request writing the document behind a cache_control breakpoint")


async def _cache_breakpoint(ctx: SweepContext, cell: Cell, client: StreamingClient, record: Recorder,
                            repetition: int) -> None:
    """Seed 000 §2.6 ('显式 prompt_cache_breakpoint 写入后再追加读取'): a chat request writes the document
    behind an explicit breakpoint (IF §4: content part `prompt_cache_breakpoint: {"mode": "explicit"}`),
    then the same parts with a sentence appended read it."""
    text = exact_prompt(ctx.tokenizer, cell.params["prompt_tokens"]).text
    written = {"type": "text", "text": text, "prompt_cache_breakpoint": {"mode": "explicit"}}
    seed = [{"role": "user", "content": [written]}]
    measured = [{"role": "user", "content": [written, {"type": "text", "text": APPENDED_SENTENCE}]}]
    await _send_pair(ctx, cell, client, record, repetition, _spec(ctx, cell, seed), _spec(ctx, cell, measured),
                     "a chat request writing the document behind an explicit prompt_cache_breakpoint")


async def _previous_response(ctx: SweepContext, cell: Cell, client: StreamingClient, record: Recorder,
                             repetition: int) -> None:
    text = exact_prompt(ctx.tokenizer, cell.params["prompt_tokens"]).text
    seed = await record(await client.send(_spec(ctx, cell, user_messages(text), api="responses")), repetition, False,
                        prefix_role="seed")
    if seed.response_id is None:
        return  # the seed failed (its row says why); there is no response to continue
    follow_up = _spec(ctx, cell, user_messages("Continue."), api="responses",
                      previous_response_id=seed.response_id)
    await record(await client.send(follow_up), repetition, False, prefix_role="measured",
                 seeded_by="the response named by previous_response_id", seed_prompt_tokens=seed.prompt_tokens)


SCENARIOS: dict[str, ScenarioRun] = {
    "cold": _cold, "identical_resend": _identical, "max_tokens_changed": _max_tokens_changed,
    "sentence_appended": _sentence_appended, "session_marker_changed": _session_marker,
    "prompt_cache_breakpoint": _cache_breakpoint, "anthropic_cache_control": _cache_control,
    "responses_previous_response_id": _previous_response,
}
RUNNERS: dict[str, Callable[[SweepContext, Cell, Recorder], Awaitable[None]]] = {
    "context": _context, "tasks": _tasks, "concurrency": _concurrency, "rate": _rate, "prefix_reuse": _prefix_reuse,
}


def base_row(run: Run, adapter: EnginePart, server_record: dict[str, Any]) -> dict[str, Any]:
    """The fields every row of this run shares: what makes a result reproducible."""
    artifact = run.dir.artifact
    sha = run.profile.artifact.sha256
    if artifact.exists():
        sha = json.loads(artifact.read_text()).get("sha256") or sha
    return {"schema_version": RequestRow.SCHEMA_VERSION, "run_id": run.dir.path.name, "profile_hash": run.profile_hash,
            "engine": adapter.kind, "engine_version": run.profile.engine.version or server_record.get("engine_version"),
            "artifact_sha256": sha}
