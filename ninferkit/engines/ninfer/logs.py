"""NInfer's stderr read line by line, as printed: the startup ledger, throughput lines, per-request lines.

Every line is tried against every build's messages (a fork prints what it prints, whatever its
table row says): the console lines of G0/G1 (`console_lines`, IF §2.1-2.2), G2's spdlog key=value
lines (`keyvalue_lines`, IF §2.3) and the pipe lines of G3 and the forks that adopted them
(`pipe_lines`, IF §2.4), with or without the timestamp and level (seed 000 quotes them bare).
A line no reader knows is `unread` when it carries the engine's prefix and `other` when it does
not; parts of a known line that no rule places are listed in its `unread`, never read as zero.
Values are rounded as printed; each byte value carries its `<key>_resolution_bytes`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from ninferkit.engines.ninfer import console_lines, keyvalue_lines, pipe_lines
from ninferkit.engines.ninfer.reading import LineKind, LogFormat, Read

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PREFIXES: tuple[tuple[LogFormat, re.Pattern[str]], ...] = (
    ("pipe", re.compile(r"^(?:(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})\s+)?"
                        r"(?P<level>TRACE|DEBUG|INFO|WARN|ERROR|FATAL)\s+(?=\S)")),
    ("keyvalue", re.compile(r"^\[(?P<ts>[^]]+)\] \[(?P<level>\w+)\] \[ninfer-serve\] ")),
    ("bracketed", re.compile(r"^\[(?P<ts>[^]]+)\] \[(?P<level>\w+)\] ninfer-serve: ")),
    ("plain", re.compile(r"^ninfer-serve: ")),
    ("plain", re.compile(r"^(?P<level>error): ")),  # G0's own errors (`error: failed to bind H:P`, IF §2.1)
)
FAILURE_LEVELS = frozenset({"error", "critical", "fatal"})
Reader = Literal["console", "keyvalue", "pipe"]
_READERS: tuple[tuple[Reader, Callable[[str], Read | None]], ...] = (
    ("console", console_lines.read), ("keyvalue", keyvalue_lines.read), ("pipe", pipe_lines.read))
_USAGE = re.compile(r"^usage: \S*ninfer-serve\b")
_FIRST_LINES = ("loading model...", "starting engine", "startup phase=engine-startup status=begin")
"""The first message of a server start in each format: request ids count again from 1 after it."""


@dataclass(frozen=True)
class Line:
    """One line of a log as read."""

    number: int
    text: str
    format: LogFormat | None
    """The prefix it was printed with; None for a bare message (as the field reports quote them) or a line
    that is not the engine's."""
    level: str | None
    timestamp: str | None
    message: str
    reader: Reader | None
    kind: LineKind
    values: dict[str, Any]
    unread: tuple[str, ...]


def split_line(line: str) -> tuple[LogFormat | None, str | None, str | None, str]:
    """(format, level, timestamp, message) of a printed line; (None, None, None, line) without a prefix."""
    line = _ANSI.sub("", line.rstrip("\r\n"))
    for fmt, prefix in _PREFIXES:
        found = prefix.match(line)
        if found:
            groups = found.groupdict()
            level = (groups.get("level") or "").lower() or None
            return fmt, {"warn": "warning"}.get(level or "", level), groups.get("ts"), line[found.end():]
    return None, None, None, line


def log_format_of(log_text: str) -> LogFormat | None:
    """The prefix format of the first line that has one; None when no line carries the engine's prefix."""
    return next((fmt for line in log_text.splitlines() if (fmt := split_line(line)[0]) is not None), None)


def message(line: str) -> str:
    """A log line without its format's timestamp/level prefix."""
    return split_line(line)[3]


def read_line(text: str, number: int = 0) -> Line:
    fmt, level, timestamp, msg = split_line(text)
    for reader, read in _READERS:
        found = read(msg)
        if found is not None:
            return Line(number, text, fmt, level, timestamp, msg, reader, found.kind, found.values, found.unread)
    if level in FAILURE_LEVELS:
        found = Read("error", {"message": msg})
    elif fmt is not None and msg.strip():
        found = Read("unread", {}, (msg,))
    elif _USAGE.match(msg):
        found = Read("usage")
    else:
        found = Read("other")
    return Line(number, text, fmt, level, timestamp, msg, None, found.kind, found.values, found.unread)


def log_lines(log_text: str) -> list[str]:
    """The lines of a log as a terminal showed them, numbered as an editor numbers them (from 1, at each
    newline): a progress line rewritten in place with carriage returns (G1 on a TTY, IF §2.2) is its last
    state."""
    lines = log_text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r").rpartition("\r")[2] for line in lines]


def read_log(log_text: str) -> list[Line]:
    """Every line of a log as read. The usage text NInfer prints after a refused command line (G0/G1,
    IF §3.1) is `usage`: its first line and the indented lines that follow it."""
    lines: list[Line] = []
    in_usage = False
    for number, text in enumerate(log_lines(log_text), 1):
        line = read_line(text, number)
        if in_usage and line.kind == "other" and text[:1].isspace() and text.strip():
            line = Line(number, text, None, None, None, line.message, None, "usage", {}, ())
        in_usage = line.kind == "usage"
        lines.append(line)
    return lines


def _with_unread(line: Line) -> dict[str, Any]:
    return {**line.values, "unread": list(line.unread)} if line.unread else dict(line.values)


# ---------------------------------------------------------------------------------------------
# The startup ledger
# ---------------------------------------------------------------------------------------------

def _finish_ledger(out: dict[str, Any]) -> dict[str, Any]:
    """Derive what a build does not print but its numbers imply (slack = free after weights - runtime)."""
    if "slack_bytes" not in out and "free_after_weights_bytes" in out and "runtime_bytes" in out:
        out["slack_bytes"] = out["free_after_weights_bytes"] - out["runtime_bytes"]
        out["slack_bytes_resolution_bytes"] = (out["free_after_weights_bytes_resolution_bytes"]
                                               + out["runtime_bytes_resolution_bytes"])
    return out


def parse_ledger(log_text: str) -> dict[str, Any]:
    """The startup ledger with normalized keys, from any format's stderr (last value wins).

    Keys where a build prints them: weights_bytes, weights_load_s, kv_tokens, kv_dtype, kv_capacity_mode,
    kv_pages, kv_max_pages, runtime_bytes, free_after_weights_bytes, free_after_startup_bytes,
    headroom_bytes, slack_bytes, graphs_observed_bytes, graphs_allowance_bytes, ready_s, warmup_s,
    listen_url, model_id, model_name, auth, runtime_version; each byte value printed rounded also has
    `<key>_resolution_bytes`. `unread` (only when there is any) lists the parts of ledger lines no
    rule placed, each with its line number. G0 prints no memory line; the JSONL `server_start`
    event has the exact numbers (request_log.ledger_from_events).
    """
    out: dict[str, Any] = {}
    unread: list[str] = []
    for number, text in enumerate(log_lines(log_text), 1):
        if any(mark in text for mark in _NOT_LEDGER):
            continue
        line = read_line(text, number)
        if line.kind == "startup":
            out.update(line.values)
            unread += [f"{part} (line {line.number})" for part in line.unread]
    if unread:
        out["unread"] = unread
    return _finish_ledger(out)


# ---------------------------------------------------------------------------------------------
# Throughput and per-request lines
# ---------------------------------------------------------------------------------------------

_NOT_LEDGER = ("[req ", "req#", "request id=", "throughput")
"""Marks of the lines that carry no ledger value (per-request and throughput lines), which a long log
is mostly made of: parse_ledger does not read them."""


def parse_throughput(line: str) -> dict[str, Any] | None:
    """A periodic throughput line as numbers: interval_s, prefill_tok_s, decode_tok_s, prefill_tokens,
    decode_tokens, running, prefilling, decode_ready, waiting, batch, host_pct, host_s (where printed);
    `unread` lists the segments no rule placed. A value the line does not give is absent or None,
    never 0; 0 only where the engine omits a clause because it is zero (IF §2.4)."""
    if "throughput" not in line:  # every format's throughput line says so; the rest need no reading
        return None
    read = read_line(line)
    return _with_unread(read) if read.kind == "throughput" else None


def parse_request_done(line: str) -> dict[str, Any] | None:
    """A per-request "done" line as contract-named server numbers, or None.

    stderr values are rounded (ttft in ms, rates to 0.1 tok/s); prefer the request log
    (request_log.request_rows). Queue time only in pipe lines (printed when >= 10 ms).
    """
    if "done" not in line:  # `[req N] done`, `req#N done`, `status=done`
        return None
    read = read_line(line)
    return _with_unread(read) if read.kind == "request_done" else None


_REQUEST_MARKS = ("[req ", "req#", "request id=", *_FIRST_LINES)


def request_rows_of_log(log_text: str) -> list[dict[str, Any]]:
    """requests_from_lines over a whole log, reading only the lines that can be request lines or a server
    start (a sweep asks after every cell, of a log that is mostly throughput lines)."""
    lines = [read_line(text, number) for number, text in enumerate(log_lines(log_text), 1)
             if any(mark in text for mark in _REQUEST_MARKS)]
    return requests_from_lines(lines)


def _servers(lines: list[Line]) -> Iterator[tuple[int, Line]]:
    """Each line with the index of the server start it belongs to (a log may hold restarts)."""
    server = 0
    for line in lines:
        if line.message in _FIRST_LINES:
            server += 1
        yield server, line


def requests_from_lines(lines: list[Line]) -> list[dict[str, Any]]:
    """One row per request the log shows, in the order they appeared: its submitted line's fields
    (protocol, stream, max_tokens, ...), then its done line's server numbers (the names of
    request_log.request_rows, rounded as printed) or its error. `status` is ok, errored, or None for a
    request still running when the log ends; `server` counts the server starts in the log (from 1)."""
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    for server, line in _servers(lines):
        if line.kind not in ("request_start", "request_done", "request_error"):
            continue
        key = (server, line.values["request_id"])
        row = rows.setdefault(key, {"server": server, "request_id": key[1], "status": None})
        unread = row.get("unread", []) + list(line.unread)
        row.update(line.values, **({"unread": unread} if unread else {}))
        if line.kind == "request_start":
            row["started_at"] = line.timestamp
        else:
            row.update(status="ok" if line.kind == "request_done" else "errored", ended_at=line.timestamp)
    return list(rows.values())
