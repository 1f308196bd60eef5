"""vLLM's own per-request numbers from its OpenTelemetry spans, for requests that ran together.

`/metrics` deltas give a request's server numbers only when it ran alone (a histogram's sum cannot be split
between overlapping requests). vLLM exports one `llm_request` span per finished request when it is started with
`--otlp-traces-endpoint` (vllm/v1/engine/output_processor.py `do_tracing`, vLLM 0.26.0): queue time, TTFT,
prefill and decode time, end-to-end time and token counts, named by vllm/tracing/utils.py `SpanAttributes`, and
`gen_ai.request.id`, the engine's external request id, which on the Chat API is the `id` every streamed chunk
carries (`chatcmpl-...`), so a span joins its row exactly by the row's `response_id`. The Messages API answers
with its own `msg_...` id, so its rows find no span and say so.

The receiver (otlp_receiver.py) stores each span as one JSON line (`span_record`); `span_rows` turns those into
rows under requests.jsonl's names and `join_spans` lays them on the client rows. Decoding uses the OpenTelemetry
project's own generated protobuf classes (opentelemetry-proto): the OTLP messages nest four deep with variant
values, and generated code from the specification's .proto files decodes every field the way the exporters
encode it, where hand-written wire parsing would have to restate that schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from ninferkit.bounded import LOG_FILE_BYTES, read_file
from ninferkit.errors import BadInput

SPAN_NAME = "llm_request"
"""The span vLLM 0.26.0 exports once per finished request."""
_SECONDS = {
    "gen_ai.latency.time_in_queue": "queue_s_server",
    "gen_ai.latency.time_to_first_token": "ttft_s_server",
    "gen_ai.latency.e2e": "e2e_s_server",
    "gen_ai.latency.time_in_model_prefill": "prompt_s_server",
    "gen_ai.latency.time_in_model_decode": "decode_s_server",
}
_COUNTS = {"gen_ai.usage.prompt_tokens": "prompt_tokens_server",
           "gen_ai.usage.completion_tokens": "completion_tokens_server"}
REQUEST_ID = "gen_ai.request.id"


def _value(value: AnyValue) -> Any:
    """An attribute's value as Python: vLLM sets strings, ints and floats only; others come back as text."""
    kind = value.WhichOneof("value")
    if kind in ("string_value", "int_value", "double_value", "bool_value"):
        return getattr(value, kind)
    return None if kind is None else str(getattr(value, kind))


def decode_export(body: bytes) -> list[dict[str, Any]]:
    """An OTLP/HTTP protobuf body (ExportTraceServiceRequest) -> one `span_record` per span; BadInput when the
    body is not such a message."""
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except DecodeError as exc:
        raise BadInput(f"not an OTLP ExportTraceServiceRequest: {exc}") from None
    return [span_record(span.name, span.trace_id.hex(), span.start_time_unix_nano, span.end_time_unix_nano,
                        {kv.key: _value(kv.value) for kv in span.attributes})
            for resource in request.resource_spans for scope in resource.scope_spans for span in scope.spans]


def span_record(name: str, trace_id: str, start_ns: int, end_ns: int, attributes: Mapping[str, Any]
                ) -> dict[str, Any]:
    """What the receiver stores of a span: its name, trace, times and attributes (one JSON line)."""
    return {"name": name, "trace_id": trace_id, "start_unix_ns": start_ns, "end_unix_ns": end_ns,
            "attributes": dict(attributes)}


def read_spans(path: Path) -> list[dict[str, Any]]:
    """The receiver's JSONL file; a line cut short by a receiver that died mid-write is skipped (the spans
    before it stand)."""
    out = []
    for line in read_file(path, LOG_FILE_BYTES, "reading vLLM's spans").decode(errors="replace").splitlines():
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            out.append(found)
    return out


def span_rows(spans: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each `llm_request` span as a row under requests.jsonl's names: `request_id`, the five times, the two
    counts, and derived decode_tokens_server (the first token is prefill's) and decode_tok_s_server."""
    rows = []
    for span in spans:
        attributes = span.get("attributes") or {}
        if span.get("name") != SPAN_NAME or REQUEST_ID not in attributes:
            continue
        row: dict[str, Any] = {"request_id": str(attributes[REQUEST_ID])}
        row.update({name: float(attributes[key]) for key, name in _SECONDS.items() if key in attributes})
        row.update({name: int(attributes[key]) for key, name in _COUNTS.items() if key in attributes})
        generated = row.get("completion_tokens_server")
        if generated:
            row["decode_tokens_server"] = generated - 1
            if row.get("decode_s_server"):
                row["decode_tok_s_server"] = (generated - 1) / row["decode_s_server"]
        rows.append(row)
    return rows


def join_spans(client_rows: Sequence[Mapping[str, Any]], server_rows: Sequence[Mapping[str, Any]]
               ) -> list[dict[str, Any]]:
    """Server fields per client row (same order) by the row's `response_id`, the engine's request id: an exact
    join that concurrency cannot confuse. A row with no span says why (`server_note`); an id two spans carry
    (never seen: vLLM's ids are random) pairs with neither, and says so."""
    by_id: dict[str, list[Mapping[str, Any]]] = {}
    for row in server_rows:
        by_id.setdefault(row["request_id"], []).append(row)
    out: list[dict[str, Any]] = []
    for client in client_rows:
        response_id = client.get("response_id")
        found = by_id.get(str(response_id), []) if response_id else []
        if len(found) == 1:
            span = found[0]
            out.append({**{k: v for k, v in span.items() if k != "request_id"}, "server_join": "request_id",
                        "server_request_id": span["request_id"], "server_note": None})
        elif len(found) > 1:
            out.append({"server_note": f"{len(found)} vLLM spans carry the request id {response_id}: they cannot "
                                       "be told apart, so none is paired"})
        elif client.get("status") != "ok":
            out.append({})
        elif not response_id:
            out.append({"server_note": "the answer carried no id, so no vLLM span can be matched to it"})
        else:
            out.append({"server_note": f"no vLLM span carries the request id {response_id} (the Messages API answers "
                                       "with an id of its own, not the engine's; or the span was not exported yet)"})
    return out
