"""The 04_capacity_fit step: gather observations, fit, tabulate, search, write capacity.json.

Observations come from the launch step's own server (server.json's log), from earlier capacity
launches of this run (capacity/observations.jsonl, so a rerun resumes), from new launches at every
grid point when `capacity.fit_launches` is on, and from the search when `capacity.search` is on.
The fitting and the record's fields are ninferkit/capacity/gather.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ninferkit.capacity.gather import (
    capacity_record,
    check_concurrencies,
    check_dtypes,
    fit_observations,
    model_file,
    served_observations,
    variant_capacity,
)
from ninferkit.capacity.launches import launcher, recorded
from ninferkit.capacity.observations import Observation, Setting, from_log_file, with_served
from ninferkit.capacity.search import SearchResult, search
from ninferkit.engines import get_adapter
from ninferkit.engines.pool import PoolRule
from ninferkit.errors import ProfileError
from ninferkit.rundir.identity import variant_profile
from ninferkit.rundir.records import CapacityRecord, ServerRecord, VariantCapacity
from ninferkit.rundir.runs import Run, write_record
from ninferkit.rundir.servings import run_servings
from ninferkit.server import process as server
from ninferkit.steps.catalog import Step


def capacity(run: Run, *, say: Callable[[str], None] = print) -> CapacityRecord:
    """Gather, fit, (launch,) tabulate and write run_dir/capacity.json; returns its content.

    A `--url` run's server is someone else's: its observations are its log (where given) and the pool it
    reported, and nothing is launched (capacity.fit_launches and capacity.search are refused)."""
    profile = run.profile
    adapter = get_adapter(profile.engine.kind)
    record = run.dir.read_server()
    if record is not None and record.external:
        return _external_capacity(run, record)
    observations = recorded(run)
    own = _launch_step_observation(run, adapter.capacity_pool)
    if own is not None:
        observations.insert(0, own)
    # with a budget standing in for device memory, the host's free memory is not what decides a launch
    measured_memory = own.available if own is not None and profile.capacity.memory_budget_bytes is None else None
    launch = launcher(run, adapter.capacity_pool, say, measured_memory)
    seen = {(o.setting.concurrency, o.setting.context_per_slot, o.setting.kv_dtype) for o in observations}
    base = Setting.from_profile(profile)
    grid_dtypes: list[str | None] = list(profile.capacity.kv_dtypes) or [base.kv_dtype]
    check_concurrencies(profile, adapter.capacity_pool)
    check_dtypes(profile, adapter, grid_dtypes)
    if profile.capacity.fit_launches:
        for dtype in grid_dtypes:
            for concurrency in profile.capacity.concurrencies:
                for context in profile.capacity.contexts:
                    if (concurrency, context, dtype) in seen:
                        continue
                    setting = Setting(concurrency, context, dtype, None, base.spec, base.draft_tokens,
                                      base.prefill_chunk, base.other)
                    found = launch(setting)
                    if found is not None:
                        observations.append(found)
    searches: list[SearchResult] = []
    if profile.capacity.search:
        section = profile.capacity
        for dtype in grid_dtypes:
            for concurrency in section.concurrencies:
                target = Setting(concurrency, section.search_context or base.context_per_slot, dtype, None,
                                 base.spec, base.draft_tokens, base.prefill_chunk, base.other)
                answer = search(target, adapter.capacity_pool, launch, lambda obs: fit_observations(profile, obs),
                                observations, section.max_launches, section.memory_budget_bytes,
                                adapter.slot_context_cap(profile, model_file(profile)))
                observations = _all(run, own)
                searches.append(answer)
                say(f"search {target.label()}: {answer.launches} launch(es); answer {answer.answer_tokens} tokens"
                    + (f": {answer.note}" if answer.bounded_by == "engine" else ""))
    fitted = capacity_record(profile, observations, searches)
    fitted.variants = _variants(run, adapter.capacity_pool, observations, say)
    return _written(run, fitted)


def _variants(run: Run, rule: PoolRule, observations: list[Observation],
              say: Callable[[str], None]) -> list[VariantCapacity]:
    """The capacity each launched variant leaves (issue 39): its startup books (variants/<name>/logs/server.log)
    are an observation at its own setting, fitted with the run's other launches. A variant not launched yet has
    none; one whose profile no longer validates was refused before any launch."""
    found = []
    for variant in run.profile.variants:
        folder = run.dir.variant(variant.name)
        record = folder.read_server()
        if record is None or not folder.server_log.is_file():
            continue
        changed = variant_profile(run.profile, variant)
        own = from_log_file(run.profile.engine.kind, folder.server_log, Setting.from_profile(changed), rule)
        own = None if own is None else with_served(own, server.passed_checks(record))
        leaves = variant_capacity(variant.name, changed, own, observations, str(folder.server_log))
        say(f"variant {variant.name} ({', '.join(variant.overrides())}): "
            + (f"started with a pool of {leaves.kv_tokens} tokens; the largest pool at its setting: "
               + (f"{leaves.max_kv_tokens} tokens (bounded by {leaves.max_kv_tokens_bounded_by})"
                  if leaves.max_kv_tokens is not None else f"unknown ({leaves.note})")
               if own is not None else f"no capacity: {leaves.note}"))
        found.append(leaves)
    return found


def _external_capacity(run: Run, record: ServerRecord) -> CapacityRecord:
    profile = run.profile
    launching = [name for name in ("fit_launches", "search") if getattr(profile.capacity, name)]
    if launching:
        raise ProfileError(", ".join(f"capacity.{name}" for name in launching) + " launch servers, but this run's "
                           f"server ({record.url}) was not started by ninferkit and none is started for it; set "
                           "them false (-p capacity.fit_launches=false -p capacity.search=false)")
    log = Path(record.log) if record.log else None
    served = server.passed_checks(record)
    found = served_observations(profile, str(record.url), record.served_pool, [log] if log else [], served)
    return _written(run, capacity_record(profile, found))


def _written(run: Run, record: CapacityRecord) -> CapacityRecord:
    """capacity.json, as the record of the run's profile and of the launch step's serving (which the answer is for)."""
    record.profile_hash = run.profile_hash
    record.serving_id = run_servings(run.dir).main.id
    write_record(run.dir.capacity, record)
    return record


def _all(run: Run, own: Observation | None) -> list[Observation]:
    rows = recorded(run)
    return [own, *rows] if own is not None else rows


def _launch_step_observation(run: Run, rule: PoolRule) -> Observation | None:
    """The launch step's server: its log is an observation at the profile's own setting."""
    record = run.dir.read_server()
    log = run.dir.server_log  # the launch step writes its log there (server.json's "log" names it as it was then)
    if record is None or not log.exists():
        return None
    found = from_log_file(run.profile.engine.kind, log, Setting.from_profile(run.profile), rule)
    return None if found is None else with_served(found, server.passed_checks(record))


STEP = Step("capacity", "04_capacity_fit.ipynb", "capacity.json", capacity, url=True)
