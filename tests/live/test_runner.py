"""The headless runner against the live embedded server: steps run headless, a failing or killed step stops
the server it started (the runner's own logic: tests/unit/steps/test_runner.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from ninferkit.errors import StepFailed
from ninferkit.server.process import _group_alive
from ninferkit.steps.runner import STEPS, run_runbook
from tests.conftest import LOCAL_CPU, REPO, free_port
from tests.unit.steps.test_runner import notebooks_with


def _server_pgid(run_dir: Path) -> int:
    return int(json.loads((run_dir / "server.json").read_text())["pgid"])


def test_setup_and_launch_headless(tmp_path: Path, llama_server: Path) -> None:
    lines: list[str] = []
    result = run_runbook(LOCAL_CPU, tmp_path / "run", ["setup", "launch", "sweeps"], [f"serve.port={free_port()}"],
                         notebooks_dir=notebooks_with(tmp_path, None), say=lines.append)
    run_dir = tmp_path / "run"
    assert [s.status for s in result.steps] == ["ok", "ok", "not_available"]
    assert any("sweeps" in line and "not available" in line for line in lines)
    probe = json.loads((run_dir / "probe.json").read_text())
    assert "gpu" in probe["facts"] and isinstance(probe["findings"], list)
    server = json.loads((run_dir / "server.json").read_text())
    assert server["state"] == "stopped" and all(check["ok"] for check in server["checks"])
    assert not _group_alive(server["pgid"])
    for step in ("setup", "launch"):
        executed = nbformat.read(run_dir / "notebooks" / STEPS[step], as_version=4)
        assert executed.metadata["papermill"]["parameters"]["run_dir"] == str(run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert {k: v["status"] for k, v in manifest["steps"].items()} == {
        "setup": "ok", "launch": "ok", "sweeps": "not_available"}


def test_a_failing_step_names_itself_and_stops_the_server(tmp_path: Path, llama_server: Path) -> None:
    failing = "raise ninferkit.ServerError('the stand-in sweep failed on purpose')"
    with pytest.raises(StepFailed) as err:
        run_runbook(LOCAL_CPU, tmp_path / "run", ["setup", "launch", "sweeps"], [f"serve.port={free_port()}"],
                    notebooks_dir=notebooks_with(tmp_path, failing), say=lambda line: None)
    assert err.value.step == "sweeps"
    assert "failed on purpose" in str(err.value)
    assert not _group_alive(_server_pgid(tmp_path / "run"))
    executed = nbformat.read(tmp_path / "run" / "notebooks" / STEPS["sweeps"], as_version=4)
    assert any(output.get("ename") == "ServerError" for cell in executed.cells for output in cell.get("outputs", []))
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["steps"]["launch"]["status"] == "ok"
    assert manifest["steps"]["sweeps"]["status"] == "failed"


def test_sigterm_mid_step_stops_the_server(tmp_path: Path, llama_server: Path) -> None:
    # The stand-in sweep blocks until the runner is told to stop; the test waits on the manifest.
    blocking = "import threading\nthreading.Event().wait()"
    folder = notebooks_with(tmp_path, blocking)
    run_dir = tmp_path / "run"
    code = (f"from ninferkit.steps.runner import run_runbook; from pathlib import Path; "
            f"run_runbook({str(LOCAL_CPU)!r}, {str(run_dir)!r}, ['setup', 'launch', 'sweeps'], "
            f"['serve.port={free_port()}'], notebooks_dir=Path({str(folder)!r}))")
    runner = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    manifest = run_dir / "manifest.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        steps = json.loads(manifest.read_text()).get("steps", {}) if manifest.exists() else {}
        if steps.get("sweeps", {}).get("status") == "running":
            break
        assert runner.poll() is None, runner.communicate()[0].decode()
        time.sleep(0.1)
    pgid = _server_pgid(run_dir)
    assert _group_alive(pgid)
    os.kill(runner.pid, signal.SIGTERM)
    output = runner.communicate(timeout=180)[0].decode()
    assert runner.returncode != 0
    assert "server stopped" in output
    assert not _group_alive(pgid)
    assert json.loads(manifest.read_text())["steps"]["sweeps"]["status"] == "interrupted"
