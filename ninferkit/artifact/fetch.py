"""Resumable, verified download of one large file over HTTP (httpx streaming).

The bytes go to ``<dest>.part`` and are hashed as they arrive, so no second pass over a 20 GB file
is needed. A dropped connection resumes from the bytes already on disk (``Range: bytes=N-``, after
hashing that prefix again); a server that ignores Range and sends the whole file restarts the part
cleanly; transient failures are retried a bounded number of times with exponential backoff. The
part is renamed into place only after its size and sha256 match, and never over an existing file.

A download is bounded: a body is cut off at the pinned size (else the size the server announced,
else what the disk can spare), so a server that streams forever or sends more than it should
ends in a clear error, not a full disk; a redirect loop or a redirect to another scheme is an
error at once. Redirects carry the Authorization header only within the origin it was given for
(httpx drops it on a redirect to another host). A server that trickles (a few bytes now and then, never
silent long enough for the read timeout) is stopped by a speed floor, as curl's `--speed-limit` and
`--speed-time` do: slower than `SpeedFloor.bytes_per_s` over a whole `window_s` ends the download with the
part kept, so a rerun (or a mirror) resumes from it.

CPU per GiB matters as much as the rate (a 2-core box shares its CPUs with everything else): the
socket is read up to 1 MiB at a time instead of httpcore's 64 KiB (the Python per read is paid 16
times less, see `_LargeReadStream`), writing and hashing run in two helper threads, and the
part goes to disk in the background as it grows, so the fsync before the rename has little left.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpcore
import httpx

from ninferkit.errors import ArtifactError, ChecksumMismatch
from ninferkit.progress import Progress, track
from ninferkit.rundir.hashing import Sha256Result, hash_file_into
from ninferkit.transports import BackendTransport

_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
WRITE_BATCH_BYTES = 8 * 1024 * 1024
SYNC_EVERY_BYTES = 64 * 1024 * 1024
READ_BYTES = 1024 * 1024
DISK_RESERVE_BYTES = 1024**3
"""Left free on the destination's disk by a download whose size nothing pins or announces."""


@dataclass(frozen=True)
class SpeedFloor:
    """The slowest a download may run over a whole window before it stops (curl: --speed-limit/--speed-time)."""

    bytes_per_s: float = 1024.0
    window_s: float = 30.0

    def describe(self) -> str:
        return f"{self.bytes_per_s:,.0f} bytes/s over {self.window_s:g} s"


@dataclass(frozen=True)
class DownloadResult:
    """What one download did: bytes fetched this time, from where it resumed, retries, rate."""

    path: Path
    url: str
    size: int
    sha256: Sha256Result
    bytes_received: int
    resumed_from_bytes: int
    attempts: int
    restarts: int
    seconds: float

    @property
    def bytes_per_s(self) -> float:
        return self.bytes_received / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "size": self.size, "bytes_received": self.bytes_received,
                "resumed_from_bytes": self.resumed_from_bytes, "attempts": self.attempts,
                "restarts": self.restarts, "seconds": round(self.seconds, 3),
                "bytes_per_s": round(self.bytes_per_s)}


class _HashingAppender:
    """Appends network chunks to the part file and hashes them, in batches, in helper threads.

    Chunks are batched (no copy) up to WRITE_BATCH_BYTES; while one helper writes a batch and
    another hashes it (both release the GIL), the caller keeps receiving the next. Every
    SYNC_EVERY_BYTES the writer has a third helper call fdatasync, so the disk writes overlap the
    download instead of all waiting for the fsync before the rename. `pool` needs 3 workers.
    """

    def __init__(self, handle: IO[bytes], digest: Any, pool: ThreadPoolExecutor) -> None:
        self.handle, self.digest, self.pool = handle, digest, pool
        self.batch: list[bytes] = []
        self.batch_bytes = 0
        self.unsynced_bytes = 0
        self.writing: Future[None] | None = None
        self.hashing: Future[None] | None = None
        self.syncing: Future[None] | None = None

    def write(self, chunk: bytes) -> None:
        self.batch.append(chunk)
        self.batch_bytes += len(chunk)
        if self.batch_bytes >= WRITE_BATCH_BYTES:
            self._hand_off()

    def _hand_off(self) -> None:
        batch, self.batch, self.batch_bytes = self.batch, [], 0
        self._wait_for_batch()
        self.writing = self.pool.submit(self._write, batch)
        self.hashing = self.pool.submit(self._hash, batch)

    def _wait_for_batch(self) -> None:
        for pending in (self.writing, self.hashing):
            if pending is not None:
                pending.result()

    def _write(self, batch: list[bytes]) -> None:
        for chunk in batch:
            self.handle.write(chunk)
            self.unsynced_bytes += len(chunk)
        if self.unsynced_bytes >= SYNC_EVERY_BYTES and (self.syncing is None or self.syncing.done()):
            if self.syncing is not None:
                self.syncing.result()
            self.handle.flush()
            self.syncing, self.unsynced_bytes = self.pool.submit(os.fdatasync, self.handle.fileno()), 0

    def _hash(self, batch: list[bytes]) -> None:
        for chunk in batch:
            self.digest.update(chunk)

    def flush(self) -> None:
        """Everything received so far is written and hashed (the fsync is the caller's)."""
        if self.batch:
            self._hand_off()
        self._wait_for_batch()
        if self.syncing is not None:  # read after the writer finished: it may have started one
            self.syncing.result()
        self.writing = self.hashing = self.syncing = None
        self.handle.flush()


class _LargeReadStream(httpcore.NetworkStream):
    """A connection that asks the socket for up to READ_BYTES per read, not httpcore's fixed 64 KiB.

    recv returns what has arrived, so small responses are not delayed; a fast body comes in reads
    16 times larger, so the Python per read (h11 events, timeouts, generators) is paid 16 times
    less. TLS reads stay at one record (16 KiB) whatever is asked.
    """

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self.inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max(max_bytes, READ_BYTES), timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, timeout)

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _LargeReadStream(self.inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class _LargeReadBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self.inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        return _LargeReadStream(self.inner.connect_tcp(host, port, timeout, local_address, socket_options))


def part_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


def download(
    url: str,
    dest: Path,
    expected_size: int | None = None,
    expected_sha256: str | None = None,
    headers: dict[str, str] | None = None,
    retries: int = 5,
    backoff_s: float = 1.0,
    timeout_s: float = 60.0,
    speed_floor: SpeedFloor = SpeedFloor(),
    progress: bool = True,
) -> DownloadResult:
    """Fetch `url` to `dest` (which must not exist yet), resuming a `.part` left by an earlier try.

    `retries` bounds consecutive failed attempts that received no byte (a drop after progress
    starts the count again), and restarts from byte 0; the wait before retry k is
    ``backoff_s * 2**(k-1)`` seconds, at most 60.
    `headers` may carry an Authorization header; it is never logged. A body slower than `speed_floor`
    raises ArtifactError at once (not retried: the same server would trickle again), the part kept.

    Raises ChecksumMismatch when the server offers another size or the bytes hash to another
    sha256 (the part is removed: its bytes are wrong), ArtifactError for HTTP errors and exhausted
    retries (the part is kept for the next resume).

    Example: ``download("https://huggingface.co/o/r/resolve/<commit>/m.ninfer", Path("m.ninfer"), size, sha)``
    """
    if dest.exists():
        raise ArtifactError(f"{dest} already exists; verify it instead (a file in place is never overwritten)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = part_path(dest)
    if expected_size is not None and part.exists() and part.stat().st_size > expected_size:
        part.unlink()
    part.touch()
    started = time.perf_counter()
    resumed_from = part.stat().st_size
    digest = hashlib.sha256()
    hash_file_into(digest, part)
    offset, received, attempts, restarts, failures = resumed_from, 0, 0, 0, 0
    request_headers = {"Accept-Encoding": "identity", **(headers or {})}
    timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 30.0))
    # a proxy from the environment is honoured only by httpx's own transport: keep it then
    transport = None if urllib.request.getproxies() else BackendTransport(_LargeReadBackend())
    with httpx.Client(follow_redirects=True, timeout=timeout, transport=transport) as client, \
            part.open("ab") as handle, ThreadPoolExecutor(3, "download-io") as pool, \
            track(f"downloading {dest.name}", expected_size, byte_counts=True, initial=offset,
                  enabled=progress) as shown:
        while True:
            attempts += 1
            sink = _HashingAppender(handle, digest, pool)
            before = offset
            try:
                outcome = _fetch(client, url, offset, expected_size, request_headers, sink, shown, speed_floor)
            except _TooSlow as exc:
                sink.flush()
                raise ArtifactError(f"download of {url} stopped: {exc}, below the floor of {speed_floor.describe()}; "
                                    f"{handle.tell():,} bytes are kept in {part}: run the step again to resume, or "
                                    "use a mirror (artifact.endpoint, HF_ENDPOINT)") from None
            except (httpx.TooManyRedirects, httpx.UnsupportedProtocol) as exc:
                sink.flush()
                raise ArtifactError(f"download of {url} failed: {exc} (a redirect loop, or a redirect away from "
                                    "http/https); check the URL or the mirror (artifact.endpoint, HF_ENDPOINT)"
                                    ) from None
            except _Oversize as exc:
                sink.flush()
                part.unlink()
                raise ChecksumMismatch(f"download of {url}: {exc}; the partial file was removed") from None
            except (httpx.TransportError, _Transient) as exc:
                sink.flush()
                offset = handle.tell()
                received += offset - before
                failures = 1 if offset > before else failures + 1
                if failures > retries:
                    raise ArtifactError(
                        f"download of {url} failed {failures} times in a row without progress ({exc}); "
                        f"{offset} bytes are kept in {part}, run the step again to resume") from exc
                time.sleep(min(backoff_s * 2 ** (failures - 1), 60.0))
                continue
            sink.flush()
            if outcome == "restart":
                if restarts >= retries:
                    raise ArtifactError(f"download of {url} had to restart from byte 0 {restarts + 1} times (the "
                                        "server ignores Range and the connection keeps dropping); try a mirror "
                                        "(artifact.endpoint or HF_ENDPOINT)")
                handle.seek(0)
                handle.truncate()
                digest = hashlib.sha256()
                offset, restarts = 0, restarts + 1
                shown.restart(expected_size)
                continue
            offset = handle.tell()
            received += offset - before
            break
        os.fsync(handle.fileno())
    result = DownloadResult(dest, url, offset, Sha256Result(digest.hexdigest(), offset, time.perf_counter() - started),
                            received, resumed_from, attempts, restarts, time.perf_counter() - started)
    _accept(part, dest, result, expected_size, expected_sha256)
    return result


class _Transient(Exception):
    """A retryable HTTP status (5xx, 429, 408) or a body shorter than announced."""


class _TooSlow(Exception):
    """The body ran below the speed floor for a whole window."""


class _Oversize(Exception):
    """The body goes on past the size the file can have (pinned, announced, or the disk's room)."""


def _fetch(
    client: httpx.Client,
    url: str,
    offset: int,
    expected_size: int | None,
    headers: dict[str, str],
    sink: _HashingAppender,
    shown: Progress,
    speed_floor: SpeedFloor,
) -> str:
    """One GET from `offset`: 'done' when the whole body arrived, 'restart' when the part must restart."""
    if offset:
        headers = {**headers, "Range": f"bytes={offset}-"}
    with client.stream("GET", url, headers=headers) as response:
        status = response.status_code
        if status == 416:
            total = _total_from(response.headers.get("Content-Range", ""))
            return "done" if total == offset else "restart"
        if status in _RETRY_STATUS:
            raise _Transient(f"HTTP {status}")
        if status >= 400:
            raise ArtifactError(_http_error(url, status))
        if offset and status == 200:
            return "restart"  # the server ignored Range and sends the whole file
        start, total = (_range_of(response) if status == 206 else (0, _length(response)))
        if start != offset:
            return "restart"
        if expected_size is not None and total is not None and total != expected_size:
            raise ChecksumMismatch(f"size_bytes: expected {expected_size}, actual {total} (offered by {url}); "
                                   "the pinned size or the revision is wrong")
        if shown.total is None and total is not None:
            shown.set_total(total)  # a share and a rate for a download whose size the profile does not pin
        limit, bound = _limit(expected_size, total, sink.handle.name, offset)
        position = offset
        window_started, window_position = time.monotonic(), offset
        for chunk in response.iter_raw():
            if position + len(chunk) > limit:
                sink.write(chunk[:limit - position])
                raise _Oversize(f"the server sent more than {bound} ({limit:,} bytes): cut off there")
            position += len(chunk)
            sink.write(chunk)
            shown.update(len(chunk))
            elapsed = time.monotonic() - window_started
            if elapsed >= speed_floor.window_s:
                if position - window_position < speed_floor.bytes_per_s * elapsed:
                    raise _TooSlow(f"{position - window_position:,} bytes in the last {elapsed:.1f} s")
                window_started, window_position = time.monotonic(), position
        sink.flush()
        if total is not None and sink.handle.tell() < total:
            raise _Transient(f"the body ended at byte {sink.handle.tell()} of {total}")
    return "done"


def _limit(expected_size: int | None, total: int | None, part: str, offset: int) -> tuple[int, str]:
    """(the most bytes the file can have, what sets it): the pin, else the announced size, else the disk."""
    if expected_size is not None:
        return expected_size, "the pinned size_bytes"
    if total is not None:
        return total, "the size it announced"
    room = shutil.disk_usage(os.path.dirname(os.path.abspath(part))).free - DISK_RESERVE_BYTES
    return max(offset + room, offset), ("what the disk can spare without a pinned or announced size (pin "
                                        "size_bytes)")


def _range_of(response: httpx.Response) -> tuple[int, int | None]:
    found = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
    if found is None:
        return -1, None
    return int(found[1]), None if found[3] == "*" else int(found[3])


def _total_from(content_range: str) -> int | None:
    found = re.match(r"^bytes \*/(\d+)$", content_range)
    return int(found[1]) if found else None


def _length(response: httpx.Response) -> int | None:
    value = response.headers.get("Content-Length")
    return int(value) if value and value.isdigit() else None


def _http_error(url: str, status: int) -> str:
    if status == 404:
        return f"{url}: HTTP 404; check artifact.repo, artifact.revision and artifact.filename"
    if status in (401, 403):
        return (f"{url}: HTTP {status}; the repo may be gated or private: put a token in the HF_TOKEN "
                "environment variable (it is sent, never logged)")
    return f"{url}: HTTP {status}"


def _accept(part: Path, dest: Path, result: DownloadResult, expected_size: int | None,
            expected_sha256: str | None) -> None:
    """Rename the part into place only when size and sha256 match; never replace an existing file."""
    problems = []
    if expected_size is not None and result.size != expected_size:
        problems.append(f"size_bytes: expected {expected_size}, actual {result.size}")
    if expected_sha256 is not None and result.sha256.hexdigest != expected_sha256.lower():
        problems.append(f"sha256: expected {expected_sha256.lower()}, actual {result.sha256.hexdigest}")
    if problems:
        part.unlink()
        raise ChecksumMismatch(f"downloaded {result.url} does not match its pin: " + "; ".join(problems)
                               + ". The partial file was removed; check the pinned values and the revision")
    try:
        os.link(part, dest)  # fails if dest exists: a verified file is never overwritten
    except FileExistsError as exc:
        raise ArtifactError(f"{dest} appeared while downloading; it was left untouched, the download "
                            f"stays in {part}") from exc
    part.unlink()
