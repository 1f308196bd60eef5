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

from ninferkit.bounded import LOG_FILE_BYTES, read_file
from ninferkit.errors import NinferkitError
from ninferkit.rundir.records import RequestRow

ARTIFACT_TYPE = "ninfer_serve_request_log"
KNOWN_SCHEMAS = (2, 8, 9, 19, 21)
TERMINAL_EVENTS = ("request_done", "request_error", "request_rejected")


def read_events(source: str | Path | Iterable[str]) -> list[dict[str, Any]]:
    """Events from a JSONL file (or its lines); a torn last line from a killed server is skipped.

    Raises NinferkitError for a line that is not a NInfer request-log event (wrong file).
    """
    lines = (read_file(Path(source), LOG_FILE_BYTES, "reading NInfer's request log").decode(errors="replace")
             .splitlines() if isinstance(source, (str, Path)) else list(source))
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
        "queue_s_server": _queue_s(engine_timing, timings),
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


def _queue_s(engine_timing: Mapping[str, Any], timings: Mapping[str, Any]) -> float | None:
    """The request's wait in the engine's queue: `engine_timing.queue_wait_seconds` where the engine writes it (G3);
    else, where it writes its own TTFT (G1 on), that TTFT less the parts it names (prepare, vision, prefill). G1
    writes no queue field, and its TTFT runs from arrival: in the captured run (shared/ninfer-live/g1-h200-2x120k)
    every request served alone leaves under 1 ms over, and the second of two 122,880-token prompts 67.11 s, the
    first one's prefill. None where the log has neither (G0 writes no TTFT)."""
    if engine_timing.get("queue_wait_seconds") is not None:
        return float(engine_timing["queue_wait_seconds"])
    ttft, prefill = timings.get("ttft"), timings.get("prefill")
    if ttft is None or prefill is None:
        return None
    return max(0.0, float(ttft) - float(timings.get("prepare") or 0.0) - float(timings.get("vision") or 0.0)
               - float(prefill))


SERVER_FIELDS = RequestRow.LOG_FIELDS
JOIN_FIELDS = tuple(name for name in RequestRow.model_fields if name.startswith("server_"))
"""What join_client_rows adds beside SERVER_FIELDS: how the pair was made, and the server's own ids."""


def join_client_rows(client_rows: Sequence[Mapping[str, Any]], server_rows: Sequence[Mapping[str, Any]],
                     max_skew_s: float = 5.0, early_s: float = 0.25) -> list[dict[str, Any]]:
    """Client rows (requests.jsonl) with the server's fields filled in from the request log.

    A client row that carries `server_request_id` is matched on it (G2/G3 send `x-request-id`).
    Otherwise a logged request can be a client row's only if it fits inside it (`_fits`): logged
    between `early_s` before and `max_skew_s` after the send, done between `max_skew_s` before and
    `early_s` after the client's end (the engine's wall clock and ours are the same host's clock), a
    TTFT, total and queue-plus-prompt time no longer than the client's, and the same prompt and
    completion tokens and outcome. Each logged request pairs once, so pass all rows of a run at once.

    The fits make a graph; a pair is made where every way of pairing the most rows makes it (`time`).
    Where several requests in flight together fit each other's log entries, the order of the
    client's ends against the order of the engine's done events decides, when both sides end apart
    (`done_order`); where even that cannot tell them apart, none of them is paired and `server_note`
    names the log entries they could be. The engine admits requests in its own order, not the send
    order: start order is never used. Rows without a partner get `server_join` None. The output keeps
    the input order; the inputs are not modified.
    """
    by_id = {str(row["request_id"]): row for row in server_rows}
    out = [dict(client) for client in client_rows]
    for merged in out:
        merged["server_join"] = None
    for merged in out:
        if merged.get("server_request_id") is not None:
            partner = by_id.get(str(merged["server_request_id"]))
            if partner is not None:
                _fill(merged, partner, "request_id", None)
    taken = {str(merged["server_request_id"]) for merged in out if merged["server_join"] == "request_id"}
    pending = sorted((row for row in server_rows if row.get("started_unix_ms") is not None
                      and str(row["request_id"]) not in taken), key=lambda row: row["started_unix_ms"])
    starts = [row["started_unix_ms"] for row in pending]
    spans = {i: _client_span(m) for i, m in enumerate(out)
             if m.get("server_request_id") is None and m.get("started_utc")}
    fits: dict[int, list[int]] = {}
    for index, (sent_ms, ended_ms) in spans.items():
        window = range(bisect_left(starts, sent_ms - early_s * 1000), bisect_right(starts, sent_ms + max_skew_s * 1000))
        fits[index] = [j for j in window if _fits(out[index], sent_ms, ended_ms, pending[j], max_skew_s, early_s)]
    for clients in _components(fits):
        graph = {index: fits[index] for index in clients}
        pairs = _forced_pairs(graph)
        how = "time"
        if len(pairs) < len(clients):
            ordered = _done_order(graph, spans, pending)
            if ordered is not None:
                pairs, how = ordered, "done_order"
        for index in clients:
            if index in pairs:
                _fill(out[index], pending[pairs[index]], how, None)
            elif graph[index]:
                ids = ", ".join(str(pending[j]["request_id"]) for j in sorted({j for i in clients for j in graph[i]}))
                out[index]["server_note"] = (
                    f"{len(clients)} requests in flight together fit the log entries of requests {ids} alike (same "
                    "token counts, start and done times within the clocks' slack, TTFTs that fit): the log cannot "
                    "tell which is which, so none is paired")
    return out


def _client_span(client: Mapping[str, Any]) -> tuple[float, float | None]:
    """(sent, ended) on the unix clock in ms: the row's started_utc, plus its end-to-end time."""
    sent_ms = _unix_ms(str(client["started_utc"]))
    e2e = client.get("e2e_client_s")
    return sent_ms, None if e2e is None else sent_ms + e2e * 1000


DURATION_SLACK_S = 0.05
"""How much longer a server-measured duration may be than the client's of the same request: stderr prints
times rounded (ms, 0.01 s), and the two sides read different timers; a real excess is seconds."""


def _fits(client: Mapping[str, Any], sent_ms: float, ended_ms: float | None, server: Mapping[str, Any],
          max_skew_s: float, early_s: float) -> bool:
    """Whether the logged request could be this client request: the same counts and outcome, its start and
    done within the clocks' slack of the client's send and end, and its TTFT, total and queue-plus-prompt
    time inside the client's (the engine sees a request after it is sent and answers before it is received)."""
    if not _same_counts(client, server):
        return False
    offset = server["started_unix_ms"] - sent_ms
    if not -early_s * 1000 <= offset <= max_skew_s * 1000:
        return False
    if ended_ms is not None and server.get("ended_unix_ms") is not None:
        if not -max_skew_s * 1000 <= server["ended_unix_ms"] - ended_ms <= early_s * 1000:
            return False
    inside = ((server.get("ttft_s_server"), client.get("ttft_client_s")),
              (server.get("e2e_s_server"), client.get("e2e_client_s")),
              (_queue_and_prompt_s(server), client.get("e2e_client_s")))
    return all(theirs is None or mine is None or theirs <= mine + DURATION_SLACK_S for theirs, mine in inside)


def _queue_and_prompt_s(server: Mapping[str, Any]) -> float | None:
    prompt = server.get("prompt_s_server")
    return None if prompt is None else prompt + (server.get("queue_s_server") or 0.0)


def _components(fits: Mapping[int, Sequence[int]]) -> list[list[int]]:
    """Client rows grouped by the log entries they could share (connected through any fit)."""
    owner: dict[int, int] = {}
    groups: dict[int, list[int]] = {}
    for index in sorted(fits):
        joined = {owner[j] for j in fits[index] if j in owner}
        group = [index]
        for other in joined:
            group += groups.pop(other)
        groups[index] = group
        for member in group:
            for j in fits[member]:
                owner[j] = index
    return [sorted(group) for group in groups.values()]


def _matching(graph: Mapping[int, Sequence[int]], banned: tuple[int, int] | None = None) -> dict[int, int]:
    """A largest pairing of client rows to log entries (augmenting paths), without the `banned` pair."""
    partner_of: dict[int, int] = {}

    def augment(index: int, seen: set[int]) -> bool:
        for j in graph[index]:
            if (index, j) == banned or j in seen:
                continue
            seen.add(j)
            if j not in partner_of or augment(partner_of[j], seen):
                partner_of[j] = index
                return True
        return False

    for index in graph:
        augment(index, set())
    return {index: j for j, index in partner_of.items()}


def _forced_pairs(graph: Mapping[int, Sequence[int]]) -> dict[int, int]:
    """The pairs every largest pairing makes: what the log tells apart, whatever the rest."""
    best = _matching(graph)
    return {index: j for index, j in best.items() if len(_matching(graph, (index, j))) < len(best)}


ORDER_SLACK_MS = 5.0
"""Two ends closer than this on either side have no order: the clocks stamp whole ms, the stream's last
chunk takes a moment to arrive."""


def _done_order(graph: Mapping[int, Sequence[int]], spans: Mapping[int, tuple[float, float | None]],
                pending: Sequence[Mapping[str, Any]]) -> dict[int, int] | None:
    """Requests in flight together that fit the same log entries, paired by the order they ended in: the
    k-th client row to end with the k-th of their log entries to be done. None unless the rows and entries
    are as many, every end on both sides is known and apart from the next, and every such pair fits."""
    client_ends = {index: spans[index][1] for index in graph}
    entry_ends = {j: pending[j].get("ended_unix_ms") for index in graph for j in graph[index]}
    known_clients = {index: end for index, end in client_ends.items() if end is not None}
    known_entries = {j: float(end) for j, end in entry_ends.items() if end is not None}
    if len(known_clients) != len(client_ends) or len(known_entries) != len(entry_ends) or len(graph) != len(entry_ends):
        return None
    clients = sorted(known_clients, key=known_clients.__getitem__)
    entries = sorted(known_entries, key=known_entries.__getitem__)
    for ends in ([known_clients[i] for i in clients], [known_entries[j] for j in entries]):
        if any(later - earlier < ORDER_SLACK_MS for earlier, later in zip(ends, ends[1:], strict=False)):
            return None
    pairs = dict(zip(clients, entries, strict=True))
    return pairs if all(pairs[index] in graph[index] for index in clients) else None


def with_log_clock(log_rows: Sequence[Mapping[str, Any]], client_rows: Sequence[Mapping[str, Any]]
                   ) -> list[dict[str, Any]]:
    """Rows read from stderr request lines (logs.requests_from_lines) with `started_unix_ms` and
    `ended_unix_ms` (the submitted and done lines' stamps), so they join like request-log rows.

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
    out = []
    for row, started_ms in naive:
        ended_ms = _naive_ms(row.get("ended_at"))
        out.append({**row, "started_unix_ms": None if started_ms is None else started_ms - zone_ms,
                    "ended_unix_ms": None if ended_ms is None else ended_ms - zone_ms})
    return out


QUARTER_HOUR_MS = 900_000


def _naive_ms(stamp: object) -> float | None:
    """'YYYY-MM-DD HH:MM:SS.mmm' as if it were UTC (the zone is found by with_log_clock)."""
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp() * 1000
    except ValueError:
        return None


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
