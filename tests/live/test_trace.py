"""Trace replay against the live embedded llama-server: the shipped trace sent open loop at twice its speed,
each prompt as long as its input_length and sharing the blocks its hash_ids share; then the run's own
requests.jsonl turned back into a trace (`ninferkit trace`) that reads as a valid one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ninferkit import steps
from ninferkit.cli import main as cli_main
from ninferkit.measure.traces import SHIPPED_BLOCK_TOKENS, read_trace, shipped_trace
from ninferkit.rundir.runs import Run, open_run, read_jsonl
from ninferkit.server import process as server
from ninferkit.steps.sweeps import sweeps
from tests.conftest import LOCAL_CPU, free_port


@pytest.fixture(scope="module")
def trace_run(tmp_path_factory: pytest.TempPathFactory, llama_server: Path) -> Iterator[Run]:
    run = open_run(LOCAL_CPU, tmp_path_factory.mktemp("trace"), [f"serve.port={free_port()}", "sweeps.trace.speed=2"])
    steps.launch(run, progress=False)
    yield run
    server.stop(run.dir)


def test_the_shipped_trace_replays_on_its_schedule(trace_run: Run) -> None:
    table = sweeps(trace_run, only="trace", progress=False)["trace"]
    assert list(table["status"]) == ["done"] and list(table["n_ok"]) == [12]
    trace = read_trace(shipped_trace(), SHIPPED_BLOCK_TOKENS)
    rows = sorted((r for r in read_jsonl(trace_run.dir.requests) if r["sweep"] == "trace"),
                  key=lambda r: r["trace_index"])
    assert [r["trace_index"] for r in rows] == list(range(12))
    for row, request in zip(rows, trace, strict=True):
        assert row["scheduled_s"] == pytest.approx(request.timestamp_ms / 1000 / 2)
        assert row["completion_tokens"] == request.output_length  # pinned
        # block boundaries may merge a token or two; the chat template adds the same tokens to every prompt
        assert abs(row["prompt_content_tokens"] - request.input_length) <= len(request.hash_ids), row
    template = {r["prompt_tokens"] - r["prompt_content_tokens"] for r in rows}
    assert len(template) == 1 and 0 < template.pop() < 64
    assert table["schedule_lag_s_p99"].iloc[0] < 0.5


def test_a_run_becomes_a_trace_that_reads_back(trace_run: Run, capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    assert cli_main(["trace", str(trace_run.dir.path)]) == 0
    out, err = capsys.readouterr()
    written = tmp_path / "trace.jsonl"
    written.write_text(out)
    replayed = read_trace(written)
    rows = [r for r in read_jsonl(trace_run.dir.requests) if r.get("prompt_tokens")]
    assert len(replayed) == len(rows) and replayed[0].timestamp_ms == 0
    assert [r.input_length for r in replayed] == [r["prompt_tokens"] for r in sorted(rows, key=lambda r: r["t_send"])]
    assert "every other request has blocks of its own" in err
    assert all(json.loads(line) for line in out.splitlines())
