"""A lab session works on a run's copy of the notebooks; papermill users pass parameters as they would.

The JupyterLab test starts the real server (`ninferkit lab`, as a user runs it) and talks to it over
loopback: it must want its token. The papermill test runs a template from the repository root with
`overrides` as one string, the form `papermill -p overrides serve.port=…` passes.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import nbformat
import papermill as pm
import pytest

from ninferkit.errors import BadInput, ProfileError
from ninferkit.rundir.runs import open_run, read_json
from ninferkit.steps.lab import TEMPLATES, open_lab_run, prepare
from tests.conftest import LOCAL_CPU, REPO, free_port


def _digests() -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(TEMPLATES.glob("*.ipynb"))}


def _parameters(path: Path) -> str:
    notebook = nbformat.read(path, as_version=4)
    return next(c.source for c in notebook.cells if "parameters" in c.metadata.get("tags", []))


def test_the_lab_copies_the_notebooks_with_this_runs_parameters(tmp_path: Path) -> None:
    before = _digests()
    run = open_run(LOCAL_CPU, tmp_path / "run", ["serve.port=8099"])
    lab = prepare(run)
    copies = sorted(p.name for p in lab.glob("*.ipynb"))
    assert copies == sorted(before)  # every notebook, whatever their number
    source = _parameters(lab / "03_sweeps.ipynb")
    assert f'profile: str = "{LOCAL_CPU.resolve()}"' in source
    assert f'run_dir: str = "{run.dir.path}"' in source and 'overrides: list = ["serve.port=8099"]' in source
    assert "allow_profile_change: bool = False" in source  # the lab's run exists: its profile is the run's
    (lab / "03_sweeps.ipynb").write_text((lab / "03_sweeps.ipynb").read_text().replace("Sweeps", "My sweeps"))
    prepare(run)  # reopening keeps the session's own edits
    assert "My sweeps" in (lab / "03_sweeps.ipynb").read_text()
    assert _digests() == before  # the templates are never written


def test_jupyterlab_listens_on_loopback_and_wants_its_token(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt")}
    process = subprocess.Popen([sys.executable, "-m", "ninferkit", "lab", str(LOCAL_CPU), "--run-dir",
                                str(tmp_path / "run"), "--port", str(port), "--no-browser"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        assert process.stdout is not None
        seen, url = [], None
        deadline = time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            seen.append(line)
            found = re.search(rf"http://127\.0\.0\.1:{port}/lab\?token=(\w+)", line)
            url = found and found.group(0)
        assert url is not None, "".join(seen)
        token = url.rpartition("=")[2]
        assert httpx.get(f"http://127.0.0.1:{port}/api/status", params={"token": token}).status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/api/contents").status_code == 403  # no token, no entry
        listing = httpx.get(f"http://127.0.0.1:{port}/api/contents", params={"token": token}).json()
        assert sorted(item["name"] for item in listing["content"]) == sorted(_digests())  # the run's copies
    finally:
        process.terminate()
        process.communicate(timeout=30)


def test_papermill_from_the_repository_root_with_overrides_as_one_string(tmp_path: Path) -> None:
    output = tmp_path / "out.ipynb"
    cwd = Path.cwd()
    os.chdir(REPO)
    try:
        pm.execute_notebook(str(TEMPLATES / "00_setup.ipynb"), str(output), progress_bar=False, kernel_name="python3",
                            parameters={"run_dir": str(tmp_path / "run"), "overrides": "serve.port=8099"})
    finally:
        os.chdir(cwd)
    manifest = read_json(tmp_path / "run" / "manifest.json")
    assert manifest["profile"]["serve"]["port"] == 8099  # the default profile, found from the repository root
    assert manifest["profile_overrides"] == ["serve.port=8099"]


def test_reopening_a_runs_lab_keeps_its_profile_and_refuses_a_change_field_by_field(tmp_path: Path) -> None:
    first = open_run(LOCAL_CPU, tmp_path / "run", ["serve.port=8099"])
    again = open_lab_run(None, str(tmp_path / "run"))  # `ninferkit lab --run-dir R`: the run's own profile
    assert again.profile_hash == first.profile_hash and list(again.loaded.overrides) == ["serve.port=8099"]
    with pytest.raises(ProfileError, match=r"serve\.port: the run's 8099, the new 8088"):
        open_lab_run(str(LOCAL_CPU), str(tmp_path / "run"))  # the profile again, without the run's -p
    manifest = read_json(tmp_path / "run" / "manifest.json")
    assert manifest["profile_hash"] == first.profile_hash and manifest["profile_overrides"] == ["serve.port=8099"]
    changed = open_lab_run(str(LOCAL_CPU), str(tmp_path / "run"), ["serve.port=8100"], allow_profile_change=True)
    assert changed.profile.serve.port == 8100
    assert read_json(tmp_path / "run" / "manifest.json")["profile_changes"][-1]["step"] == "lab"
    with pytest.raises(BadInput, match="lab needs a PROFILE"):
        open_lab_run(None, str(tmp_path / "nothing-here"))


def test_the_lab_command_refuses_a_changed_profile_before_jupyterlab_starts(tmp_path: Path) -> None:
    open_run(LOCAL_CPU, tmp_path / "run", ["serve.port=8099"])
    done = subprocess.run([sys.executable, "-m", "ninferkit", "lab", str(LOCAL_CPU), "--run-dir", str(tmp_path / "run"),
                           "--no-browser"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "serve.port: the run's 8099, the new 8088" in done.stderr
    assert "--allow-profile-change changes it" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run" / "lab").exists()


def test_the_labs_kernels_talk_over_unix_sockets_without_the_tcp_warning(tmp_path: Path) -> None:
    """JupyterLab as `ninferkit lab` starts it, and a kernel started in it: its connection file names the ipc
    transport, and the kernel's log (JupyterLab's) has no "running over TCP without encryption" (issue 44)."""
    from ninferkit.steps.lab import command

    port, runtime = free_port(), tmp_path / "runtime"
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_RUNTIME_DIR": str(runtime)}
    with tempfile.TemporaryDirectory(prefix="nk-") as sockets:  # as start() makes it: short, whatever tmp_path is
        argv = [*command(tmp_path, Path(sockets), port, open_browser=False), "--IdentityProvider.token=test-token"]
        _start_a_kernel(argv, env, port, runtime, tmp_path / "lab.log")
    assert "without encryption" not in (tmp_path / "lab.log").read_text()


def _start_a_kernel(argv: list[str], env: dict[str, str], port: int, runtime: Path, log_path: Path) -> None:
    """JupyterLab started with `argv`, one kernel started in it through its REST API: its connection file names
    the ipc transport, and it binds its five sockets there."""
    with log_path.open("w") as log:
        lab = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        headers, url = {"Authorization": "token test-token"}, f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline and lab.poll() is None, log_path.read_text()
            try:
                started = httpx.post(f"{url}/api/kernels", headers=headers, json={"name": "python3"}, timeout=30)
            except httpx.TransportError:
                started = None
            if started is not None and started.status_code == 201:
                kernel = started.json()
                break
            time.sleep(0.2)
        connection = read_json(runtime / f"kernel-{kernel['id']}.json")
        assert connection["transport"] == "ipc"
        bound = Path(connection["ip"]).parent
        while len(list(bound.glob(f"{Path(connection['ip']).name}-*"))) < 5:  # its five sockets bound: it runs
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
    finally:
        lab.terminate()
        lab.wait(timeout=60)
