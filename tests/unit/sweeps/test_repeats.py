"""`sweeps.repeats`: every cell run N times, each repeat its own cell; the tables' median of the repeats with
its bootstrap interval; compare's interval of a difference and `--fail-on-regression`.

Requests are real ones: the context sweep's measured requests of the two recorded runs of the embedded
default (tests/data/run_dirs/embedded-1 and embedded-2, README there: the same profile run twice), replayed
into the cells of a run with `sweeps.repeats: 2`, embedded-1's as one repeat and embedded-2's as the other,
since a unit test has no server (tests/live/test_repeats.py runs repeats against one). The one made-up run
is named where it is made: a copy with every TTFT doubled, the regression the gate has to catch.
"""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path
from typing import Any

import pytest

from ninferkit.cli import main as cli_main
from ninferkit.engines import get_adapter
from ninferkit.errors import BadInput, ProfileError
from ninferkit.measure.client import RequestResult
from ninferkit.params import load_profile
from ninferkit.report import compare_runs, write_report
from ninferkit.report.compare import regressions
from ninferkit.rundir.records import ServerRecord
from ninferkit.rundir.runs import Run, open_run, read_jsonl
from ninferkit.rundir.servings import run_servings
from ninferkit.sweeps.cell import first_repeat_id
from ninferkit.sweeps.execute import Recorder, SweepContext, _append_outcome, base_row, ended_outcome
from ninferkit.sweeps.plan import build_plan
from ninferkit.sweeps.tables import build_tables, save_tables
from tests.conftest import DATA, LOCAL_CPU, whole
from tests.unit.report.test_report import RUN_A, RUN_B, RUNS

TWO_CELLS = ["sweeps.context.targets=[256, 512]"]


def recorded(run: str, target: int) -> list[dict[str, Any]]:
    return [row for row in read_jsonl(DATA / "run_dirs" / run / "requests.jsonl")
            if row["sweep"] == "context" and not row["warmup"] and row["status"] == "ok"
            and row["cell"]["target_prompt_tokens"] == target]


def replayed_run(folder: Path, sources: tuple[str, ...], ttft_factor: float = 1.0) -> Run:
    """A run with sweeps.repeats = len(sources): the context cells of 256 and 512 tokens, repeat r holding
    the recorded rows of sources[r]; `ttft_factor` makes each request's first token come that many times later."""
    run = open_run(LOCAL_CPU, folder, [*TWO_CELLS, f"sweeps.repeats={len(sources)}"])
    adapter = get_adapter(run.profile.engine.kind)
    ctx = SweepContext(run, adapter, "http://recorded", "recorded-model", {}, None, [],  # type: ignore[arg-type]
                       base_row(run, adapter, ServerRecord(), run_servings(run.dir).main), 60.0, None,
                       run_servings(run.dir).main)
    for cell in build_plan(run.profile, adapter, ["context"], explicit=True):
        record = Recorder(ctx, cell, "replay")
        for repetition, row in enumerate(recorded(sources[cell.params.repeat], cell.params.target_prompt_tokens)):
            fields = {name: row[name] for name in RequestResult.__dataclass_fields__
                      if name in row and name != "server"}
            if ttft_factor != 1.0:  # the first token (and everything after it) that much later
                late = (ttft_factor - 1) * (fields["t_first_token"] - fields["t_send"])
                for name in ("t_first_token", "t_first_answer_token", "t_last_token", "t_done"):
                    fields[name] = None if fields.get(name) is None else fields[name] + late
                fields["text_event_times"] = [t + late for t in fields.get("text_event_times") or ()]
            asyncio.run(record(RequestResult(**fields), repetition, False))
        _append_outcome(ctx, cell, ended_outcome(ctx, record))
    return run


def test_repeats_plan_every_cell_again_and_the_first_repeat_is_the_cell_without_repeats(tmp_path: Path) -> None:
    adapter = get_adapter("llama_server")
    once = build_plan(open_run(LOCAL_CPU, tmp_path / "a", TWO_CELLS).profile, adapter, ["context"], explicit=True)
    thrice = build_plan(open_run(LOCAL_CPU, tmp_path / "b", [*TWO_CELLS, "sweeps.repeats=3"]).profile, adapter,
                        ["context"], explicit=True)
    assert [(c.params.target_prompt_tokens, c.params.repeat) for c in thrice] == [
        (256, 0), (512, 0), (256, 1), (512, 1), (256, 2), (512, 2)]  # the whole plan, then again
    assert [c.cell_id for c in thrice[:2]] == [c.cell_id for c in once]  # a run without repeats is repeat 0
    assert len({c.cell_id for c in thrice}) == 6
    assert "repeat" not in thrice[0].params.as_dict() and thrice[2].params.as_dict()["repeat"] == 1
    assert thrice[2].label == "context target_prompt_tokens=256 repeat=1"
    assert {first_repeat_id(c.sweep, c.params.as_dict(), c.cell_id) for c in thrice} == {c.cell_id for c in once}


def test_a_skipped_cell_is_planned_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine that does not serve the cell's API (this adapter told it serves chat only): the refusal is
    planned once, not once per repeat."""
    run = open_run(LOCAL_CPU, tmp_path / "run", [*TWO_CELLS, "sweeps.repeats=2", "sweeps.context.api=responses"])
    adapter = get_adapter("llama_server")
    monkeypatch.setattr(adapter, "served_apis", lambda profile: {"chat"})
    cells = build_plan(run.profile, adapter, ["context"], explicit=True)
    assert [c.params.repeat for c in cells] == [0, 0] and all(c.skip for c in cells)


@pytest.mark.parametrize("value", ["0", "101", "two"])
def test_repeats_out_of_range_is_one_error_naming_the_field(tmp_path: Path, value: str) -> None:
    with pytest.raises(ProfileError, match=r"sweeps\.repeats"):
        load_profile(LOCAL_CPU, [f"sweeps.repeats={value}"])


def test_the_table_gives_the_median_of_the_repeats_with_its_interval(tmp_path: Path) -> None:
    run = replayed_run(tmp_path / "run", ("embedded-1", "embedded-2"))
    table = build_tables(run, ["context"])["context"]
    assert table["target_prompt_tokens"].tolist() == [256, 512]
    for row in table.to_dict("records"):
        target = row["target_prompt_tokens"]
        medians = [statistics.median(r["ttft_client_s"] for r in recorded(name, target))
                   for name in ("embedded-1", "embedded-2")]
        assert row["repeats"] == 2 and row["n_ok"] == 4 and row["status"] == "done"
        assert row["ttft_client_s_median"] == pytest.approx(statistics.median(medians))
        # two repeats: the 95% percentile interval is bounded by the two repeats' medians
        assert (row["ttft_client_s_ci_low"], row["ttft_client_s_ci_high"]) == pytest.approx(
            (min(medians), max(medians)))
        pooled = [r["ttft_client_s"] for name in ("embedded-1", "embedded-2") for r in recorded(name, target)]
        assert (row["ttft_client_s_min"], row["ttft_client_s_max"]) == pytest.approx((min(pooled), max(pooled)))
        assert row["ci_method"].startswith("95% percentile bootstrap interval of the median (10,000 resamples of 2")
    alone = build_tables(replayed_run(tmp_path / "once", ("embedded-1",)), ["context"])["context"]
    assert not {"repeats", "ci_method", "ttft_client_s_ci_low"} & set(alone.columns)  # one repeat: as before


def test_a_rerun_resumes_mid_repeats_and_the_write_up_shows_the_interval(tmp_path: Path) -> None:
    run = replayed_run(tmp_path / "run", ("embedded-1", "embedded-2"))
    ledger = run.dir.read_cells()
    assert [entry.cell.get("repeat", 0) for entry in ledger] == [0, 0, 1, 1]
    rows = [row for row in run.dir.read_requests() if row.cell]
    assert {row.cell.get("repeat", 0) for row in rows} == {0, 1}  # rows carry the repeat index
    # the sweeps step skips a cell whose ledger entry is done: with repeats each repeat is such a cell
    planned = build_plan(run.profile, get_adapter("llama_server"), ["context"], explicit=True)
    assert {c.cell_id for c in planned} == {entry.cell_id for entry in ledger}
    save_tables(run.dir, build_tables(run))
    text = whole(write_report(run.dir.path, ["markdown"]))
    assert "2 of the cells ran 2 times (sweeps.repeats)" in text
    assert "95% percentile bootstrap interval of the median" in text
    table = build_tables(run, ["context"])["context"]
    low, high = table.loc[0, "ttft_client_s_ci_low"], table.loc[0, "ttft_client_s_ci_high"]
    from ninferkit.report.fmt import number
    assert f"[{number(low)} – {number(high)}]" in text
    # the latency table spans each repeat's own requests (a rate over the wall time of one repeat)
    assert "| 256 prompt tokens | 2 |" in text and "| 256 prompt tokens (repeat 1) | 2 |" in text


def repeat_medians(target: int, factor: float = 1.0) -> list[float]:
    return [factor * statistics.median(r["ttft_client_s"] for r in recorded(name, target))
            for name in ("embedded-1", "embedded-2")]


def test_compare_says_whether_a_difference_lies_outside_the_interval(tmp_path: Path) -> None:
    """With 2 repeats a side, the 95% interval of the difference runs from the candidate's lower repeat minus the
    baseline's upper to the candidate's upper minus the baseline's lower (each extreme pair is drawn 1 time in
    16, above the 2.5% tail): outside it exactly where the two runs' repeats do not overlap."""
    a = replayed_run(tmp_path / "a", ("embedded-1", "embedded-2"))
    b = replayed_run(tmp_path / "b", ("embedded-2", "embedded-1"))  # the same repeats in the other order
    # made up, on purpose: a's rows with every TTFT times 3, a regression the gate must catch where the
    # recorded repeats (a loaded VM: embedded-2 was up to 4x slower) leave room to see it
    slower = replayed_run(tmp_path / "slower", ("embedded-1", "embedded-2"), ttft_factor=3.0)
    same = compare_runs([a.dir.path, b.dir.path]).table
    ttft = same[same["metric"] == "ttft_client_s"]
    assert (ttft["delta"] == 0).all() and not ttft["outside_interval"].any()
    assert (ttft["repeats_a"] == 2).all() and (ttft["repeats_b"] == 2).all()
    worse = compare_runs([a.dir.path, slower.dir.path])
    ttft = worse.table[worse.table["metric"] == "ttft_client_s"].sort_values("cell")
    expected_outside = []
    for row, target in zip(ttft.to_dict("records"), (256, 512), strict=True):
        base, candidate = repeat_medians(target), repeat_medians(target, 3.0)
        assert row["delta_pct"] == pytest.approx(200.0)
        assert (row["interval_low"], row["interval_high"]) == pytest.approx(
            (min(candidate) - max(base), max(candidate) - min(base)))
        assert row["outside_interval"] == (min(candidate) > max(base))
        expected_outside.append(row["outside_interval"])
    assert any(expected_outside)  # the data has a cell the gate can decide
    found, ungated = regressions(worse, 50.0)  # prefill and decode are the engine's: unchanged
    assert [r.metric for r in found] == ["ttft_client_s"] * sum(expected_outside) and not ungated
    assert not [r for r in regressions(worse, 250.0)[0] if r.metric == "ttft_client_s"]  # 200% worse, not > 250%
    assert "interval of the difference of the medians" in worse.document().sections[2].blocks[0].text  # type: ignore


def test_fail_on_regression_exits_1_with_a_line_naming_metric_cell_values_and_percentage(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = replayed_run(tmp_path / "a", ("embedded-1", "embedded-2"))
    slower = replayed_run(tmp_path / "slower", ("embedded-1", "embedded-2"), ttft_factor=3.0)
    assert cli_main(["compare", str(a.dir.path), str(slower.dir.path), "--fail-on-regression", "5"]) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("regression:")]
    ttft = [line for line in lines if line.startswith("regression: ttft_client_s in context target_prompt_tokens=")]
    assert ttft and all("(+200.0%), outside the interval of the difference [" in line for line in ttft)
    b = replayed_run(tmp_path / "b", ("embedded-2", "embedded-1"))
    assert cli_main(["compare", str(a.dir.path), str(b.dir.path), "--fail-on-regression", "5"]) == 0


def test_fail_on_regression_without_repeats_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    from tests.unit.report.test_report import copy_run

    first, second = copy_run(RUN_A, tmp_path), copy_run(RUN_B, tmp_path)
    with pytest.raises(BadInput, match="sweeps.repeats"):
        regressions(compare_runs([RUNS / RUN_A, RUNS / RUN_B]), 5.0)
    assert cli_main(["compare", str(first), str(second), "--fail-on-regression", "5"]) == 2
    assert not (second / "report").exists() or not any((second / "report").glob("compare-vs-*"))
    with pytest.raises(SystemExit) as refused:  # argparse's own refusal: exit 2, naming the option
        cli_main(["compare", str(first), str(second), "--fail-on-regression", "-3"])
    assert refused.value.code == 2


def test_the_ab_table_pairs_a_cell_once_over_its_repeats(tmp_path: Path) -> None:
    from ninferkit.sweeps.tables import ab_table

    a = replayed_run(tmp_path / "a", ("embedded-1", "embedded-2"))
    b = replayed_run(tmp_path / "b", ("embedded-2", "embedded-1"))
    table = ab_table(a.dir, b.dir)
    assert len(table) == 2 and list(table["cell"]) == ["target_prompt_tokens=256 api=chat",
                                                       "target_prompt_tokens=512 api=chat"]
    for row, target in zip(table.to_dict("records"), (256, 512), strict=True):
        pooled = [r["ttft_client_s"] for name in ("embedded-1", "embedded-2") for r in recorded(name, target)]
        assert row["ttft_client_s_a"] == pytest.approx(statistics.median(pooled)) == row["ttft_client_s_b"]


def test_a_cells_repeats_join_counts_summed_ranges_widened_and_disagreements_unknown() -> None:
    from ninferkit.sweeps.tables import _over_repeats

    first = {"target_prompt_tokens": 256, "n_ok": 2, "ttft_client_s_median": 0.5, "ttft_client_s_min": 0.4,
             "ttft_client_s_max": 0.6, "p99": 1.0, "kept_up": True, "server_note": None, "notes": "same",
             "status": "done", "reason": None, "cell_id": "first"}
    second = {**first, "n_ok": 1, "ttft_client_s_median": 0.9, "ttft_client_s_min": 0.8, "ttft_client_s_max": 1.1,
              "p99": 3.0, "kept_up": False, "server_note": "a note", "status": "failed", "reason": "it died",
              "cell_id": "second"}
    joined = _over_repeats([first, second], [0, 1])
    assert joined["n_ok"] == 3 and joined["cell_id"] == "first"
    assert joined["target_prompt_tokens"] == 256 and isinstance(joined["target_prompt_tokens"], int)  # a parameter
    assert (joined["ttft_client_s_min"], joined["ttft_client_s_max"]) == (0.4, 1.1)
    assert joined["ttft_client_s_median"] == pytest.approx(0.7) and joined["p99"] == pytest.approx(2.0)
    assert (joined["ttft_client_s_ci_low"], joined["ttft_client_s_ci_high"]) == (0.5, 0.9)
    assert joined["kept_up"] is None and joined["notes"] == "same" and joined["server_note"] == "a note"
    assert joined["status"] == "failed" and joined["reason"] == "repeat 1: it died" and joined["repeats"] == 2
