"""The whole plan of a run, checked when it starts: before anything is downloaded or launched.

A profile can be valid field by field and still describe a run that cannot finish: a sweep cell whose
prompt and output exceed the served context, a capacity grid point the engine refuses, a KV pool that
is not a whole number of the engine's pages, an API key that is not exported. Each of these used to
fail in its own step, after the artifact was downloaded (21 GB for the V100 report) and the server had
loaded it. Here every step that will run is asked through the functions that step itself calls (the
sweep plan, the engine's command line with its checks, the capacity launcher's overrides), and each
problem becomes one line that names the profile field.

The steps a run will execute are recorded in its manifest by `ninferkit run`, so the setup notebook,
which checks the plan again, checks the same steps; run on its own, it checks them all.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Collection, Sequence
from dataclasses import fields
from functools import partial
from pathlib import Path
from typing import get_type_hints

from ninferkit.capacity.launches import overrides_for
from ninferkit.capacity.observations import Setting
from ninferkit.deploy import power
from ninferkit.engines import get_adapter
from ninferkit.errors import NinferkitError, ProfileError
from ninferkit.params import LoadedProfile, Profile, apply_override, validate_profile
from ninferkit.params.variants import GOODPUT
from ninferkit.rundir.identity import serving_identity, variant_profile
from ninferkit.rundir.records import RequestRow
from ninferkit.rundir.runs import RunDir
from ninferkit.server import process as server
from ninferkit.sweeps.kinds import get_kind, names
from ninferkit.sweeps.plan import build_plan

LAUNCHING = ("launch", "sweeps", "capacity")
"""The steps that start the server (the sweeps launch one when the run has none)."""
"""The manifest key that holds the steps `ninferkit run` was asked for."""


def check(loaded: LoadedProfile, steps: Collection[str] | None = None, *, here: bool = True) -> None:
    """Raise ProfileError, one line per problem, when the steps (None: all) cannot finish with this profile, and,
    with `here` (the machine that runs them), on this machine (`machine_problems`)."""
    found = problems(loaded.profile, steps) + (machine_problems(loaded.profile, steps) if here else [])
    if found:
        raise ProfileError(f"profile {loaded.profile.name} describes a run that cannot finish; nothing was "
                           f"downloaded or launched ({len(found)} problem(s)):\n"
                           + "\n".join(f"  - {problem}" for problem in found))


def problems(profile: Profile, steps: Collection[str] | None = None) -> list[str]:
    """Every reason the chosen steps (None: all) would fail on this profile alone, whatever the machine."""
    wanted = set(LAUNCHING) if steps is None else set(steps)
    found: list[str] = []
    if profile.artifact.served and wanted & {"verify", "launch"}:
        found.append("artifact.served: true: the model is a running server's, so there is nothing to verify or "
                     "launch; measure that server with --url URL (ninferkit run --url URL runs sweeps, capacity "
                     "and writeup)")
    launch = _launch_problems(profile)
    if wanted & set(LAUNCHING):
        found += launch
    if "sweeps" in wanted:
        found += _sweep_problems(profile)
    if "capacity" in wanted:
        found += _capacity_problems(profile, set(launch))
    if "sweeps" in wanted:
        found += variant_problems(profile, set(launch))
    return list(dict.fromkeys(found))  # a problem every check meets (an unknown build) is listed once


def ab_baseline(profile: Profile) -> RunDir:
    """The A/B's other side (sweeps.ab.baseline_run_dir) as this machine holds it, its requests recorded; a
    ProfileError naming the field otherwise. Not one of `problems`, which judge the profile whatever the machine (a
    fleet checks every host's profile on the machine that holds the fleet file): the runner asks it on the machine
    that runs, before it writes, downloads or launches anything (a second profile with sweeps.ab, seed 000 §2.2's
    groupwise-int side, otherwise downloaded 18 GB before its sweeps refused)."""
    section = profile.sweeps.ab
    if not section.baseline_run_dir:
        raise ProfileError("sweeps.ab.baseline_run_dir is not set; allowed: the run directory of the other "
                           "profile's sweep (run the same plan there first)")
    path = Path(section.baseline_run_dir).expanduser().resolve()
    if not RunDir(path).requests.exists():
        raise ProfileError(f"sweeps.ab.baseline_run_dir = {section.baseline_run_dir!r}: no requests.jsonl there; "
                           "run the sweeps against the other profile into that directory first (or set "
                           "sweeps.ab.enabled=false and pair the two runs later with `ninferkit sweep --only ab`)")
    return RunDir(path)


def record_plan(run_dir: RunDir, steps: Sequence[str]) -> None:
    """Write the steps this run will execute into its manifest (the setup notebook checks those)."""
    run_dir.update_manifest(planned_steps=list(steps))


def planned_steps(run_dir: RunDir) -> list[str] | None:
    """The steps `ninferkit run` recorded for this run; None when none did (a notebook run by hand)."""
    return run_dir.read_manifest().planned_steps


def _launch_problems(profile: Profile) -> list[str]:
    """What the launch step would refuse: the engine's check of every flag (the command it would run) and a KV
    pool that is not a whole number of the engine's pages. A served model's (`--url`) server is someone else's:
    nothing of its launch is checked. The API key's variable is the machine's environment (`machine_problems`)."""
    if profile.artifact.served:
        return []
    found = _raised(partial(server.planned_argv, profile))
    capacity = profile.serve.kv.capacity
    page = get_adapter(profile.engine.kind).capacity_pool.page_tokens
    already = any(line.startswith("serve.kv.capacity") for line in found)
    if isinstance(capacity, int) and capacity % page and not already:
        below = capacity - capacity % page
        found.append(f"serve.kv.capacity = {capacity}: not a whole number of {page}-token pages, so the engine "
                     f"would serve {below + page} tokens and the run would record a pool it did not get; "
                     f"allowed: a multiple of {page}, e.g. {below} or {below + page}")
    return found


def _sweep_problems(profile: Profile) -> list[str]:
    """Each enabled sweep's cells, planned as the sweep step plans them (prompt + output within
    serve.max_context). The A/B pairing needs its baseline run, which the sweep step checks."""
    adapter = get_adapter(profile.engine.kind)
    found: list[str] = []
    for kind in names():
        found += _raised(partial(build_plan, profile, adapter, [kind], explicit=False))
    return found


def variant_problems(profile: Profile, launch: set[str]) -> list[str]:
    """Why a variant (the profile's `variants`) would not start, each line naming the variant and the field,
    before the first launch: a field its engine lacks or a value out of range, a flag the build's `--help` lacks
    (the engine's own check of the command it would run), a power limit this machine cannot set, a KV pool whose
    cache alone (with the weights) exceeds the memory the profile states, and a variant that changes nothing
    measured (the base's serving and cells; one with cells of its own, `sweeps.*`, is a second launch of the base's
    serving: seed 000 §2.1's 8K / 320 cell beside its 128-token context rows). A problem the base's launch has too
    (`launch`) is listed once, for it."""
    if not profile.variants:
        if profile.objective is None:
            return []
        if profile.objective.largest:  # the base's own cells answer it
            return _objective_problems(profile)
        return ["objective: it chooses among the profile's variants, and it has none; allowed: variants with the "
                "settings to search, or largest: a cell parameter whose largest passing cell is the answer"]
    if profile.artifact.served:
        return ["variants: each variant is a launch of ninferkit's, and a --url run's server is someone else's; "
                "allowed: none (remove variants, or run the profile without --url)"]
    base = serving_identity(profile, None, None)
    found: list[str] = []
    for variant in profile.variants:
        where = f"variant {variant.name!r}"
        try:
            changed = variant_profile(profile, variant)
        except ProfileError as exc:
            found += [line if line.startswith(where) else f"{where}: {line}" for line in _lines(exc)]
            continue
        if serving_identity(changed, None, None) == base and not any(key.startswith("sweeps.") for key in variant.set):
            found.append(f"{where}: set {', '.join(variant.set)} changes nothing that is measured (the same serving "
                         "as the profile's own, the same cells); allowed: a serve option that changes behaviour, "
                         "gpu.power_limit_w, or cells of its own (sweeps.*)")
        found += [f"{where}: {line}" for line in _launch_problems(changed) if line not in launch]
        found += [f"{where}: {line}" for line in _pool_beyond_memory(changed)]
    return found + _objective_problems(profile)


def power_limit_variants(profile: Profile) -> list[tuple[str, float, str | None]]:
    """Each variant that sets the GPU's power limit (the sweeps step sets it with nvidia-smi, as root, for the
    variant's launch): its name, the limit and why this machine cannot set it (None: it can)."""
    found = []
    for variant in profile.variants:
        if "gpu.power_limit_w" in variant.set:
            try:
                changed = variant_profile(profile, variant)
            except ProfileError:  # `problems` names it
                continue
            found.append((variant.name, float(variant.set["gpu.power_limit_w"]), power.refusal(changed,
                                                                                                 boot_unit=False)))
    return found


def machine_problems(profile: Profile, steps: Collection[str] | None = None) -> list[str]:
    """What this machine lacks for the plan: the API key's variable (serve.api_key_env) unset in its environment,
    a variant's power limit it cannot set (no root, no nvidia-smi). Not one of `problems`, which judge the profile
    whatever the machine (a fleet checks its hosts' profiles where the fleet file is, a dry run plans a GPU box's
    run on a laptop): the run asks these on the machine that runs it, before anything is written, downloaded or
    launched; a dry run lists them as not checked (steps/dry_run.py)."""
    wanted = set(LAUNCHING) if steps is None else set(steps)
    found = _raised(partial(server.api_key, profile)) if wanted & set(LAUNCHING) else []
    if "sweeps" not in wanted or profile.artifact.served:
        return found
    return found + [f"variant {name!r}: gpu.power_limit_w = {watts:g}: {refused}"
                    for name, watts, refused in power_limit_variants(profile) if refused]


def _objective_problems(profile: Profile) -> list[str]:
    """An objective must name a sweep kind every variant runs and figures the rows have (a metric, or its
    percentile `<metric>_p99`)."""
    objective = profile.objective
    if objective is None:
        return []
    found = []
    if objective.sweep not in names():
        found.append(f"objective.sweep = {objective.sweep!r}: not a sweep kind; allowed: {', '.join(names())}")
    missing = [variant.name for variant in profile.variants if variant.kinds and objective.sweep not in variant.kinds]
    if missing:
        found.append(f"objective.sweep = {objective.sweep!r}: variant(s) {', '.join(missing)} do not run it (their "
                     "kinds); add it there")
    numeric = sorted(name for name, info in RequestRow.model_fields.items()
                     if info.annotation in (float, int, float | None, int | None, int | float | None))
    asked = [*objective.at_most, *objective.at_least, *filter(None, [objective.maximize])]
    for name in asked:
        metric = re.sub(r"_p\d{1,2}$", "", name) if name not in numeric else name
        if metric not in numeric and name not in GOODPUT:
            found.append(f"objective: {name!r} is no figure of the rows; allowed: a metric such as "
                         f"decode_tok_s_server or ttft_client_s, its percentile (ttft_client_s_p99), or "
                         f"{' / '.join(GOODPUT)}")
    if objective.largest and objective.sweep in names():
        params = get_kind(objective.sweep).params
        hints = get_type_hints(params)  # the fields' types as types: the module's annotations are strings
        numbers = [each.name for each in fields(params) if hints[each.name] in (int, float, int | None, float | None)]
        if objective.largest not in numbers:
            found.append(f"objective.largest = {objective.largest!r}: not a numeric cell parameter of the "
                         f"{objective.sweep} sweep; allowed: {', '.join(numbers)}")
    return found


def _pool_beyond_memory(profile: Profile) -> list[str]:
    """The KV pool the profile asks for, when its cache and the model's weights alone exceed the memory it
    states (capacity.memory_budget_bytes, else gpu.memory_gib x gpu.count): the engine's own runtime comes on top,
    so such a pool cannot start. Silent where the layout or the memory is unknown."""
    memory = profile.capacity.memory_budget_bytes or (
        int(profile.gpu.memory_gib * 2**30 * profile.gpu.count) if profile.gpu.memory_gib else None)
    adapter = get_adapter(profile.engine.kind)
    rule = adapter.capacity_pool
    base = Setting.from_profile(profile)
    try:
        layout = adapter.kv_layout(profile, None, base.kv_dtype or rule.default_kv_dtype)
    except ProfileError:
        return []
    if memory is None or layout is None:
        return []
    pool = rule.requested_pool(base.concurrency, base.context_per_slot, profile.serve.kv.capacity)
    needed = pool * layout.bytes_per_token + (profile.artifact.size_bytes or 0)
    if needed <= memory:
        return []
    return [f"serve.kv: a pool of {pool:,} tokens holds {pool * layout.bytes_per_token / 2**30:.2f} GiB of KV cache "
            f"({layout.bytes_per_token:,} bytes a token), with the weights {needed / 2**30:.2f} GiB, more than the "
            f"{memory / 2**30:.2f} GiB the profile states the device has; allowed: a smaller serve.max_context or "
            "serve.max_concurrency, or a smaller KV type"]


def _capacity_problems(profile: Profile, launch: set[str]) -> list[str]:
    """Every point of the capacity grid as the engine would get it: the table's cells at the engine's
    own pool (or, with capacity.fit_launches, the profile's pool, which those launches keep), and each
    search's setting at its smallest legal pool; plus each KV dtype's byte layout. A problem the launch
    setting has too (`launch`) is listed once, for it."""
    adapter = get_adapter(profile.engine.kind)
    rule = adapter.capacity_pool
    section = profile.capacity
    if profile.artifact.served:  # a --url run: nothing is launched, so no grid point has a command to check
        return [f"capacity.{name}: true launches servers, and a --url run's server is someone else's; allowed: "
                "false" for name in ("fit_launches", "search") if getattr(section, name)]
    base = Setting.from_profile(profile)
    found: list[str] = []
    dtypes: list[str | None] = list(section.kv_dtypes) or [base.kv_dtype]
    for dtype in dtypes:
        try:
            adapter.kv_layout(profile, None, dtype or rule.default_kv_dtype)
        except ProfileError as exc:
            found.append(f"capacity.kv_dtypes: {dtype!r}: {exc}")
        for slots in section.concurrencies:
            for context in section.contexts:
                own_pool = [] if section.fit_launches else ["serve.kv.capacity=null"]
                found += _at(profile, Setting(slots, context, dtype), own_pool, launch,
                             f"capacity grid point {slots} slot(s) x {context} tokens, kv {dtype} "
                             "(capacity.concurrencies x capacity.contexts x capacity.kv_dtypes)")
            if section.search:
                context = section.search_context or base.context_per_slot
                pool = rule.requested_pool(slots, context, None)
                found += _at(profile, Setting(slots, context, dtype, pool if rule.shared_pool else None), [],
                             launch, f"capacity.search at {slots} slot(s) x {context} tokens, kv {dtype}")
    return found


def _at(profile: Profile, setting: Setting, extra: list[str], launch: set[str], where: str) -> list[str]:
    """The launch problems of the profile as a capacity launch at `setting` changes it."""
    data = profile.model_dump(mode="json")
    try:
        for item in [*overrides_for(setting), *extra]:
            apply_override(data, item)
        variant = validate_profile(data, where=where)
    except ProfileError as exc:
        return [f"{where}: {line}" for line in _lines(exc)]
    return [f"{where}: {line}" for line in _raised(partial(server.planned_argv, variant)) if line not in launch]


def _raised(check: Callable[[], object]) -> list[str]:
    """The problems a check raises, one per line; [] when it passes. A legal setting's warning (the
    queue-timeout trap) is the launch's to give, not a reason to stop."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check()
    except NinferkitError as exc:
        return _lines(exc)
    return []


def _lines(exc: NinferkitError) -> list[str]:
    """An error's problems: the '  - ' lines of a message that lists several, else the message."""
    text = str(exc)
    listed = [line.strip().removeprefix("- ") for line in text.splitlines() if line.startswith("  - ")]
    return listed or [text]
