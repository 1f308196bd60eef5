"""Run directories: where each step writes its output, and the manifest that makes a run reproducible.

Steps hand each other data only through files here, so any step can be re-run alone. Every JSON
file is written atomically (temp file + rename) and every JSONL row is flushed as it is appended,
so a run that dies midway leaves whole files behind; a torn last line (a kill -9 or a full disk in
the middle of a row) is cut off before the next row is appended. Everything written here is scrubbed
of the secrets the process knows (ninferkit.redaction). A full disk is a DiskFull error that says
what to do; the files stay whole, so the rerun completes. A run directory is held by one run at a
time (`open_run` takes its lock): a second one is refused with the holder's process id.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import os
import platform
import re
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, BinaryIO, Generic, TypeVar

from pydantic import ValidationError

from ninferkit.errors import BadInput, DiskFull, RunDirBusy
from ninferkit.params import LoadedProfile, Profile, load_profile
from ninferkit.redaction import remember_env, scrub, scrub_data
from ninferkit.rundir.identity import ServingIdentity, recorded_identity
from ninferkit.rundir.records import (
    ArtifactRecord,
    CapacityRecord,
    CellEntry,
    FleetTaskRecord,
    ImportedRecord,
    LlamaBenchRecord,
    Manifest,
    ProbeRecord,
    RequestRow,
    RunFile,
    RunRow,
    ServerRecord,
    TelemetrySample,
    VariantRecord,
)
from ninferkit.version import __version__, git_state

PACKAGES = ("ninferkit", "papermill", "httpx", "pandas", "matplotlib", "nvidia-ml-py", "pydantic", "gguf", "numpy")
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@contextmanager
def disk_errors(path: Path) -> Iterator[None]:
    """Turn "no space left" (and quota, file size limit) while writing `path` into DiskFull with the fix."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in _DISK_FULL:
            raise
        try:
            free = f"{shutil.disk_usage(path.parent).free:,} bytes free there now"
        except OSError:
            free = "free space unknown"
        raise DiskFull(f"could not write {path}: {os.strerror(exc.errno or 0)} ({free}). Free some space and run "
                       "the step again: every file written so far is whole, finished rows and cells are kept, "
                       "and the rerun completes what is missing") from exc


def write_json_atomic(path: Path, data: Any) -> Path:
    """Write JSON so that readers see either the old file or the whole new one, never a torn one."""
    return write_text_atomic(path, json.dumps(scrub_data(data), indent=2, sort_keys=True, default=str) + "\n")


def write_text_atomic(path: Path, text: str) -> Path:
    """Write a text file (scrubbed of secrets) so that readers see the old file or the whole new one, as
    `write_bytes_atomic`."""
    return write_bytes_atomic(path, scrub(text).encode())


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    """Write a file (a table's parquet, a figure) so that readers see the old file or the whole new one.

    The new file replaces whatever was at `path`, a symbolic link included (the link goes, its target is
    never written), and keeps the mode of the file it replaces: a file someone made 0600 stays 0600."""
    refuse_linked_folders(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(os.stat(path, follow_symlinks=False).st_mode) if not path.is_symlink() else 0o644
    except FileNotFoundError:
        mode = 0o644  # mkstemp makes 0600; results are meant to be read by others
    with disk_errors(path):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        os.fchmod(fd, mode)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return path


def read_json(path: Path) -> Any:
    """A JSON file; BadInput (naming the file) when it is truncated, not JSON or not text."""
    try:
        return json.loads(path.read_text())
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise BadInput(f"{path} is not valid JSON ({_short(exc)}); ninferkit writes it atomically, so it was "
                       "cut short or edited by something else: restore it, or run the step that writes it again"
                       ) from exc


def append_jsonl(path: Path, row: Mapping[str, Any]) -> None:
    """Append one row and flush it to disk at once: a crash loses at most the row being written."""
    append_jsonl_rows(path, [row])


def append_jsonl_rows(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Append rows with one write and one fsync (an import of 100,000 rows fsynced each and wrote ~156 rows/s:
    issue 40); a crash loses at most the rows of this call, never a row written before.

    A last line without its newline is what a kill -9 or a full disk leaves in the middle of a row. It
    is repaired first: ended with a newline when it is a whole row, else cut off (it was never a
    finished row); appended after it as it is, the new row would be glued to it and lost to every reader.
    """
    line = "".join(json.dumps(scrub_data(dict(row)), sort_keys=True, default=str) + "\n" for row in rows).encode()
    refuse_linked_folders(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with disk_errors(path):
        fd = _open_appending(path)
        try:
            _repair_torn_tail(fd)
            _write_all(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)


RUN_MARKERS = (".lock", "manifest.json")
"""What makes a folder a run directory (`claim` writes the first, `open_run` the second)."""


def refuse_linked_folders(path: Path) -> None:
    """BadInput when a folder between `path` and the run directory it lies in is a symbolic link: a `report/`
    or `logs/` planted as a link would have ninferkit write outside the run. A path in no run directory
    (a test's scratch file) is not checked; nor is the run directory itself, which may live anywhere."""
    linked: list[Path] = []
    for folder in list(path.parents)[:8]:
        if any((folder / marker).exists() for marker in RUN_MARKERS) and not folder.is_symlink():
            if linked:
                raise BadInput(f"{linked[-1]} is a symbolic link inside the run directory {folder}; ninferkit "
                               "writes only inside its run directory: remove the link (a rerun makes the folder)")
            return
        if folder.is_symlink():
            linked.append(folder)


def _open_appending(path: Path) -> int:
    """A run file opened to append, never through a symbolic link to a file or folder (BadInput: the link
    would have the row written outside the run); a link to a character device (/dev/null, /dev/full) is
    followed, as it stores nothing."""
    try:
        return os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
    try:
        device = stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        device = False
    if not device:
        raise BadInput(f"{path} is a symbolic link to {os.readlink(path)}; ninferkit writes its run files itself, "
                       "never through a link: remove the link and run the step again")
    return os.open(path, os.O_RDWR | os.O_APPEND)


def open_for_write(path: Path) -> BinaryIO:
    """A run file opened to be written anew (a server's log): a symbolic link at `path` is replaced by the
    file, never written through; a linked folder is refused (`refuse_linked_folders`)."""
    refuse_linked_folders(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644), "wb")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _repair_torn_tail(fd: int) -> None:
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    start = size
    while start > 0:  # back to the newline before the torn line (rows are small: a few KiB)
        block = max(0, start - 65536)
        found = os.pread(fd, start - block, block).rfind(b"\n")
        if found >= 0:
            start = block + found + 1
            break
        start = block
    tail = os.pread(fd, size - start, start)
    if _is_row(tail):
        _write_all(fd, b"\n")
    else:
        os.ftruncate(fd, start)


def _is_row(text: bytes) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of a JSONL file (see `read_jsonl_numbered`)."""
    for _, row in read_jsonl_numbered(path):
        yield row


def read_jsonl_numbered(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) of a JSONL file written by `append_jsonl`; nothing when it does not exist.

    A torn last line (a crash mid-write: no newline after it) is skipped, as the next append will cut
    it. Any other line that is not a JSON object raises BadInput naming the file and line: skipping it
    would drop a row from every table without a word.
    """
    if not path.exists():
        return
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            row = _row_of(path, number, raw)
            if row is not None:
                yield number, row


def _row_of(path: Path, number: int, raw: bytes) -> dict[str, Any] | None:
    """Line `number` of a JSONL file as a row; None for a blank line or a torn last line (no newline, not JSON)."""
    if not raw.strip():
        return None
    try:
        row = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        if not raw.endswith(b"\n"):
            return None  # the torn last line
        raise BadInput(f"{path}, line {number}: not a JSON row ({_short(exc)}); ninferkit appends whole "
                       "rows, so the file was edited or damaged: delete or fix that line") from exc
    if not isinstance(row, dict):
        raise BadInput(f"{path}, line {number}: a JSON {type(row).__name__}, not a row (an object); "
                       "delete or fix that line")
    return row


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 200 else text[:200] + "..."


def earlier_logs(path: Path) -> list[Path]:
    """The logs earlier launches left beside `path` (logs/server.log): `server.N.log`, N counting up from 1 in
    launch order (server.process.keep_earlier_log names them), sorted by N."""
    numbered = {int(found.suffixes[-2][1:]): found for found in path.parent.glob(f"{path.stem}.*{path.suffix}")
                if len(found.suffixes) >= 2 and found.suffixes[-2][1:].isdigit()}
    return [numbered[number] for number in sorted(numbered)]


@dataclass(frozen=True)
class RunDir:
    """Every path of one run directory, named once: the data flow of the design.

    A step, a reader or a command asks for a file by its name here, never by spelling it out, so moving
    a file is one edit and `ls` of a run directory reads as this list.
    """

    path: Path

    def name(self, file: Path) -> str:
        """A path of this run directory as the write-up cites it: relative, with forward slashes."""
        return file.relative_to(self.path).as_posix()

    @property
    def lock(self) -> Path:
        """Held by the run writing here (`claim`)."""
        return self.path / ".lock"

    @property
    def manifest(self) -> Path:
        """The profile, packages and host of the run, and each step's status."""
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
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def server_log(self) -> Path:
        """The log of this folder's latest launch (the base's, a variant's, a capacity launch's)."""
        return self.logs / "server.log"

    def server_logs(self) -> list[Path]:
        """Every launch's log of this folder, in launch order: the earlier launches' (`earlier_logs`, kept when the
        server was started again: the base after the variants, a variant on a rerun), then the latest's; those
        present. Each launch's rows are joined to its own log (sweeps/truth.py)."""
        return [*earlier_logs(self.server_log), *([self.server_log] if self.server_log.is_file() else [])]

    @property
    def docker(self) -> Path:
        """The Dockerfile and power-limit unit of a Docker launch, to reproduce it by hand."""
        return self.path / "docker"

    @property
    def requests(self) -> Path:
        return self.path / "requests.jsonl"

    @property
    def engine_request_log(self) -> Path:
        """The run's copy of the engine's own request log (NInfer's serve.request_log_jsonl), kept so the join
        with it can be re-derived on another machine (report/derive.py)."""
        return self.logs / "engine-request-log.jsonl"

    def engine_record(self) -> Path | None:
        """The engine request log to join the rows with: the run's copy, else one a capturer left at the run's
        root (the recorded NInfer runs); None when the run holds none."""
        return next((path for path in (self.engine_request_log, self.path / "engine-request-log.jsonl")
                     if path.is_file()), None)

    @property
    def server_truth(self) -> Path:
        """The engine's own record of each request, joined to requests.jsonl by request_uid."""
        return self.path / "server_truth.jsonl"

    @property
    def telemetry(self) -> Path:
        return self.path / "telemetry.jsonl"

    @property
    def sweep_plan(self) -> Path:
        return self.path / "sweeps" / "plan.json"

    @property
    def sweep_cells(self) -> Path:
        """The ledger of finished cells (what a rerun skips)."""
        return self.path / "sweeps" / "cells.jsonl"

    @property
    def speculation_off(self) -> Path:
        """The run directory of the speculation A/B's second server."""
        return self.path / "sweeps" / "speculation-off"

    @property
    def variants(self) -> Path:
        """The profile's variants' run folders, one per variant (issue 39): variants/<name>/."""
        return self.path / "variants"

    def variant(self, name: str) -> RunDir:
        """The run folder of variant `name`: its server's files and variant.json."""
        return RunDir(self.variants / name)

    @property
    def variant_record(self) -> Path:
        """variant.json, in a variant's run folder (RunDir.variant)."""
        return self.path / "variant.json"

    def read_variant(self) -> VariantRecord | None:
        return _read_record(self.variant_record, VariantRecord)

    @property
    def sweep_figures(self) -> Path:
        """The figures 03_sweeps shows where the sweep ran (report.notebook_view.sweep_figures)."""
        return self.path / "sweeps" / "figures"

    @property
    def tables(self) -> Path:
        """The sweep tables, tables/<name>.csv and its .parquet twin."""
        return self.path / "tables"

    def table(self, name: str, suffix: str = ".csv") -> Path:
        return self.tables / f"{name}{suffix}"

    @property
    def capacity(self) -> Path:
        return self.path / "capacity.json"

    @property
    def capacity_observations(self) -> Path:
        return self.path / "capacity" / "observations.jsonl"

    @property
    def capacity_launches(self) -> Path:
        """One run directory per capacity launch: launches/01, 02, ..."""
        return self.path / "capacity" / "launches"

    @property
    def llama_bench(self) -> Path:
        """benchmarks/bench_llama_bench.py's result, where that benchmark ran on this run."""
        return self.path / "llama_bench.json"

    @property
    def report(self) -> Path:
        return self.path / "report"

    @property
    def report_figures(self) -> Path:
        return self.report / "figures"

    @property
    def write_up(self) -> Path:
        """The write-up as Markdown (the markdown renderer's file in report/)."""
        return self.report / "index.md"

    def comparison(self, baseline_run_id: str) -> Path:
        """Where `ninferkit compare` writes this run against a baseline by default: in this run's report/,
        whatever the other run's manifest calls it (a run_id of `../../..` or `a/b` is written as a name)."""
        name = re.sub(r"[^A-Za-z0-9._-]", "_", baseline_run_id).lstrip(".") or "baseline"
        return self.report / f"compare-vs-{name[:100]}"

    @property
    def imported(self) -> Path:
        """What `ninferkit import` read from a peer tool's file: where it came from and the tool's aggregates."""
        return self.path / "imported.json"

    @property
    def fleet_task(self) -> Path:
        """The fleet task that made this run (`ninferkit fleet`), with the host name the fleet gave it."""
        return self.path / "fleet-task.json"

    @property
    def exports(self) -> Path:
        """Where `ninferkit export` writes by default: exports/<format's file or folder>."""
        return self.path / "exports"

    @property
    def notebooks(self) -> Path:
        """The executed notebooks: the record of what ran."""
        return self.path / "notebooks"

    @property
    def lab(self) -> Path:
        """JupyterLab's copies of the notebooks for this run (`ninferkit lab`)."""
        return self.path / "lab"

    def read_manifest(self) -> Manifest:
        """The manifest as a record (empty when no step has written one yet)."""
        return Manifest.model_validate(self._manifest_fields())

    def run_id(self) -> str:
        """The run's id as its manifest names it (a run directory copied or renamed keeps it), else the folder's
        name: what every row of requests.jsonl carries as `run_id`."""
        return str(self.read_manifest().run_id or self.path.name)

    def profile_hashes(self) -> set[str]:
        """Every profile hash this run has had: the manifest's, and those it replaced (`profile_history`)."""
        manifest = self._manifest_fields()
        earlier = manifest.get("profile_history") or []
        hashes = {str(entry["hash"]) for entry in earlier if isinstance(entry, dict) and entry.get("hash")}
        return hashes | ({str(manifest["profile_hash"])} if manifest.get("profile_hash") else set())

    def read_probe(self) -> ProbeRecord | None:
        return _read_record(self.probe, ProbeRecord)

    def read_artifact(self) -> ArtifactRecord | None:
        return _read_record(self.artifact, ArtifactRecord)

    def read_server(self) -> ServerRecord | None:
        return _read_record(self.server, ServerRecord)

    def read_capacity(self) -> CapacityRecord | None:
        return _read_record(self.capacity, CapacityRecord)

    def read_llama_bench(self) -> LlamaBenchRecord | None:
        return _read_record(self.llama_bench, LlamaBenchRecord)

    def read_imported(self) -> ImportedRecord | None:
        return _read_record(self.imported, ImportedRecord)

    def read_fleet_task(self) -> FleetTaskRecord | None:
        return _read_record(self.fleet_task, FleetTaskRecord)

    def read_requests(self) -> list[RequestRow]:
        """requests.jsonl as written by the client (sweeps/truth.py lays the engine's own record over it)."""
        return read_rows(self.requests, RequestRow)

    def read_telemetry(self) -> list[TelemetrySample]:
        return read_rows(self.telemetry, TelemetrySample)

    def read_cells(self) -> list[CellEntry]:
        """The sweeps step's ledger: one entry per finished attempt at a cell, in the order they finished."""
        return read_rows(self.sweep_cells, CellEntry)

    def update_manifest(self, **fields: Any) -> None:
        """Merge top-level fields into the manifest, keeping every field it has."""
        manifest = self._manifest_fields()
        manifest.update(fields)
        write_json_atomic(self.manifest, manifest)

    def record_step(self, step: str, **fields: Any) -> None:
        """Merge fields into the manifest entry of one step (status, times, error)."""
        manifest = self._manifest_fields()
        manifest.setdefault("steps", {}).setdefault(step, {}).update(fields)
        manifest["updated"] = utc_now()
        write_json_atomic(self.manifest, manifest)

    def _manifest_fields(self) -> dict[str, Any]:
        found: dict[str, Any] = read_json(self.manifest) if self.manifest.exists() else {}
        return found


Record = TypeVar("Record", bound=RunFile)


def _read_record(path: Path, record: type[Record]) -> Record | None:
    """The record of a run file; None when the step that writes it has not run. BadInput (naming the file)
    when it is not a JSON object of that shape."""
    if not path.exists():
        return None
    try:
        return record.model_validate(read_json(path))
    except ValidationError as exc:
        raise BadInput(f"{path} is not a {record.__name__} ({_short(exc)}): restore it, or run the step that "
                       "writes it again") from exc


Row = TypeVar("Row", bound=RunRow)


def read_rows(path: Path, record: type[Row]) -> list[Row]:
    """A JSONL run file's lines as records (none when it does not exist); BadInput naming the line and field
    of a line the record refuses (a number field holding text, a status that is not text)."""
    return [_validated_row(path, number, row, record) for number, row in read_jsonl_numbered(path)]


def _validated_row(path: Path, number: int, row: dict[str, Any], record: type[Row]) -> Row:
    try:
        return record.model_validate(row)
    except ValidationError as error:
        raise damaged_line(path, number, row, record, error) from None


ROW_BYTES = 64 * 1024 * 1024
"""No row ninferkit appends is this long (a request's row is a few KiB): a longer line is damage, not a row."""


class GrowingRows(Generic[Row]):
    """A JSONL run file that a step appends to and reads as it stands, again and again (the sweeps step: its ledger
    and requests.jsonl, before the first cell, after every cell and at the end), read once: one open for the step,
    each line parsed once; every call reads only the lines appended since the last, the rows as `read_rows` has
    them. A last line without its newline is read again at the next call (a torn one is skipped, as `read_rows`
    skips it, and the next append cuts it; a whole one is a row). Close it when the step ends (a context manager).
    """

    def __init__(self, path: Path, record: type[Row]) -> None:
        self.path, self.record = path, record
        self._handle: BinaryIO | None = None
        self._lines = 0
        self._rows: list[Row] = []

    def rows(self) -> list[Row]:
        """Every row of the file as it stands now; none while it does not exist. Only a regular file holds rows: a
        device in its place (/dev/full standing in for a full disk) is not read, endlessly, and the step's first
        append says what is wrong with it."""
        if self._handle is None:
            if not self.path.is_file():
                return []
            self._handle = self.path.open("rb")
        tail: list[Row] = []
        while raw := self._handle.readline(ROW_BYTES + 1):
            if len(raw) > ROW_BYTES:
                raise BadInput(f"{self.path}, line {self._lines + 1}: over {ROW_BYTES:,} bytes, no row ninferkit "
                               "writes: the file was damaged or is not a run file; move it aside")
            if not raw.endswith(b"\n"):  # the last line, still being written or torn: read again next time
                self._handle.seek(-len(raw), os.SEEK_CUR)
                row = _row_of(self.path, self._lines + 1, raw)
                tail = [] if row is None else [_validated_row(self.path, self._lines + 1, row, self.record)]
                break
            self._lines += 1
            row = _row_of(self.path, self._lines, raw)
            if row is not None:
                self._rows.append(_validated_row(self.path, self._lines, row, self.record))
        return self._rows + tail

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()

    def __enter__(self) -> GrowingRows[Row]:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def damaged_line(path: Path, number: int, row: Mapping[str, Any], record: type[RunRow],
                 error: ValidationError) -> BadInput:
    """The error for a JSONL line the record refuses: the file, line and field, what it holds and what
    ninferkit writes there."""
    first = error.errors()[0]
    bad = str(first["loc"][0])
    expected = record.expected(bad)
    shown = repr(row.get(bad))
    found = (f"has no {bad}" if first["type"] == "missing" else
             f"{bad} is {shown[:60]}{'...' if len(shown) > 60 else ''}, not {expected}")
    return BadInput(f"{path}, line {number}: {found}; ninferkit writes {expected} there, so the line was edited or "
                    "damaged: fix or delete that line")


def write_record(path: Path, record: RunFile) -> Path:
    """Write a record as its file: the fields it was given or read with (a default it never had is not added)."""
    return write_json_atomic(path, record.model_dump(mode="json", exclude_unset=True))


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
    profile: str | Path | LoadedProfile, run_dir: str | Path | None = None,
    overrides: tuple[str, ...] | list[str] = ()
) -> Run:
    """Validate the profile, then create (or reopen) its run directory and manifest.

    Validation comes first, so a bad profile leaves nothing behind. Reopening a run directory
    keeps its step history: that is how a rerun resumes. A LoadedProfile is taken as it is (a notebook
    reopening its run with the profile the manifest records: ninferkit.rundir.profile_change).
    """
    loaded = profile if isinstance(profile, LoadedProfile) else load_profile(profile, overrides)
    remember_env(loaded.profile.serve.api_key_env)  # whatever this run stores is scrubbed of the key
    path = Path(run_dir) if run_dir else Path("runs") / new_run_id(loaded.profile.name)
    run = Run(loaded, RunDir(path.resolve()))
    claim(run.dir)
    _write_manifest(run)
    return run


_held: dict[Path, int] = {}
"""Run directories this process holds: path -> the open lock file (the lock ends with the process)."""


def claim(run_dir: RunDir) -> None:
    """Hold `run_dir` for this process, or raise RunDirBusy naming the live process that holds it.

    Two runs writing one run directory would interleave their rows and stop each other's servers.
    The lock is an flock on run_dir/.lock, which the kernel releases when its holder exits, so a
    crashed run never leaves a stale lock. Processes the holder started (the runner's notebook
    kernels, a command a test runs) work under its lock. A notebook kernel only checks: the notebooks
    of one JupyterLab session share their run directory, one step at a time, by design.
    """
    if run_dir.path in _held:
        return
    run_dir.path.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir.lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        if holder.get("pid") in _ancestors():
            return
        raise RunDirBusy(f"{run_dir.path} is in use by another run: process {holder.get('pid', '?')} "
                         f"({holder.get('command', 'command unknown')}, since {holder.get('since', '?')}). Wait "
                         "for it to end, stop it, or give this run another --run-dir") from None
    if "ipykernel" in sys.modules:  # a notebook: checked, not held
        os.close(fd)
        return
    os.ftruncate(fd, 0)
    _write_all(fd, json.dumps({"pid": os.getpid(), "command": " ".join(sys.argv)[:300],
                               "since": utc_now()}).encode())
    _held[run_dir.path] = fd


def _holder(fd: int) -> dict[str, Any]:
    try:
        found = json.loads(os.pread(fd, 4096, 0))
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _ancestors() -> set[int]:
    """This process's parent, its parent, ... (from /proc)."""
    found: set[int] = set()
    pid = os.getppid()
    while pid > 1 and pid not in found:
        found.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return found


def _write_manifest(run: Run) -> None:
    manifest = run.dir._manifest_fields()
    before = dict(manifest)
    previous = manifest.get("profile_hash")
    manifest.update(
        {
            "schema_version": Manifest.SCHEMA_VERSION,
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
            "git": git_state(),
            "updated": utc_now(),
        }
    )
    manifest.setdefault("run_id", run.dir.path.name)  # a run copied or moved keeps the id its rows carry
    manifest.setdefault("created", manifest["updated"])
    manifest.setdefault("steps", {})
    if previous and previous != run.profile_hash:
        earlier = recorded_identity(before, json_object(run.dir.artifact), json_object(run.dir.server))
        replaced: dict[str, Any] = {"hash": previous, "replaced": manifest["updated"]}
        if earlier is not None:  # rows of that profile keep their serving (a new port is no new serving)
            replaced["serving_id"] = earlier.id
            manifest.setdefault("servings", {})[earlier.id] = earlier.as_record()
        manifest.setdefault("profile_history", []).append(replaced)
    write_json_atomic(run.dir.manifest, manifest)


def json_object(path: Path) -> dict[str, Any]:
    """A JSON object file's content; empty when it is missing, damaged or not an object (what reads it, a
    serving identity, then knows less, and reading goes on)."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return found if isinstance(found, dict) else {}


def record_serving(run_dir: RunDir, identity: ServingIdentity) -> None:
    """Name a serving in the manifest (`servings`), so every id a row or ledger line carries has its fields."""
    servings = run_dir._manifest_fields().get("servings") or {}
    if servings.get(identity.id) != identity.as_record():
        run_dir.update_manifest(servings={**servings, identity.id: identity.as_record()})


def package_versions() -> dict[str, str | None]:
    """Versions of the packages results depend on; ninferkit's own from its source, which is right also
    when it runs from a checkout that was never pip-installed (the GPU boxes' PYTHONPATH runs)."""
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = __version__ if name == "ninferkit" else metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


