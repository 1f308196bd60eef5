"""A sweep cell whose streams one process cannot stamp honestly goes over worker processes: decided from the run's
own rows (the gap between a stream's events) and the client's measured cost, rows saying which worker stamped
them, the ledger how many and why. Against the stand-in streaming server in C (tests/standin_server.py), paced at
5 ms a token; the cells' requests are the concurrency kind's closed loop, sent without a tokenizer (the stand-in
has none: what is measured here is the client, not the prompt)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from ninferkit.engines import get_adapter
from ninferkit.host.cpu_idle import CpuIdle
from ninferkit.measure.client_workers import client_cost, spread
from ninferkit.rundir.records import RequestRow, ServerRecord
from ninferkit.rundir.runs import GrowingRows, open_run, read_jsonl
from ninferkit.rundir.servings import run_servings
from ninferkit.sweeps import execute
from ninferkit.sweeps.cell import Cell
from ninferkit.sweeps.execute import Recorder, SweepContext, _append_outcome, base_row, ended_outcome, request_spec
from ninferkit.sweeps.kinds.concurrency import KIND as CONCURRENCY
from ninferkit.sweeps.kinds.concurrency import ConcurrencyCell
from tests.conftest import REPO
from tests.standin_server import standin

TOKENS = 24


def closed_loop_cell(ctx: SweepContext, level: int) -> tuple[Recorder, Cell[ConcurrencyCell]]:
    cell = Cell(CONCURRENCY, ConcurrencyCell(concurrency=level, requests_per_client=1, prompt_tokens=8, warmup=0,
                                             output_tokens=TOKENS, api="chat", pin_output=False, temperature=0.0,
                                             seed=0))
    record = Recorder(ctx, cell, f"c{level}")

    async def run() -> None:
        gap = ctx.stream_gap_s()
        async with ctx.load_client(record, None if gap is None else level / gap, level + 1) as client:
            async def one(index: int) -> None:
                result = await client.send(request_spec(ctx, cell, [{"role": "user", "content": "Hi"}]))
                await record(result, 0, False, client_index=index)

            await asyncio.gather(*(one(index) for index in range(level)))

    asyncio.run(record.watched(run()))
    _append_outcome(ctx, cell, ended_outcome(ctx, record))
    return record, cell


def test_a_cell_past_one_process_is_stamped_by_workers_and_says_so(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # two idle cores, as recorded (the measure itself: tests/unit/host/test_cpu_idle.py): on this shared machine
    # the idle share moves from one reading to the next, and the test is of what the sweep does with it
    two_idle = CpuIdle({0: 1.0, 1: 0.99}, "recorded: two idle cores")
    monkeypatch.setattr(execute, "measure_idle", lambda: two_idle)
    run = open_run(REPO / "params" / "local-cpu.yaml", tmp_path / "run")
    adapter = get_adapter(run.profile.engine.kind)
    serving = run_servings(run.dir).main
    with standin(tmp_path, "paced") as url, GrowingRows(run.dir.requests, RequestRow) as requests:
        ctx = SweepContext(run, adapter, url, "embedded", {}, None, [],  # type: ignore[arg-type]
                           base_row(run, adapter, ServerRecord(), serving), 60.0, None, serving, requests)
        first, _ = closed_loop_cell(ctx, 1)  # nothing known yet: one process, and the gap is learned
        gap = ctx.stream_gap_s()
        assert first.spread is not None and "not known yet" in first.spread and gap is not None
        level = 256
        expected = spread(level / gap, gap, client_cost(), lambda: two_idle)
        assert expected.workers > 1  # 256 streams at 5 ms: past what one process stamps within 5% of the gap
        second, cell = closed_loop_cell(ctx, level)

    assert second.spread == expected.why
    rows = [row for row in read_jsonl(run.dir.requests) if row["cell_id"] == cell.cell_id]
    assert len(rows) == level and {row["status"] for row in rows} == {"ok"}
    assert {row["client_worker"] for row in rows} == set(range(expected.workers))
    earlier = next(row for row in read_jsonl(run.dir.requests) if row["attempt"] == "c1")
    assert earlier["client_worker"] is None
    assert {key for key in earlier if earlier[key] is not None} - {key for key in rows[0] if rows[0][key] is not None} \
        <= {"client_unsure"}  # the same fields measured, whichever process stamped them
    for row in rows:
        assert row["text_events"] == row["completion_tokens"] == TOKENS
        assert row["client_lag_max_s"] is None or row["client_lag_max_s"] >= 0
    ledger: list[dict[str, Any]] = [json.loads(line) for line in run.dir.sweep_cells.read_text().splitlines()]
    assert [entry["client_workers"] for entry in ledger] == [None, expected.workers]
    assert ledger[1]["client_spread"] == expected.why and ledger[1]["status"] == "done"
    assert ledger[1]["client_cpu_share"] is not None  # the busiest worker's
