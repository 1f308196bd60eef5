"""A deployment sized by a finished run: the capacity step's answer, the largest pool that started and served.

The capacity search (capacity/search.py) launches the engine at growing pools and keeps the largest that
started and answered a request (`verified_by_request`). Deploying that answer means the same settings the
search's winning launch had: its concurrency, KV dtype and pool (a shared pool is `serve.kv.capacity`; an
engine that gives each slot its own context gets the pool's share per slot).
"""

from __future__ import annotations

from pathlib import Path

from ninferkit.engines import get_adapter
from ninferkit.errors import BadInput
from ninferkit.params.profile import Profile
from ninferkit.rundir.records import CapacitySearch
from ninferkit.rundir.runs import RunDir


def capacity_overrides(run_dir: Path, profile: Profile) -> list[str]:
    """The profile overrides that deploy `run_dir`'s capacity answer at the profile's concurrency; BadInput
    (naming what is missing) where the run has no verified answer to deploy."""
    record = RunDir(run_dir).read_capacity()
    if record is None:
        raise BadInput(f"{run_dir} has no capacity.json: run the capacity step (04_capacity_fit) with "
                       "capacity.search: true first, or deploy the profile's own settings without --from-run")
    verified = [found for found in record.searches if found.verified_by_request and found.answer_kv_tokens]
    if not verified:
        raise BadInput(f"{run_dir}/capacity.json has no search answer that started and served a request "
                       f"({len(record.searches)} search(es)); set capacity.search: true and run the capacity step")
    chosen = _at_profile_setting(verified, profile)
    rule = get_adapter(profile.engine.kind).capacity_pool
    setting = chosen.setting
    assert chosen.answer_kv_tokens is not None and setting.concurrency is not None
    out = [f"serve.max_concurrency={setting.concurrency}"]
    if setting.kv_dtype is not None:
        out.append(f"serve.kv.dtype={setting.kv_dtype}")
    if rule.shared_pool:
        out += [f"serve.kv.capacity={chosen.answer_kv_tokens}"]
        if setting.context_per_slot is not None:
            out.append(f"serve.max_context={setting.context_per_slot}")
    else:
        out.append(f"serve.max_context={chosen.answer_kv_tokens // setting.concurrency}")
    return out


def _at_profile_setting(searches: list[CapacitySearch], profile: Profile) -> CapacitySearch:
    """The search at the profile's concurrency (and KV dtype, where several share it); the only one where
    there is one."""
    if len(searches) == 1:
        return searches[0]
    same = [found for found in searches if found.setting.concurrency == profile.serve.max_concurrency]
    if len(same) > 1:
        same = [found for found in same if found.setting.kv_dtype == profile.serve.kv.dtype] or same
    if len(same) == 1:
        return same[0]
    settings = ", ".join(f"concurrency {f.setting.concurrency} kv {f.setting.kv_dtype}" for f in searches)
    raise BadInput(f"the run's capacity answers are at {settings}; pick one with -p serve.max_concurrency=N "
                   "(and -p serve.kv.dtype=D)")
