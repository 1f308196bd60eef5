"""The engine seam: what the rest of ninferkit needs from an inference engine.

Everything engine-specific (flags, log formats, error strings, where server-side timings live) sits
in one adapter file per engine. `server`, `sweeps`, `telemetry` and `capacity` talk to this base
class only. The base keeps the books (diagnosis by rule table, ledger parsing by pattern table);
an adapter fills in its tables and its argv.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ninferkit.errors import Diagnosis, ProfileError
from ninferkit.finding import Finding
from ninferkit.params.profile import Profile
from ninferkit.params.serve import ServeSection
from ninferkit.units import MIB

if TYPE_CHECKING:  # the capacity package reads adapters; importing it here at run time would be a cycle
    from ninferkit.engines.kv import KVLayout
    from ninferkit.engines.pool import PoolRule


OUT_OF_MEMORY_AT_FIRST_USE = "out_of_memory_at_first_use"
"""The diagnosis code of a server that allocated all its buffers, then ran out of memory at warm-up or its
first request: the capacity search counts it as a pool that does not fit."""


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


class EngineAdapter:
    """Base adapter; subclasses set `kind`, the two tables, and implement `argv`."""

    kind: ClassVar[str]
    default_binary: ClassVar[str]
    health_path: ClassVar[str] = "/health"
    secret_flags: ClassVar[frozenset[str]] = frozenset({"--api-key"})
    diagnoses: ClassVar[tuple[DiagnosisRule, ...]] = ()
    ledger_fields: ClassVar[tuple[LedgerField, ...]] = ()

    apis: ClassVar[frozenset[str]] = frozenset({"chat"})
    capacity_pool: ClassVar[PoolRule]
    """How (concurrency, per-slot context) becomes this engine's KV pool (the capacity fit and search)."""
    """Request APIs the engine serves: chat (OpenAI Chat Completions), messages (Anthropic), responses."""

    def binary(self, profile: Profile) -> Path:
        """The engine executable for a native launch (may build or locate it)."""
        raise NotImplementedError

    def argv(self, profile: Profile, model_path: Path, binary: Path) -> list[str]:
        """The exact command line, as a list; never a shell string."""
        raise NotImplementedError

    def docker_files(self, profile: Profile) -> dict[str, str]:
        """Files for a Docker deployment (name -> text), written to run_dir/docker/ by the launch step."""
        return {}

    def setup_findings(self, profile: Profile, facts: Mapping[str, Any], model_path: Path) -> list[Finding]:
        """What the setup step's facts (probe.json's `facts`) mean for this engine, profile and model file
        (where the artifact step puts it; it may not be there yet), beyond what every engine shares (GPU,
        driver, disk, Docker: ninferkit/probe.py)."""
        return []

    def profile_field_of(self, flag: str) -> str | None:
        """The profile field a command-line flag of this engine comes from (the write-up's recipe);
        None when the engine keeps no flag table (the recipe then matches by name or value)."""
        return None

    def docker_mounts(self, profile: Profile) -> tuple[list[str], dict[str, Any]]:
        """(extra `docker run` arguments, serve fields as the engine sees them inside the container) for
        files the engine writes outside the model folder."""
        return [], {}

    def env(self, profile: Profile) -> dict[str, str]:
        """Extra environment for the server process (secrets go here, not into argv, where possible)."""
        return {}

    def is_ready(self, status_code: int, body: str) -> bool:
        return status_code == 200

    def diagnose(self, log_text: str) -> Diagnosis | None:
        """The first known failure found in a log, or None."""
        for candidate in self.diagnoses:
            found = candidate.match(log_text)
            if found is not None:
                return found
        return None

    request_error_codes: ClassVar[frozenset[str]] = frozenset()
    """Codes of `diagnoses` that are one request answered with an error: the server goes on serving."""

    def describe_log(self, log_text: str, profile: Profile | None = None) -> dict[str, Any]:
        """What a log says beyond its ledger, throughput lines and diagnoses (`ninferkit diagnose`): `build`
        (the builds that print such a log), `lines` (how many of each kind), `unread` (lines or parts of
        lines no rule read), `error_lines` (numbers of the lines that report a failure), `requests` (one
        row per request); {} for an engine whose adapter reads no more."""
        return {}

    def parse_ledger(self, log_text: str) -> dict[str, Any]:
        """Numbers from the startup log; the last occurrence of each wins (a restarted context)."""
        ledger: dict[str, Any] = {}
        for entry in self.ledger_fields:
            matches = list(entry.pattern.finditer(log_text))
            if matches:
                ledger[entry.name] = entry.convert(matches[-1])
        return ledger

    def models_check(self, body: Mapping[str, Any], profile: Profile) -> dict[str, Any]:
        """The /v1/models acceptance check: the served ids and the context the server reports."""
        ids = [model["id"] for model in body.get("data", [])]
        context = self.reported_context(body)
        problems = []
        if not ids:
            problems.append("the server lists no model")
        if context is not None and context < profile.serve.max_context:
            problems.append(f"reported context {context} is below serve.max_context {profile.serve.max_context}")
        return {"ok": not problems, "ids": ids, "context_reported": context, "problems": problems}

    def reported_context(self, models_body: Mapping[str, Any]) -> int | None:
        """The per-request context the server says it serves, from /v1/models; None when not reported."""
        return None

    def chat_check(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The short chat acceptance check: a completion with server-counted usage, and what the model answered
        (the write-up's one example of the model's text)."""
        usage = dict(body.get("usage") or {})
        choice = (body.get("choices") or [{}])[0]
        ok = usage.get("completion_tokens", 0) > 0 and usage.get("prompt_tokens", 0) > 0
        return {"ok": ok, "usage": usage, "finish_reason": choice.get("finish_reason"),
                "reply": (choice.get("message") or {}).get("content"), "server_timings": self.server_timings(body)}

    def accepted_container_versions(self, profile: Profile) -> frozenset[int] | None:
        """Artifact container versions this engine build reads; None when it has no container format."""
        return None

    def parse_refusal(self, log_text: str) -> dict[str, Any] | None:
        """A memory refusal at startup as numbers (required_bytes, available_bytes, with
        `<name>_resolution_bytes` for values printed in rounded units); None when there is none."""
        return None

    def tokenize_request(self, text: str) -> tuple[str, dict[str, Any]]:
        """(path, JSON body) of the request that counts tokens with the server's own tokenizer."""
        raise NotImplementedError(f"{self.kind} has no tokenizer endpoint")

    def token_count(self, body: Mapping[str, Any]) -> int:
        """The token count from the tokenizer endpoint's response."""
        raise NotImplementedError(f"{self.kind} has no tokenizer endpoint")

    def output_pin_fields(self) -> dict[str, Any]:
        """Extra request fields that make the server generate exactly max_tokens (no early stop)."""
        return {}

    def served_apis(self, profile: Profile) -> frozenset[str]:
        """The request APIs this profile's engine build serves (`apis` unless the build says otherwise)."""
        return self.apis

    request_extensions_path: ClassVar[str | None] = None
    """Where the running server says what its model reads (llama-server: /props); None: the profile says it all."""

    def request_extensions(self, profile: Profile, served: Mapping[str, Any] | None = None) -> frozenset[str]:
        """The request fields beyond every engine's core that this engine, build and model read, of
        `reasoning_effort`, `tools`, `prompt_cache_breakpoint` (chat content parts), `cache_control`
        (Messages blocks) and `previous_response_id`. The sweeps send such a field, and run the cell that
        measures it, only where it is read: an engine refuses or ignores the others. `served` is the JSON
        of `request_extensions_path` when the server answered it."""
        return frozenset()

    def parse_throughput(self, line: str) -> dict[str, Any] | None:
        """A periodic throughput line as numbers, or None when the line is not one."""
        return None

    def server_timings(self, response: Mapping[str, Any]) -> dict[str, Any]:
        """Per-request server-side timings from a response body or final stream event."""
        return {}

    def kv_layout(self, profile: Profile, model_path: Path | None, kv_dtype: str) -> KVLayout | None:
        """KV bytes per token from the model's architecture (None: unknown, the fit estimates it);
        raises ProfileError for a KV dtype the engine cannot use with this model."""
        return None

    def slot_context_cap(self, profile: Profile, model_path: Path | None) -> int | None:
        """The longest context the engine serves in one slot whatever the memory; None: no such cap."""
        return None

    def work_before_prefill(self, log_text: str) -> str | None:
        """What the server log shows the engine doing between a request's arrival and its prefill, which
        its per-request timings leave out (a sentence with the log's numbers and the fix); None if nothing."""
        return None

    request_metrics_path: ClassVar[str | None] = None
    """Where the engine serves server-wide counters (Prometheus text) that are a request's own
    numbers when it runs alone; the sweeps read it just before and just after each such request."""

    def request_metrics_deltas(self, before: str, after: str) -> dict[str, Any] | None:
        """Server-side fields of the one request that ran between two reads of `request_metrics_path`
        (contract names, plus `server_note` when the counters say they are not that request's alone);
        None while the counters do not yet show the request as finished (the caller reads again)."""
        return {}

    def server_log_truth(self, profile: Profile, rows: Sequence[Mapping[str, Any]],
                         server_log: Path | None = None) -> list[dict[str, Any]] | None:
        """Server-side fields per client row (same order; {} where none) from the engine's own
        per-request record outside the responses (its request log, or the server log's per-request
        lines), read after the requests ended; None when the engine (or this profile) keeps no such
        record. `rows` are all requests.jsonl rows of the run."""
        return None

    def redact(self, argv: list[str], mask: str = "***") -> list[str]:
        """argv with the value of every secret flag (`--api-key KEY`, `--api-key=KEY`) replaced by `mask`:
        for logs and result files, and for a placeholder a container's shell expands."""
        out = list(argv)
        for index, arg in enumerate(out[:-1]):
            if arg in self.secret_flags:
                out[index + 1] = mask
        for index, arg in enumerate(out):
            flag, eq, _ = arg.partition("=")
            if eq and flag in self.secret_flags:
                out[index] = f"{flag}={mask}"
        return out


S = TypeVar("S", bound=ServeSection)


def serve_of(profile: Profile, section: type[S]) -> S:
    """The profile's serve section as its engine's class (a profile's engine.kind picks that class, so a
    mismatch is a profile of another engine handed to this adapter)."""
    if not isinstance(profile.serve, section):
        raise ProfileError(f"profile {profile.name} is not a profile of this engine (engine.kind "
                           f"{profile.engine.kind})")
    return profile.serve


def llama_cpp_timings(timings: Mapping[str, Any]) -> dict[str, Any]:
    """llama.cpp's per-request `timings` object (also returned by NInfer G3) in the contract's names."""
    def seconds(ms: float | None) -> float | None:
        return None if ms is None else ms / 1000.0

    out = {
        "prompt_tokens_server": timings.get("prompt_n"),
        "cached_tokens_server": timings.get("cache_n"),
        "prompt_s_server": seconds(timings.get("prompt_ms")),
        "prefill_tok_s_server": timings.get("prompt_per_second"),
        "decode_tokens_server": timings.get("predicted_n"),
        "decode_s_server": seconds(timings.get("predicted_ms")),
        "decode_tok_s_server": timings.get("predicted_per_second"),
    }
    if "draft_n" in timings:
        drafted, accepted = timings["draft_n"], timings.get("draft_n_accepted")
        out.update(drafted_tokens_server=drafted, accepted_tokens_server=accepted,
                   acceptance_server=(accepted / drafted) if drafted and accepted is not None else None)
    return out




def mib(group: str) -> Callable[[re.Match[str]], int]:
    return lambda match: round(float(match[group]) * MIB)


def integer(group: str) -> Callable[[re.Match[str]], int]:
    return lambda match: int(match[group])


def text(group: str) -> Callable[[re.Match[str]], str]:
    return lambda match: match[group]


def field_pattern(name: str, pattern: str, convert: Callable[[re.Match[str]], Any]) -> LedgerField:
    return LedgerField(name, re.compile(pattern, re.MULTILINE), convert)


