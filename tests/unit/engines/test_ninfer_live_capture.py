"""Every log and request log a real `ninfer-serve` wrote, read line by line and checked against itself.

Data: tests/data/ninfer_live/ (a verbatim copy of shared/ninfer-live, see its README.md): the G1
build of ziworkslab/ninfer-3090-ubuntu at f750a5d on an H200, driven by ninferkit. Each server's
stderr is checked against the same process's `--request-log-jsonl` (its `server_start` event has
the listening port): the ledger, every throughput line and every per-request line must give the
engine's exact numbers within the rounding it printed them with. The startup failures must each
get their one diagnosis, with the profile field to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from ninferkit.engines import get_adapter
from ninferkit.engines.ninfer.logs import parse_ledger, parse_throughput, read_log, requests_from_lines
from ninferkit.engines.ninfer.request_log import ledger_from_events, read_events
from ninferkit.engines.ninfer.request_log import request_rows as log_request_rows
from ninferkit.server.diagnose import diagnose_log
from tests.conftest import DATA

LIVE = DATA / "ninfer_live"
LOGS = sorted(LIVE.rglob("*.log"))
REQUEST_LOGS = sorted([*LIVE.rglob("engine-request-log.jsonl"), *LIVE.rglob("reqlog.jsonl")])
SERVER_LOGS = [p for p in LOGS if p.name in ("server.log", "serve_http.log")]
ERRORS = LIVE / "g1-h200" / "startup-errors"
ADAPTER = get_adapter("ninfer")


def _instance(log_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The server_start of the process that wrote this log (same capture, same port), and its events.

    Both runs listened on 18080; within one capture (g1-h200, g1-h200-v100flags) every port is another.
    The capacity search's launches appended to the run's request log (same --request-log-jsonl path)."""
    port = int(parse_ledger(log_path.read_text())["listen_url"].rpartition(":")[2])
    capture = LIVE / log_path.relative_to(LIVE).parts[0]
    events = [event for path in REQUEST_LOGS if path.is_relative_to(capture) for event in read_events(path)]
    start, = [e for e in events if e["event"] == "server_start" and e["server"]["port"] == port]
    return start, [e for e in events if e["server_instance_id"] == start["server_instance_id"]]


def _within(printed: float | None, exact: float, resolution: float) -> bool:
    """A printed value agrees with the exact one within half a unit of its last digit (plus float noise)."""
    return printed is not None and abs(printed - exact) <= resolution / 2 + 1e-9 * max(1.0, abs(exact))


def test_the_capture_is_what_the_readme_says() -> None:
    assert len(LOGS) == 21 and len(SERVER_LOGS) == 10 and len(REQUEST_LOGS) == 4  # g1-h200-2x120k: its run only
    assert len(list(ERRORS.glob("*.log"))) == 11


@pytest.mark.parametrize("path", LOGS, ids=lambda p: str(p.relative_to(LIVE)))
def test_every_line_is_read(path: Path) -> None:
    lines = read_log(path.read_text())
    assert [(line.number, line.text) for line in lines if line.kind == "unread" or line.unread] == []
    # The only lines that are not the engine's are the capture harness's exit codes.
    assert [line.text for line in lines if line.kind == "other"] == (["rc=1"] if path.parent == ERRORS and
                                                                      "healthy" not in path.name else [])


@pytest.mark.parametrize("path", REQUEST_LOGS, ids=lambda p: str(p.relative_to(LIVE)))
def test_every_request_log_is_read(path: Path) -> None:
    events = read_events(path)
    ended = [e for e in events if e["event"] in ("request_done", "request_error", "request_rejected")]
    rows = log_request_rows(events)
    assert len(rows) == len(ended) and all(row["status"] in ("ok", "errored") for row in rows)
    assert {e["schema_version"] for e in events} == {8}  # the G1 fork's schema (IF §5.2 documents v9)


@pytest.mark.parametrize("path", SERVER_LOGS, ids=lambda p: str(p.relative_to(LIVE)))
def test_ledger_matches_the_engines_exact_numbers(path: Path) -> None:
    ledger = parse_ledger(path.read_text())
    start, _ = _instance(path)
    exact = ledger_from_events([start])
    for key in ("kv_tokens", "kv_pages", "kv_max_pages", "kv_capacity_mode", "listen_url"):
        assert ledger[key] == exact[key], key
    for key in ("runtime_bytes", "free_after_weights_bytes", "free_after_startup_bytes", "headroom_bytes",
                "slack_bytes", "graphs_observed_bytes", "graphs_allowance_bytes", "weights_bytes"):
        assert _within(ledger[key], exact[key], ledger[f"{key}_resolution_bytes"]), key
    # `load weights 100.00% … 8.279 s` is the upload the request log times (artifact.upload_seconds).
    assert _within(ledger["weights_load_s"], start["artifact"]["upload_seconds"], 0.001)
    assert ledger["model_id"] == start["server"]["public_model_id"] and "unread" not in ledger


@pytest.mark.parametrize("path", SERVER_LOGS, ids=lambda p: str(p.relative_to(LIVE)))
def test_throughput_lines_match_the_engines_throughput_events(path: Path) -> None:
    _, events = _instance(path)
    exact = [e for e in events if e["event"] == "throughput"]
    printed = [row for line in path.read_text().splitlines() if (row := parse_throughput(line)) is not None]
    assert len(printed) == len(exact) > 0
    for row, event in zip(printed, exact, strict=True):
        assert "unread" not in row
        assert _within(row["interval_s"], event["interval_seconds"], 0.001)
        rates = event["throughput_tokens_per_second"]
        assert _within(row["prefill_tok_s"], rates["prefill"], 0.1)
        assert _within(row["decode_tok_s"], rates["decode"], 0.1)
        assert {k: row[k] for k in event["scheduler"]} == event["scheduler"]
        if event["decode_batch"]["rounds"] == 0:
            assert row["batch"] is None  # printed `n/a`
        else:
            assert _within(row["batch"], event["decode_batch"]["average_size"], 0.01)


def _check_done(row: Mapping[str, Any], event: Mapping[str, Any], exact: Mapping[str, Any]) -> None:
    result, spec = event["result"], event["speculative"]
    assert (row["prompt_tokens_server"], row["completion_tokens_server"], row["cached_tokens_server"]) == (
        result["prompt_tokens"], result["completion_tokens"], result["prefix_cache_hit_tokens"])
    assert row["decode_tokens_server"] == exact["decode_tokens_server"]
    assert (row["finish_reason"], row["prefix_reuse_path"]) == (result["finish_reason"], result["prefix_reuse_path"])
    assert _within(row["ttft_s_server"], exact["ttft_s_server"], 0.001)
    assert _within(row["e2e_s_server"], exact["e2e_s_server"], 0.01)
    assert _within(row["prefill_tok_s_server"], exact["prefill_tok_s_server"], 0.1)
    assert _within(row["decode_tok_s_server"], exact["decode_tok_s_server"], 0.1)
    assert row["spec_backend_server"] == spec["backend"]
    if spec["backend"] == "none":
        assert row["acceptance_server"] is None and "tokens_per_round_server" not in row
    else:  # `speculative=mtp 1.00tok/round (0.0%)`: 1 + accepted per round, accepted / drafted
        assert _within(row["acceptance_server"], exact["acceptance_server"], 0.001)
        assert _within(row["tokens_per_round_server"], 1 + spec["accepted_tokens"] / spec["rounds"], 0.01)


@pytest.mark.parametrize("path", SERVER_LOGS, ids=lambda p: str(p.relative_to(LIVE)))
def test_request_lines_match_the_request_log(path: Path) -> None:
    _, events = _instance(path)
    exact = {row["request_id"]: row for row in log_request_rows(events)}
    by_id = {e["request"]["request_id"]: e for e in events if e["event"] in ("request_done", "request_error")}
    rows = requests_from_lines(read_log(path.read_text()))
    assert sorted(row["request_id"] for row in rows) == sorted(exact) and {row["server"] for row in rows} == {1}
    for row in rows:
        assert "unread" not in row and row["started_at"] and row["ended_at"]
        event = by_id[row["request_id"]]
        assert row["protocol"] == event["request"]["protocol"] and row["stream"] == event["request"]["stream"]
        assert row["max_tokens"] == event["request"]["requested_output_tokens"]
        if event["event"] == "request_error":
            assert row["status"] == "errored" and row["error"] == event["error"]["message"]
        else:
            assert row["status"] == "ok"
            _check_done(row, event, exact[row["request_id"]])


@pytest.mark.parametrize(("name", "code", "fix_words"), [
    ("unknown_flag.log", "unknown_argument", ["--bogus-flag", "serve.extra_args"]),
    ("concurrency9.log", "option_invalid", ["serve.max_concurrency", "[1,8]"]),
    ("prefill_chunk_1000.log", "option_invalid", ["serve.prefill_chunk", "multiple of 128"]),
    ("v3_header.log", "artifact_container_mismatch", ["artifact.revision", "ninferkit verify"]),
    ("junk.log", "artifact_container_mismatch", ["artifact.revision"]),
    ("missing.log", "artifact_missing", ["artifact.local_dir", "artifact.filename"]),
    ("kv_too_big.log", "kv_capacity_range", ["serve.kv.capacity", "serve.max_context x serve.max_concurrency"]),
    ("kv_below_context.log", "kv_capacity_too_small", ["serve.kv.capacity", "serve.max_context"]),
    ("port_in_use.log", "port_in_use", ["serve.port", "127.0.0.1:18092"]),
])
def test_each_startup_failure_gets_its_one_diagnosis(name: str, code: str, fix_words: list[str]) -> None:
    text = (ERRORS / name).read_text()
    first = ADAPTER.diagnose(text)
    assert first is not None and first.code == code
    report = diagnose_log(text, ADAPTER)
    assert [entry["code"] for entry in report["errors"]] == [code]  # the usage text that follows adds none
    assert report["verdict"] == f"failed: {code}" and not report["healthy"]
    for words in fix_words:
        assert words in first.fix
    assert first.evidence.startswith("[2026-12-01 ") and "[error] ninfer-serve: " in first.evidence


def test_the_missing_file_and_the_port_are_named_from_the_log() -> None:
    missing = ADAPTER.diagnose((ERRORS / "missing.log").read_text())
    port = ADAPTER.diagnose((ERRORS / "port_in_use.log").read_text())
    assert missing is not None and "/root/art/nothere.ninfer" in missing.cause
    assert port is not None and "sport = :18092" in port.fix


@pytest.mark.parametrize(("name", "tokens", "mode", "headroom"), [
    ("healthy_kv_auto_c2.log", 65536, "auto", 1024**3), ("healthy_kv262144_c8.log", 262144, "explicit", 0)])
def test_healthy_starts_give_no_diagnosis(name: str, tokens: int, mode: str, headroom: int) -> None:
    text = (ERRORS / name).read_text()
    assert ADAPTER.diagnose(text) is None
    report = diagnose_log(text, ADAPTER)
    assert report["healthy"] and report["errors"] == [] and report["verdict"].startswith("healthy start")
    ledger = report["ledger"]
    assert (ledger["kv_tokens"], ledger["kv_capacity_mode"], ledger["headroom_bytes"]) == (tokens, mode, headroom)
    assert ledger["weights_bytes"] == round(15.25 * 1024**3) and ledger["weights_load_s"] in (7.72, 8.569)


def test_the_capture_names_its_own_build() -> None:
    # A refused v3/junk file ('v1 or v2'), bracketed lines and the usage text's options: only the
    # fork the capture ran (README.md) prints all three.
    for name in ("junk.log", "v3_header.log"):
        build = diagnose_log((ERRORS / name).read_text(), ADAPTER)["build"]
        assert build["builds"] == ["ziworkslab/ninfer-3090-ubuntu"], name
    unknown = diagnose_log((ERRORS / "unknown_flag.log").read_text(), ADAPTER)["build"]
    assert unknown["unknown_options"] == ["--bogus-flag"] and "ziworkslab/ninfer-3090-ubuntu" in unknown["builds"]


def test_a_request_that_waited_too_long_is_a_request_error_not_a_failed_server() -> None:
    report = diagnose_log((LIVE / "g1-h200" / "http" / "serve_http.log").read_text(), ADAPTER)
    assert report["healthy"] and report["request_errors"] == ["request_queue_timeout"]
    entry, = report["errors"]
    assert entry["lines"] == [45, 46] and "serve.pending_timeout_ms" in entry["fix"]
    # the run's --pending-timeout-ms 1500 (README.md): requests 7 and 8 waited behind 6
    errored = [row["request_id"] for row in report["requests"] if row["status"] == "errored"]
    assert errored == [7, 8]


def test_throughput_summary_of_the_http_server() -> None:
    # 25 lines, 24 of 5 s and a last one of 4.857 s; the 120 s generation decodes at ~70 tok/s.
    summary = diagnose_log((LIVE / "g1-h200" / "http" / "serve_http.log").read_text(), ADAPTER)["throughput"]
    assert summary["lines"] == 25 and summary["intervals_s"] == [4.857, 5.0]
    assert summary["decode"]["peak_tok_s"] == 70.8 and summary["decode"]["peak_interval_s"] == 5.0
    assert summary["decode"]["active_lines"] == 25 and 69.0 <= summary["decode"]["average_tok_s"] <= 70.8
    assert summary["prefill"]["active_lines"] == 2 and summary["prefill"]["peak_tok_s"] == 629.4

