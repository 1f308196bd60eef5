"""The engine's records joined to the client's rows of a real NInfer run with two concurrent 122,880-token requests.

Data: tests/data/ninfer_live/g1-h200-2x120k/run (see README.md there), a run directory of ninferkit 1af22a9 against
`ninfer-serve` of the G1 fork on an H200: requests.jsonl (the client's rows), engine-request-log.jsonl (the engine's
--request-log-jsonl), logs/server.log (its stderr), telemetry.jsonl (its throughput lines on the rows' clock) and
server_truth.jsonl as the old start-order join wrote it. The engine admitted the second-sent long request first
(request 6, sent 1 ms after the other), so the start order pairs them wrong. Nothing here is edited: the rejoin
appends entries to a copy's server_truth.jsonl, as the sweeps step does after every cell.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ninferkit.engines import get_adapter
from ninferkit.engines.ninfer.request_log import join_client_rows, read_events, request_rows
from ninferkit.params.load import validate_profile
from ninferkit.params.profile import Profile
from ninferkit.rundir.records import RequestRow
from ninferkit.rundir.runs import RunDir, append_jsonl, read_jsonl
from ninferkit.sweeps.truth import decode_gap_summary, decode_gaps, rows_with_server_truth
from tests.conftest import DATA

RUN = DATA / "ninfer_live" / "g1-h200-2x120k" / "run"
ADAPTER = get_adapter("ninfer")
LONG = 122_880


def client_rows() -> list[dict[str, Any]]:
    return list(read_jsonl(RUN / "requests.jsonl"))


def profile(request_log: Path | None) -> Profile:
    """The capture's engine, with or without its request log (the recorded profile names the capture machine's path)."""
    fork = json.loads((RUN / "manifest.json").read_text())["profile"]["engine"]["fork"]
    serve: dict[str, Any] = {"max_context": 131072, "max_concurrency": 2, "kv": {"capacity": 262144}}
    if request_log is not None:
        serve["request_log_jsonl"] = str(request_log)
    return validate_profile({"name": "g1-2x120k", "engine": {"kind": "ninfer", "fork": fork},
                             "artifact": {"url": "https://example.invalid/m.ninfer"}, "serve": serve})


def rejoined(tmp_path: Path, request_log: Path = RUN / "engine-request-log.jsonl") -> list[RequestRow]:
    """A copy of the run with the engine's record joined again (appended to server_truth.jsonl, the last entry of a
    row wins), read as the tables and the write-up read it."""
    copy = tmp_path / "run"
    shutil.copytree(RUN, copy)
    rows = client_rows()
    found = ADAPTER.server_log_truth(profile(request_log), rows, [copy / "logs" / "server.log"])
    assert found is not None
    for row, fields in zip(rows, found, strict=True):
        append_jsonl(copy / "server_truth.jsonl", {"request_uid": row["request_uid"], "cell_id": row["cell_id"],
                                                   "attempt": row["attempt"], **fields})
    return rows_with_server_truth(RunDir(copy))


def long_pair(rows: list[RequestRow]) -> list[RequestRow]:
    """The two 122,880-token rows, in the order the client finished them."""
    pair = [row for row in rows if row.sweep == "concurrency" and row.prompt_tokens == LONG]
    assert len(pair) == 2
    return sorted(pair, key=lambda row: float(row.t_done or 0.0))


def test_the_two_long_requests_are_joined_by_their_done_times_and_ttfts(tmp_path: Path) -> None:
    first, second = long_pair(rejoined(tmp_path))
    assert float(first.t_send or 0) > float(second.t_send or 0)  # the one sent 1 ms later ended first
    logged = request_rows(read_events(RUN / "engine-request-log.jsonl"))
    ended = {row["request_id"]: row["ended_unix_ms"] for row in logged}
    assert (first.server_request_id, second.server_request_id) == (6, 7)
    assert ended[7] - ended[6] > 39_000  # the engine's done events, 39.5 s apart, in the order the client ended
    for row in (first, second):
        assert row.server_join == "time" and row.server_note is None
        assert row.ttft_s_server is not None and row.ttft_client_s is not None
        assert row.ttft_s_server <= row.ttft_client_s  # the engine answers before the client hears it
        assert row.ttft_client_s - row.ttft_s_server < 0.01
    assert first.ttft_s_server == pytest.approx(66.235, abs=0.001)
    assert second.ttft_s_server == pytest.approx(133.358, abs=0.001)


def test_the_stderr_done_lines_join_the_same_way() -> None:
    rows = client_rows()
    from_stderr = ADAPTER.server_log_truth(profile(None), rows, [RUN / "logs" / "server.log"])
    exact = join_client_rows(rows, [row for row in request_rows(read_events(RUN / "engine-request-log.jsonl"))
                                    if row.get("status")])
    assert from_stderr is not None
    assert [entry.get("server_request_id") for entry in from_stderr] == [row.get("server_request_id") for row in exact]
    assert all(entry.get("server_join") == "time" for entry in from_stderr)


def test_the_start_order_pairing_the_capture_recorded_is_withheld_not_published(tmp_path: Path) -> None:
    """server_truth.jsonl as the old join wrote it: the row that ended first carries request 7's record."""
    copy = tmp_path / "run"
    shutil.copytree(RUN, copy)
    recorded = {entry["request_uid"]: entry for entry in read_jsonl(copy / "server_truth.jsonl")}
    first, _ = long_pair(rows_with_server_truth(RunDir(copy)))
    assert recorded[str(first.request_uid)]["server_request_id"] == 7  # the old, wrong pairing
    assert recorded[str(first.request_uid)]["ttft_s_server"] > first.ttft_client_s + 60  # type: ignore[operator]
    assert first.ttft_s_server is None and first.decode_tok_s_server is None and first.prompt_s_server is None
    assert str(first.server_note).startswith("withheld") and "TTFT of 133.358 s" in str(first.server_note)
    assert "66.239 s" in str(first.server_note)


def test_the_same_swap_forced_by_request_id_is_withheld(tmp_path: Path) -> None:
    """The engine's two records forced onto each other's rows (`server_request_id`, as an x-request-id join would)."""
    rows = client_rows()
    first, second = sorted((row for row in rows if row["sweep"] == "concurrency"), key=lambda row: row["t_done"])
    first["server_request_id"], second["server_request_id"] = 7, 6
    server = [row for row in request_rows(read_events(RUN / "engine-request-log.jsonl")) if row.get("status")]
    joined = {row["request_uid"]: row for row in join_client_rows(rows, server)}
    copy = tmp_path / "run"
    shutil.copytree(RUN, copy)
    for uid in (first["request_uid"], second["request_uid"]):
        fields = {k: v for k, v in joined[uid].items() if k.endswith("_server") or k.startswith("server_")}
        append_jsonl(copy / "server_truth.jsonl", {"request_uid": uid, **fields})
    shown = {row.request_uid: row for row in rows_with_server_truth(RunDir(copy))}
    assert str(shown[first["request_uid"]].server_note).startswith("withheld")
    assert shown[first["request_uid"]].ttft_s_server is None
    assert shown[second["request_uid"]].server_join == "request_id"  # 66 s of server TTFT fit inside 133 s: kept


def test_the_stalled_stream_carries_both_rates_and_why(tmp_path: Path) -> None:
    rows = rejoined(tmp_path)
    first, second = long_pair(rows)
    assert first.decode_tok_s_client == pytest.approx(1.086, abs=0.001)
    assert first.decode_tok_s_server == pytest.approx(33.80, abs=0.01)
    note = str(first.decode_gap_note)
    assert "1.09 tok/s at the client" in note and "33.80 tok/s by the engine" in note
    assert f"a {LONG:,}-token prompt (request {second.request_uid}) before its first token for 28.5 s" in note
    assert "throughput lines in that window show prefill" in note
    assert second.decode_gap_note is None  # it decoded alone after the other ended: both sides agree
    assert [row.request_uid for row in rows if row.decode_gap_note] == [first.request_uid]
    gap = decode_gaps(rows, [line for line in RunDir(tmp_path / "run").read_telemetry() if line.source == "engine_log"])
    assert set(gap) == {first.request_uid}
    assert gap[str(first.request_uid)].spread == pytest.approx(0.02)  # the 15 alone agree within 0.5%: the floor
    cell = [row for row in rows if row.cell_id == first.cell_id]
    assert str(decode_gap_summary(cell)).startswith("1 of 2 requests: decode 1.09 tok/s at the client")


def prefix_rows(rows: list[RequestRow]) -> dict[str, RequestRow]:
    return {str((row.cell or {})["scenario"]): row for row in rows
            if row.sweep == "prefix_reuse" and row.prefix_role == "measured"}


def test_cached_tokens_come_from_the_engines_record_where_usage_has_none(tmp_path: Path) -> None:
    measured = prefix_rows(rejoined(tmp_path))
    for scenario in ("identical_resend", "max_tokens_changed"):
        assert measured[scenario].cached_tokens is None  # the chat usage carries no count
        assert measured[scenario].cached_tokens_server == 16_378
    assert measured["cold"].cached_tokens_server == 0  # the engine says it reused nothing: a real 0
    assert measured["responses_previous_response_id"].cached_tokens == 16_378  # the Responses usage has it


def test_a_request_without_an_engine_record_is_unknown_not_zero(tmp_path: Path) -> None:
    """The request log without the identical resend's done event (request 10; as when the engine is stopped before
    writing it): the captured lines, one left out, none changed."""
    lines = (RUN / "engine-request-log.jsonl").read_text().splitlines(keepends=True)
    done = [i for i, line in enumerate(lines) if json.loads(line)["event"] == "request_done"
            and json.loads(line)["request"]["request_id"] == 10]
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(line for i, line in enumerate(lines) if i not in done))
    measured = prefix_rows(rejoined(tmp_path, cut))
    unknown = measured["identical_resend"]
    assert unknown.server_join is None and "matched" in str(unknown.server_note)
    assert unknown.cached_tokens is None and unknown.cached_tokens_server is None  # unknown on both sides
    assert measured["cold"].cached_tokens_server == 0 and measured["max_tokens_changed"].cached_tokens_server == 16_378
