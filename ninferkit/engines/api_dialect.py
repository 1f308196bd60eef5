"""How an engine speaks its HTTP API: which APIs and request fields it reads, what pins an answer's
length, how it counts tokens, and where its responses and counters carry its own numbers.

The client, the tokenizer, the sweeps' plan and truth, and the launch step's acceptance checks need this
part of an engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ninferkit.engines.part import EnginePart
from ninferkit.params.profile import Profile


class ApiDialect(EnginePart):
    """An engine's requests and responses; adapters override what differs from OpenAI Chat Completions."""

    apis: ClassVar[frozenset[str]] = frozenset({"chat"})
    """Request APIs the engine serves: chat (OpenAI Chat Completions), messages (Anthropic), responses."""
    request_extensions_path: ClassVar[str | None] = None
    """Where the running server says what its model reads (llama-server: /props); None: the profile says it all."""
    request_metrics_path: ClassVar[str | None] = None
    """Where the engine serves server-wide counters (Prometheus text) that are a request's own
    numbers when it runs alone; the sweeps read it just before and just after each such request."""
    owned_by: ClassVar[str | None] = None
    """What the engine answers as `owned_by` in /v1/models: how a server someone else started names its engine."""
    metric_prefix: ClassVar[str | None] = None
    """The prefix of the engine's own /metrics names (`vllm:`), where it serves /metrics."""
    server_header: ClassVar[str | None] = None
    """The engine's own `Server` response header (a generic one, such as uvicorn's, names no engine)."""

    def served_signs(self, models: Mapping[str, Any] | None, props: Mapping[str, Any] | None,
                     metrics: str | None, server_header: str | None) -> list[str]:
        """What in a running server's answers says it is this engine, each sign as a short phrase
        (`ninferkit.server.detect` asks every engine; an empty list: nothing here says so)."""
        signs = []
        owners = {str(model.get("owned_by")) for model in (models or {}).get("data") or [] if isinstance(model, dict)}
        if self.owned_by is not None and self.owned_by in owners:
            signs.append(f"/v1/models owned_by {self.owned_by!r}")
        if self.metric_prefix is not None and metrics is not None and any(
                line.startswith(self.metric_prefix) for line in metrics.splitlines()):
            signs.append(f"/metrics names start {self.metric_prefix!r}")
        if self.server_header is not None and server_header == self.server_header:
            signs.append(f"Server header {self.server_header!r}")
        return signs

    def served_version(self, props: Mapping[str, Any] | None) -> str | None:
        """The engine build a running server reports of itself, where it reports one (None: not said)."""
        return None

    def served_pool(self, props: Mapping[str, Any] | None, metrics: str | None) -> dict[str, Any] | None:
        """The KV pool a running server reports of itself, in the ledger's names (kv_tokens, and where said
        max_concurrency, max_context, kv_dtype, `source`: where it was read); None where it reports none."""
        return None

    def served_apis(self, profile: Profile) -> frozenset[str]:
        """The request APIs this profile's engine build serves (`apis` unless the build says otherwise)."""
        return self.apis

    def request_extensions(self, profile: Profile, served: Mapping[str, Any] | None = None) -> frozenset[str]:
        """The request fields beyond every engine's core that this engine, build and model read, of
        `reasoning_effort`, `tools`, `prompt_cache_breakpoint` (chat content parts), `cache_control`
        (Messages blocks) and `previous_response_id`. The sweeps send such a field, and run the cell that
        measures it, only where it is read: an engine refuses or ignores the others. `served` is the JSON
        of `request_extensions_path` when the server answered it."""
        return frozenset()

    def output_pin_fields(self) -> dict[str, Any]:
        """Extra request fields that make the server generate exactly max_tokens (no early stop)."""
        return {}

    def tokenize_request(self, text: str) -> tuple[str, dict[str, Any]]:
        """(path, JSON body) of the request that counts tokens with the server's own tokenizer."""
        raise NotImplementedError(f"{self.kind} has no tokenizer endpoint")

    def token_count(self, body: Mapping[str, Any]) -> int:
        """The token count from the tokenizer endpoint's response."""
        raise NotImplementedError(f"{self.kind} has no tokenizer endpoint")

    def server_timings(self, response: Mapping[str, Any]) -> dict[str, Any]:
        """Per-request server-side timings from a response body or final stream event."""
        return {}

    def request_metrics_deltas(self, before: str, after: str) -> dict[str, Any] | None:
        """Server-side fields of the one request that ran between two reads of `request_metrics_path`
        (contract names, plus `server_note` when the counters say they are not that request's alone);
        None while the counters do not yet show the request as finished (the caller reads again)."""
        return {}

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
