"""vLLM's per-request spans: the receiver on loopback, fed by the OpenTelemetry SDK's own OTLP/HTTP exporter (the
exporter vLLM 0.26.0 uses, vllm/tracing/otel.py, with the attribute names of vllm/tracing/utils.py), the rows
made of them, and their join to the client's rows by the engine's request id."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from ninferkit.engines import get_adapter
from ninferkit.engines.vllm.otlp import join_spans, read_spans, span_rows
from ninferkit.engines.vllm.otlp_receiver import endpoint
from ninferkit.errors import ProfileError
from tests.conftest import DATA
from tests.unit.engines.test_engine_vllm import argv_of, profile

ADAPTER = get_adapter("vllm")
VLLM_SPAN = {  # what output_processor.do_tracing sets, values of a made-up request
    "gen_ai.latency.time_to_first_token": 0.05, "gen_ai.latency.e2e": 0.4, "gen_ai.latency.time_in_queue": 0.01,
    "gen_ai.usage.prompt_tokens": 1024, "gen_ai.usage.completion_tokens": 33,
    "gen_ai.latency.time_in_model_prefill": 0.03, "gen_ai.latency.time_in_model_decode": 0.32,
    "gen_ai.latency.time_in_model_inference": 0.35, "gen_ai.request.max_tokens": 128, "gen_ai.request.n": 1}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _export(port: int, request_ids: list[str]) -> None:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint(port))))
    tracer = provider.get_tracer("vllm.llm_engine")
    for request_id in request_ids:
        span = tracer.start_span("llm_request", start_time=time.time_ns())
        span.set_attributes({**VLLM_SPAN, "gen_ai.request.id": request_id})
        span.end()
    provider.shutdown()  # flushes, as vLLM's atexit does


def _receiver(tmp_path: Path, port: int, child: list[str]) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-m", "ninferkit.engines.vllm.otlp_receiver", "--port", str(port),
                                "--jsonl", str(tmp_path / "spans.jsonl"), "--", *child])
    for _ in range(200):
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1.0)
            return process
        except httpx.TransportError:
            time.sleep(0.05)
    process.kill()
    raise AssertionError("the receiver never listened")


def test_the_exporters_spans_reach_the_file_and_the_child_exit_code_is_the_receivers(tmp_path: Path) -> None:
    port = _free_port()
    receiver = _receiver(tmp_path, port, [sys.executable, "-c", "import time, sys; time.sleep(3); sys.exit(3)"])
    _export(port, ["chatcmpl-a", "chatcmpl-b"])
    assert receiver.wait(timeout=30) == 3
    spans = read_spans(tmp_path / "spans.jsonl")
    assert [span["attributes"]["gen_ai.request.id"] for span in spans] == ["chatcmpl-a", "chatcmpl-b"]
    assert spans[0]["name"] == "llm_request" and spans[0]["attributes"]["gen_ai.usage.prompt_tokens"] == 1024


def test_a_body_that_is_not_an_export_is_refused_and_kept_out(tmp_path: Path) -> None:
    port = _free_port()
    receiver = _receiver(tmp_path, port, [sys.executable, "-c", "import time; time.sleep(2)"])
    answer = httpx.post(endpoint(port), content=b"\xff\xff\xff not protobuf",
                        headers={"Content-Type": "application/x-protobuf"})
    assert answer.status_code == 400
    assert receiver.wait(timeout=30) == 0
    assert read_spans(tmp_path / "spans.jsonl") == []


def _span(request_id: str, **attributes: Any) -> dict[str, Any]:
    return {"name": "llm_request", "attributes": {**VLLM_SPAN, "gen_ai.request.id": request_id, **attributes}}


def test_span_rows_name_the_numbers_as_requests_jsonl_does() -> None:
    [row] = span_rows([_span("chatcmpl-a"), {"name": "other", "attributes": {}}])
    assert row == {"request_id": "chatcmpl-a", "queue_s_server": 0.01, "ttft_s_server": 0.05, "e2e_s_server": 0.4,
                   "prompt_s_server": 0.03, "decode_s_server": 0.32, "prompt_tokens_server": 1024,
                   "completion_tokens_server": 33, "decode_tokens_server": 32, "decode_tok_s_server": 32 / 0.32}


def test_the_join_is_by_request_id_and_says_why_a_row_has_none() -> None:
    rows = span_rows([_span("chatcmpl-a"), _span("chatcmpl-b", **{"gen_ai.usage.prompt_tokens": 7}),
                      _span("chatcmpl-dup"), _span("chatcmpl-dup")])
    clients = [{"response_id": "chatcmpl-b", "status": "ok"}, {"response_id": "chatcmpl-a", "status": "ok"},
               {"response_id": "msg_1796532597000", "status": "ok"}, {"response_id": None, "status": "ok"},
               {"response_id": "chatcmpl-dup", "status": "ok"}, {"response_id": None, "status": "error"}]
    joined = join_spans(clients, rows)
    assert joined[0]["prompt_tokens_server"] == 7 and joined[0]["server_request_id"] == "chatcmpl-b"
    assert joined[1]["prompt_tokens_server"] == 1024 and joined[1]["server_join"] == "request_id"
    assert "Messages API" in joined[2]["server_note"]
    assert "no id" in joined[3]["server_note"]
    assert "cannot be told apart" in joined[4]["server_note"] and "ttft_s_server" not in joined[4]
    assert joined[5] == {}


def test_the_profile_turns_the_receiver_on_and_the_run_keeps_its_file(tmp_path: Path) -> None:
    spans = tmp_path / "spans.jsonl"
    p = profile(arch="sm_90", otlp_traces_jsonl=str(spans), otlp_port=14318, tool_call_parser="hermes")
    argv = argv_of(p)
    assert argv[1:3] == ["-m", "ninferkit.engines.vllm.otlp_receiver"] and argv[argv.index("--") + 1] == "python3"
    assert argv[argv.index("--otlp-traces-endpoint") + 1] == "http://127.0.0.1:14318/v1/traces"
    assert argv[-5:-2] == ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    assert ADAPTER.env(p)["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    assert ADAPTER.request_log_path(p) == spans and ADAPTER.request_extensions(p) == {"tools"}
    assert ADAPTER.request_extensions(profile()) == frozenset() and "--" not in argv_of(profile())
    assert ADAPTER.server_log_truth(profile(), [{}]) is None
    assert "does not exist" in ADAPTER.server_log_truth(p, [{"response_id": "x"}])[0]["server_note"]
    spans.write_text(json.dumps(_span("chatcmpl-a")) + "\n" + '{"name": "llm_req')  # a last line cut short
    assert ADAPTER.server_log_truth(p, [{"response_id": "chatcmpl-a", "status": "ok"}])[0]["ttft_s_server"] == 0.05


def test_docker_and_the_receiver_do_not_go_together() -> None:
    with pytest.raises(ProfileError, match="native launch only"):
        argv_of(profile(arch="sm_90", otlp_traces_jsonl="/tmp/s.jsonl", docker=True))


SESSION5 = DATA / "vllm-live" / "session5" / "h200-vllm-otlp"
"""vLLM 0.26.0 on an H100 (2026-12-06) with the receiver on: the runbook's context, concurrency (C = 1, 8, 32),
rate and agent sweeps; logs/engine-request-log.jsonl is the receiver's span file as the run kept it."""


def test_every_answered_row_of_the_live_run_joins_its_own_span_concurrent_ones_included() -> None:
    rows = [json.loads(line) for line in (SESSION5 / "requests.jsonl").read_text().splitlines()]
    spans = read_spans(SESSION5 / "logs" / "engine-request-log.jsonl")
    joined = join_spans(rows, span_rows(spans))
    answered = [(row, found) for row, found in zip(rows, joined, strict=True) if row["status"] == "ok"]
    assert len(answered) == 161 and all(found["server_join"] == "request_id" for _, found in answered)
    concurrent = [(row, found) for row, found in answered if row["sweep"] in ("concurrency", "rate")]
    assert len(concurrent) == 151  # none of these had vLLM's numbers from /metrics deltas
    for row, found in concurrent:
        assert found["server_request_id"] == row["response_id"]
        assert found["prompt_tokens_server"] == row["prompt_tokens"]
        assert found["completion_tokens_server"] == row["completion_tokens"]
        assert found["ttft_s_server"] <= row["ttft_client_s"] and found["e2e_s_server"] <= row["e2e_client_s"]
    entries = [json.loads(line) for line in (SESSION5 / "server_truth.jsonl").read_text().splitlines()]
    last = {entry["request_uid"]: entry for entry in entries}  # the run's own passes, the latest per row
    assert sum(entry.get("server_join") == "request_id" for entry in last.values()) == 161
    # 4 rows' spans had not arrived at the pass after their cell (a note), and were joined at the next pass
    assert sum("not exported yet" in (entry.get("server_note") or "") for entry in entries) == 4
