"""Without a --request-log-jsonl, NInfer's per-request `done` lines in the server log are the server's truth.

Data: the live capture's first run (tests/data/ninfer_live/g1-h200/run, see SOURCE.md there): the
client rows (requests.jsonl), the engine's stderr (logs/server.log, `[req N] done …` lines) and the
engine's own request log (engine-request-log.jsonl), which that run did set. Joining the client rows
to the stderr lines alone must find the same requests the request log finds, with the numbers the
request log has, rounded as stderr prints them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ninferkit.engines import get_adapter
from ninferkit.engines.ninfer.logs import read_log, requests_from_lines
from ninferkit.engines.ninfer.request_log import join_client_rows, read_events, request_rows, with_log_clock
from ninferkit.params.load import validate_profile
from ninferkit.params.profile import Profile
from tests.conftest import DATA

RUN = DATA / "ninfer_live" / "g1-h200" / "run"
ADAPTER = get_adapter("ninfer")


def rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (RUN / "requests.jsonl").read_text().splitlines()]


def profile_without_request_log() -> Profile:
    recorded = json.loads((RUN / "manifest.json").read_text())["profile"]
    engine = {"kind": "ninfer", "fork": recorded["engine"]["fork"]}
    return validate_profile({"name": "g1-live", "engine": engine, "artifact": {"url": "https://example.invalid/m.ninfer"},
                             "serve": {"max_context": 32768, "max_concurrency": 4, "kv": {"capacity": 131072}}})


def test_the_log_clock_is_found_from_the_rows_themselves() -> None:
    logged = [row for row in requests_from_lines(read_log((RUN / "logs" / "server.log").read_text()))
              if row["status"]]
    client = rows()
    as_utc = with_log_clock(logged, client)
    # the same stderr stamps read as if written 8 hours east (a container on UTC+8) land on the same instants
    shifted = [{**row, "started_at": _plus_hours(row["started_at"], 8)} for row in logged]
    assert [r["started_unix_ms"] for r in with_log_clock(shifted, client)] == [r["started_unix_ms"] for r in as_utc]
    engine: dict[int, list[float]] = {}  # the request log spans several server instances: ids repeat
    for r in request_rows(read_events(RUN / "engine-request-log.jsonl")):
        engine.setdefault(r["request_id"], []).append(r["started_unix_ms"])
    for row in as_utc:  # stderr's millisecond stamp is the request log's submit time, to the millisecond
        assert min(abs(row["started_unix_ms"] - ms) for ms in engine[row["request_id"]]) <= 1, row["request_id"]


def test_done_lines_join_the_requests_the_request_log_joins() -> None:
    client = rows()
    from_stderr = ADAPTER.server_log_truth(profile_without_request_log(), client, [RUN / "logs" / "server.log"])
    assert from_stderr is not None and len(from_stderr) == len(client)
    from_request_log = join_client_rows(client, [r for r in request_rows(read_events(RUN / "engine-request-log.jsonl"))
                                                 if r.get("status")])
    joined = 0
    for row, stderr, exact in zip(client, from_stderr, from_request_log, strict=True):
        if exact["server_join"] is None:
            assert stderr.get("server_join") is None, row["request_uid"]
            continue
        joined += 1
        assert stderr["server_source"] == "server_log"
        assert stderr["server_request_id"] == exact["server_request_id"], row["request_uid"]
        assert stderr["prompt_tokens_server"] == exact["prompt_tokens_server"]
        assert stderr["completion_tokens_server"] == exact["completion_tokens_server"]
        assert stderr["ttft_s_server"] == pytest.approx(exact["ttft_s_server"], abs=0.0005)  # printed in whole ms
        assert stderr["decode_tok_s_server"] == pytest.approx(exact["decode_tok_s_server"], abs=0.05)  # 0.1 tok/s
        assert stderr["e2e_s_server"] == pytest.approx(exact["e2e_s_server"], abs=0.005)  # printed %.2fs
    assert joined >= 50


def test_no_record_at_all_is_none() -> None:
    assert ADAPTER.server_log_truth(profile_without_request_log(), rows(), []) is None


def _plus_hours(stamp: str, hours: int) -> str:
    from datetime import datetime, timedelta

    return (datetime.fromisoformat(stamp) + timedelta(hours=hours)).isoformat(sep=" ", timespec="milliseconds")
