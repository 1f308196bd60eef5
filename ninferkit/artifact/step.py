"""The artifact step (01_artifact_verify): obtain the model file, verify it, write artifact.json.

Order matters: the pin policy is checked before anything is downloaded; a file already in place is
verified, never replaced; the engine binaries listed with sha256 values are checked too; and
artifact.json is written before a failure is raised, so the evidence survives the failed step.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pandas as pd

from ninferkit.artifact.container import read_container
from ninferkit.artifact.fetch import DownloadResult, download
from ninferkit.artifact.paths import local_dir, planned_path
from ninferkit.artifact.source import ArtifactSource, check_pin, resolve_source
from ninferkit.artifact.verify import FileReport, sha256_file, verify_file
from ninferkit.embedded import generate_model
from ninferkit.engines import get_adapter
from ninferkit.errors import ArtifactError, ChecksumMismatch
from ninferkit.params.profile import Profile
from ninferkit.runs import Run, utc_now, write_json_atomic

SCHEMA_VERSION = 1


def verify_step(run: Run, progress: bool = True) -> dict[str, Any]:
    """Download the profile's artifact if it is missing, verify it and the engine binaries, write
    ``run_dir/artifact.json``, and return that record.

    Raises ArtifactError (before any download) for an unpinned revision, ChecksumMismatch when a
    size or sha256 differs, ArtifactError for any other problem (header, container version the
    engine cannot read, missing binary); artifact.json is written first, also when a download fails.

    Example: ``ninferkit.artifact.verify_step(ninferkit.open_run("params/local-cpu.yaml"))["sha256"]``
    """
    profile = run.profile
    artifact = profile.artifact
    accepted = get_adapter(profile.engine.kind).accepted_container_versions(profile)
    started_utc = utc_now()
    warnings: list[str] = []
    fetched: list[DownloadResult] = []
    if artifact.generate is not None:
        path = generate_model(artifact.generate, local_dir(profile))
        source: dict[str, Any] = {"kind": "generated", "url": None, "revision": None, "pinned": None,
                                  "generator": artifact.generate.model_dump(mode="json")}
    else:
        resolved = resolve_source(artifact)
        warnings += check_pin(resolved, artifact.allow_branch)
        source = {"kind": resolved.kind, "url": resolved.url, "repo": resolved.repo, "revision": resolved.revision,
                  "filename": resolved.filename, "endpoint": resolved.endpoint, "pinned": resolved.pinned}
        path = planned_path(profile)
        try:
            fetched = _fetch_missing(resolved, path, artifact.size_bytes, artifact.sha256, progress)
        except ArtifactError as exc:
            write_json_atomic(run.dir.artifact, {"schema_version": SCHEMA_VERSION, "profile_hash": run.profile_hash,
                                                 "source": source, "path": str(path), "ok": False,
                                                 "problems": [str(exc)], "warnings": warnings})
            raise
    if artifact.sha256 is None:
        warnings.append("artifact.sha256 is not pinned: the sha256 below is recorded, not checked")
    entry_download = next((result for result in fetched if result.path == path), None)
    verify_started = time.perf_counter()
    report = verify_file(
        path, artifact.size_bytes, artifact.sha256, artifact.container_version, accepted,
        artifact.container_revisions, known_sha256=entry_download.sha256 if entry_download else None,
        progress=progress,
    )
    binaries = _verify_binaries(profile, report)
    record = {
        "schema_version": SCHEMA_VERSION,
        "profile_hash": run.profile_hash,
        "source": source,
        "path": str(path),
        "size_bytes": report.size,
        "sha256": report.sha256.hexdigest if report.sha256 else None,
        "container_version": report.container_version,
        "container": report.container.to_json() if report.container else None,
        "parts": report.parts,
        "expected": {"size_bytes": artifact.size_bytes, "sha256": artifact.sha256,
                     "container_version": artifact.container_version},
        "engine": {"kind": profile.engine.kind, "fork": profile.engine.fork, "version": profile.engine.version,
                   "accepted_container_versions": sorted(accepted) if accepted is not None else None},
        "downloads": [result.to_json() for result in fetched],
        "verification": {
            "started_utc": started_utc,
            "verified_utc": utc_now(),
            "seconds": round(time.perf_counter() - verify_started, 3),
            "sha256_seconds": round(report.sha256.seconds, 3) if report.sha256 else None,
            "sha256_bytes_per_s": round(report.sha256.bytes_per_s) if report.sha256 else None,
            "sha256_computed_while_downloading": entry_download is not None,
        },
        "binaries": binaries,
        "checks": [vars(check) for check in report.checks],
        "warnings": warnings,
        "ok": report.ok,
        "problems": report.problems,
    }
    write_json_atomic(run.dir.artifact, record)
    if report.problems:
        mismatch = any(not c.ok and c.name in ("size_bytes", "sha256") for c in report.checks)
        error = ChecksumMismatch if mismatch else ArtifactError
        raise error(f"{path} failed verification:\n" + "\n".join(f"  - {p}" for p in report.problems)
                    + f"\nDetails: {run.dir.artifact}")
    return record


def _fetch_missing(
    source: ArtifactSource, path: Path, size: int | None, sha256: str | None, progress: bool
) -> list[DownloadResult]:
    """Download the entry file if it is missing, then any v3 continuation part it names that is missing."""
    headers = _auth_headers() if source.kind == "hub" else {}
    fetched = []
    if not path.exists():
        fetched.append(download(source.url, path, size, sha256, headers=headers, progress=progress))
    for part in read_container(path).parts:
        part_file = path.parent / part.path
        if "/" not in part.path and not part_file.exists():
            fetched.append(download(source.sibling(part.path), part_file, part.expected_bytes,
                                    headers=headers, progress=progress))
    return fetched


def _auth_headers() -> dict[str, str]:
    """A hub token from the environment (gated repos); sent with the request, never recorded."""
    token = os.environ.get("HF_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else {}


def _verify_binaries(profile: Profile, report: FileReport) -> list[dict[str, Any]]:
    """Check the engine files named in engine.build.binary_sha256 (relative names: beside the binary)."""
    expected = profile.engine.build.binary_sha256
    if not expected:
        return []
    folder = _binary_dir(profile)
    rows: list[dict[str, Any]] = []
    for name, sha in sorted(expected.items()):
        candidate = Path(name).expanduser()
        path = candidate if candidate.is_absolute() else folder / candidate
        if not path.is_file():
            report.problems.append(f"binary {name}: not found at {path}")
            rows.append({"name": name, "path": str(path), "expected_sha256": sha, "sha256": None, "ok": False})
            continue
        actual = sha256_file(path).hexdigest
        report.compare(f"binary {name} sha256", sha, actual)
        rows.append({"name": name, "path": str(path), "size_bytes": path.stat().st_size,
                     "expected_sha256": sha, "sha256": actual, "ok": actual == sha})
    return rows


def _binary_dir(profile: Profile) -> Path:
    if profile.engine.binary:
        named = os.path.expanduser(profile.engine.binary)
        return Path(shutil.which(named) or named).parent
    return get_adapter(profile.engine.kind).binary(profile).parent


def summary(record: dict[str, Any]) -> str:
    """A few lines for people: what was checked, where it came from, how fast it hashed."""
    source = record["source"]
    origin = source["url"] or "generated locally"
    if source.get("revision"):
        origin += f" (revision {source['revision']}, {'pinned' if source['pinned'] else 'NOT pinned'})"
    rate = record["verification"]["sha256_bytes_per_s"]
    lines = [
        f"artifact   {record['path']}",
        f"source     {origin}",
        f"size       {record['size_bytes']:,} bytes",
        f"sha256     {record['sha256']}" + (f"  ({rate / 2**20:,.0f} MiB/s)" if rate else ""),
        "container  " + (f"v{record['container_version']}" if record["container_version"] else "not a .ninfer file"),
    ]
    lines += [f"warning    {text}" for text in record["warnings"]]
    lines.append("verdict    " + ("all checks passed" if record["ok"] else "; ".join(record["problems"])))
    return "\n".join(lines)


def checks_table(record: dict[str, Any]) -> pd.DataFrame:
    """Each check as a row: name, expected, actual, ok."""
    return pd.DataFrame(record["checks"], columns=["name", "expected", "actual", "ok"])
