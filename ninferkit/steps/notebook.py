"""What the notebooks call: `notebook_run` first, then their step (wrapped so an OSError is named), then the
small tables they show. The steps themselves are the modules beside this one, each declaring its `STEP`
(ninferkit.steps.catalog); the wrappers are made from that catalog, so a new step needs nothing here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import pandas as pd

from ninferkit.errors import ProfileError
from ninferkit.os_errors import os_errors_named
from ninferkit.report.document import Table
from ninferkit.report.notebook_view import Shown
from ninferkit.rundir.profile_change import change_lines, checked_profile, record_change
from ninferkit.rundir.records import ProbeRecord, ServerRecord
from ninferkit.rundir.runs import Run, open_run
from ninferkit.steps.catalog import runbook, steps
from ninferkit.steps.notebook_errors import show_short_errors

REPOSITORY = Path(__file__).resolve().parents[2]
"""The checkout the notebooks belong to: where their relative parameters point."""

P = ParamSpec("P")
R = TypeVar("R")


def _os_errors_named(step: str, function: Callable[Concatenate[Run, P], R]) -> Callable[Concatenate[Run, P], R]:
    """The step function with its OSErrors named (ninferkit.os_errors): the notebook shows the path, what the
    step was doing and the fix, the runner records them for the post, the traceback stays in the run's logs/."""

    def step_function(run: Run, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with os_errors_named(f"the {step} step", run.dir.path):
            return function(run, *args, **kwargs)

    functools.update_wrapper(step_function, function)  # its name, docstring and signature, for help()
    return step_function


def step_functions() -> dict[str, Callable[..., Any]]:
    """Every step with a notebook, by name, as its notebook calls it: its OSErrors named."""
    return {step.name: _os_errors_named(step.name, step.run) for step in steps() if step.notebook}


__all__ = ["REPOSITORY", "acceptance_table", "findings_table", "gpu_table", "ledger_table", "notebook_run",
           "profile_table", "step_functions"]


def notebook_run(profile: str, run_dir: str, overrides: str | Sequence[str] = (), *, step: str,
                 allow_profile_change: bool = False) -> Run:
    """The run a notebook works in, from its parameters cell; `step` is the notebook's (setup ... writeup).

    A relative path is the repository's: a notebook's kernel runs in notebooks/ under JupyterLab and
    wherever papermill was started, so the same parameters mean the same files from both. `overrides`
    may be one string (`papermill … -p overrides serve.port=8090`, the form a papermill user tries
    first) or a list (`-y '{"overrides": ["serve.port=8090", "sweeps.seed=1"]}'`).

    One run has one profile (ninferkit.rundir.profile_change): an empty `profile` is the run's own, from its manifest,
    and parameters that would change the profile the run recorded are refused, naming each field with the
    run's value and the new one, unless `allow_profile_change`; then the manifest records that this step
    changed them.

    Every notebook calls it first, so it also records the runbook in the manifest (the write-up's step order and
    labels: ninferkit.steps.catalog.runbook) and makes the kernel show ninferkit's own errors as their message
    with the fix (ninferkit.steps.notebook_errors), this call's own refusal of a bad parameter included.
    """
    show_short_errors()
    where = _in_repository(run_dir)
    loaded, changed = checked_profile(profile, where, _override_items(overrides), allow_change=allow_profile_change,
                                      base=REPOSITORY)
    run = open_run(loaded, where)
    record_change(run.dir, step, changed)
    run.dir.update_manifest(runbook=[known.model_dump() for known in runbook()])  # the write-up's steps and labels
    return run


def profile_table(run: Run) -> Shown:
    """The run's profile as its manifest records it (name, file, overrides, hash) and each change a step made
    to it: what a parameters cell runs under."""
    manifest = run.dir.read_manifest()
    changes = change_lines(manifest) or ["none"]
    rows = (("run directory", str(run.dir.path)), ("profile", str(manifest.profile_name)),
            ("file", str(manifest.profile_source)),
            ("overrides", ", ".join(manifest.profile_overrides) or "none"), ("hash", run.profile_hash),
            *(("changed by a step", line) for line in changes))
    return Shown([Table(("run profile", "value"), rows, "from manifest.json: one profile per run "
                                                       "(allow_profile_change=True changes it)")])


OVERRIDES_FORMS = ("one key=value string (papermill -p overrides serve.port=8090) or a YAML list of key=value "
                   "strings (papermill -y 'overrides: [serve.port=8090, sweeps.seed=1]')")


def _override_items(overrides: object) -> list[str]:
    """The parameter `overrides` as the list open_run takes, or ProfileError naming it and its two forms.

    papermill's -p passes a list as its text ('[serve.port=8090]'), which read as one override failed deep in
    the profile with "did you mean 'serve'?"; here it is refused as what it is."""
    listed = [overrides] if isinstance(overrides, str) else overrides
    if not isinstance(listed, list | tuple):
        raise ProfileError(f"parameter overrides: {overrides!r} is a {type(overrides).__name__}; "
                           f"accepted: {OVERRIDES_FORMS}")
    for item in listed:
        if not isinstance(item, str) or item.lstrip().startswith("["):
            told = ("a list written as text, which papermill -p passes as one string"
                    if isinstance(item, str) else f"a {type(item).__name__}, not a key=value string")
            raise ProfileError(f"parameter overrides: {item!r} is {told}; accepted: {OVERRIDES_FORMS}")
    return [item for item in listed if item]


def _in_repository(path: str) -> Path:
    given = Path(path).expanduser()
    return given if given.is_absolute() else REPOSITORY / given


def findings_table(record: ProbeRecord) -> pd.DataFrame:
    return pd.DataFrame([finding.model_dump() for finding in record.findings],
                        columns=["severity", "code", "message", "fix", "waived"])


def gpu_table(record: ProbeRecord) -> pd.DataFrame:
    return pd.DataFrame([gpu.as_dict() for gpu in record.gpus])


def acceptance_table(record: ServerRecord) -> pd.DataFrame:
    """The launch step's checks of the fresh server (health, models, one chat request)."""
    return pd.DataFrame([{"check": c.name, "ok": c.ok, "seconds": c.seconds, "detail": c.detail}
                         for c in record.checks])


def ledger_table(record: ServerRecord) -> pd.DataFrame:
    return pd.DataFrame(sorted(record.ledger.items()), columns=["quantity", "value"])
