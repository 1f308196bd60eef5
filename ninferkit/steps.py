"""The runbook's steps as library calls: each notebook cell calls one of these.

Each step reads what earlier steps wrote into the run directory and writes its own file there, so a
step can be re-run alone, from JupyterLab or headless.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ninferkit import preflight, probe, server
from ninferkit.errors import NinferkitError
from ninferkit.runs import Run, open_run, write_json_atomic

REPOSITORY = Path(__file__).resolve().parent.parent
"""The checkout the notebooks belong to: where their relative parameters point."""


def notebook_run(profile: str, run_dir: str, overrides: str | Sequence[str] = ()) -> Run:
    """The run a notebook works in, from its parameters cell.

    A relative path is the repository's: a notebook's kernel runs in notebooks/ under JupyterLab and
    wherever papermill was started, so the same parameters mean the same files from both. `overrides`
    may be one string (`papermill … -p overrides serve.port=8090`, the form a papermill user tries
    first) or a list (`-y '{"overrides": ["serve.port=8090", "sweeps.seed=1"]}'`).
    """
    listed = [overrides] if isinstance(overrides, str) else list(overrides)
    return open_run(_in_repository(profile), _in_repository(run_dir), [o for o in listed if o])


def _in_repository(path: str) -> Path:
    given = Path(path).expanduser()
    return given if given.is_absolute() else REPOSITORY / given


def setup(run: Run) -> dict[str, Any]:
    """Check the run's whole plan, probe the machine, judge it against the profile, write probe.json.

    The first step stops a run that cannot succeed before anything is downloaded or launched: a plan
    that cannot finish raises ProfileError (nothing probed or written); a finding of severity error
    that the profile does not waive (gpu.waive) raises NinferkitError with its fix, after probe.json
    is written, so the record of what the machine is stays.
    """
    preflight.check(run.loaded, preflight.planned_steps(run.dir))
    result = probe.probe(run.profile)
    result["profile_hash"] = run.profile_hash
    write_json_atomic(run.dir.probe, result)
    stopping = probe.blocking(result)
    if stopping:
        raise NinferkitError(f"this machine cannot run profile {run.profile.name}: {len(stopping)} setup finding(s) "
                             "of severity error (probe.json has every finding):\n"
                             + "\n".join(f"  - {f['code']}: {f['message']}. Fix: {f['fix']}" for f in stopping)
                             + "\nTo go on regardless, list the code in the profile's gpu.waive.")
    return result


def findings_table(result: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(result["findings"], columns=["severity", "code", "message", "fix", "waived"])


def gpu_table(result: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(result["facts"]["gpu"].get("gpus", []))


def launch(run: Run, progress: bool = True) -> dict[str, Any]:
    """The launch step: the run's server, fresh and checked (server.start), its record in server.json."""
    return server.start(run, progress=progress)


def checks_table(record: dict[str, Any]) -> pd.DataFrame:
    rows = [{"check": c["name"], "ok": c["ok"], "seconds": c["seconds"], "detail": c["detail"]}
            for c in record.get("checks", [])]
    return pd.DataFrame(rows)


def ledger_table(record: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(sorted(record.get("ledger", {}).items()), columns=["quantity", "value"])
