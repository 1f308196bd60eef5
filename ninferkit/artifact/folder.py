"""A checkpoint folder (config.json, tokenizer, weight shards: what vLLM loads), fetched and checked file by file.

A folder is pinned by the size and sha256 of each file (`artifact.files`), since no single hash
covers it. Each missing file is downloaded on its own from the revision's resolve URL, resuming
like any other download and landing only when it matches; a file in place is never replaced. The
check hashes every file, pinned or not, so a folder fetched by hand (seed 001 downloads with
ModelScope from a repo it does not name) gets its hashes recorded, ready to pin. Hidden files and
folders (a downloader's bookkeeping: .cache/, .msc) are not part of the checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ninferkit.artifact.fetch import DownloadResult, download
from ninferkit.artifact.source import ArtifactSource
from ninferkit.artifact.verify import FileReport
from ninferkit.params.profile import FilePin
from ninferkit.rundir.hashing import Sha256Result, sha256_file


def fetch_folder(source: ArtifactSource, folder: Path, pins: Mapping[str, FilePin], headers: dict[str, str],
                 progress: bool) -> list[DownloadResult]:
    """Download each pinned file missing from `folder`, in name order."""
    return [download(source.file_url(name), folder / name, pin.size_bytes, pin.sha256, headers=headers,
                     progress=progress)
            for name, pin in sorted(pins.items()) if not (folder / name).exists()]


def checkpoint_files(folder: Path) -> list[str]:
    """The folder's files as paths relative to it, hidden ones left out."""
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*")
                  if path.is_file() and not any(part.startswith(".") for part in path.relative_to(folder).parts))


def verify_folder(folder: Path, pins: Mapping[str, FilePin], known: Mapping[Path, Sha256Result] | None = None,
                  progress: bool = False) -> tuple[FileReport, list[dict[str, object]]]:
    """(report, one row per file). Every pinned file must be there with its size and sha256; a file
    nobody pinned is hashed and listed (`pinned: false`) but is no problem. `known` holds digests a
    download computed while writing those very bytes."""
    report = FileReport(folder)
    if not folder.is_dir():
        report.problems.append(f"checkpoint folder not found: {folder}")
        return report, []
    rows: list[dict[str, object]] = []
    total = 0
    for name in sorted(set(pins) | set(checkpoint_files(folder))):
        path, pin = folder / name, pins.get(name)
        if not path.is_file():
            report.problems.append(f"{name}: not found in {folder}")
            rows.append({"path": name, "size_bytes": None, "sha256": None, "pinned": True, "ok": False})
            continue
        size = path.stat().st_size
        digest = (known or {}).get(path) or sha256_file(path, progress=progress)
        total += size
        before = len(report.problems)
        if pin is not None and pin.size_bytes is not None:
            report.compare(f"{name} size_bytes", pin.size_bytes, size)
        if pin is not None and pin.sha256 is not None:
            report.compare(f"{name} sha256", pin.sha256, digest.hexdigest)
        rows.append({"path": name, "size_bytes": size, "sha256": digest.hexdigest, "pinned": pin is not None,
                     "ok": len(report.problems) == before})
    report.size = total
    return report, rows
