"""Sweeps: the measurements of 03_sweeps, resumable, with the server's own accounting beside the client's.

`sweeps(run)` finds the run's server, writes the plan, runs every cell that has no result yet
(with telemetry sampling in the background), and returns the tables it saved under
`run_dir/tables/` (SweepTables). Rerunning it continues where it stopped, and runs failed cells again. A server
that dies mid-sweep fails its cell with the diagnosis from the server log, and the step raises
ServerExited after saving the tables of what finished; cells that measured nothing make it raise
SweepFailed (after saving the tables), and so does a server that refuses the requests' credentials,
at the first refusal. Task cells planned with `speculation: off` (sweeps.tasks.speculation_ab) run against a
second server of the profile with speculation off, started for them and stopped after (spec_off.py).

    tables = sweeps(run, only="context,prefix_reuse")
    tables["context"]
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import httpx

from ninferkit import bounded
from ninferkit.deploy import power
from ninferkit.deploy.actions import Host
from ninferkit.engines import get_adapter
from ninferkit.engines.api_dialect import ApiDialect
from ninferkit.errors import (
    NinferkitError,
    ProfileError,
    ReadinessTimeout,
    ServerError,
    ServerStartError,
    SweepFailed,
)
from ninferkit.measure.telemetry import Telemetry
from ninferkit.measure.workloads import Tokenizer
from ninferkit.params.variants import Variant
from ninferkit.progress import Progress, track
from ninferkit.rundir.identity import variant_profile
from ninferkit.rundir.records import CellEntry, RequestRow, ServerRecord
from ninferkit.rundir.runs import GrowingRows, Run, RunDir, read_rows, record_serving, utc_now
from ninferkit.rundir.servings import RunServings, run_servings
from ninferkit.server import process as server
from ninferkit.steps import preflight
from ninferkit.steps.catalog import Step, get_step
from ninferkit.sweeps.cell import Cell
from ninferkit.sweeps.execute import SweepContext, base_row, run_cell
from ninferkit.sweeps.objective import Verdict, next_launch, said
from ninferkit.sweeps.plan import AB, build_plan, parse_only, sweep_names, write_plan
from ninferkit.sweeps.resume import resume_plan
from ninferkit.sweeps.rules import CellTally, MaxErrors, StopRule
from ninferkit.sweeps.settle import answer_line, launch_verdicts, settle
from ninferkit.sweeps.spec_off import is_spec_off, spec_off_context
from ninferkit.sweeps.tables import SweepTables, ab_table, build_tables, latest_outcomes, measured_ok, save_tables
from ninferkit.sweeps.truth import record_log_truth
from ninferkit.sweeps.variants import variant_context
from ninferkit.transports import uses_proxy


def sweeps(run: Run, *, only: str | Iterable[str] | None = None, progress: bool = True) -> SweepTables:
    """Run the sweeps of the profile (or only the named kinds) against the run's server.

    `only`: "context,tasks" or a list; None runs every enabled kind. Returns the tables it saved.
    Raises ProfileError (bad sizes or names, before anything is sent), ServerError when no server
    is running, ServerExited when it dies mid-sweep (finished cells and their rows are kept),
    SweepFailed when cells measured nothing or the server refused the credentials (tables saved).
    """
    kinds = parse_only(only)
    profile = run.profile
    adapter = get_adapter(profile.engine.kind)
    explicit = only is not None
    headers = server.auth_headers(profile)
    try:
        record = server.ensure_running(run.dir)
    except ServerError:
        cells, baseline = _checked_plan(run, kinds, explicit)  # a bad plan is named first, whether or not a server runs
        finished = _done_without_server(run, kinds, cells, baseline)
        if finished is not None:
            return finished
        stopped = _variants_left(run, cells)
        if stopped is None:
            raise
        record = stopped  # only variants' cells are left: each launches its own server, the base's is not needed
    else:
        # The plan is built once, with what the server says it reads: a bad plan still fails before any request of
        # the sweep is sent (only the server's health and `request_extensions_path` were asked).
        cells, baseline = _checked_plan(run, kinds, explicit, served(adapter, str(record.url), headers))
    url = str(record.url)
    if record.external and any(map(is_spec_off, cells)):
        raise ProfileError("sweeps.tasks.speculation_ab runs its cells on a second server that ninferkit starts, and "
                           f"this run's server ({url}) is someone else's; allowed: false "
                           "(-p sweeps.tasks.speculation_ab=false)")
    # the ledger and requests.jsonl are read once for the step, each line parsed once as the cells append it
    with GrowingRows(run.dir.sweep_cells, CellEntry) as ledger, GrowingRows(run.dir.requests, RequestRow) as requests:
        servings = run_servings(run.dir)
        for identity in {servings.main.id: servings.main, servings.spec_off.id: servings.spec_off,
                         **{each.id: each for each in servings.variants.values()}}.values():
            record_serving(run.dir, identity)
        write_plan(run.dir, cells, run.profile_hash, servings.main.id)
        resume = resume_plan(cells, ledger.rows(), measured_ok(requests.rows()), servings)
        pending = [cell for cell, _ in resume.send]
        log_path = Path(record.log) if record.log else None
        rules: list[StopRule] = [MaxErrors(profile.sweeps.max_errors_per_cell)]
        telemetry = Telemetry(run.dir.telemetry, adapter, log_path, url, headers=headers,
                              hz=profile.sweeps.telemetry_hz)
        with Tokenizer(url, adapter, headers) as tokenizer:
            ctx = SweepContext(run, adapter, url, server.record_model_id(record, profile), headers, tokenizer,
                               rules, base_row(run, adapter, record, servings.main),
                               profile.sweeps.request_timeout_s, log_path, servings.main, requests)
            earlier, relaunch = len(resume.keep), False
            resumed = f" ({earlier} of {len(cells)} cells done before)" if earlier else ""
            try:
                with track(f"sweeps{resumed}", len(pending), "cells", enabled=progress) as shown:
                    if run.dir.sweep_cells.exists():  # a rerun: what it keeps, and why it sends each cell it sends
                        shown.event(resume.summary(servings.main.id))
                    if any(map(is_spec_off, pending)):
                        shown.note("starting the second server of the speculation A/B (speculation off)")
                    base = [cell for cell in pending if variant_of(cell) is None]
                    if base:
                        with spec_off_context(ctx, any(map(is_spec_off, base)), servings.spec_off) as spec_off:
                            _run_cells({False: ctx, True: spec_off or ctx}, base,
                                       telemetry if profile.sweeps.telemetry else None, shown)
                    variants = [cell for cell in pending if variant_of(cell) is not None]
                    relaunch = bool(variants) and server.stop(run.dir)  # a GPU holds one pool: the base's goes first
                    if relaunch and (left := _left_stopped(run)) is not None:
                        relaunch = False
                        shown.event(left)
                        run.dir.record_step("sweeps", server_left_stopped=left)
                    unstarted = _run_variants(ctx, variants, servings, shown,
                                              lambda said: _checked_plan(run, kinds, explicit, said)[0])
                    settled = None
                    if profile.objective is not None:  # the engine's record of the last cell joined first
                        record_log_truth(run, adapter, requests.rows())
                        settled = _settled(run)
                        shown.event(f"objective: {settled}")
            except NinferkitError as error:  # a variant's power limit that did not take or come back included
                try:  # what was measured before it is joined and tabled, whatever stopped the step
                    record_log_truth(run, adapter, requests.rows())
                    save_tables(run.dir, build_tables(run, kinds, ledger.rows(), requests.rows()))
                except NinferkitError as unsaved:
                    error.add_note(f"the tables were not saved: {unsaved}")
                if relaunch:
                    try:
                        _relaunch_base(run, progress)
                    except ServerError as again:
                        error.add_note(f"the run's server did not start again after the variants: {again}")
                raise
        record_log_truth(run, adapter, requests.rows())  # the engine has logged every request by now
        tables = build_tables(run, kinds, ledger.rows(), requests.rows())
        if baseline is not None:
            tables[AB] = ab_table(baseline, run.dir)
        save_tables(run.dir, tables)
        done = latest_outcomes(run.dir, servings, ledger.rows())
        failed = [cell for cell in cells if _status(done, cell) == "failed"]
        run.dir.record_step("sweeps", cells_planned=len(cells), cells_run=len(pending), cells_failed=len(failed),
                            cells_kept=len(resume.keep), cells_sent=len(resume.send), resend_reasons=resume.reasons(),
                            resume_summary=resume.summary(servings.main.id),
                            serving_id=servings.main.id,
                            telemetry_nvml=telemetry.nvml_status, telemetry_metrics=telemetry.metrics_status,
                            **({} if settled is None else {"objective_answer": settled}))
        problem = None
        if unstarted:
            problem = SweepFailed(f"{len(unstarted)} variant(s) did not start, so their cells were not sent (tables "
                                  "saved; a rerun launches them again):\n"
                                  + "\n".join(f"  - {line}" for line in unstarted))
        elif failed:
            problem = SweepFailed(f"{len(failed)} of {len(cells)} cells measured nothing (tables saved; a rerun "
                                  "retries them):\n"
                                  + "\n".join(f"  - {c.label}: {done[c.cell_id].reason}" for c in failed))
        if relaunch:
            try:
                _relaunch_base(run, progress)
            except ServerError as again:
                if problem is None:
                    raise
                problem.add_note(f"the run's server did not start again after the variants: {again}")
        if problem is not None:
            raise problem
        return SweepTables(tables)


def variant_of(cell: Cell[Any]) -> str | None:
    """The variant a cell is measured under (the profile's `variants`); None: the base."""
    variant: str | None = cell.params.variant
    return variant


def _run_variants(ctx: SweepContext, cells: list[Cell[Any]], servings: RunServings, shown: Progress,
                  replan: Callable[[dict[str, Any] | None], list[Cell[Any]]]) -> list[str]:
    """Each variant with cells left, in the profile's order, or as the profile's `objective` searches them
    (sweeps/objective.py: with `ordered` it bisects, and stops launching once the answer is pinned): the variant
    launched (the caller has stopped the run's server: a GPU holds one pool), its cells run against it with
    telemetry from its own log, and stopped (sweeps/variants.py). A variant whose server does not start is
    recorded and skipped; returns those, each with why. `replan`: the plan as a server's answer at the adapter's
    `request_extensions_path` makes it (`served`), asked of each variant's own server."""
    run, unstarted = ctx.run, []
    objective, order = run.profile.objective, [variant.name for variant in run.profile.variants]
    pending = {name: [cell for cell in cells if variant_of(cell) == name] for name in order}
    verdicts: dict[str, Verdict] = {}
    if objective is not None:  # what earlier runs measured (or failed to launch) decides first
        measured = [name for name in order if not pending[name]]
        verdicts = launch_verdicts(objective, run.dir, measured)
    while True:
        if objective is None:
            name = next((each for each in order if pending[each]), None)
        else:
            name = next_launch(objective, order, verdicts)
        if name is None:
            break
        if not pending[name]:  # measured, yet no row at the objective's cells: it cannot meet the limits
            verdicts[name] = Verdict(name, {}, False, ["no row at the objective's cells"])
            continue
        why = _run_variant(ctx, run.profile.variants[order.index(name)], pending.pop(name), servings, shown, replan)
        pending[name] = []
        if why is not None:
            unstarted.append(f"variant {name}: {why} (its log: {run.dir.variant(name).server_log})")
        if objective is not None:
            verdicts[name] = launch_verdicts(objective, run.dir, [name])[name]
            shown.event(f"variant {name}: {said(verdicts[name])}")
    return unstarted


def _run_variant(ctx: SweepContext, variant: Variant, own: list[Cell[Any]], servings: RunServings,
                 shown: Progress, replan: Callable[[dict[str, Any] | None], list[Cell[Any]]]) -> str | None:
    """One variant's launch, cells and stop; why it did not start (None: it did). Its cells are planned again with
    what its own server says it reads (a variant may change the chat template; a rerun of variants alone planned
    them without any server)."""
    run = ctx.run
    shown.note(f"launching variant {variant.name} ({', '.join(variant.overrides())})")
    changed = variant_profile(run.profile, variant)
    held = power.held_limit(changed, Host(say=shown.event)) if "gpu.power_limit_w" in variant.set else nullcontext()
    try:
        with held, variant_context(ctx, variant, servings.variants[variant.name], len(own)) as each:
            planned = {cell.cell_id: cell for cell in replan(served(ctx.adapter, each.url, ctx.headers))}
            own = [planned.get(cell.cell_id, cell) for cell in own]
            telemetry = Telemetry(run.dir.telemetry, ctx.adapter, each.log_path, each.url, headers=ctx.headers,
                                  hz=run.profile.sweeps.telemetry_hz)
            _run_cells({False: each, True: each}, own, telemetry if run.profile.sweeps.telemetry else None, shown)
    except (ServerStartError, ReadinessTimeout) as exc:
        shown.event(f"variant {variant.name} did not start: {exc}")
        return str(exc).splitlines()[0]
    return None


def _relaunch_base(run: Run, progress: bool) -> None:
    """The run's own server launched again after the variants, as the step found it: the user after `ninferkit
    sweep` or 03_sweeps, and a later step of `ninferkit run` that sends it requests (`_left_stopped`), find the base
    serving running. Its earlier log is kept (server.keep_earlier_log), its rows joined to it."""
    server.start(run, progress=progress)
    run.dir.record_step("sweeps", server_relaunched=utc_now())


def _left_stopped(run: Run) -> str | None:
    """Why the run's server is not launched again after the variants (None: it is): `ninferkit run` is running this
    step (the manifest's plan, and this step's status `running`, are the runner's) and no later step of its plan
    sends requests to the run's server (`Step.needs_server`): the capacity step reads the launch's log or launches
    its own servers (its first launch stops the run's), the write-up reads the run's files, and the runner stops the
    server at the end, so a relaunch would hold a GPU for minutes of a model's load for nothing. What those steps
    read of the base's launch (server.json with its checks and ledger, logs/server.log) is its first launch's, kept
    as it was; a rerun of this step launches what it needs (`_variants_left`). Called alone (03_sweeps, `ninferkit
    sweep`), the step leaves the base running as it found it."""
    manifest = run.dir.read_manifest()
    planned, entry = manifest.planned_steps or [], manifest.steps.get("sweeps")
    if entry is None or entry.status != "running" or "sweeps" not in planned:
        return None
    later = planned[planned.index("sweeps") + 1:]
    if any(get_step(name).needs_server for name in later):
        return None
    if later[:1] == ["capacity"] and (run.profile.capacity.fit_launches or run.profile.capacity.search):
        return ("the run's server is not started again after the variants: the capacity step, next in this run, "
                "stops it for its own launches")
    return ("the run's server is not started again after the variants: "
            + (f"no later step of this run ({', '.join(later)}) sends it requests" if later
               else "the sweeps step is the last of this run") + ", and the run stops it at its end")


def _variants_left(run: Run, cells: list[Cell[Any]]) -> ServerRecord | None:
    """The run's (stopped) server record where the cells left to send are all variants' (each launches its own
    server, so a rerun needs no base server: 04 stopped it, or the runner did); None where a base cell is left,
    the run has no server record, or its server is someone else's (a --url run has no variants to launch)."""
    record = run.dir.read_server()
    if record is None or record.external or not run.dir.sweep_cells.exists():
        return None
    ledger, requests = read_rows(run.dir.sweep_cells, CellEntry), read_rows(run.dir.requests, RequestRow)
    left = [cell for cell, _ in resume_plan(cells, ledger, measured_ok(requests), run_servings(run.dir)).send]
    return record if left and all(variant_of(cell) is not None for cell in left) else None


def _done_without_server(run: Run, kinds: list[str], cells: list[Cell[Any]],
                         baseline: RunDir | None) -> SweepTables | None:
    """The tables, rebuilt from the rows, where every planned cell is done for the run's serving: a rerun of
    03_sweeps after 04_capacity_fit stopped the server has nothing to send and needs no server; the objective's
    answer is recorded as after the launches. None where a cell is still to be sent (the caller raises why no
    server answers)."""
    if not run.dir.sweep_cells.exists():
        return None
    ledger, requests = read_rows(run.dir.sweep_cells, CellEntry), read_rows(run.dir.requests, RequestRow)
    if resume_plan(cells, ledger, measured_ok(requests), run_servings(run.dir)).send:
        return None
    tables = build_tables(run, kinds, ledger, requests)
    if baseline is not None:
        tables[AB] = ab_table(baseline, run.dir)
    save_tables(run.dir, tables)
    settled = _settled(run)
    if settled is not None:
        run.dir.record_step("sweeps", objective_answer=settled)
    return SweepTables(tables)


def _settled(run: Run) -> str | None:
    """The profile's objective answered from the run's files (sweeps/settle.py, as the post answers it), in a line;
    None without an objective."""
    objective = run.profile.objective
    if objective is None:
        return None
    return answer_line(settle(objective, run.dir, [variant.name for variant in run.profile.variants]))


def _status(outcomes: dict[str, CellEntry], cell: Cell[Any]) -> str | None:
    """The cell's status in the ledger's last entry for it; None for a cell never run."""
    entry = outcomes.get(cell.cell_id)
    return entry.status if entry else None


def served(adapter: ApiDialect, url: str, headers: dict[str, str]) -> dict[str, Any] | None:
    """What the running server says at the adapter's `request_extensions_path` (None when it has none or
    does not answer: the adapter then reads what the profile alone says)."""
    path = adapter.request_extensions_path
    if path is None:
        return None
    try:
        with httpx.Client(headers=headers, timeout=30.0, trust_env=uses_proxy(url)) as client:
            status, answer = bounded.get(client, url + path, deadline_s=30.0)
        body = json.loads(answer.data) if status == 200 and answer.cut is None else None
    except (httpx.HTTPError, ValueError, RecursionError):
        return None
    return body if isinstance(body, dict) else None


def plan(run: Run, only: str | Iterable[str] | None = None) -> list[Cell[Any]]:
    """The cells `sweeps` would run, checked against the profile; sends nothing, writes nothing.
    A skip that depends on what the running server says (llama-server's /props: does its model's chat
    template render tools?) is decided when the sweep runs; here the profile alone decides.

    Raises ProfileError for an unknown kind, a size over the served context, or an A/B without
    its baseline run.
    """
    return _checked_plan(run, parse_only(only), explicit=only is not None)[0]


def _checked_plan(run: Run, kinds: list[str], explicit: bool,
                  served: dict[str, Any] | None = None) -> tuple[list[Cell[Any]], RunDir | None]:
    cells = build_plan(run.profile, get_adapter(run.profile.engine.kind), kinds, explicit=explicit, served=served)
    return cells, _ab_baseline(run, kinds, explicit)


def _run_cells(contexts: dict[bool, SweepContext], cells: list[Cell[Any]], telemetry: Telemetry | None,
               shown: Progress) -> None:
    """Each cell against its server: contexts[True] for the speculation-off side of the A/B. The progress
    names the cell at hand and counts its requests as they end (a cell of long prompts on a CPU takes minutes)."""
    if telemetry is not None:
        telemetry.start()
        if telemetry.without_gpu:
            shown.event(f"no GPU samples: NVML is {telemetry.nvml_status}; fine for the embedded default, which "
                        "runs on the CPU")
    try:
        for index, cell in enumerate(cells, 1):
            label = f"cell {index}/{len(cells)} {cell.label}"
            shown.note(label)

            def requests_done(tally: CellTally, label: str = label) -> None:
                shown.note(f"{label}, requests done: {tally.sent}")

            outcome = run_cell(contexts[is_spec_off(cell)], cell, requests_done)
            if outcome.status == "failed":
                shown.event(f"cell {cell.label} failed: {outcome.reason}")
            shown.update()
    finally:
        if telemetry is not None:
            telemetry.stop()


def _ab_baseline(run: Run, kinds: list[str], explicit: bool) -> RunDir | None:
    if AB not in kinds or not (run.profile.sweeps.ab.enabled or explicit):
        return None
    return preflight.ab_baseline(run.profile)


@contextmanager
def serving(run: Run, progress: bool = True) -> Iterator[bool]:
    """The run's server for the duration of the block: the running one, or one launched here and
    stopped at the end (also on failure). Yields whether it launched one."""
    try:
        server.ensure_running(run.dir)
    except ServerError:
        server.start(run, progress=progress)
        try:
            yield True
        finally:
            server.stop(run.dir)
    else:
        yield False


__all__ = ["SweepTables", "ab_table", "build_tables", "plan", "serving", "sweep_names", "sweeps"]


STEP = Step("sweeps", "03_sweeps.ipynb", "tables/", sweeps, url=True, needs_server=True)
