"""`sweeps.repeats` against the live embedded llama-server: one tiny cell run 3 times, the server killed after
the first repeat, a rerun that sends only the repeats without a result, the table's median of the repeats
with its interval, and `compare --fail-on-regression` between two real runs."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from ninferkit import steps
from ninferkit.cli import main as cli_main
from ninferkit.report import compare_runs
from ninferkit.report.compare import METRICS
from ninferkit.rundir.runs import Run, open_run, read_jsonl
from ninferkit.server import process as server
from ninferkit.steps.sweeps import sweeps
from tests.conftest import LOCAL_CPU, free_port
from tests.live.conftest import sweep_with_the_server_killed

TINY = ["sweeps.context.targets=[64]", "sweeps.context.output_tokens=32", "sweeps.context.repetitions=2",
        "sweeps.context.warmup=0", "sweeps.telemetry=false"]


def open_tiny(path: Path, repeats: int) -> Run:
    return open_run(LOCAL_CPU, path, [f"serve.port={free_port()}", *TINY, f"sweeps.repeats={repeats}"])


def test_repeats_resume_mid_repeats_and_the_table_gives_the_interval(tmp_path: Path, llama_server: Path) -> None:
    run = open_tiny(tmp_path / "a", 3)
    steps.launch(run, progress=False)
    ledger = run.dir.sweep_cells

    sweep_with_the_server_killed(run, "context")
    first = list(read_jsonl(ledger))
    assert [(e["cell"].get("repeat", 0), e["status"]) for e in first] == [(0, "done"), (1, "failed")]
    sent_before = collections.Counter(r["cell_id"] for r in read_jsonl(run.dir.requests))

    steps.launch(run, progress=False)
    try:
        table = sweeps(run, only="context", progress=False)["context"]
    finally:
        server.stop(run.dir)
    rows = list(read_jsonl(run.dir.requests))
    assert collections.Counter(r["cell_id"] for r in rows)[first[0]["cell_id"]] == sent_before[first[0]["cell_id"]]
    assert {r["cell"].get("repeat", 0) for r in rows} == {0, 1, 2}  # every row says its repeat
    assert len(table) == 1
    row = table.iloc[0]
    assert row["repeats"] == 3 and row["status"] == "done" and row["n_ok"] == 6
    assert row["cell_id"] == first[0]["cell_id"]  # the table names the cell by its first repeat
    for metric in ("ttft_client_s", "decode_tok_s_server", "prefill_tok_s_server"):
        assert row[f"{metric}_ci_low"] <= row[f"{metric}_median"] <= row[f"{metric}_ci_high"]
    assert row["ci_method"].startswith("95% percentile bootstrap interval of the median (10,000 resamples of 3")


def test_compare_of_two_live_runs_gates_on_the_interval(tmp_path: Path, llama_server: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    runs = []
    for name in ("a", "b"):
        run = open_tiny(tmp_path / name, 2)
        steps.launch(run, progress=False)
        try:
            sweeps(run, only="context", progress=False)
        finally:
            server.stop(run.dir)
        runs.append(run.dir.path)
    table = compare_runs(runs).table
    assert set(table["metric"]) == set(METRICS)
    assert (table["repeats_a"] == 2).all() and (table["repeats_b"] == 2).all()
    assert (table["interval_low"] <= table["interval_high"]).all()
    worse = [row for row in table.to_dict("records")
             if (-row["delta_pct"] if METRICS[row["metric"]] else row["delta_pct"]) > 0 and row["outside_interval"]]
    code = cli_main(["compare", *map(str, runs), "--fail-on-regression", "0"])
    out = capsys.readouterr().out
    assert code == (1 if worse else 0)  # whatever the shared cores did, the gate says what the table says
    gated = [line for line in out.splitlines() if line.startswith("regression: ")]
    assert len(gated) == len(worse)
    assert all(f"regression: {row['metric']} in context " in "\n".join(gated) for row in worse)
    assert cli_main(["compare", *map(str, runs), "--fail-on-regression", "999"]) == 0
