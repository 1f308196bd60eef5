"""G2 spdlog messages (after `[…] [level] [ninfer-serve] `): `what key=value …` lines, IF §2.3.

Byte counts and milliseconds are printed unrounded, so every byte value has a resolution of one byte.
"""

from __future__ import annotations

import re
from typing import Any

from ninferkit.engines.ninfer.numbers import key_values
from ninferkit.engines.ninfer.reading import LineKind, Read, unread_pairs

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")

_READY_TEXT = {"model_id": "model_id", "weights_id": "weights_id", "target": "target"}
_READY_UNUSED = frozenset({"status", "materialization_pipeline_ms", "artifact_bytes_read", "peak_staging_bytes",
                           "tensors", "resources"})
_CAPACITY_COUNTS = {"kv_capacity_tokens": "kv_tokens", "kv_page_groups": "kv_pages",
                    "kv_max_page_groups": "kv_max_pages"}
_CAPACITY_BYTES = {"runtime_reservation_bytes": "runtime_bytes",
                   "available_after_weights_bytes": "free_after_weights_bytes",
                   "available_after_startup_bytes": "free_after_startup_bytes",
                   "kv_headroom_bytes": "headroom_bytes", "planned_slack_bytes": "slack_bytes",
                   "cuda_graph_allowance_bytes": "graphs_allowance_bytes"}
_PHASE_KEYS = frozenset({"phase", "status", "total_bytes", "submitted_bytes", "completed_bytes", "duration_ms"})
_SERVER_KEYS = frozenset({"status", "host", "port", "model_id", "auth_enabled"})
_THROUGHPUT = (("interval_ms", "interval_s", 1000), ("prefill_tokens_per_second", "prefill_tok_s", 1),
               ("decode_tokens_per_second", "decode_tok_s", 1), ("host_active_ms", "host_s", 1000))
_THROUGHPUT_COUNTS = {"computed_prefill_tokens": "prefill_tokens", "committed_decode_tokens": "decode_tokens",
                      "running": "running", "prefilling": "prefilling", "decode_ready": "decode_ready",
                      "waiting": "waiting", "materializing": "materializing", "capture_pending": "capture_pending",
                      "terminal_pending": "terminal_pending"}
_REQUEST_COUNTS = {"prompt_tokens": "prompt_tokens_server", "completion_tokens": "completion_tokens_server",
                   "prefix_cache_hit_tokens": "cached_tokens_server"}
_REQUEST_RATES = {"prefill_tokens_per_second": "prefill_tok_s_server",
                  "decode_tokens_per_second": "decode_tok_s_server"}
_REQUEST_MS = {"ttft_ms": "ttft_s_server", "duration_ms": "e2e_s_server"}
_REQUEST_TEXT = {"prefix_reuse_path": "prefix_reuse_path", "protocol": "protocol", "phase": "phase",
                 "classification": "classification", "error_type": "error_type", "error_code": "error_code",
                 "param": "param", "message": "error", "detail": "error"}
_REQUEST_KNOWN = frozenset({"id", "status", "http_status", *_REQUEST_COUNTS, *_REQUEST_RATES, *_REQUEST_MS,
                            *_REQUEST_TEXT})


def _integer(pairs: dict[str, str], source: str, out: dict[str, Any], key: str, unread: list[str]) -> None:
    if source not in pairs:
        return
    if pairs[source].isdigit():
        out[key] = int(pairs[source])
    else:
        unread.append(f"{source}={pairs[source]}")


def _real(pairs: dict[str, str], source: str, out: dict[str, Any], key: str, per: int,
          unread: list[str]) -> None:
    """pairs[source] / per into out[key] (per 1000: milliseconds to seconds)."""
    if source not in pairs:
        return
    if _NUMBER.fullmatch(pairs[source]):
        out[key] = float(pairs[source]) / per
    else:
        out[key] = None
        unread.append(f"{source}={pairs[source]}")


def _engine_ready(pairs: dict[str, str], unread: list[str]) -> Read:
    out: dict[str, Any] = {key: pairs[source] for source, key in _READY_TEXT.items() if source in pairs}
    if "host_to_device_bytes" in pairs and pairs["host_to_device_bytes"].isdigit():
        out["weights_bytes"], out["weights_bytes_resolution_bytes"] = int(pairs["host_to_device_bytes"]), 1
    _real(pairs, "target_load_ms", out, "ready_s", 1000, unread)
    known = {*_READY_TEXT, *_READY_UNUSED, "host_to_device_bytes", "target_load_ms"}
    return Read("startup", out, tuple(unread + unread_pairs(pairs, known)))


def _engine_capacity(pairs: dict[str, str], unread: list[str]) -> Read:
    out: dict[str, Any] = {}
    if "kv_capacity_mode" in pairs:
        out["kv_capacity_mode"] = pairs["kv_capacity_mode"]
    for source, key in _CAPACITY_COUNTS.items():
        _integer(pairs, source, out, key, unread)
    for source, key in _CAPACITY_BYTES.items():
        _integer(pairs, source, out, key, unread)
        if key in out:
            out[f"{key}_resolution_bytes"] = 1
    known = {"kv_capacity_mode", *_CAPACITY_COUNTS, *_CAPACITY_BYTES}
    return Read("startup", out, tuple(unread + unread_pairs(pairs, known)))


def _startup(msg: str, pairs: dict[str, str], unread: list[str]) -> Read | None:
    if msg.startswith("startup phase="):
        if pairs.get("status") == "failed":
            return Read("error", {"message": msg})
        out: dict[str, Any] = {}
        if pairs.get("phase") == "serve-warmup" and pairs.get("status") == "complete":
            _real(pairs, "duration_ms", out, "warmup_s", 1000, unread)
        return Read("startup", out, tuple(unread + unread_pairs(pairs, _PHASE_KEYS)))
    if msg.startswith("engine status=ready"):
        return _engine_ready(pairs, unread)
    if msg.startswith("engine capacity "):
        return _engine_capacity(pairs, unread)
    if re.match(r"^engine (?:context_cache|context_cost|media) ", msg):
        return Read("startup")  # cache tiers and media budgets: printed, not used by ninferkit
    if msg.startswith("server status=failed"):
        return Read("error", {"message": msg})
    if msg.startswith("server status=ready"):
        out = {"listen_url": f"http://{pairs.get('host')}:{pairs.get('port')}",
               "auth": "bearer" if pairs.get("auth_enabled") == "true" else "disabled"}
        if "model_id" in pairs:
            out["model_id"] = pairs["model_id"]
        return Read("startup", out, tuple(unread + unread_pairs(pairs, _SERVER_KEYS)))
    return None


def _throughput(pairs: dict[str, str], unread: list[str]) -> Read:
    out: dict[str, Any] = {}
    for source, key, scale in _THROUGHPUT:
        _real(pairs, source, out, key, scale, unread)
    for source, key in _THROUGHPUT_COUNTS.items():
        _integer(pairs, source, out, key, unread)
    batch = pairs.get("average_decode_batch")
    out["batch"] = None if batch in (None, "n/a", "null") else float(batch) if _NUMBER.fullmatch(batch) else None
    if batch is not None and out["batch"] is None and batch not in ("n/a", "null"):
        unread.append(f"average_decode_batch={batch}")
    interval = out.get("interval_s")
    if out.get("host_s") is not None and interval:
        out["host_pct"] = 100 * out["host_s"] / interval
    known = {*(source for source, _, _ in _THROUGHPUT), *_THROUGHPUT_COUNTS, "average_decode_batch"}
    return Read("throughput", out, tuple(unread + unread_pairs(pairs, known)))


def _request(pairs: dict[str, str], unread: list[str]) -> Read:
    status = pairs.get("status")
    kind: LineKind = "request_start" if status == "submitted" else "request_done" if status == "done" else \
        "request_error"
    out: dict[str, Any] = {"request_id": int(pairs["id"])}
    if kind == "request_error":
        out["status"] = status
    for source, key in _REQUEST_COUNTS.items():
        _integer(pairs, source, out, key, unread)
    for source, key in _REQUEST_RATES.items():
        _real(pairs, source, out, key, 1, unread)
    for source, key in _REQUEST_MS.items():
        _real(pairs, source, out, key, 1000, unread)
    for source, key in _REQUEST_TEXT.items():
        if source in pairs:
            out[key] = pairs[source]
    _integer(pairs, "http_status", out, "http_status", unread)
    if out.get("completion_tokens_server") is not None:
        out["decode_tokens_server"] = max(0, out["completion_tokens_server"] - 1)
    return Read(kind, out, tuple(unread + unread_pairs(pairs, _REQUEST_KNOWN)))


_HEADS = ("throughput interval_ms=", "request id=", "startup phase=", "engine ", "server status=")


def read(msg: str) -> Read | None:
    """A G2 message as read, or None when it is none of this format's lines."""
    if not msg.startswith(_HEADS):
        return None
    pairs, words = key_values(msg)
    first = re.search(r"[\w.-]+=", msg)
    unread = words[len(msg[:first.start()].split()) if first else len(words):]  # words after the line's name
    if msg.startswith("throughput interval_ms="):
        return _throughput(pairs, unread)
    if msg.startswith("request id=") and pairs.get("id", "").isdigit():
        return _request(pairs, unread)
    return _startup(msg, pairs, unread)
