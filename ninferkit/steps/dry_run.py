"""`ninferkit run --dry-run`: what a run of a profile would do, from the same checks and plan the run itself makes,
with nothing written, downloaded or launched. A GPU hour is dear: the launches and cells it will spend are worth
reading before the first one starts.

A dry run plans without the GPU box (on a laptop, a login node): what only that machine can answer (its GPU against
the profile, a variant's power limit it must set as root with nvidia-smi) is said as not checked, with what this
machine would answer, and the run itself refuses it before anything is written (steps/preflight.py)."""

from __future__ import annotations

import os
import shlex
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from ninferkit.engines import get_adapter
from ninferkit.errors import ProfileError
from ninferkit.params import LoadedProfile, apply_override
from ninferkit.params.load import profile_path, read_yaml_mapping
from ninferkit.params.not_reproduced import NotReproduced
from ninferkit.params.variants import BASE
from ninferkit.rundir.identity import variant_profile
from ninferkit.server.process import planned_argv
from ninferkit.steps.preflight import power_limit_variants
from ninferkit.sweeps.plan import build_plan, parse_only


def plan_lines(loaded: LoadedProfile, steps: Sequence[str]) -> list[str]:
    """The run's plan in lines: the steps, each launch's command, the sweep cells by launch and kind (the cells a
    rerun would find measured are not known before the run folder is: each is counted), the capacity step's
    launch budget, and what the plan warns of (a `note:` line each, once)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lines = _planned(loaded, steps)
    notes = dict.fromkeys(str(warning.message) for warning in caught)
    return [*lines[:-1], *(f"note: {note}" for note in notes), lines[-1]]


def _planned(loaded: LoadedProfile, steps: Sequence[str]) -> list[str]:
    profile = loaded.profile
    lines = [f"profile {loaded.source}: passes preflight for steps {', '.join(steps)}",
             f"launch ({BASE}): {shlex.join(planned_argv(profile))}"]
    for variant in profile.variants:
        changes = ", ".join(f"{key}={value}" for key, value in variant.set.items())
        lines.append(f"launch ({variant.name}: {changes}): "
                     f"{shlex.join(planned_argv(variant_profile(profile, variant)))}")
    if "sweeps" in steps:
        cells = build_plan(profile, get_adapter(profile.engine.kind), parse_only(None), explicit=False)
        counted = Counter((cell.params.variant or BASE, cell.sweep, cell.skip is not None) for cell in cells)
        for launch in [BASE, *(variant.name for variant in profile.variants)]:
            kinds = dict.fromkeys(sweep for (name, sweep, _) in counted if name == launch)
            said = [f"{sweep} {counted[(launch, sweep, False)]}"
                    + (f" (+{counted[(launch, sweep, True)]} skipped)" if counted[(launch, sweep, True)] else "")
                    for sweep in kinds]
            lines.append(f"sweeps on {launch}: {', '.join(said) or 'no cell'}")
        repeats = f" ({profile.sweeps.repeats} repeats of each)" if profile.sweeps.repeats > 1 else ""
        lines.append(f"sweeps: {sum(1 for cell in cells if cell.skip is None)} cells in all{repeats}")
    if "capacity" in steps:
        capacity = profile.capacity
        grid = len(capacity.concurrencies) * max(1, len(capacity.kv_dtypes))
        said = []
        if capacity.search:
            said.append(f"a search of up to {capacity.max_launches} launches at each of {grid} grid point(s)")
        if capacity.fit_launches:
            said.append(f"up to one launch at each of {grid * len(capacity.contexts)} grid point(s) (those the "
                        "run's own launches have not observed)")
        lines.append(f"capacity: {' and '.join(said) if said else 'no launch (the fit reads the startup logs)'}")
    lines += _not_checked(loaded)
    lines += _not_reproduced(loaded)
    lines.append("nothing was written, downloaded or launched")
    return lines


def refused(exc: ProfileError, profile: str | Path, overrides: Sequence[str]) -> ProfileError:
    """The refusal of a dry run with the profile's `not_reproduced` after it: a plan refused for one reason (001's
    NVFP4 checkpoint on a V100, refused while the profile loads) still tells its reader what else of the report the
    profile cannot reproduce and why, which is what they came to the dry run to read. Read from the file as
    written, since the profile as a whole did not validate; where that section does not validate either, the
    refusal goes alone."""
    try:
        source = profile_path(profile)
        _, data = read_yaml_mapping(source, "profile", str(source), "at least name, engine, artifact")
        for item in overrides:
            apply_override(data, item)
        entries = TypeAdapter(list[NotReproduced]).validate_python(data.get("not_reproduced") or [])
    except (ProfileError, ValidationError):
        return exc
    lines = [_said(entry) for entry in entries]
    return ProfileError("\n".join([str(exc), *lines])) if lines else exc


def _not_reproduced(loaded: LoadedProfile) -> list[str]:
    return [_said(entry) for entry in loaded.profile.not_reproduced]


def _said(entry: NotReproduced) -> str:
    return f"not reproduced: {entry.item}: {entry.why}"


def _not_checked(loaded: LoadedProfile) -> list[str]:
    """What the run checks on its own machine and a dry run does not: the setup probe's judgement of the GPU, the
    API key's variable in its environment, and each variant's power limit, with what this machine would answer."""
    gpu = loaded.profile.gpu
    described = [value for value in (gpu.name, gpu.arch, f"{gpu.memory_gib:g} GiB" if gpu.memory_gib else None,
                                     f"power limit {gpu.power_limit_w:g} W" if gpu.power_limit_w else None) if value]
    lines = ["not checked by a dry run: the machine (the setup step probes its GPU, driver, CUDA, Docker and disk"
             + (f" against gpu: {', '.join(described)})" if described else ")")]
    variable = loaded.profile.serve.api_key_env
    if variable:
        lines.append(f"not checked by a dry run: serve.api_key_env names {variable}, which the run reads from its "
                     "machine's environment and refuses before anything is written where it is unset; "
                     + ("here it is set" if os.environ.get(variable) else f"here it is not set (export {variable})"))
    for name, watts, refused in power_limit_variants(loaded.profile):
        lines.append(f"not checked by a dry run: variant {name!r} sets the power limit to {watts:g} W for its launch "
                     "(nvidia-smi, as root); " + (f"this machine could not: {refused}; the run refuses it before "
                                                  "anything is written" if refused else "this machine could"))
    return lines
