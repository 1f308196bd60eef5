"""`ninferkit deploy` in systemd mode: the unit for the embedded llama-server, as deploy writes it, accepted by
systemd-analyze verify (which checks its keys and that ExecStart's program exists and is executable). This
machine has no systemd as its init, so the unit is verified, not started (tests/unit/deploy/test_deploy.py checks
the refusal)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from ninferkit.deploy import service
from tests.conftest import LOCAL_CPU


def test_the_units_for_the_embedded_llama_server_verify(llama_server: Path, tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    profile = service.load(LOCAL_CPU, ["deploy.mode=systemd", "deploy.name=ninferkit-embedded"]).profile
    mode, planned = service.plan(profile, binary=llama_server)
    unit = tmp_path / "ninferkit-embedded.service"
    unit.write_text(planned.files[unit.name])
    [exec_start] = [line for line in unit.read_text().splitlines() if line.startswith("ExecStart=")]
    assert shlex.split(exec_start.removeprefix("ExecStart="))[:3] == [str(llama_server), "-m",
                                                                      planned.argv[2]]
    checked = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert checked.returncode == 0 and checked.stderr == "", checked.stderr
    broken = tmp_path / "broken.service"
    broken.write_text(unit.read_text().replace(str(llama_server), str(tmp_path / "no-such-binary")))
    assert subprocess.run(["systemd-analyze", "verify", str(broken)], capture_output=True).returncode != 0
