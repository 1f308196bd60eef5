"""The runbook's steps as library calls: each notebook cell calls one of these.

Each step reads what earlier steps wrote into the run directory and writes its own file there, so a
step can be re-run alone, from JupyterLab or headless.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ninferkit import probe, server
from ninferkit.artifact import model_path
from ninferkit.engines import get_adapter
from ninferkit.runs import Run, write_json_atomic


def setup(run: Run) -> dict[str, Any]:
    """Probe the machine, judge it against the profile, write probe.json."""
    result = probe.probe(run.profile)
    result["profile_hash"] = run.profile_hash
    write_json_atomic(run.dir.probe, result)
    return result


def findings_table(result: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(result["findings"], columns=["severity", "code", "message", "fix"])


def gpu_table(result: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(result["facts"]["gpu"].get("gpus", []))


def launch(run: Run, progress: bool = True) -> dict[str, Any]:
    """Stop a server this run left behind, start a fresh one, check it, write server.json.

    In Docker mode the Dockerfile and the boot-time power-limit unit are written to run_dir/docker/
    first, so the deployment can be reproduced by hand from the run directory.
    """
    server.stop(run.dir)
    if run.profile.serve.docker:
        for name, text in get_adapter(run.profile.engine.kind).docker_files(run.profile).items():
            (run.dir.path / "docker").mkdir(parents=True, exist_ok=True)
            (run.dir.path / "docker" / name).write_text(text)
    return server.launch(run, model_path(run.profile), progress=progress)


def checks_table(record: dict[str, Any]) -> pd.DataFrame:
    rows = [{"check": c["name"], "ok": c["ok"], "seconds": c["seconds"], "detail": c["detail"]}
            for c in record.get("checks", [])]
    return pd.DataFrame(rows)


def ledger_table(record: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(sorted(record.get("ledger", {}).items()), columns=["quantity", "value"])
