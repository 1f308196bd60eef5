"""Running one cell: build its prompts, send its requests, append one row per finished request.

Every row is appended to `requests.jsonl` and flushed the moment its request ends. A cell ends as
`done` (at least one measured request succeeded: a cell is done only when it measured something),
`failed` (none did, a stop rule fired, or the server died; with the server's answer and the adapter's
diagnosis of it, or of its log) or `skipped` (planned so: the engine cannot serve it); the outcome is
appended to `sweeps/cells.jsonl`. A 401 or 403 fails the cell and stops the sweep (SweepFailed): every
other cell would be refused the same way. Rows carry
the cell's `attempt`, so the tables use only the attempt that finished, and a retried cell never
counts twice while nothing written is ever deleted. After a cell's requests end, and before its
outcome is recorded, the engine's own per-request record is joined to its rows (truth.py). What a cell
sends is its kind's (sweeps/kinds/<kind>.py: `run`), over the pieces here: `request_spec`, the Recorder and
`gather_or_cancel`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import statistics
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ninferkit.bounded import read_log
from ninferkit.engines.base import EngineAdapter
from ninferkit.engines.part import EnginePart
from ninferkit.errors import Diagnosis, RequestFailed, ServerExited, SweepFailed
from ninferkit.host.cpu_idle import measure_idle
from ninferkit.measure.client import RequestResult, RequestSpec, StreamingClient, error_summary
from ninferkit.measure.client_clock import CellClock, ClockWatch, cell_unsure, row_unsure
from ninferkit.measure.client_workers import WorkerClient, client_cost, spread
from ninferkit.measure.workloads import Tokenizer
from ninferkit.params.sweeps import Api
from ninferkit.rundir.identity import ServingIdentity
from ninferkit.rundir.records import RequestRow, ServerRecord
from ninferkit.rundir.runs import GrowingRows, Run, RunDir, append_jsonl, utc_now
from ninferkit.server import process as server
from ninferkit.sweeps.cell import Cell
from ninferkit.sweeps.rules import CellTally, StopRule
from ninferkit.sweeps.truth import MeteredClient, record_log_truth

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
    serving: ServingIdentity
    """What the cell is measured under (rundir/identity.py): every row and the ledger line carry its id."""
    requests: GrowingRows[RequestRow] | None = None
    """requests.jsonl as the step reads it, once (the engine's record is joined to it after every cell); None:
    read whole at each join."""
    server_dir: RunDir | None = None
    """The run folder whose server.json is the server these cells reach (a variant's, the speculation A/B's other
    side), asked whether it still runs; None: the run's own."""

    def server_run(self) -> RunDir:
        """The run folder of the server the cells reach (see `server_dir`)."""
        return self.server_dir or self.run.dir

    def rows(self) -> list[RequestRow] | None:
        """requests.jsonl as it stands, from the step's reading of it; None where the step has none."""
        return None if self.requests is None else self.requests.rows()

    def client(self, connections: int = 8, metered: bool = True) -> StreamingClient:
        """A client per cell; it reads the engine's per-request counters around requests that run alone
        when the engine has such counters (truth.MeteredClient), unless `metered` is off: the open loop's
        sends keep their schedule, and a read of /metrics before each would delay them."""
        kind = MeteredClient if metered and self.adapter.request_metrics_path is not None else StreamingClient
        return kind(self.url, self.adapter, self.model_id, headers=self.headers,
                    timeout_s=self.timeout_s, max_connections=connections)

    @contextlib.asynccontextmanager
    async def load_client(self, record: Recorder, events_per_s: float | None, connections: int,
                          metered: bool = True) -> AsyncIterator[StreamingClient | WorkerClient]:
        """The open client of a kind that loads the server with many streams: `client`'s, or where the events per
        second its streams are expected to bring (from the gap `stream_gap_s` learned) need more than one
        process to be stamped honestly on the CPUs' idle time (measure/client_workers.spread), worker processes,
        each stamping its share, their clocks handed to the cell's watch; the cell's `record` keeps how many and
        why. The CPUs' idle share is measured in a thread: the cell's clock watch must not see the window as lag."""
        decided = await asyncio.to_thread(spread, events_per_s, self.stream_gap_s(), client_cost(), measure_idle)
        record.spread = decided.why
        client = self.client(connections, metered) if decided.workers == 1 else WorkerClient(
            self.url, self.adapter, self.model_id, workers=decided.workers, headers=self.headers,
            timeout_s=self.timeout_s, watch=record.watch)
        async with client:
            yield client

    def stream_gap_s(self) -> float | None:
        """The median gap between a stream's text events over this run's requests so far (each request's own
        median), or None where none has two: what one stream's events cost the client per second."""
        medians = [statistics.median(row.itl_client_s) for row in self.rows() or ()
                   if row.status == "ok" and row.itl_client_s]
        return statistics.median(medians) if medians else None


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
    clock: CellClock | None = None
    """What the clock watch saw over the cell (None: skipped)"""
    unsure_rows: int = 0
    spread: str | None = None
    """How many client processes stamped the cell, and why (Recorder.spread)"""


class Recorder:
    """Turns a finished request into a row, appends it, and applies the stop rules.

    The row is written and fsynced in a worker thread, one row at a time: on the event loop, a write that
    waits for the disk (milliseconds, more on a busy one) would delay every other stream's reads, and their
    inter-token gaps and first tokens would carry it."""

    def __init__(self, ctx: SweepContext, cell: Cell[Any], attempt: str,
                 on_request: Callable[[CellTally], None] | None = None) -> None:
        self.ctx, self.cell, self.attempt, self.on_request = ctx, cell, attempt, on_request
        self.tally = CellTally()
        self.measured = CellTally()  # without warm-up and cache seeds: what the table reports
        self._writing = asyncio.Lock()
        self.watch = ClockWatch()
        self.clock: CellClock | None = None
        self.unsure_rows = 0
        """Rows whose timing the client cannot vouch for"""
        self.spread: str | None = None
        """How many client processes stamped the cell's streams, and why (SweepContext.load_client), where it weighed"""

    async def watched(self, run: Awaitable[None]) -> None:
        """Run the cell's requests under the clock watch (measure/client_clock); `clock` holds what it saw."""
        try:
            async with self.watch:
                await run
        finally:
            self.clock = self.watch.cell()

    async def __call__(self, result: RequestResult, repetition: int, warmup: bool, **extra: Any) -> RequestResult:
        if result.client_worker is None:  # stamped here; a worker's row carries its own loop's lag
            result.client_lag_max_s = self.watch.lag_max_s(result.t_send, result.t_done)
        unsure = row_unsure(result.client_lag_max_s, result.itl_client_s, result.ttft_client_s)
        row = {**self.ctx.base_row, "sweep": self.cell.sweep, "cell_id": self.cell.cell_id,
               "cell": self.cell.params.as_dict(), "attempt": self.attempt, "request_uid": uuid.uuid4().hex,
               "repetition": repetition, "warmup": warmup, **result.row(), "client_unsure": unsure,
               **extra}
        async with self._writing:  # one append at a time: a torn-tail repair must never see another's half row
            await asyncio.to_thread(append_jsonl, self.ctx.run.dir.requests, row)
        # tallied as stored: a row refused as impossible is errored, and a cell of nothing else is failed, not done
        stored, error = str(row["status"]), row.get("error")
        self.tally.add(stored, error, result.http_status)
        self.unsure_rows += unsure is not None
        if self.on_request is not None:
            self.on_request(self.tally)
        if not warmup and extra.get("prefix_role") != "seed":
            self.measured.add(stored, error, result.http_status)
        if result.status != "ok" and (result.http_status is None or result.http_status < 400):
            # broke off without an error answer: did the server die? (raises ServerExited, failing this cell)
            await asyncio.to_thread(server.confirm_running, self.ctx.server_run())
        if result.http_status is not None and result.http_status in ACCESS_REFUSED:
            raise AccessRefused(result.http_status, result.error)
        for rule in self.ctx.rules:
            reason = rule.check(self.tally)
            if reason:
                raise CellStopped(reason)
        return result


def run_cell(ctx: SweepContext, cell: Cell[Any], on_request: Callable[[CellTally], None] | None = None) -> CellOutcome:
    """Run one cell to its outcome and append it to the ledger; ServerExited is re-raised after that, and a
    refused credential becomes SweepFailed. `on_request` sees the cell's tally after each request (progress)."""
    attempt = uuid.uuid4().hex[:8]
    if cell.skip:
        outcome = CellOutcome(cell.cell_id, "skipped", attempt, cell.skip)
        _append_outcome(ctx, cell, outcome)
        return outcome
    record = Recorder(ctx, cell, attempt, on_request)
    client_cost()  # measured once per process, before any cell's clock watch starts: it would see it as lag
    try:
        try:
            _run_async(record.watched(cell.kind.run(ctx, cell, record)))
        except RequestFailed as failed:  # the tokenizer could not be reached or was refused
            answer = failed.__cause__.response if isinstance(failed.__cause__, httpx.HTTPStatusError) else None
            if answer is not None and answer.status_code in ACCESS_REFUSED:
                raise AccessRefused(answer.status_code, answer.text) from failed
            server.ensure_running(ctx.server_run())  # is the server gone?
            raise CellStopped(str(failed)) from failed
    except AccessRefused as refused:
        outcome = _failed(ctx, record, str(refused), _access_diagnosis(ctx, refused.body))
        record_log_truth(ctx.run, ctx.adapter, ctx.rows())
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
                              diagnosis=None if diagnosis is None else diagnosis.__dict__, tally=record.tally,
                              clock=record.clock, unsure_rows=record.unsure_rows, spread=record.spread)
        record_log_truth(ctx.run, ctx.adapter, ctx.rows())
        _append_outcome(ctx, cell, outcome)
        raise
    else:
        outcome = ended_outcome(ctx, record)
    record_log_truth(ctx.run, ctx.adapter, ctx.rows())  # before the outcome: a done cell has its truth
    _append_outcome(ctx, cell, outcome)
    return outcome


def ended_outcome(ctx: SweepContext, record: Recorder) -> CellOutcome:
    """The outcome of a cell whose requests all ended: done when a measured request (not a warm-up, not a
    cache seed) succeeded, else failed with the server's last answer and the adapter's diagnosis of it."""
    if record.measured.ok:
        return CellOutcome(record.cell.cell_id, "done", record.attempt, tally=record.tally, clock=record.clock,
                           unsure_rows=record.unsure_rows, spread=record.spread)
    return _failed(ctx, record, _nothing_measured(record.measured, record.tally))


def _failed(ctx: SweepContext, record: Recorder, reason: str, diagnosis: Diagnosis | None = None) -> CellOutcome:
    """A failed outcome, with the adapter's diagnosis of the server's last answer when none is given."""
    error = record.tally.last_error
    diagnosis = diagnosis or (ctx.adapter.diagnose(error) if error else None)
    return CellOutcome(record.cell.cell_id, "failed", record.attempt, reason,
                       diagnosis=None if diagnosis is None else diagnosis.__dict__, tally=record.tally,
                       clock=record.clock, unsure_rows=record.unsure_rows, spread=record.spread)


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
    return ctx.adapter.diagnose(read_log(ctx.log_path, "diagnosing the server's death from its log"))


def _append_outcome(ctx: SweepContext, cell: Cell[Any], outcome: CellOutcome) -> None:
    tally = outcome.tally
    clock = outcome.clock or CellClock(None, None, None)
    append_jsonl(ctx.run.dir.sweep_cells, {
        "cell_id": cell.cell_id, "sweep": cell.sweep, "cell": cell.params.as_dict(), "status": outcome.status,
        "attempt": outcome.attempt, "reason": outcome.reason, "diagnosis": outcome.diagnosis,
        "notes": list(cell.notes), "request_fields": cell.request,
        "profile_hash": ctx.run.profile_hash, "serving_id": ctx.serving.id, "finished_utc": utc_now(),
        "requests_sent": tally.sent, "requests_ok": tally.ok, "requests_errored": tally.errored,
        "requests_incomplete": tally.incomplete, **clock.fields(),
        "client_unsure": cell_unsure(clock, outcome.unsure_rows, tally.sent),
        "client_spread": outcome.spread,
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


def request_spec(ctx: SweepContext, cell: Cell[Any], messages: list[dict[str, Any]], max_tokens: int | None = None,
                 api: Api | None = None, tools: list[dict[str, Any]] | None = None, **extra: Any) -> RequestSpec:
    """A request of the cell: its sampling, the engine extensions the plan chose (cell.request), output
    pinning where asked, then what this request adds."""
    params = cell.params
    pin = ctx.adapter.output_pin_fields() if params.pin_output else {}
    return RequestSpec(api or params.api, messages, max_tokens or params.output_tokens,
                       temperature=params.temperature, seed=params.seed, tools=tools,
                       extra={**cell.request, **pin, **extra})


async def gather_or_cancel(coroutines: list[Awaitable[None]]) -> None:
    """Run all; on the first exception cancel the rest (their finished requests are already rows)."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def base_row(run: Run, adapter: EnginePart, server_record: ServerRecord, serving: ServingIdentity) -> dict[str, Any]:
    """The fields every row of this run shares: what makes a result reproducible, and what it was measured
    under (`serving_id`: the rows are kept, resumed and pooled by it)."""
    artifact = run.dir.artifact
    sha = run.profile.artifact.sha256
    if artifact.exists():
        sha = json.loads(artifact.read_text()).get("sha256") or sha
    return {"schema_version": RequestRow.SCHEMA_VERSION, "run_id": run.dir.run_id(), "profile_hash": run.profile_hash,
            "engine": adapter.kind, "engine_version": run.profile.engine.version or server_record.engine_version,
            "artifact_sha256": sha, "serving_id": serving.id}
