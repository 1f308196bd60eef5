"""`ninferkit diagnose --url`: what a live server someone else started says of itself.

Asked, never signalled: its health, the engine its answers name (and how), the build and context it reports,
the models it lists, one short chat request, and the engine's own /metrics gauges of what it holds now
(requests running and waiting, KV cache use). A number the server does not report is absent, never 0.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import httpx

from ninferkit.engines import get_adapter
from ninferkit.errors import BadInput
from ninferkit.prometheus_text import sample_key, samples
from ninferkit.server import process as server
from ninferkit.server.target import Target, reach
from ninferkit.transports import uses_proxy

LOAD_WORDS = ("running", "waiting", "processing", "deferred", "usage", "swapped", "busy")
"""The gauges of what a server holds now, by the words in their names (vLLM's num_requests_running and
kv_cache_usage_perc, llama-server's requests_processing and kv_cache_usage_ratio)."""


def diagnose_server(target: Target) -> dict[str, Any]:
    """Everything `diagnose --url` says, as plain data (`--json` prints it). healthy: /health answered 2xx and
    the chat request was served."""
    url, answers, detection = reach(target)
    adapter = get_adapter(detection.kind)
    ids = answers.model_ids()
    model = target.model or (ids[0] if ids else None)
    chat = None
    if model is not None:
        headers = server.bearer(server.env_key(target.api_key_env, "--api-key-env"))
        with httpx.Client(base_url=url, timeout=60.0, headers=headers, trust_env=uses_proxy(url)) as client:
            chat = asdict(server.chat_check(client, adapter, model))
    healthy = answers.health_status is not None and 200 <= answers.health_status < 300 and bool(chat and chat["ok"])
    return {"url": url, "engine": detection.kind, "engine_given": detection.given, "engine_signs": detection.signs,
            "engine_version": detection.version, "health_status": answers.health_status, "models": ids,
            "model": model, "context_reported": adapter.reported_context(answers.models or {}),
            "chat": chat, "load": _load(answers.metrics, adapter.metric_prefix), "not_answered": answers.notes,
            "healthy": healthy,
            "verdict": "serving" if healthy else "not serving: " + _why(answers.health_status, chat, model)}


def _load(metrics: str | None, prefix: str | None) -> dict[str, float] | None:
    """The engine's gauges of what it holds now; None when it serves no /metrics (or its names have no prefix)."""
    if metrics is None or prefix is None:
        return None
    try:
        found = samples(metrics)
    except BadInput:
        return None
    return {sample_key(s): s.value for s in found
            if s.name.startswith(prefix) and any(word in s.name for word in LOAD_WORDS)}


def _why(health: int | None, chat: dict[str, Any] | None, model: str | None) -> str:
    if health is None or not 200 <= health < 300:
        return f"/health answered {health if health is not None else 'nothing'}"
    if model is None:
        return "the server lists no model at /v1/models (name one with --model)"
    return f"the chat request failed ({(chat or {}).get('detail', {}).get('error', 'no detail')})"


def server_text(report: dict[str, Any]) -> str:
    """The report on a terminal: verdict first, then what the server said."""
    signs = "; ".join(f"{kind}: {', '.join(phrases)}" for kind, phrases in report["engine_signs"].items())
    how = "named by --engine" if report["engine_given"] else "from its answers"
    out = [f"verdict: {report['verdict']}",
           f"server: {report['url']} (not started by ninferkit; nothing was signalled)",
           f"engine: {report['engine']} ({how}: {signs or 'no signs'})",
           f"engine build: {report['engine_version'] or 'not reported'}",
           f"health: {report['health_status'] if report['health_status'] is not None else 'no answer'}",
           f"models: {', '.join(report['models']) or 'none listed'}",
           f"context per request: {report['context_reported'] or 'not reported'}"]
    chat = report["chat"]
    if chat is not None:
        detail = chat["detail"]
        out.append(f"chat: {'served' if chat['ok'] else 'FAILED'} in {chat['seconds']} s"
                   + (f" ({detail['error']})" if "error" in detail else ""))
    load = report["load"]
    if load is None:
        out.append("load: no engine gauges (/metrics not served, or not the engine's)")
    else:
        out += ["load (the engine's /metrics now):"] + [f"  {key} {value:g}" for key, value in sorted(load.items())]
    out += [f"not answered: {path}: {why}" for path, why in report["not_answered"].items()]
    return "\n".join(out)
