"""`ninferkit diagnose` as a user runs it: on the live capture's logs, on seed lines pasted into a file,
and on a llama-server log through a profile. Exit codes: 0 healthy start, 1 failure, 2 bad usage.

Data: tests/data/ninfer_live/ (real ninfer-serve output, see its README.md), tests/seed_excerpts.py
(the field reports' lines, verbatim), tests/data/llama_server_cuda_h200/ (real llama-server logs).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ninferkit.cli import main
from tests import seed_excerpts as seeds
from tests.conftest import DATA, REPO

LIVE = DATA / "ninfer_live" / "g1-h200"
ERRORS = LIVE / "startup-errors"
LLAMA = DATA / "llama_server_cuda_h200"


def _run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main(["diagnose", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def _pasted(tmp_path: Path, excerpt: seeds.Excerpt) -> Path:
    path = tmp_path / f"{excerpt.section}.log"
    path.write_text(excerpt.text + "\n")
    return path


def test_a_healthy_run(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, LIVE / "run" / "logs" / "server.log")
    assert code == 0
    assert "verdict: healthy start (listening on http://127.0.0.1:18080)" in out
    assert "ziworkslab/ninfer-3090-ubuntu" in out and "log format bracketed" in out
    assert "weights_bytes 15.67 GiB" in out and "kv_tokens 131072" in out and "weights_load_s 8.279" in out
    assert "requests: 54 (54 done, 0 with an error, 0 unfinished)" in out
    assert "errors: none" in out and "not understood" not in out
    assert "peak 3071.7 tok/s in one 2 s interval" in out  # the run's best prefill interval


def test_startup_failures_json(capsys: pytest.CaptureFixture[str]) -> None:
    logs = sorted(ERRORS.glob("*.log"))
    code, out, _ = _run(capsys, *logs, "--json")
    assert code == 1  # one failure is enough
    reports = {Path(r["log"]).name: r for r in json.loads(out)}
    assert set(reports) == {p.name for p in logs}
    assert {name: r["verdict"] for name, r in reports.items()} == {
        "concurrency9.log": "failed: option_invalid", "junk.log": "failed: artifact_container_mismatch",
        "kv_below_context.log": "failed: kv_capacity_too_small", "kv_too_big.log": "failed: kv_capacity_range",
        "missing.log": "failed: artifact_missing", "port_in_use.log": "failed: port_in_use",
        "prefill_chunk_1000.log": "failed: option_invalid", "unknown_flag.log": "failed: unknown_argument",
        "v3_header.log": "failed: artifact_container_mismatch",
        "healthy_kv262144_c8.log": "healthy start (listening on http://127.0.0.1:18095)",
        "healthy_kv_auto_c2.log": "healthy start (listening on http://127.0.0.1:18094)"}
    concurrency = reports["concurrency9.log"]["errors"][0]
    assert concurrency["fix"] == "change serve.max_concurrency so that: --max-concurrency must be in [1,8]"
    assert concurrency["lines"] == [1] and concurrency["evidence"].endswith("--max-concurrency must be in [1,8]")
    assert reports["concurrency9.log"]["lines"] == {"error": 1, "usage": 14, "other": 1}


def test_only_healthy_starts_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, ERRORS / "healthy_kv_auto_c2.log", ERRORS / "healthy_kv262144_c8.log")
    assert code == 0 and out.count("verdict: healthy start") == 2


def test_request_errors_do_not_fail_a_healthy_server(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, LIVE / "http" / "serve_http.log", "--json")
    report, = json.loads(out)
    assert code == 0 and report["healthy"] and report["request_errors"] == ["request_queue_timeout"]
    assert report["errors"][0]["lines"] == [45, 46]
    assert [r["status"] for r in report["requests"]].count("errored") == 2


def test_the_reports_ledger_pasted(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = _run(capsys, _pasted(tmp_path, seeds.LEDGER), "--json")
    report, = json.loads(out)
    assert code == 0 and report["verdict"] == "healthy start (listening on http://0.0.0.0:8080)"
    ledger = report["ledger"]
    assert (ledger["kv_tokens"], ledger["kv_dtype"], ledger["ready_s"]) == (262144, "int8", 18.2)
    assert round(ledger["weights_bytes"] / 1024**3, 1) == 19.7 and round(ledger["runtime_bytes"] / 1024**3, 1) == 10.8
    assert report["build"]["log_format"] == "pipe" and report["unread"] == []


def test_the_reports_refusal_pasted_with_its_profile(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    profile = REPO / "params" / "ninfer-v100-pcie-nvfp4.yaml"  # seed 000's deployment
    code, out, _ = _run(capsys, _pasted(tmp_path, seeds.STARTUP_REFUSED), "--profile", profile)
    assert code == 1
    assert "verdict: failed: artifact_container_mismatch" in out
    assert "build: hamawang/ninfer-v100-20260916@f17d37f (" in out
    assert "the profile's build hamawang/ninfer-v100-20260916@f17d37f matches the log" in out
    assert "artifact_container_mismatch (line 2)" in out and "fix: pin artifact.revision" in out


def test_a_profile_of_another_build_is_told_how_it_differs(capsys: pytest.CaptureFixture[str]) -> None:
    profile = REPO / "params" / "ninfer-rtx3090-groupwise.yaml"  # seed 003: Don-Chad's prebuilt, pipe lines
    code, out, _ = _run(capsys, ERRORS / "junk.log", "--profile", profile)
    assert code == 1
    assert "the profile's build Don-Chad/ninfer-3090@0.6.1 does NOT match the log" in out
    assert "its row prints pipe lines; the log's are bracketed" in out


def test_the_reports_throughput_lines_pasted(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "throughput.log"
    path.write_text(seeds.SERIAL_PREFILL.text + "\n" + seeds.PREFILL_STARVES_DECODE.text + "\n")
    code, out, _ = _run(capsys, path)
    assert code == 1  # three throughput lines show no start
    assert "verdict: no start" in out
    assert "decode: average 65.0 tok/s over 2 intervals (650 tokens in 10.0 s); peak 126.8 tok/s" in out
    assert "prefill: average 614.4 tok/s over 2 intervals (6144 tokens in 10.0 s); peak 819.2 tok/s" in out
    assert "build: " in out and "told by the messages' `what | value` shape" in out


def test_a_line_nobody_knows_is_shown(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # The live capture's healthy start with two lines a later fork might print (made up here to stand
    # for them; the rest is the capture): a new capacity field and an error no rule knows.
    lines = (ERRORS / "healthy_kv_auto_c2.log").read_text().splitlines()
    lines.insert(5, lines[4] + " lanes=2")
    lines.append("[2026-12-01 14:25:31.000] [error] ninfer-serve: something new went wrong")
    path = tmp_path / "new.log"
    path.write_text("\n".join(lines) + "\n")
    code, out, _ = _run(capsys, path, "--json")
    report, = json.loads(out)
    assert code == 1 and report["verdict"] == "failed: unrecognized_error"
    assert report["errors"][0]["evidence"].endswith("something new went wrong")
    assert report["ledger"]["unread"] == ["lanes=2 (line 6)"]
    assert report["unread"] == [{"line": 6, "text": lines[5], "unread": ["lanes=2"]}]


def test_a_llama_server_log_through_its_profile(capsys: pytest.CaptureFixture[str]) -> None:
    profile = REPO / "params" / "h200-llamacpp.yaml"
    code, out, _ = _run(capsys, LLAMA / "launch-c81920-np8-f16.log", "--profile", profile)
    assert code == 0 and "engine: llama_server" in out and "n_ctx_per_slot 81920" in out
    code, out, _ = _run(capsys, LLAMA / "q8_0-head80-refused.log", "--profile", profile)
    assert code == 1 and "verdict: failed: cache_type_head_size" in out
    code, out, _ = _run(capsys, LLAMA / "launch-c81920-np8-f16.log")  # without the profile: read as NInfer's
    assert code == 1 and "verdict: no line of this log is ninfer's (another engine's log is read with --profile)" in out
    assert "build: the log does not tell" in out


def test_bad_usage_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = _run(capsys, tmp_path / "nothere.log")
    assert code == 2 and "cannot read" in err and "nothere.log" in err
    code, _, err = _run(capsys, ERRORS / "junk.log", "--profile", tmp_path / "nope.yaml")
    assert code == 2 and "does not exist" in err
    code, _, err = _run(capsys)  # neither a log nor --url (a live server)
    assert code == 2 and "diagnose needs a LOG, or --url URL" in err
