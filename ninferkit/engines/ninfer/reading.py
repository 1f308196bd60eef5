"""What reading one NInfer log message gives: the kind of line, its values, and what was not understood.

A reader that meets a part of a line it does not know lists that part in `unread` instead of
dropping it or reading it as zero: a fork that adds a clause shows up in `ninferkit diagnose`
rather than as a silently wrong number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

LogFormat = Literal["plain", "bracketed", "keyvalue", "pipe"]
LOG_FORMATS: dict[LogFormat, str] = {
    "plain": "`ninfer-serve: …` lines (IF §2.1)",
    "bracketed": "`[YYYY-MM-DD HH:MM:SS.mmm] [level] ninfer-serve: …` lines (IF §2.2)",
    "keyvalue": "spdlog `[…] [level] [ninfer-serve] key=value` lines (IF §2.3)",
    "pipe": "`LEVEL  what | value | value` lines, with or without a timestamp (IF §2.4)",
}
"""How a build prefixes its stderr lines (its timestamp and level), which tells builds apart."""

LineKind = Literal["startup", "throughput", "request_start", "request_done", "request_error", "error", "usage",
                   "unread", "other"]
"""startup: the ledger and load progress; error: a failure of the process (the diagnoses say which);
usage: the usage text printed after a refused command line; unread: an engine line no reader knows;
other: a line that is not the engine's (a shell's, a harness's)."""


@dataclass(frozen=True)
class Read:
    kind: LineKind
    values: dict[str, Any] = field(default_factory=dict)
    unread: tuple[str, ...] = ()


def unread_pairs(pairs: dict[str, str], known: set[str] | frozenset[str]) -> list[str]:
    """`key=value` of every pair a reader does not know."""
    return [f"{key}={value}" for key, value in pairs.items() if key not in known]
