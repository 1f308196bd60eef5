"""A/B comparison of two real runs: cells paired by their parameters, deltas with run-to-run spread.

Data: tests/data/run_dirs/embedded-1 and embedded-2 (see its README): the same profile run twice.
"""

from __future__ import annotations

import gzip
import json
import shutil
import statistics
from pathlib import Path

import pandas as pd
import pytest

from ninferkit.cli import main as cli_main
from ninferkit.errors import NinferkitError
from ninferkit.report import compare_runs
from ninferkit.report.caveats import comparison_caveats
from ninferkit.report.compare import CACHED, from_cache
from ninferkit.report.data import RunData, load_run
from ninferkit.rundir.records import Manifest, ProbeRecord, RequestRow
from ninferkit.rundir.runs import RunDir
from tests.unit.report.test_report import RUN_A, RUN_B, RUNS, copy_run, counted_rows

METRICS = ("decode_tok_s_server", "prefill_tok_s_server", "ttft_client_s")


def measured(run: Path) -> list[dict]:
    return [r for r in counted_rows(run) if r["status"] == "ok" and not r["warmup"] and r.get("prefix_role") != "seed"]


def per_repetition(rows: list[dict], cell_id: str, metric: str) -> dict[int, float]:
    found: dict[int, list[float]] = {}
    for r in rows:
        if r["cell_id"] == cell_id and r.get(metric) is not None:
            found.setdefault(r["repetition"], []).append(r[metric])
    return {rep: statistics.median(values) for rep, values in found.items()}


def test_compare_pairs_every_cell_and_reports_deltas() -> None:
    comparison = compare_runs([RUNS / RUN_A, RUNS / RUN_B])
    table = comparison.table
    rows_a, rows_b = measured(RUNS / RUN_A), measured(RUNS / RUN_B)
    run_id_a = json.loads((RUNS / RUN_A / "manifest.json").read_text())["run_id"]
    assert comparison.run_ids[0] == run_id_a
    # same profile, same plan: every measured cell of one run is paired with the other's
    assert {r["cell_id"] for r in rows_a} == {r["cell_id"] for r in rows_b}
    assert comparison.unpaired == []
    expected = {(cell, metric) for cell in {r["cell_id"] for r in rows_a} for metric in METRICS
                if per_repetition(rows_a, cell, metric) and per_repetition(rows_b, cell, metric)}
    assert set(zip(table["cell_id"], table["metric"], strict=True)) == expected
    for row in table.itertuples():
        a = per_repetition(rows_a, row.cell_id, row.metric)
        b = per_repetition(rows_b, row.cell_id, row.metric)
        assert row.median_a == pytest.approx(statistics.median(a.values()))
        assert row.median_b == pytest.approx(statistics.median(b.values()))
        assert row.delta == pytest.approx(row.median_b - row.median_a)
        assert row.pairs == len(set(a) & set(b))
        assert row.paired_delta == pytest.approx(statistics.median([b[k] - a[k] for k in set(a) & set(b)]))
        if len(a) > 1:
            assert row.spread_a_pct == pytest.approx(100 * statistics.stdev(a.values()) / statistics.mean(a.values()))
        spreads = [spread for spread in (row.spread_a_pct, row.spread_b_pct) if pd.notna(spread)]
        if row.verdict == CACHED:  # a resend's prompt time is over the tokens its cache left: no rate to judge
            assert row.metric == "prefill_tok_s_server" and row.from_cache_a and row.from_cache_b
        elif spreads:
            assert (row.verdict == "within spread") == (abs(row.delta_pct) <= max(spreads))
        else:
            assert row.verdict == "spread unknown (one repetition)"


def test_a_prefill_mostly_from_the_cache_is_no_rate() -> None:
    """The rule, on the recorded runs' own requests: a cell whose engine served more than half of each prompt from
    its cache (the prefix-reuse resends) has no prefill rate; a cold one keeps its rate."""
    comparison = compare_runs([RUNS / RUN_A, RUNS / RUN_B])
    prefill = comparison.table[comparison.table["metric"] == "prefill_tok_s_server"]
    verdicts = dict(zip(prefill["cell"], prefill["verdict"], strict=True))
    assert verdicts["scenario=identical_resend, api=chat"] == CACHED
    cold = next(verdict for cell, verdict in verdicts.items() if cell.startswith("scenario=cold"))
    assert cold != CACHED
    scenarios: dict[str, list[RequestRow]] = {}
    for row in load_run(RUNS / RUN_A).measured("prefix_reuse"):
        scenarios.setdefault(str((row.cell or {}).get("scenario")), []).append(row)
    assert from_cache(scenarios["identical_resend"]) and not from_cache(scenarios["cold"])


def test_compare_cli_prints_the_table_and_writes_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = copy_run(RUN_A, tmp_path), copy_run(RUN_B, tmp_path)
    assert cli_main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "decode_tok_s_server" in out and "prefix_reuse" in out
    run_id_a = json.loads((a / "manifest.json").read_text())["run_id"]
    folder = b / "report" / f"compare-vs-{run_id_a}"
    assert (folder / "index.md").exists() and (folder / "index.html").exists()
    assert len((folder / "table.csv").read_text().splitlines()) == len(compare_runs([a, b]).table) + 1


def test_compare_refuses_runs_without_requests(tmp_path: Path) -> None:
    with pytest.raises(NinferkitError, match="no measured request"):
        compare_runs([RUNS / RUN_A, copy_run("launch-only", tmp_path)])
    with pytest.raises(NinferkitError, match="at least two"):
        compare_runs([RUNS / RUN_A])


def test_decode_delta_at_different_acceptance_is_flagged() -> None:
    # Artifact A/B from the field reports (reference/field-reports.md, section 2.6): the coding task
    # ran at 89 % acceptance on both sides (58.6 vs 90.9 tok/s): comparable. The 26 % row is the
    # fiction task's acceptance from the same report, set against the 89 % coding row: not comparable.
    def run(run_id: str, coding: tuple[float, int], fiction: tuple[float, int]) -> RunData:
        rows = [RequestRow(sweep="tasks", cell={"task": task}, status="ok", warmup=False, repetition=0,
                           decode_tok_s_server=tok_s, drafted_tokens_server=100, accepted_tokens_server=acc)
                for task, (tok_s, acc) in (("coding", coding), ("fiction", fiction))]
        return RunData(RunDir(Path(run_id)), manifest=Manifest(run_id=run_id), requests=rows,
                       probe=ProbeRecord(facts={"gpu": {"available": True}}))

    notes = comparison_caveats([run("a", (58.6, 89), (44.9, 26)), run("b", (90.9, 89), (44.9, 89))])
    assert notes == ["tasks / task=fiction: acceptance 26% in a vs 89% in b; its decode delta is not comparable."]


def test_the_headline_names_eager_against_cuda_graphs(tmp_path: Path) -> None:
    """Issue 38 item 10: the published H200 A/B (docs/examples/h200-vllm, recorded on the GPU) sets vLLM under
    --enforce-eager against a llama-server CUDA build; the title says so, from each server's own log."""
    from ninferkit.report.compare import graphs_words

    examples = Path(__file__).resolve().parents[3] / "docs" / "examples" / "h200-vllm"
    llama = tmp_path / "h200-llamacpp-smollm2"
    shutil.copytree(examples / "h200-llamacpp-smollm2", llama)
    packed = llama / "logs" / "server.log.gz"
    (llama / "logs" / "server.log").write_bytes(gzip.decompress(packed.read_bytes()))
    comparison = compare_runs([llama, examples])
    assert comparison.cuda_graphs == ["built in (USE_GRAPHS = 1)", "off (--enforce-eager)"]
    assert comparison.document().title == ("A/B: h200-llamacpp-smollm2 vs h200-vllm (CUDA graphs: built in "
                                           "(USE_GRAPHS = 1) vs off (--enforce-eager))")
    # the same on both sides, or said by neither: nothing to add
    assert graphs_words(["off (--enforce-eager)"] * 2) == "" and graphs_words([None, None]) == ""
    assert graphs_words([None, "off (--enforce-eager)"]) == (" (CUDA graphs: not stated in its log vs off "
                                                               "(--enforce-eager))")
