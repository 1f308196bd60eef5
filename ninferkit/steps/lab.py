"""A JupyterLab session on a run's own copy of the notebooks, so notebooks/ stays the runbook's template.

JupyterLab autosaves what it opens. Opened on notebooks/ it saved outputs and edited parameters over
the repository's notebooks (and the next headless run executed the edited copies); so a session
works on copies in run_dir/lab/, with the profile, run directory and overrides filled in once. The
server listens on 127.0.0.1 only, with JupyterLab's token on (anyone on the host who can reach the
port would otherwise run code as this user); as root it needs --allow-root, which it is given.

Reopening a run's lab keeps its run: the run's own profile, as its manifest records it (a `--url` run's engine,
model and context read from its server included). A profile or `-p` that would change it is refused field by
field, as the notebooks refuse it, unless the change is asked for.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from ninferkit.errors import BadInput, ProfileError
from ninferkit.rundir.profile_change import checked_profile, record_change
from ninferkit.rundir.runs import Run, RunDir, open_run

TEMPLATES = Path(__file__).resolve().parents[2] / "notebooks"


def open_lab_run(profile: str | None, run_dir: str | None, overrides: Sequence[str] = (),
                 allow_profile_change: bool = False) -> Run:
    """The run a lab session works in: a new run of `profile`, or the existing run at `run_dir` under its own
    profile (`profile` and `overrides` may restate it, not change it, unless `allow_profile_change`; the manifest
    then records that the lab changed it)."""
    if run_dir is not None and RunDir(Path(run_dir)).manifest.exists():
        where = Path(run_dir).resolve()
        try:
            loaded, changed = checked_profile(profile or "", where, list(overrides),
                                              allow_change=allow_profile_change, base=Path.cwd())
        except ProfileError as exc:
            raise ProfileError(f"{exc}. From `ninferkit lab`: --run-dir {run_dir} alone reopens the run as it is; "
                               "--allow-profile-change changes it") from None
        run = open_run(loaded, where)
        record_change(run.dir, "lab", changed)
        return run
    if profile is None:
        raise BadInput("lab needs a PROFILE (params/*.yaml), --url URL for a server ninferkit did not start, or "
                       "--run-dir of an existing run to reopen")
    return open_run(profile, run_dir, list(overrides))


def prepare(run: Run, templates: Path = TEMPLATES) -> Path:
    """run_dir/lab/ with a copy of every notebook whose parameters cell names this run; returns the folder.

    A notebook already there is kept as the session left it (its outputs and edits are the user's), so
    reopening a run's lab resumes it; delete run_dir/lab/ to start from the templates again.
    """
    lab = run.dir.lab
    lab.mkdir(parents=True, exist_ok=True)
    profile = str(run.loaded.source.resolve()) if run.loaded.source else ""
    for template in sorted(templates.glob("*.ipynb")):
        copy = lab / template.name
        if copy.exists():
            continue
        notebook = json.loads(template.read_text())
        for cell in notebook["cells"]:
            if "parameters" in cell.get("metadata", {}).get("tags", []):
                cell["source"] = _parameters(profile, str(run.dir.path), list(run.loaded.overrides))
        copy.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
    return lab


def _parameters(profile: str, run_dir: str, overrides: list[str]) -> list[str]:
    lines = [f"profile: str = {json.dumps(profile)}  # filled in by `ninferkit lab`",
             f"run_dir: str = {json.dumps(run_dir)}  # every notebook of this session writes here",
             f"overrides: list = {json.dumps(overrides)}  # profile fields changed for this run",
             "allow_profile_change: bool = False  # True: profile or overrides may change this run's profile from "
             "this step on (the manifest records the change)"]
    return [line + "\n" for line in lines[:-1]] + [lines[-1]]


def command(lab: Path, sockets: Path, port: int | None = None, open_browser: bool = True) -> list[str]:
    """The JupyterLab argv: loopback only, the token JupyterLab makes (never disabled), root allowed, and kernels
    over Unix-domain sockets named `sockets`/kernel-N, as the runner's (steps/runner.py): a kernel over TCP
    listens where any local user can connect in plain text, and ipykernel warns of it at every start. `sockets`
    is a short folder of the session's own: a socket's path holds at most 107 bytes, which one in a deep runtime
    folder (kernel-<uuid>-ipc-N) can pass, and the kernel then never starts."""
    argv = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={lab}", "--ServerApp.ip=127.0.0.1",
            "--KernelManager.transport=ipc", f"--KernelManager.ip={sockets / 'kernel'}"]
    if port is not None:
        argv.append(f"--ServerApp.port={port}")
    if not open_browser or not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        argv.append("--no-browser")
    if os.geteuid() == 0:
        argv.append("--allow-root")
    return argv


def start(lab: Path, port: int | None = None, open_browser: bool = True) -> NoReturn:
    """Replace this process with JupyterLab, which prints the URL with its token. Its kernels' sockets go in a
    folder of its own under the system's temporary folder (a short path; the kernels remove their sockets)."""
    argv = command(lab, Path(tempfile.mkdtemp(prefix="ninferkit-lab-")), port, open_browser)
    os.execv(argv[0], argv)
