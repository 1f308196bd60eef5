"""Reads with a bound in bytes and in time: what a server sends and what a user points at.

A server is not trusted to end what it sends: a `/metrics` body or an error page that never ends grew a
sweep by gigabytes (issue 29), because a read timeout is per read and a body that keeps coming never
trips it. Every body ninferkit reads whole is read here, up to a cap in bytes and a wall-clock deadline;
what was cut is said (`Body.cut`), never grown. A file a user names (a log to diagnose, a log to fit) is
refused when it is not a regular file (a FIFO or /dev/zero never ends) or is larger than its cap.

JSON a server or a peer's file sends is read by `loads_json`, bounded in nesting: Python's reader raises
RecursionError on deep nesting, which surfaced as tracebacks (engine detection, the vllm-bench and AIPerf
importers: issue 40), and a value nested a few hundred deep fails later, in whatever walks it.
"""

from __future__ import annotations

import json
import json.scanner
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ninferkit.errors import BadInput

ERROR_BODY_BYTES = 64 * 1024
"""An error page is a line or a JSON object; the row keeps its first 2,000 characters."""
METRICS_BYTES = 16 * 1024 * 1024
"""A Prometheus /metrics body: vLLM's is about 200 KiB with every histogram."""
ANSWER_BYTES = 16 * 1024 * 1024
"""A JSON answer of a helper endpoint (/health, /v1/models, /tokenize, a check's chat answer)."""
LOG_FILE_BYTES = 2 * 1024 * 1024 * 1024
"""A server log named on the command line: a long run's log is megabytes, 2 GiB is not a log."""
INPUT_FILE_BYTES = 1024 * 1024 * 1024
"""A file a user hands ninferkit to read whole (a peer tool's results to import, a trace): the largest peer output
seen is hundreds of megabytes (vLLM bench's detailed results)."""
LOG_READ_BYTES = 64 * 1024 * 1024
"""What is read of a log scanned whole (its startup ledger at the start, a crash at the end): beyond this, its
first and last halves of it. An engine's startup and crash lines are kilobytes; a verbose log of a long run is
hundreds of megabytes, and a log someone pointed at /dev/zero never ends."""
LOG_POLL_BYTES = 4 * 1024 * 1024
"""What a log tail (telemetry's reading of the engine's throughput lines) reads per poll, at most."""
LOG_LINE_BYTES = 64 * 1024
"""The longest log line a tail keeps waiting for the end of; a longer one is skipped, not buffered."""
JSON_NESTING = 100
"""The deepest JSON nesting read from a server or a file someone sent: a tool's results nest 4 or 5 deep."""


_SCAN: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(
    json.JSONDecoder())  # type: ignore[arg-type]  # typeshed types the decoder it takes as the scanner
"""json's own (C) scanner, called straight: json.loads of a str passes two Python frames and two whitespace matches
before it (a streamed event's cost, issue 43). Text it does not read whole goes to json.loads, whose answer and
error are then the ones given."""


def loads_json(text: str | bytes) -> Any:
    """JSON from a server or a file someone sent: ValueError, never RecursionError, when it is not JSON or
    nests deeper than JSON_NESTING (callers already turn ValueError into their own clear error)."""
    try:
        found, end = None, -1
        if isinstance(text, str):
            try:
                found, end = _SCAN(text, 0)
            except (StopIteration, ValueError):  # not JSON from its first character: json.loads says how
                pass
        if end != len(text):
            found = json.loads(text)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {JSON_NESTING} levels") from None
    opening = (b"{", b"[") if isinstance(text, bytes) else ("{", "[")
    if text.count(opening[0]) + text.count(opening[1]) <= JSON_NESTING:  # type: ignore[arg-type]
        return found  # a value nests at most as deep as its text has brackets: no walk (a streamed event's cost)
    stack = [(found, 1)]
    while stack:  # walked without recursion: a deep value would overflow the stack of whatever walks it
        value, depth = stack.pop()
        if depth > JSON_NESTING:
            raise ValueError(f"JSON nested deeper than {JSON_NESTING} levels")
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        stack += [(child, depth + 1) for child in children if isinstance(child, (dict, list))]
    return found


@dataclass(frozen=True)
class Body:
    """The bytes read, and why reading stopped short (None: the body ended by itself)."""

    data: bytes
    cut: str | None = None

    def text(self) -> str:
        return self.data.decode(errors="replace")


def _cut(read: int, cap: int, started: float, deadline_s: float) -> str | None:
    if read > cap:
        return f"cut at {cap:,} bytes: the server sent more and was not read further"
    if time.monotonic() - started > deadline_s:
        return f"cut after {deadline_s:g} s: the server was still sending"
    return None


def read_body(response: httpx.Response, cap: int, deadline_s: float) -> Body:
    """At most `cap` bytes of a streamed response's body, for at most `deadline_s` seconds."""
    started, parts, read = time.monotonic(), [], 0
    for part in response.iter_bytes():
        parts.append(part)
        read += len(part)
        cut = _cut(read, cap, started, deadline_s)
        if cut is not None:
            return Body(b"".join(parts)[:cap], cut)
    return Body(b"".join(parts))


async def aread_body(response: httpx.Response, cap: int, deadline_s: float) -> Body:
    """`read_body` for an async response."""
    started, parts, read = time.monotonic(), [], 0
    async for part in response.aiter_bytes():
        parts.append(part)
        read += len(part)
        cut = _cut(read, cap, started, deadline_s)
        if cut is not None:
            return Body(b"".join(parts)[:cap], cut)
    return Body(b"".join(parts))


def get(client: httpx.Client, path: str, cap: int = ANSWER_BYTES, deadline_s: float = 60.0) -> tuple[int, Body]:
    """GET `path`: its status and at most `cap` bytes of its body."""
    with client.stream("GET", path) as response:
        return response.status_code, read_body(response, cap, deadline_s)


def read_file(path: Path, cap: int, doing: str) -> bytes:
    """A file a user named, read whole: BadInput (naming the path and what ninferkit was doing) when it is
    not a regular file, is over `cap` bytes, or cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO with no writer would block the open itself
    except OSError as exc:
        raise BadInput(f"{doing}: cannot read {path}: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise BadInput(f"{doing}: {path} is {_kind(mode)}, not a regular file; name the file itself")
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(cap + 1)
        except OSError as exc:
            raise BadInput(f"{doing}: cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > cap:
        raise BadInput(f"{doing}: {path} is over {cap:,} bytes, more than such a file holds; check the path")
    return data


def read_text_file(path: Path, cap: int, doing: str) -> str:
    """`read_file` as UTF-8 text; BadInput naming the path and the first byte that is not UTF-8."""
    data = read_file(path, cap, doing)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{doing}: {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                       "give the file the tool wrote") from None


def read_log(path: Path, doing: str, cap: int = LOG_READ_BYTES) -> str:
    """A log's text for a reader that scans it whole: all of it up to `cap` bytes, else its first and last
    `cap // 2` bytes around a line saying how many bytes between them were not read. "" when it does not
    exist; BadInput (naming the path and what ninferkit was doing) when it is not a regular file."""
    problem = not_a_regular_file(path)
    if problem is not None:
        if not os.path.lexists(path):
            return ""
        raise BadInput(f"{doing}: {problem}; a log is a regular file")
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size <= cap:
            return handle.read(cap).decode(errors="replace")
        head = handle.read(cap // 2)
        handle.seek(size - cap // 2)
        tail = handle.read(cap // 2)
    skipped = size - len(head) - len(tail)
    return (head.decode(errors="replace") + f"\n[ninferkit: {skipped:,} bytes of {path.name} not read: the log is "
            f"over {cap:,} bytes; its start and end are read]\n" + tail.decode(errors="replace"))


def not_a_regular_file(path: Path) -> str | None:
    """Why `path` cannot be read as a file (it does not exist, or is a directory, a FIFO, a device), or None."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return f"file not found: {path}"
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    return None if stat.S_ISREG(mode) else f"{path} is {_kind(mode)}, not a regular file"


def regular_file(path: Path, cap: int, doing: str) -> Path:
    """`path`, checked before another function reads it: BadInput (naming the path and what ninferkit was
    doing) when it is not a regular file or is over `cap` bytes."""
    problem = not_a_regular_file(path)
    if problem is not None:
        raise BadInput(f"{doing}: {problem}; name the file itself")
    if path.stat().st_size > cap:
        raise BadInput(f"{doing}: {path} is over {cap:,} bytes, more than such a file holds; check the path")
    return path


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (a pipe that may never end)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"
