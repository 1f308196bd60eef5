"""NInfer's `--request-log-jsonl`: per-request server timings and speculative counters.

The JSONL log is the engine's own unrounded account of every request (stderr is rounded in every
generation), so it is where NInfer's server-side truth comes from. Schema versions 2 (G0), 8/9
(G1), 19 (G2) and 21 (G3) are read (reference/ninfer-interface.md section 5); unknown fields and
unknown events are ignored, so a newer schema degrades to the fields it shares.

Pure functions: `read_events` -> `request_rows` (one row per request, contract names) ->
`join_client_rows` (fill requests.jsonl rows). `ledger_from_events` gives the exact startup
memory numbers of `server_start`; `throughput_rows` the periodic throughput events.
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ninferkit.errors import NinferkitError
from ninferkit.records import RequestRow

ARTIFACT_TYPE = "ninfer_serve_request_log"
KNOWN_SCHEMAS = (2, 8, 9, 19, 21)
TERMINAL_EVENTS = ("request_done", "request_error", "request_rejected")


def read_events(source: str | Path | Iterable[str]) -> list[dict[str, Any]]:
    """Events from a JSONL file (or its lines); a torn last line from a killed server is skipped.

    Raises NinferkitError for a line that is not a NInfer request-log event (wrong file).
    """
    lines = Path(source).read_text().splitlines() if isinstance(source, (str, Path)) else list(source)
    events = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            if number == len(lines):
                break  # the server died mid-write; everything before is intact
            raise NinferkitError(f"request log line {number} is not JSON; is this a --request-log-jsonl "
                                 "file?") from None
        if event.get("artifact_type") != ARTIFACT_TYPE:
            raise NinferkitError(f"request log line {number} has artifact_type {event.get('artifact_type')!r}, "
                                 f"not {ARTIFACT_TYPE!r}; is this a --request-log-jsonl file?")
        events.append(event)
    return events


def request_rows(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per started or rejected request, in start order, with the contract's server fields.

    Fields: server_instance_id, request_id, schema_version, protocol, stream, started_unix_ms,
    ended_unix_ms, status (ok|errored), http_status, error, finish_reason, and the server-side
    contract names (prompt_tokens_server, cached_tokens_server, prompt_s_server,
    prefill_tok_s_server, decode_tokens_server, decode_s_server, decode_tok_s_server,
    queue_s_server, drafted_tokens_server, accepted_tokens_server, acceptance_server) plus
    completion_tokens_server, reasoning_tokens_server, ttft_s_server, e2e_s_server,
    spec_rounds_server, accepted_per_position_server, prefix_reuse_path.

    Definitions (upstream docs/performance.md): prompt_s_server = vision + prefill seconds (no
    queueing); prefill rate over the computed suffix (prompt - cache hits; G1's definition);
    decode_tokens_server = completion - 1 (the first token belongs to prefill), so
    decode_tok_s_server = (completion - 1) / decode seconds; acceptance = accepted / drafted.
    """
    rows: dict[tuple[Any, Any], dict[str, Any]] = {}
    order: list[tuple[Any, Any]] = []
    for event in events:
        kind = event.get("event")
        request = event.get("request") or {}
        if kind not in ("request_start", *TERMINAL_EVENTS) or "request_id" not in request:
            continue
        key = (event.get("server_instance_id"), request["request_id"])
        if key not in rows:
            order.append(key)
            rows[key] = {"server_instance_id": key[0], "request_id": key[1],
                         "schema_version": event.get("schema_version"), "protocol": request.get("protocol"),
                         "stream": request.get("stream"), "started_unix_ms": event.get("timestamp_unix_ms")}
        row = rows[key]
        if kind == "request_start":
            row["started_unix_ms"] = event.get("timestamp_unix_ms")
            continue
        row["ended_unix_ms"] = event.get("timestamp_unix_ms")
        if kind == "request_done":
            row.update(status="ok", http_status=200, error=None)
            row.update(_done_fields(event))
        else:
            error = event.get("error") or {}
            row.update(status="errored", http_status=error.get("status"), error=error.get("message"),
                       error_code=error.get("code"))
    return [rows[key] for key in order]


def _done_fields(event: Mapping[str, Any]) -> dict[str, Any]:
    result = event.get("result") or {}
    timings = event.get("timings_seconds") or {}
    spec = event.get("speculative") or {}
    engine_timing = event.get("engine_timing") or {}
    prompt = result.get("prompt_tokens")
    completion = result.get("completion_tokens")
    cached = result.get("prefix_cache_hit_tokens")
    computed = result.get("computed_prefill_tokens")
    if computed is None and prompt is not None:
        computed = max(0, prompt - (cached or 0))
    prefill_s = timings.get("prefill")
    prompt_s = None if prefill_s is None else prefill_s + (timings.get("vision") or 0.0)
    decode_s = timings.get("decode")
    decode_tokens = None if completion is None else max(0, completion - 1)
    ttft = timings.get("ttft")
    if ttft is None and prefill_s is not None:
        ttft = (timings.get("prepare") or 0.0) + (timings.get("vision") or 0.0) + prefill_s
    drafted, accepted = spec.get("drafted_tokens"), spec.get("accepted_tokens")
    return {
        "finish_reason": result.get("finish_reason"),
        "prompt_tokens_server": prompt,
        "cached_tokens_server": cached,
        "computed_prefill_tokens_server": computed,
        "completion_tokens_server": completion,
        "reasoning_tokens_server": result.get("model_thinking_tokens"),
        "prompt_s_server": prompt_s,
        "prefill_tok_s_server": computed / prefill_s if computed is not None and prefill_s else None,
        "decode_tokens_server": decode_tokens,
        "decode_s_server": decode_s,
        "decode_tok_s_server": decode_tokens / decode_s if decode_tokens is not None and decode_s else None,
        "queue_s_server": engine_timing.get("queue_wait_seconds"),
        "ttft_s_server": ttft,
        "e2e_s_server": timings.get("total"),
        "spec_backend_server": spec.get("backend"),
        "spec_rounds_server": spec.get("rounds"),
        "drafted_tokens_server": drafted,
        "accepted_tokens_server": accepted,
        "acceptance_server": accepted / drafted if drafted and accepted is not None else None,
        "accepted_per_position_server": spec.get("accepted_per_position"),
        "prefix_reuse_path": result.get("prefix_reuse_path"),
    }


SERVER_FIELDS = RequestRow.LOG_FIELDS
JOIN_FIELDS = tuple(name for name in RequestRow.model_fields if name.startswith("server_"))
"""What join_client_rows adds beside SERVER_FIELDS: how the pair was made, and the server's own ids."""


def join_client_rows(client_rows: Sequence[Mapping[str, Any]], server_rows: Sequence[Mapping[str, Any]],
                     max_skew_s: float = 5.0, early_s: float = 0.25) -> list[dict[str, Any]]:
    """Client rows (requests.jsonl) with the server's fields filled in from the request log.

    A client row that carries `server_request_id` is matched on it (G2/G3 send `x-request-id`).
    Otherwise client rows are taken in start order, and each takes the earliest unused server row
    that started between `early_s` before and `max_skew_s` after its `started_utc` (the engine's
    wall clock and ours are the same host's clock) and agrees with it on the server-counted prompt
    and completion tokens and on success. Every server row is used once, so pass all rows of a run
    at once: an earlier cell's requests then pair with their own rows, not a later cell's.

    Matched rows get `server_join` 'request_id', 'time', or 'time_order' when the pair could be
    swapped with another pair (two requests in flight together with the same token counts, each
    logged after the other's send: which is which the log cannot tell, so they are paired in start
    order and `server_note` says so). Rows without a partner get `server_join` None. The output
    keeps the input order; the inputs are not modified.
    """
    by_id = {str(row["request_id"]): row for row in server_rows}
    used: set[int] = set()
    out = [dict(client) for client in client_rows]
    for merged in out:
        merged["server_join"] = None
    pending = sorted((row for row in server_rows if row.get("started_unix_ms") is not None),
                     key=lambda row: row["started_unix_ms"])
    timed = sorted(((_unix_ms(str(m["started_utc"])), i) for i, m in enumerate(out)
                    if m.get("server_request_id") is None and m.get("started_utc")))
    for merged in out:
        if merged.get("server_request_id") is not None:
            partner = by_id.get(str(merged["server_request_id"]))
            if partner is not None:
                used.add(id(partner))
                _fill(merged, partner, "request_id", None)
    starts = [row["started_unix_ms"] for row in pending]
    pairs: list[tuple[float, int, Mapping[str, Any]]] = []
    for started_ms, index in timed:
        window = pending[bisect_left(starts, started_ms - early_s * 1000):
                         bisect_right(starts, started_ms + max_skew_s * 1000)]
        partner = next((row for row in window if id(row) not in used and _same_counts(out[index], row)), None)
        if partner is not None:
            used.add(id(partner))
            pairs.append((started_ms, index, partner))
    paired_starts = [pair[0] for pair in pairs]
    for started_ms, index, partner in pairs:
        near = pairs[bisect_left(paired_starts, started_ms - max_skew_s * 1000):
                     bisect_right(paired_starts, started_ms + max_skew_s * 1000)]
        swappable = sum(1 for other_ms, other, other_partner in near
                        if other != index and _could_be(out[index], started_ms, other_partner, max_skew_s)
                        and _could_be(out[other], other_ms, partner, max_skew_s))
        note = None
        if swappable:
            note = (f"{swappable + 1} requests in flight together fit each other's log entries (same token "
                    "counts); paired in start order")
        _fill(out[index], partner, "time_order" if note else "time", note)
    return out


def with_log_clock(log_rows: Sequence[Mapping[str, Any]], client_rows: Sequence[Mapping[str, Any]]
                   ) -> list[dict[str, Any]]:
    """Rows read from stderr request lines (logs.requests_from_lines) with `started_unix_ms`, so they join
    like request-log rows.

    stderr stamps the server's local wall time without a zone ('2026-12-01 14:21:42.640'), and a
    container's zone need not be the host's. A zone is a whole number of quarter hours, and a request is
    logged within moments of being sent: so the zone is the quarter-hour offset that most client/server
    start pairs lie just after (a pair of two different requests lands that close by chance ~0.6% of
    the time), taken from the rows themselves.
    """
    naive = [(row, _naive_ms(row.get("started_at"))) for row in log_rows]
    client = sorted(_unix_ms(str(row["started_utc"])) for row in client_rows if row.get("started_utc"))
    votes: dict[int, int] = {}
    for _, server_ms in naive:
        if server_ms is None:
            continue
        for client_ms in client[bisect_left(client, server_ms - 15 * 3600_000):
                                bisect_right(client, server_ms + 15 * 3600_000)]:
            quarters = round((server_ms - client_ms) / QUARTER_HOUR_MS)
            after_send_ms = server_ms - client_ms - quarters * QUARTER_HOUR_MS
            if -250 <= after_send_ms <= 5000:
                votes[quarters] = votes.get(quarters, 0) + 1
    zone_ms = max(votes, key=lambda q: votes[q]) * QUARTER_HOUR_MS if votes else 0
    return [{**row, "started_unix_ms": None if ms is None else ms - zone_ms} for row, ms in naive]


QUARTER_HOUR_MS = 900_000


def _naive_ms(stamp: object) -> float | None:
    """'YYYY-MM-DD HH:MM:SS.mmm' as if it were UTC (the zone is found by with_log_clock)."""
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp() * 1000
    except ValueError:
        return None


CLOCK_SLACK_S = 0.005  # both sides stamp the same clock in whole ms; a request is logged after it was sent


def _could_be(client: Mapping[str, Any], started_ms: float, server: Mapping[str, Any], max_skew_s: float) -> bool:
    """Whether the logged request could be this client request: logged after it was sent, same counts."""
    offset = server["started_unix_ms"] - started_ms
    return -CLOCK_SLACK_S * 1000 <= offset <= max_skew_s * 1000 and _same_counts(client, server)


def _same_counts(client: Mapping[str, Any], server: Mapping[str, Any]) -> bool:
    """The server counted the same prompt and completion tokens as the client row's usage, and both
    sides agree on success (where both sides say): a pair that disagrees is two different requests."""
    if client.get("status") is not None and server.get("status") is not None:
        if (client["status"] == "ok") != (server["status"] == "ok"):
            return False
    for mine, theirs in (("prompt_tokens", "prompt_tokens_server"), ("completion_tokens", "completion_tokens_server")):
        if client.get(mine) is not None and server.get(theirs) is not None and client[mine] != server[theirs]:
            return False
    return True


def _fill(merged: dict[str, Any], partner: Mapping[str, Any], how: str, note: str | None) -> None:
    merged.update({name: partner.get(name) for name in SERVER_FIELDS})
    merged.update(server_join=how, server_note=note, server_request_id=partner.get("request_id"),
                  server_instance_id=partner.get("server_instance_id"))


def _unix_ms(utc: str) -> float:
    return datetime.fromisoformat(utc.replace("Z", "+00:00")).timestamp() * 1000


_MEMORY_KEYS = {
    "runtime_reservation_bytes": "runtime_bytes",
    "available_after_weights_bytes": "free_after_weights_bytes",
    "available_after_startup_bytes": "free_after_startup_bytes",
    "kv_capacity_headroom_bytes": "headroom_bytes",
    "planned_slack_bytes": "slack_bytes",
    "cuda_graph_allowance_bytes": "graphs_allowance_bytes",
    "cuda_graph_observed_bytes": "graphs_observed_bytes",
    "minimum_runtime_reservation_bytes": "runtime_min_bytes",
    "kv_capacity_increment_bytes": "kv_page_group_bytes",
    "kv_payload_bytes": "kv_payload_bytes",
}


def ledger_from_events(events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The exact startup ledger from the last `server_start` event (byte counts, resolution 1 byte).

    v9+ add the paged-pool numbers, including B_min (runtime_min_bytes) and B_step
    (kv_page_group_bytes) of the capacity formula.
    """
    starts = [event for event in events if event.get("event") == "server_start"]
    if not starts:
        return {}
    start = starts[-1]
    engine, memory, server = start.get("engine") or {}, start.get("memory") or {}, start.get("server") or {}
    out: dict[str, Any] = {"schema_version": start.get("schema_version")}
    weights = (memory.get("weights") or {}).get("capacity_bytes")
    if weights is not None:
        out["weights_bytes"] = weights
    for source, key in _MEMORY_KEYS.items():
        if memory.get(source) is not None:
            out[key] = memory[source]
    for source, key in (("kv_cache", "kv_dtype"), ("kv_capacity_mode", "kv_capacity_mode"),
                        ("kv_capacity", "kv_tokens"), ("kv_capacity_page_groups", "kv_pages"),
                        ("kv_capacity_max_page_groups", "kv_max_pages"), ("max_context", "max_context"),
                        ("max_concurrency", "max_concurrency"), ("speculative_backend", "spec_backend"),
                        ("speculative_draft_window", "draft_tokens")):
        if engine.get(source) is not None:
            out[key] = engine[source]
    if server.get("host") is not None and server.get("port") is not None:
        out["listen_url"] = f"http://{server['host']}:{server['port']}"
    for key in [k for k in out if k.endswith("_bytes")]:
        out[f"{key}_resolution_bytes"] = 1
    return out


def throughput_rows(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`throughput` events (v9+) with the names LogReader.parse_throughput uses."""
    rows = []
    for event in events:
        if event.get("event") != "throughput":
            continue
        tokens = event.get("tokens") or {}
        rates = event.get("throughput_tokens_per_second") or {}
        scheduler = event.get("scheduler") or {}
        batch = event.get("decode_batch") or {}
        rows.append({
            "t_unix_ms": event.get("timestamp_unix_ms"), "interval_s": event.get("interval_seconds"),
            "prefill_tokens": tokens.get("computed_prefill"), "decode_tokens": tokens.get("committed_decode"),
            "prefill_tok_s": rates.get("prefill"), "decode_tok_s": rates.get("decode"),
            "running": scheduler.get("running"), "prefilling": scheduler.get("prefilling"),
            "decode_ready": scheduler.get("decode_ready"), "waiting": scheduler.get("waiting"),
            "batch": batch.get("average_size"),
        })
    return rows
