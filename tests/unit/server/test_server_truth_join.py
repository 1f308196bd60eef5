"""Server-side truth from outside the responses, joined to the sweep rows (issue 8).

NInfer and vLLM cannot run here. The NInfer side uses the request-log fixtures of
tests/data/ninfer/ (built from the schema tables of reference/ninfer-interface.md section 5; see
that folder's README); the vLLM side the /metrics texts a real vLLM 0.26.0 answered on the H200 around one
request (tests/data/vllm-live/, see its README) served before and after a replayed chat stream
(tests/data/sse/chat.sse, recorded from the embedded llama-server: the OpenAI stream shape vLLM
also sends). Client rows are made the way the sweeps make them: RequestResults through the
sweeps' Recorder into requests.jsonl, then the join the sweeps run after each cell, then the tables.
The llama-server path (no out-of-band source) is covered live by tests/live/test_sweeps.py.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest

from ninferkit.engines import get_adapter
from ninferkit.engines.base import EngineAdapter
from ninferkit.engines.ninfer.request_log import read_events, request_rows
from ninferkit.engines.vllm.adapter import metrics_deltas
from ninferkit.measure.client import RequestResult, RequestSpec, StreamingClient
from ninferkit.report.data import load_run
from ninferkit.rundir.records import ServerRecord
from ninferkit.rundir.runs import Run, open_run, read_jsonl
from ninferkit.rundir.servings import run_servings
from ninferkit.sweeps.cell import Cell
from ninferkit.sweeps.execute import CellOutcome, Recorder, SweepContext, _append_outcome, base_row
from ninferkit.sweeps.kinds import get_kind
from ninferkit.sweeps.tables import build_tables, save_tables
from ninferkit.sweeps.truth import MeteredClient, record_log_truth, rows_with_server_truth
from tests.conftest import DATA, REPO

NINFER_DATA = DATA / "ninfer"
VLLM_HTTP = DATA / "vllm-live" / "session2" / "http"
SSE = DATA / "sse"
NINFER_PROFILE = REPO / "params" / "ninfer-rtx3090-groupwise.yaml"
VLLM_PROFILE = REPO / "params" / "vllm-v100-baseline.yaml"
HAIKU = [{"role": "user", "content": "Write a haiku about a lighthouse."}]


def utc(unix_ms: int) -> str:
    return dt.datetime.fromtimestamp(unix_ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def client_result(started_unix_ms: int, prompt: int, completion: int, status: str = "ok", ttft_s: float = 1.0,
                  e2e_s: float = 2.1) -> RequestResult:
    """A finished request as the client records it (times on our monotonic clock, usage from the server)."""
    return RequestResult(api="chat", status=status, http_status=200 if status == "ok" else 503,
                         started_utc=utc(started_unix_ms), t_send=100.0, t_first_byte=100.0 + ttft_s / 2,
                         t_first_token=100.0 + ttft_s, t_last_token=100.0 + e2e_s - 0.1, t_done=100.0 + e2e_s,
                         prompt_tokens=prompt if status == "ok" else None,
                         completion_tokens=completion if status == "ok" else None, temperature=0.0, seed=0,
                         max_tokens=completion)


def client_of(logged: dict[str, Any], offset_ms: int = 3) -> RequestResult:
    """The client's side of a logged request: sent `offset_ms` from its logged start, its first token and its
    end received 4 and 5 ms after the engine's TTFT and total (what fits a real pair)."""
    return client_result(logged["started_unix_ms"] + offset_ms, logged["prompt_tokens_server"],
                         logged["completion_tokens_server"], ttft_s=logged["ttft_s_server"] + 0.004,
                         e2e_s=logged["e2e_s_server"] + 0.005)


def context(run: Run, adapter: EngineAdapter) -> SweepContext:
    serving = run_servings(run.dir).main
    return SweepContext(run, adapter, "http://recorded", "recorded-model", {}, None, [],  # type: ignore[arg-type]
                        base_row(run, adapter, ServerRecord(), serving), 60.0, None, serving)


def finish_cell(ctx: SweepContext, cell: Cell, results: list[RequestResult]) -> str:
    """What run_cell does around the runner: record each request, join the server's record, then the outcome."""
    attempt = uuid.uuid4().hex[:8]
    record = Recorder(ctx, cell, attempt)
    for repetition, result in enumerate(results):
        asyncio.run(record(result, repetition, False))
    record_log_truth(ctx.run, ctx.adapter)
    _append_outcome(ctx, cell, CellOutcome(cell.cell_id, "done", attempt, tally=record.tally))
    return attempt


SAMPLING = {"temperature": 0.0, "seed": 0}


def context_cell(tokens: int) -> Cell[Any]:
    return get_kind("context").recorded({"target_prompt_tokens": tokens, "api": "chat", "output_tokens": 16,
                                         "pin_output": True, "repetitions": 1, "warmup": 0, **SAMPLING})


def concurrency_cell(level: int) -> Cell[Any]:
    return get_kind("concurrency").recorded({"concurrency": level, "requests_per_client": 1, "prompt_tokens": 8192,
                                             "output_tokens": 256, "api": "chat", "pin_output": True,
                                             "warmup": 0, **SAMPLING})


# ---------------------------------------------------------------------------------------------
# NInfer: --request-log-jsonl joined after each cell, into server_truth.jsonl
# ---------------------------------------------------------------------------------------------


def ninfer_run(tmp_path: Path, log: Path) -> tuple[Run, SweepContext]:
    run = open_run(NINFER_PROFILE, tmp_path / "run", [f"serve.request_log_jsonl={log}"])
    return run, context(run, get_adapter("ninfer"))


def test_request_log_fields_reach_the_rows_and_tables(tmp_path: Path) -> None:
    log = NINFER_DATA / "request_log_v9.jsonl"
    logged = {row["request_id"]: row for row in request_rows(read_events(log))}
    run, ctx = ninfer_run(tmp_path, log)
    # Two cells, one request each, as logged (request 2 was a 503 of another client: no client row).
    first = finish_cell(ctx, context_cell(16384), [client_of(logged[1], 3)])
    second = finish_cell(ctx, context_cell(16400), [client_of(logged[3], 2)])

    raw = list(read_jsonl(run.dir.requests))
    assert all(row["request_uid"] and row["prompt_s_server"] is None for row in raw)  # the rows stay as written
    truth = {entry["attempt"]: entry for entry in read_jsonl(run.dir.server_truth)}
    assert truth[first]["server_request_id"] == 1 and truth[second]["server_request_id"] == 3
    assert truth[first]["server_join"] == "time" and truth[first]["server_source"] == "request_log"

    rows = {row.attempt: row for row in rows_with_server_truth(run.dir)}
    assert rows[first].ttft_s_server == 16.47
    assert rows[first].prompt_s_server == pytest.approx(16.38)
    assert rows[first].decode_tok_s_server == pytest.approx(127 / 1.905)
    assert (rows[first].drafted_tokens_server, rows[first].accepted_tokens_server) == (120, 87)
    assert rows[first].acceptance_server == pytest.approx(87 / 120)
    assert rows[second].cached_tokens_server == 16384

    tables = build_tables(run, ["context"])
    table = tables["context"].set_index("target_prompt_tokens")
    assert table.loc[16384, "prompt_s_server_median"] == pytest.approx(16.38)
    assert table.loc[16384, "accepted_tokens_server_median"] == 87
    assert table.loc[16400, "prefill_tok_s_server_median"] == pytest.approx(16 / 0.12)
    assert table["server_note"].isna().all()
    save_tables(run.dir, tables)
    shown = load_run(run.dir.path).tables["context"].set_index("target_prompt_tokens")  # what the report reads
    assert shown.loc[16384, "acceptance_server_median"] == pytest.approx(87 / 120)


def test_rejoining_a_cell_appends_nothing_new(tmp_path: Path) -> None:
    log = NINFER_DATA / "request_log_v9.jsonl"
    logged = request_rows(read_events(log))[0]
    run, ctx = ninfer_run(tmp_path, log)
    cell = context_cell(16384)
    finish_cell(ctx, cell, [client_of(logged, 0)])
    lines = run.dir.server_truth.read_text()
    assert record_log_truth(run, ctx.adapter) == 0
    assert run.dir.server_truth.read_text() == lines


def test_a_request_not_yet_logged_as_done_is_filled_in_at_the_next_pass(tmp_path: Path) -> None:
    """request_log_v9.jsonl cut before request 1's request_done (the engine had not written it yet
    when the cell ended), then the rest appended, as the engine would."""
    lines = (NINFER_DATA / "request_log_v9.jsonl").read_text().splitlines(keepends=True)
    done = next(i for i, line in enumerate(lines) if '"request_done"' in line)
    log = tmp_path / "growing.jsonl"
    log.write_text("".join(lines[:done]))
    run, ctx = ninfer_run(tmp_path, log)
    logged = request_rows(read_events(NINFER_DATA / "request_log_v9.jsonl"))[0]
    finish_cell(ctx, context_cell(16384), [client_of(logged, 3)])
    first = rows_with_server_truth(run.dir)[0]
    assert first.server_join is None and first.prompt_s_server is None and "matched" in first.server_note
    with log.open("a") as handle:
        handle.write("".join(lines[done:]))
    assert record_log_truth(run, ctx.adapter) == 1  # the end-of-step pass
    row = rows_with_server_truth(run.dir)[0]
    assert row.server_join == "time" and row.server_note is None and row.ttft_s_server == 16.47


def twice_logged(tmp_path: Path, second_offset_ms: int) -> tuple[Path, int]:
    """Derived from request_log_v21.jsonl: its one request logged twice (ids 1 and 2, the second
    `second_offset_ms` later) with different queue waits (49.0 s and 0.5 s); returns the log and
    the first start (unix ms)."""
    events = read_events(NINFER_DATA / "request_log_v21.jsonl")
    lines = []
    for request_id, offset_ms, queue_s in ((1, 0, 49.0), (2, second_offset_ms, 0.5)):
        for event in events:
            if (event.get("request") or {}).get("request_id") != 1:
                continue
            copy = json.loads(json.dumps(event))
            copy["request"]["request_id"] = request_id
            copy["timestamp_unix_ms"] += offset_ms
            if copy["event"] == "request_done":
                copy["engine_timing"]["queue_wait_seconds"] = queue_s
            lines.append(json.dumps(copy))
    log = tmp_path / "requests.jsonl"
    log.write_text("\n".join(lines) + "\n")
    return log, events[0]["timestamp_unix_ms"]


def v21_client(started_unix_ms: int) -> RequestResult:
    """A client row of request_log_v21.jsonl's request (TTFT 49.5 s, 60.0 s in all), received just after."""
    return client_result(started_unix_ms, 8200, 1001, ttft_s=49.504, e2e_s=60.005)


def test_requests_the_log_cannot_tell_apart_are_not_paired_and_say_so(tmp_path: Path) -> None:
    """Two clients of a concurrency cell with equal prompts, sent 1 ms apart and ending 1 ms apart, logged
    3 ms apart with the same TTFT and total: either pairing fits, so neither is made (the start order is no
    evidence: the engine admits in its own order)."""
    log, start = twice_logged(tmp_path, 3)
    run, ctx = ninfer_run(tmp_path, log)
    finish_cell(ctx, concurrency_cell(2), [v21_client(start + 1), v21_client(start)])

    rows = rows_with_server_truth(run.dir)
    assert [(row.server_join, row.server_request_id, row.queue_s_server) for row in rows] == [(None, None, None)] * 2
    assert all("cannot tell which is which" in str(row.server_note) and "requests 1, 2" in str(row.server_note)
               for row in rows)
    note = build_tables(run, ["concurrency"])["concurrency"].loc[0, "server_note"]
    assert note.startswith("2 of 2 requests:") and "none is paired" in note


def test_requests_in_flight_together_are_told_apart_by_the_order_they_ended(tmp_path: Path) -> None:
    """The same two log entries 120 ms apart, each sent 1 ms before it was logged: each client row's times fit
    both entries (start and end within the clocks' slack), but the first to end is the first done."""
    log, start = twice_logged(tmp_path, 120)
    run, ctx = ninfer_run(tmp_path, log)
    finish_cell(ctx, concurrency_cell(2), [v21_client(start + 119), v21_client(start - 1)])
    rows = sorted(rows_with_server_truth(run.dir), key=lambda row: str(row.started_utc))
    assert [(row.server_request_id, row.server_join, row.server_note) for row in rows] == [
        (1, "done_order", None), (2, "done_order", None)]
    assert [row.queue_s_server for row in rows] == [49.0, 0.5]
    assert rows[0].reasoning_tokens_server == 700 and rows[0].acceptance_server == pytest.approx(700 / 900)


def test_requests_sent_one_after_the_other_pair_plainly(tmp_path: Path) -> None:
    """The same two log entries, the second sent after the first ended: only one pairing fits, so no note,
    even with equal token counts."""
    log, start = twice_logged(tmp_path, 61_000)
    run, ctx = ninfer_run(tmp_path, log)
    finish_cell(ctx, context_cell(8200), [v21_client(start - 1), v21_client(start + 60_999)])
    rows = sorted(rows_with_server_truth(run.dir), key=lambda row: str(row.started_utc))
    assert [(row.server_request_id, row.server_join, row.server_note) for row in rows] == [
        (1, "time", None), (2, "time", None)]
    assert pd.isna(build_tables(run, ["context"])["context"].loc[0, "server_note"])


def test_a_missing_request_log_is_a_note_not_an_error(tmp_path: Path) -> None:
    run, ctx = ninfer_run(tmp_path, tmp_path / "nowhere.jsonl")
    finish_cell(ctx, context_cell(512), [client_result(1_800_000_000_000, 512, 16)])
    row = rows_with_server_truth(run.dir)[0]
    assert row.prompt_s_server is None and "nowhere.jsonl" in row.server_note
    assert "not read" in build_tables(run, ["context"])["context"].loc[0, "server_note"]


def test_a_row_the_log_does_not_have_stays_unjoined(tmp_path: Path) -> None:
    log = NINFER_DATA / "request_log_v9.jsonl"
    run, ctx = ninfer_run(tmp_path, log)
    started = request_rows(read_events(log))[0]["started_unix_ms"]
    finish_cell(ctx, context_cell(16384), [client_result(started, 9999, 128)])  # counts differ: another request
    row = rows_with_server_truth(run.dir)[0]
    assert row.server_join is None and row.ttft_s_server is None
    assert "no request in request_log_v9.jsonl matched" in row.server_note


# ---------------------------------------------------------------------------------------------
# vLLM: /metrics read around each request that runs alone, into the row as it is appended
# ---------------------------------------------------------------------------------------------


def vllm_transport(metrics: list[str], reads: list[str]) -> httpx.MockTransport:
    """GET /metrics answers the next text of `metrics` (the last one repeats); POST answers the
    recorded chat stream, yielding to the event loop between events like a network would."""
    stream = (SSE / "chat.sse").read_bytes()

    async def events() -> AsyncIterator[bytes]:
        for part in stream.split(b"\n\n"):
            await asyncio.sleep(0)
            yield part + b"\n\n"

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            reads.append(request.url.path)
            return httpx.Response(200, text=metrics[min(len(reads), len(metrics)) - 1])
        return httpx.Response(200, content=events(), headers={"content-type": "text/event-stream"})

    return httpx.MockTransport(handler)


BEFORE, AFTER = (json.loads((VLLM_HTTP / f"{name}.json").read_text())["body"]
                 for name in ("metrics_after_prefix_first", "metrics_after_prefix_second"))
DELTAS = metrics_deltas(BEFORE, AFTER)


async def send_all(metrics: list[str], together: int, reads: list[str]) -> list[RequestResult]:
    client = MeteredClient("http://recorded", get_adapter("vllm"), "m", transport=vllm_transport(metrics, reads))
    async with client:
        spec = RequestSpec("chat", HAIKU, 8)
        return list(await asyncio.gather(*(client.send(spec) for _ in range(together))))


def test_a_request_alone_gets_its_metrics_deltas(tmp_path: Path) -> None:
    reads: list[str] = []
    result = asyncio.run(send_all([BEFORE, AFTER], 1, reads))[0]
    row = result.row()
    assert len(reads) == 2 and row["status"] == "ok"
    assert row["server_source"] == "metrics_delta" and row.get("server_note") is None
    assert row["prompt_tokens_server"] == DELTAS["prompt_tokens_server"]
    # The response's own per-request count wins over the delta (the replayed stream says 13 cached).
    assert row["cached_tokens_server"] == row["cached_tokens"] == 13 != DELTAS["cached_tokens_server"]
    assert row["prompt_s_server"] == pytest.approx(DELTAS["prompt_s_server"])
    assert row["queue_s_server"] == pytest.approx(DELTAS["queue_s_server"])
    assert row["decode_tokens_server"] == DELTAS["decode_tokens_server"]
    assert row["decode_tok_s_server"] == pytest.approx(DELTAS["decode_tok_s_server"])
    assert (row["drafted_tokens_server"], row["accepted_tokens_server"]) == (
        DELTAS["drafted_tokens_server"], DELTAS["accepted_tokens_server"])


def test_counters_that_lag_are_read_again() -> None:
    reads: list[str] = []
    row = asyncio.run(send_all([BEFORE, BEFORE, BEFORE, AFTER], 1, reads))[0].row()
    assert len(reads) == 4 and row["prompt_tokens_server"] == DELTAS["prompt_tokens_server"]


def test_overlapping_requests_get_a_reason_instead_of_numbers() -> None:
    reads: list[str] = []
    results = asyncio.run(send_all([BEFORE, AFTER], 2, reads))
    for result in results:
        row = result.row()
        assert row["status"] == "ok" and row["prompt_s_server"] is None and row["drafted_tokens_server"] is None
        assert "another request was in flight" in row["server_note"]


def test_counters_from_elsewhere_are_not_attributed() -> None:
    adapter = get_adapter("vllm")
    assert adapter.request_metrics_deltas(BEFORE, BEFORE) is None  # not counted yet: read again
    backwards = adapter.request_metrics_deltas(AFTER, BEFORE)  # the count went back: a restart
    assert backwards is not None and set(backwards) == {"server_note"} and "not attributed" in backwards["server_note"]


def test_vllm_deltas_reach_the_tables_and_concurrent_cells_say_why_not(tmp_path: Path) -> None:
    run = open_run(VLLM_PROFILE, tmp_path / "run")
    ctx = context(run, get_adapter("vllm"))
    assert isinstance(ctx.client(), MeteredClient)
    alone = asyncio.run(send_all([BEFORE, AFTER], 1, []))
    together = asyncio.run(send_all([BEFORE, AFTER], 2, []))
    finish_cell(ctx, concurrency_cell(1), alone)
    finish_cell(ctx, concurrency_cell(2), together)
    assert not run.dir.server_truth.exists()  # vLLM keeps no request log: everything is in the rows
    raw = {row["cell"]["concurrency"]: row for row in read_jsonl(run.dir.requests)}
    assert raw[1]["prompt_s_server"] == pytest.approx(DELTAS["prompt_s_server"])
    assert raw[1]["e2e_s_server"] == pytest.approx(DELTAS["e2e_s_server"])
    table = build_tables(run, ["concurrency"])["concurrency"].set_index("concurrency")
    assert table.loc[1, "prompt_s_server_median"] == pytest.approx(DELTAS["prompt_s_server"])
    assert table.loc[1, "acceptance_server_median"] == pytest.approx(DELTAS["acceptance_server"])
    assert pd.isna(table.loc[1, "server_note"])
    assert pd.isna(table.loc[2, "prompt_s_server_median"]) and pd.isna(table.loc[2, "queue_s_server_median"])
    assert table.loc[2, "server_note"].startswith("2 of 2 requests: another request was in flight")


# ---------------------------------------------------------------------------------------------
# llama-server: responses carry its timings; the new hooks are inert
# ---------------------------------------------------------------------------------------------


def test_llama_server_keeps_the_plain_client_and_no_companion_file(tmp_path: Path) -> None:
    adapter = get_adapter("llama_server")
    run = open_run(REPO / "params" / "local-cpu.yaml", tmp_path / "run")
    ctx = context(run, adapter)
    assert type(ctx.client()) is StreamingClient and adapter.request_metrics_path is None
    assert adapter.server_log_truth(run.profile, []) is None
    finish_cell(ctx, context_cell(512), [client_result(1_800_000_000_000, 512, 16)])
    assert not run.dir.server_truth.exists()
    assert [row.as_dict() for row in rows_with_server_truth(run.dir)] == list(read_jsonl(run.dir.requests))
