"""Line kinds of every NInfer log format that the live capture (G1) and the field reports (pipe) lack.

NInfer cannot run here. Lines marked "IF §x verbatim" are copied from reference/ninfer-interface.md;
"rendered" lines are built from a format it documents, with illustrative values; lines that add a
field are marked as such: they stand for what a later fork might print, to show that an unknown part
is reported as unread instead of dropped or read as zero.
"""

from __future__ import annotations

import pytest

from ninferkit.engines import get_adapter
from ninferkit.engines.ninfer.logs import parse_throughput, read_line, read_log, requests_from_lines
from ninferkit.server.diagnose import diagnose_log

ADAPTER = get_adapter("ninfer")
G3 = "2026-10-01 12:00:00.123  INFO  "  # IF §2.4 prefix
G2 = "[2026-09-01 12:00:00.123] [info] [ninfer-serve] "  # IF §2.3 prefix


def test_g0_requests_join_start_done_and_error() -> None:
    log = "\n".join([
        "ninfer-serve: loading model...",  # IF §2.1 verbatim
        # IF §2.1 verbatim start and done lines:
        "ninfer-serve: [req 1] openai_chat_completions non-stream msgs=2 max_tokens=128 (client) tools=0 "
        "tool_choice=auto tool_history=no thinking=on sampler=[temp=0.60 top_p=0.95 top_k=20 pres=1.00 seed=42] "
        "→ running",
        "ninfer-serve: [req 1] done finish=stop_token prompt=25 gen=57 cache=0 ttft=80ms prefill=312.5tok/s "
        "decode=77.1tok/s wall=0.81s speculative=off",
        # IF §2.1 `[req N] error <message>` and `(server default)`, rendered:
        "ninfer-serve: [req 2] anthropic_messages stream msgs=1 max_tokens=8192 (server default) tools=0 "
        "tool_choice=auto tool_history=no thinking=off sampler=[greedy] → running",
        "ninfer-serve: [req 2] error prepared prompt exceeds Engine context capacity",
        "ninfer-serve: loading model...",  # a restart: request ids count from 1 again
        "ninfer-serve: [req 1] openai_chat_completions stream msgs=1 max_tokens=16 (client) tools=0 "
        "tool_choice=auto tool_history=no thinking=off sampler=[greedy] → running",
    ])
    rows = requests_from_lines(read_log(log))
    assert [(r["server"], r["request_id"], r["status"]) for r in rows] == [(1, 1, "ok"), (1, 2, "errored"),
                                                                          (2, 1, None)]
    first, second, _ = rows
    assert (first["protocol"], first["stream"], first["max_tokens"], first["max_tokens_source"]) == (
        "openai_chat_completions", False, 128, "client")
    assert first["sampler"] == "temp=0.60 top_p=0.95 top_k=20 pres=1.00 seed=42" and first["thinking"] == "on"
    assert (first["completion_tokens_server"], first["decode_tokens_server"], first["ttft_s_server"]) == (57, 56, 0.08)
    assert second["max_tokens_source"] == "server default" and second["stream"] is True
    assert second["error"] == "prepared prompt exceeds Engine context capacity"
    assert not any("unread" in row for row in rows)


def test_g1_rejected_line() -> None:
    # IF §2.2 rejected-line format, rendered (the live capture has none: its refusals happen before the engine)
    line = read_line("[2026-08-20 10:00:00.123] [warning] ninfer-serve: [req 4] rejected phase=prepare "
                     "protocol=openai_chat_completions non-stream msgs=2 media=0 tools=0 status=503 "
                     "code=request_queue_timeout message=inference request expired before submission")
    assert (line.kind, line.level, line.unread) == ("request_error", "warning", ())
    assert line.values == {"request_id": 4, "phase": "prepare", "protocol": "openai_chat_completions",
                           "stream": False, "http_status": 503, "error_code": "request_queue_timeout",
                           "error": "inference request expired before submission"}


def test_g2_request_and_startup_lines() -> None:
    # IF §2.3 keys, values rendered
    rejected = read_line(G2 + "request id=5 status=rejected phase=prepare classification=client http_status=400 "
                              "error_type=invalid_request_error error_code=context_length_exceeded param=messages")
    assert (rejected.kind, rejected.unread) == ("request_error", ())
    assert (rejected.values["http_status"], rejected.values["error_code"]) == (400, "context_length_exceeded")
    assert read_line(G2 + "request id=5 status=submitted").kind == "request_start"
    progress = read_line(G2 + "startup phase=weights-materialize status=progress submitted_bytes=100 total_bytes=200")
    assert (progress.kind, progress.values, progress.unread) == ("startup", {}, ())
    failed = read_line('[2026-09-01 12:00:00.123] [critical] [ninfer-serve] server status=failed phase=startup '
                       'detail="CUDA error: out of memory"')
    assert (failed.kind, failed.level) == ("error", "critical")
    found = ADAPTER.diagnose(failed.text)
    assert found is not None and found.code == "engine_failed" and "CUDA error: out of memory" in found.cause


def test_g3_request_lines() -> None:
    started = read_line(G3 + "req#3 started | openai-chat stream | 2 messages | max output 8,192 | thinking "
                             "template default")  # IF §2.4 verbatim
    assert (started.kind, started.unread) == ("request_start", ())
    assert started.values == {"request_id": 3, "protocol": "openai-chat", "stream": True, "messages": 2,
                              "max_tokens": 8192, "thinking": "template default"}
    rejected = read_line("2026-10-01 12:00:00.123  WARN  req#7 rejected during prepare | openai-chat non-stream | "
                         "HTTP 429 | server overloaded | messages 2")  # IF §2.4 verbatim after the prefix
    assert (rejected.kind, rejected.level, rejected.unread) == ("request_error", "warning", ())
    assert (rejected.values["http_status"], rejected.values["error_code"]) == (429, "server_overloaded")
    tools = ADAPTER.parse_request_done(G3 + "req#4 done | anthropic | tool calls 2 | prompt 900 | output 40 | "
                                            "TTFT 95.0 ms | total 1.2s")  # IF §2.4 `tool calls N`, rendered
    assert tools is not None and (tools["finish_reason"], tools["tool_calls_server"]) == ("tool calls", 2)


@pytest.mark.parametrize(("line", "unread"), [
    # Each format's line with one field more than the reference documents (marked: not engine output).
    (G3 + "throughput | 5.0s | decode 71.2 tok/s (356 tok) | running 1 (decode-ready 1) | batch 1.00 | "
          "spec 2.1 tok/round", ["spec 2.1 tok/round"]),
    ("[2026-08-20 10:05:00.000] [info] ninfer-serve: throughput interval=5.002s prefill=0.0tok/s decode=71.2tok/s "
     "running=1 prefilling=0 decode_ready=1 waiting=0 avg_decode_batch=1.00 swapped=0", ["swapped=0"]),
    (G2 + "throughput interval_ms=5000.000 decode_tokens_per_second=71.200 spill_bytes=0", ["spill_bytes=0"]),
    (G3 + "throughput | five seconds | decode 71.2 tok/s", ["five seconds"]),
])
def test_an_unknown_part_of_a_throughput_line_is_unread(line: str, unread: list[str]) -> None:
    row = parse_throughput(line)
    assert row is not None and row["unread"] == unread
    assert row["decode_tok_s"] == 71.2


def test_a_value_that_is_not_a_number_is_none_and_unread() -> None:
    # G1 throughput line (IF §2.2) with its decode value garbled: None, never 0.
    row = parse_throughput("[2026-08-20 10:05:00.000] [info] ninfer-serve: throughput interval=5.002s "
                           "prefill=0.0tok/s decode=??tok/s running=1 prefilling=0 decode_ready=1 waiting=0 "
                           "avg_decode_batch=1.00")
    assert row is not None and row["decode_tok_s"] is None and row["unread"] == ["decode=??tok/s"]
    # G3 throughput line without an interval: the interval is not read, the rest is.
    bare = parse_throughput(G3 + "throughput | decode 71.2 tok/s (356 tok)")
    assert bare is not None and bare["interval_s"] is None and bare["decode_tokens"] == 356


def test_an_error_line_no_rule_knows_fails_the_start() -> None:
    # IF §2.4 ready line verbatim, then an ERROR line with a message no rule knows (made up).
    log = G3 + "listening on http://127.0.0.1:8080 | model qwen3.8-27b | auth disabled\n" + \
        "2026-10-01 12:00:01.000  ERROR engine worker 0 stalled\n"
    report = diagnose_log(log, ADAPTER)
    assert not report["healthy"] and report["verdict"] == "failed: unrecognized_error"
    assert report["errors"][0]["lines"] == [2] and report["errors"][0]["evidence"].endswith("stalled")
    assert ADAPTER.diagnose(log) is None  # the launch step's one diagnosis stays with the rules' knowledge


def test_g0_bind_failure_and_warmup() -> None:
    # IF §2.1: `error: failed to bind H:P` before any model work; `warmup failed (continuing): <what>`.
    bind = read_line("error: failed to bind 127.0.0.1:8080")
    assert (bind.kind, bind.format, bind.level) == ("error", "plain", "error")
    warmup = read_line("ninfer-serve: warmup failed (continuing): CUDA error")
    assert warmup.kind == "error"
    found = ADAPTER.diagnose(warmup.text)
    assert found is not None and found.code == "warmup_failed_continuing" and "CUDA error" in found.cause


def test_progress_rewritten_in_place_reads_as_its_last_state() -> None:
    # IF §2.2: on a TTY the load progress lines are rewritten with `\r`; the two lines are the live
    # capture's (ninfer_live/g1-h200/run/logs/server.log lines 2-3), joined as a terminal would get them.
    log = ("[2026-12-01 14:21:28.434] [info] ninfer-serve: load        weights                      0.00%           "
           "0 B /      15.67 GiB     0.000 s\r[2026-12-01 14:21:36.713] [info] ninfer-serve: load        weights      "
           "              100.00%     15.67 GiB /      15.67 GiB     8.279 s\n"
           "[2026-12-01 14:21:37.397] [info] ninfer-serve: model loaded in 10.713 s\n")
    lines = read_log(log)
    assert [(line.number, line.kind, line.unread) for line in lines] == [(1, "startup", ()), (2, "startup", ())]
    assert lines[0].values["weights_load_s"] == 8.279 and lines[1].values == {"ready_s": 10.713}
