"""The runbook's six steps, as the notebooks call them: each cell calls one function of this facade.

Every step has one shape, `step(run, *, options) -> record`: it reads what earlier steps wrote into the
run directory, writes its own file there and returns the record of what it wrote, so a step can be
re-run alone, from JupyterLab or headless. The steps live with their work (setup_step, artifact,
launch_step, sweeps, capacity, report); this module only gathers them with the small tables the
notebooks show.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ninferkit.artifact.step import verify
from ninferkit.capacity.step import capacity
from ninferkit.errors import ProfileError
from ninferkit.launch_step import launch
from ninferkit.notebook_errors import show_short_errors
from ninferkit.records import ProbeRecord, ServerRecord
from ninferkit.report.build import writeup
from ninferkit.runs import Run, open_run
from ninferkit.setup_step import setup
from ninferkit.sweeps import sweeps

REPOSITORY = Path(__file__).resolve().parent.parent
"""The checkout the notebooks belong to: where their relative parameters point."""

__all__ = ["REPOSITORY", "acceptance_table", "capacity", "findings_table", "gpu_table", "launch", "ledger_table",
           "notebook_run", "setup", "sweeps", "verify", "writeup"]


def notebook_run(profile: str, run_dir: str, overrides: str | Sequence[str] = ()) -> Run:
    """The run a notebook works in, from its parameters cell.

    A relative path is the repository's: a notebook's kernel runs in notebooks/ under JupyterLab and
    wherever papermill was started, so the same parameters mean the same files from both. `overrides`
    may be one string (`papermill … -p overrides serve.port=8090`, the form a papermill user tries
    first) or a list (`-y '{"overrides": ["serve.port=8090", "sweeps.seed=1"]}'`).

    Every notebook calls it first, so it also makes the kernel show ninferkit's own errors as their message
    with the fix (ninferkit.notebook_errors), this call's own refusal of a bad parameter included.
    """
    show_short_errors()
    return open_run(_in_repository(profile), _in_repository(run_dir), _override_items(overrides))


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
