"""The engine's own files the profile pins: its binaries (`engine.build.binary_sha256`) and the release
tarball they came from (`engine.build.tarball`, `tarball_sha256`).

A tarball given as a URL is downloaded like a model file (resuming, hashed as it arrives, landing
only when it matches) into the cache's engines/ folder; a path is checked where it lies. Every
difference is a problem row on the artifact report, so the step fails saying what differs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ninferkit.artifact.fetch import download
from ninferkit.artifact.verify import FileReport
from ninferkit.cache import cache_dir
from ninferkit.engines import get_adapter
from ninferkit.errors import ArtifactError
from ninferkit.params.profile import Profile
from ninferkit.rundir.hashing import Sha256Result, sha256_file


def engines_dir() -> Path:
    """Where release tarballs are downloaded to, and where a bare tarball file name is looked for."""
    return cache_dir() / "engines"


def is_url(text: str) -> bool:
    return urlsplit(text).scheme in ("http", "https")


def tarball_path(tarball: str) -> Path:
    """Where the tarball lies: a URL's file in engines_dir(), a path as given, a bare name in engines_dir()."""
    if is_url(tarball):
        return engines_dir() / Path(urlsplit(tarball).path).name
    path = Path(tarball).expanduser()
    return path if path.is_absolute() or len(path.parts) > 1 else engines_dir() / path


def verify_tarball(profile: Profile, report: FileReport, warnings: list[str], progress: bool) -> dict[str, Any] | None:
    """Check the release tarball against engine.build.tarball_sha256 (downloading it first when a URL names
    it and it is missing); None when the profile names no tarball (or the engine has no build)."""
    build = profile.engine.build
    if build is None:
        return None
    if build.tarball is None:
        if build.tarball_sha256 is not None:
            warnings.append("engine.build.tarball_sha256 is pinned but engine.build.tarball does not say where the "
                            "tarball lies: not checked")
        return None
    path = tarball_path(build.tarball)
    row: dict[str, Any] = {"tarball": build.tarball, "path": str(path), "expected_sha256": build.tarball_sha256,
                           "sha256": None, "size_bytes": None, "downloaded": False, "ok": False}
    digest: Sha256Result | None = None
    if not path.is_file() and is_url(build.tarball):
        try:
            digest = download(build.tarball, path, None, build.tarball_sha256, progress=progress).sha256
            row["downloaded"] = True
        except ArtifactError as exc:  # ChecksumMismatch included: the bytes the URL serves are not the pinned ones
            report.problems.append(f"engine tarball {build.tarball}: {exc}")
            return row
    if not path.is_file():
        report.problems.append(f"engine tarball {build.tarball}: not found at {path}; the profile gives no URL to "
                               "fetch it from: put the release tarball there, or set engine.build.tarball to its path "
                               "or URL")
        return row
    digest = digest or sha256_file(path, progress=progress)
    row.update(sha256=digest.hexdigest, size_bytes=path.stat().st_size)
    if build.tarball_sha256 is None:
        warnings.append("engine.build.tarball_sha256 is not pinned: the tarball's sha256 is recorded, not checked")
        row["ok"] = True
    else:
        report.compare("engine tarball sha256", build.tarball_sha256, digest.hexdigest)
        row["ok"] = digest.hexdigest == build.tarball_sha256
    return row


def verify_binaries(profile: Profile, report: FileReport) -> list[dict[str, Any]]:
    """Check the engine files named in engine.build.binary_sha256 (relative names: beside the binary)."""
    expected = profile.engine.build.binary_sha256 if profile.engine.build else {}
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
