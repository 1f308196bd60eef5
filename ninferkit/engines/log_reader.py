"""What an engine's logs say: its startup ledger, memory refusals, throughput lines, known failures, and
its own per-request record.

The launch step, the sweeps, telemetry, the capacity fit, `ninferkit diagnose` and the write-up read logs
through this part of an engine. The base keeps the books (diagnosis by rule table, ledger by pattern
table); an adapter fills in its tables and overrides what a table cannot read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ninferkit.engines.part import EnginePart
from ninferkit.errors import Diagnosis
from ninferkit.params.profile import Profile
from ninferkit.units import MIB

More = Callable[[Mapping[str, str], str], dict[str, str]]
"""What a rule's words may also use, derived from the match's groups and its whole line."""


def _nothing(values: Mapping[str, str], line: str) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class DiagnosisRule:
    """One known failure: a log pattern, and what it means for the operator."""

    code: str
    pattern: re.Pattern[str]
    cause: str
    fix: str
    more: More = _nothing

    def match(self, log_text: str) -> Diagnosis | None:
        found = self.pattern.search(log_text)
        if found is None:
            return None
        end = log_text.find("\n", found.end())
        line = log_text[log_text.rfind("\n", 0, found.start()) + 1: len(log_text) if end < 0 else end]
        values = {key: value for key, value in found.groupdict().items() if value is not None}
        values.update(self.more(values, line))
        return Diagnosis(self.code, self.cause.format(**values), self.fix.format(**values), line.strip())


def rule(code: str, pattern: str, cause: str, fix: str, more: More = _nothing) -> DiagnosisRule:
    return DiagnosisRule(code, re.compile(pattern, re.IGNORECASE | re.MULTILINE), cause, fix, more)


@dataclass(frozen=True)
class LedgerField:
    """One number in a startup log: a pattern with a named group, and how to turn it into a value."""

    name: str
    pattern: re.Pattern[str]
    convert: Callable[[re.Match[str]], Any]


def field_pattern(name: str, pattern: str, convert: Callable[[re.Match[str]], Any]) -> LedgerField:
    return LedgerField(name, re.compile(pattern, re.MULTILINE), convert)


def mib(group: str) -> Callable[[re.Match[str]], int]:
    return lambda match: round(float(match[group]) * MIB)


def integer(group: str) -> Callable[[re.Match[str]], int]:
    return lambda match: int(match[group])


def text(group: str) -> Callable[[re.Match[str]], str]:
    return lambda match: match[group]


class LogReader(EnginePart):
    """An engine's log formats; adapters set `diagnoses` and `ledger_fields`, and override the rest."""

    diagnoses: ClassVar[tuple[DiagnosisRule, ...]] = ()
    ledger_fields: ClassVar[tuple[LedgerField, ...]] = ()
    request_error_codes: ClassVar[frozenset[str]] = frozenset()
    """Codes of `diagnoses` that are one request answered with an error: the server goes on serving."""

    def diagnose(self, log_text: str) -> Diagnosis | None:
        """The first known failure found in a log, or None."""
        for candidate in self.diagnoses:
            found = candidate.match(log_text)
            if found is not None:
                return found
        return None

    def advise(self, code: str, fix: str, profile: Profile) -> str:
        """A diagnosis's fix with what the profile knows (the revision to pin, say); the rule's own fix where the
        profile adds nothing."""
        return fix

    def parse_ledger(self, log_text: str) -> dict[str, Any]:
        """Numbers from the startup log; the last occurrence of each wins (a restarted context)."""
        ledger: dict[str, Any] = {}
        for entry in self.ledger_fields:
            matches = list(entry.pattern.finditer(log_text))
            if matches:
                ledger[entry.name] = entry.convert(matches[-1])
        return ledger

    def parse_refusal(self, log_text: str) -> dict[str, Any] | None:
        """A memory refusal at startup as numbers (required_bytes, available_bytes, with
        `<name>_resolution_bytes` for values printed in rounded units); None when there is none."""
        return None

    def parse_throughput(self, line: str) -> dict[str, Any] | None:
        """A periodic throughput line as numbers, or None when the line is not one."""
        return None

    def build_banner(self, log_text: str) -> str | None:
        """The build as the server's own log names it (number, commit, compiler), for the write-up's recipe
        beside what the profile pins; None when the log does not say."""
        return None

    def describe_log(self, log_text: str, profile: Profile | None = None) -> dict[str, Any]:
        """What a log says beyond its ledger, throughput lines and diagnoses (`ninferkit diagnose`): `build`
        (the builds that print such a log), `lines` (how many of each kind), `unread` (lines or parts of
        lines no rule read), `error_lines` (numbers of the lines that report a failure), `requests` (one
        row per request); {} for an engine whose adapter reads no more."""
        return {}

    def work_before_prefill(self, log_text: str) -> str | None:
        """What the server log shows the engine doing between a request's arrival and its prefill, which
        its per-request timings leave out (a sentence with the log's numbers and the fix); None if nothing."""
        return None

    def request_log_path(self, profile: Profile) -> Path | None:
        """Where the engine writes its own per-request record on the serving machine (a file the profile
        names); None when it keeps none beside its log. The sweeps copy it into the run directory."""
        return None

    def server_log_truth(self, profile: Profile, rows: Sequence[Mapping[str, Any]],
                         server_logs: Sequence[Path] = (),
                         request_log: Path | None = None) -> list[dict[str, Any]] | None:
        """Server-side fields per client row (same order; {} where none) from the engine's own
        per-request record outside the responses (its request log, or the server logs' per-request
        lines), read after the requests ended; None when the engine (or this profile) keeps no such
        record. `rows` are the requests.jsonl rows of one serving; `server_logs` the logs of every launch of it, in
        launch order (RunDir.server_logs: a server started again keeps its earlier log as server.N.log), each read
        on its own; `request_log` the run directory's copy of the engine's request log (RunDir.engine_record), read
        instead of the path the profile names, which is the serving machine's."""
        return None
