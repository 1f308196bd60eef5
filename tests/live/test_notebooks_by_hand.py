"""The whole runbook under papermill by hand, as the README shows it (issue 24, items 3 and 6): 00_setup is given
the profile, every notebook after it only the run directory, so each works under the profile 00 started; and
each table a notebook shows is the write-up's, not a raw frame. Against the embedded llama-server, sweeps and
capacity kept small (the capacity fit reads the launch step's own log: no extra launches)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ninferkit.rundir.runs import RunDir
from ninferkit.server.process import stop
from ninferkit.steps.runner import NOTEBOOKS_DIR, STEPS
from tests.conftest import LOCAL_CPU, REPO, free_port
from tests.live.test_sweeps import SMALL


def _papermill(step: str, out: Path, *parameters: str) -> subprocess.CompletedProcess[str]:
    """papermill NOTEBOOK out/STEP.ipynb PARAMETERS... (`out` a file: that name)."""
    executed = out if out.suffix == ".ipynb" else out / f"{step}.ipynb"
    argv = [sys.executable, "-m", "papermill", str(NOTEBOOKS_DIR / STEPS[step]), str(executed),
            *parameters, "--no-progress-bar"]
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=900)


def _shown(path: Path) -> tuple[str, str]:
    """(every HTML output, every plain-text output) of an executed notebook."""
    cells = json.loads(path.read_text())["cells"]
    outputs = [o.get("data", {}) for c in cells if c["cell_type"] == "code" for o in c["outputs"]]
    return ("".join("".join(d.get("text/html", "")) for d in outputs),
            "".join("".join(d.get("text/plain", "")) for d in outputs))


def test_every_notebook_after_setup_takes_the_runs_profile(tmp_path: Path, llama_server: Path) -> None:
    run_dir = tmp_path / "run"
    overrides = [f"serve.port={free_port()}", *SMALL, "sweeps.tasks.tasks=[fiction]",
                 "capacity.fit_launches=false", "capacity.search=false"]
    started = _papermill("setup", tmp_path, "-p", "profile", str(LOCAL_CPU), "-p", "run_dir", str(run_dir),
                         "-y", json.dumps({"overrides": overrides}))
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        for step in ("verify", "launch", "sweeps", "capacity", "writeup"):
            done = _papermill(step, tmp_path, "-p", "run_dir", str(run_dir))
            assert done.returncode == 0, f"{step}:\n{done.stderr[-3000:]}"
        refused = _papermill("sweeps", tmp_path / "refused.ipynb", "-p", "run_dir", str(run_dir),
                             "-p", "overrides", "sweeps.seed=5")
    finally:
        stop(RunDir(run_dir))
    manifest = RunDir(run_dir).read_manifest()
    assert manifest.profile_overrides == overrides and manifest.profile_changes == []
    assert refused.returncode != 0
    assert "parameter overrides would change this run's profile (local-cpu" in refused.stderr
    assert "sweeps.seed: the run's 0, the new 5" in refused.stderr
    html, plain = _shown(tmp_path / "sweeps.ipynb")
    assert 'class="ninferkit-report"' in html and "prefill, tok/s (server)" in plain and "TTFT, ms" in plain
    assert "columns]" not in plain  # no frame cut short (pandas ends one with "[4 rows x 60 columns]")
    html, plain = _shown(tmp_path / "capacity.ipynb")
    assert "GiB" in plain
    cells = json.loads((tmp_path / "capacity.ipynb").read_text())["cells"]  # papermill adds a cell of its own
    outputs = next(cell for cell in cells if "ninferkit.steps.capacity(run)" in "".join(cell["source"]))["outputs"]
    printed = "".join("".join(o["text"]) for o in outputs if o.get("name") == "stdout").splitlines()
    start = next(i for i, line in enumerate(printed) if line.startswith("runtime(C, S, K) = "))
    formula = [printed[start], *(line for line in printed[start + 1:] if line.startswith("  "))]
    assert len(formula) > 1 and all(len(line) <= 100 for line in formula)  # wrapped, not one 500-column line
    html, plain = _shown(tmp_path / "launch.ipynb")
    assert "startup ledger" in plain and ("GiB" in plain or "MiB" in plain)
