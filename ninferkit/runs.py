"""Run directories: where each step writes its output, and the manifest that makes a run reproducible.

Steps hand each other data only through files here, so any step can be re-run alone. Every JSON
file is written atomically (temp file + rename) and every JSONL row is flushed as it is appended,
so a run that dies midway leaves whole files behind.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from ninferkit.params import LoadedProfile, Profile, load_profile

SCHEMA_VERSION = 1
PACKAGES = ("ninferkit", "papermill", "httpx", "pandas", "matplotlib", "nvidia-ml-py", "pydantic", "gguf", "numpy")


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def write_json_atomic(path: Path, data: Any) -> Path:
    """Write JSON so that readers see either the old file or the whole new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.fchmod(fd, 0o644)  # mkstemp makes 0600; results are meant to be read by others
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=2, sort_keys=True, default=str)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def append_jsonl(path: Path, row: Mapping[str, Any]) -> None:
    """Append one row and flush it to disk at once: a crash loses at most the row being written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(json.dumps(row, sort_keys=True, default=str) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of a JSONL file; a torn last line (a crash mid-write) is skipped, not fatal."""
    if not path.exists():
        return
    with path.open() as handle:
        for line in handle:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


@dataclass(frozen=True)
class RunDir:
    """The files of one run; the names here are the data flow of the design."""

    path: Path

    @property
    def manifest(self) -> Path:
        return self.path / "manifest.json"

    @property
    def probe(self) -> Path:
        return self.path / "probe.json"

    @property
    def artifact(self) -> Path:
        return self.path / "artifact.json"

    @property
    def server(self) -> Path:
        return self.path / "server.json"

    @property
    def server_log(self) -> Path:
        return self.path / "logs" / "server.log"

    @property
    def requests(self) -> Path:
        return self.path / "requests.jsonl"

    @property
    def telemetry(self) -> Path:
        return self.path / "telemetry.jsonl"

    @property
    def capacity(self) -> Path:
        return self.path / "capacity.json"

    @property
    def report(self) -> Path:
        return self.path / "report"

    @property
    def notebooks(self) -> Path:
        return self.path / "notebooks"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    def read_manifest(self) -> dict[str, Any]:
        return read_json(self.manifest) if self.manifest.exists() else {}

    def record_step(self, step: str, **fields: Any) -> None:
        """Merge fields into the manifest entry of one step (status, times, error)."""
        manifest = self.read_manifest()
        manifest.setdefault("steps", {}).setdefault(step, {}).update(fields)
        manifest["updated"] = utc_now()
        write_json_atomic(self.manifest, manifest)


@dataclass(frozen=True)
class Run:
    """A profile bound to a run directory: what every notebook and step function receives."""

    loaded: LoadedProfile
    dir: RunDir

    @property
    def profile(self) -> Profile:
        return self.loaded.profile

    @property
    def profile_hash(self) -> str:
        return self.loaded.hash


def new_run_id(profile_name: str) -> str:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{profile_name}"


def open_run(
    profile: str | Path, run_dir: str | Path | None = None, overrides: tuple[str, ...] | list[str] = ()
) -> Run:
    """Validate the profile, then create (or reopen) its run directory and manifest.

    Validation comes first, so a bad profile leaves nothing behind. Reopening a run directory
    keeps its step history: that is how a rerun resumes.
    """
    loaded = load_profile(profile, overrides)
    path = Path(run_dir) if run_dir else Path("runs") / new_run_id(loaded.profile.name)
    run = Run(loaded, RunDir(path.resolve()))
    _write_manifest(run)
    return run


def _write_manifest(run: Run) -> None:
    manifest = run.dir.read_manifest()
    previous = manifest.get("profile_hash")
    manifest.update(
        {
            "schema_version": SCHEMA_VERSION,
            "run_id": run.dir.path.name,
            "profile_name": run.profile.name,
            "profile_source": str(run.loaded.source) if run.loaded.source else None,
            "profile_overrides": list(run.loaded.overrides),
            "profile": run.profile.model_dump(mode="json"),
            "profile_hash": run.profile_hash,
            "profile_comments": run.loaded.comments,
            "packages": package_versions(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "host": socket.gethostname(),
            "git": git_state(Path(__file__).resolve().parent.parent),
            "updated": utc_now(),
        }
    )
    manifest.setdefault("created", manifest["updated"])
    manifest.setdefault("steps", {})
    if previous and previous != run.profile_hash:
        manifest.setdefault("profile_history", []).append({"hash": previous, "replaced": manifest["updated"]})
    write_json_atomic(run.dir.manifest, manifest)


def package_versions() -> dict[str, str | None]:
    """Versions of the packages results depend on; ninferkit's own from its source, which is right also
    when it runs from a checkout that was never pip-installed (the GPU boxes' PYTHONPATH runs)."""
    from ninferkit import __version__

    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = __version__ if name == "ninferkit" else metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_state(where: Path) -> dict[str, Any]:
    """The commit of the ninferkit checkout and whether it had uncommitted changes."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}
