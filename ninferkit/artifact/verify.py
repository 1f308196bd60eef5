"""Verification of one file: byte size, sha256, and for `.ninfer` files the container header.

Every check is a row (name, expected, actual, ok) and every failed row is a problem sentence that
names both values, so a report says exactly what differs. Nothing here raises for a bad file: the
step or the CLI decides what a problem means.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ninferkit.artifact.compat import check_container_compatibility
from ninferkit.artifact.container import ContainerInfo, all_problems, read_container
from ninferkit.bounded import not_a_regular_file
from ninferkit.rundir.hashing import Sha256Result, sha256_file


@dataclass(frozen=True)
class Check:
    """One comparison of an expected value with the value found."""

    name: str
    expected: Any
    actual: Any
    ok: bool

    @property
    def problem(self) -> str:
        return f"{self.name}: expected {self.expected}, actual {self.actual}"


@dataclass
class FileReport:
    """Everything verify found about one file."""

    path: Path
    size: int | None = None
    sha256: Sha256Result | None = None
    container: ContainerInfo | None = None
    checks: list[Check] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    parts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def container_version(self) -> int | None:
        return self.container.version if self.container else None

    def compare(self, name: str, expected: Any, actual: Any) -> None:
        check = Check(name, expected, actual, expected == actual)
        self.checks.append(check)
        if not check.ok:
            self.problems.append(check.problem)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "size": self.size,
            "sha256": self.sha256.hexdigest if self.sha256 else None,
            "sha256_seconds": round(self.sha256.seconds, 3) if self.sha256 else None,
            "sha256_bytes_per_s": round(self.sha256.bytes_per_s) if self.sha256 else None,
            "container_version": self.container_version,
            "container": self.container.to_json() if self.container else None,
            "parts": self.parts,
            "checks": [vars(check) for check in self.checks],
            "ok": self.ok,
            "problems": self.problems,
        }


def verify_file(
    path: Path,
    expected_size: int | None = None,
    expected_sha256: str | None = None,
    expected_container_version: int | None = None,
    accepted_versions: Collection[int] | None = None,
    container_pins: Mapping[int, str] | None = None,
    known_sha256: Sha256Result | None = None,
    progress: bool = False,
) -> FileReport:
    """Check size, container header (for `.ninfer` files or when a version is expected) and sha256.

    `known_sha256` is the digest a download computed while writing the very same bytes; it saves a
    second pass over a large file. The sha256 is computed even when no value is pinned, so it can be
    recorded. A missing, truncated or foreign file gives problems, not an exception.

    Example: ``verify_file(Path("m.ninfer"), expected_sha256="81f9...", accepted_versions={1, 2}).ok``
    """
    report = FileReport(path)
    problem = not_a_regular_file(path)
    if problem is not None:
        report.problems.append(problem)
        return report
    report.size = path.stat().st_size
    if expected_size is not None:
        report.compare("size_bytes", expected_size, report.size)
    _check_container(report, expected_container_version, accepted_versions, container_pins)
    report.sha256 = known_sha256 or sha256_file(path, progress=progress)
    if expected_sha256 is not None:
        report.compare("sha256", expected_sha256.lower(), report.sha256.hexdigest)
    for part in report.container.parts if report.container else []:
        part_path = path.parent / part.path
        if part_path.is_file():
            digest = sha256_file(part_path, progress=progress)
            report.parts.append({"path": str(part_path), "size": part.size, "sha256": digest.hexdigest,
                                 "sha256_bytes_per_s": round(digest.bytes_per_s)})
    return report


def _check_container(
    report: FileReport,
    expected_version: int | None,
    accepted_versions: Collection[int] | None,
    pins: Mapping[int, str] | None,
) -> None:
    info = read_container(report.path)
    report.container = info
    if not info.is_ninfer:
        expected_ninfer = expected_version is not None or accepted_versions is not None
        if report.path.suffix == ".ninfer" or expected_ninfer or info.problems:
            report.problems.append(
                f"not an NInfer container: the first 8 bytes are {info.magic_hex or '(none)'} "
                f"(an NInfer file starts with {b'NINFER'.hex()}00 then the version 01, 02 or 03)")
            report.problems.extend(info.problems)
        return
    report.problems.extend(all_problems(info))
    if expected_version is not None:
        report.compare("container_version", expected_version, info.version)
    report.problems.extend(check_container_compatibility(info.version, accepted_versions, pins))
