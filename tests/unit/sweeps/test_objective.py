"""The best setting for a target (issue 39): each launch judged from its rows, and the search that stops launching
once the answer is pinned. The searches' rows are RequestRow records as the sweeps write them (only the fields
judged); goodput and the largest context are checked on recorded real runs of the embedded default
(tests/data/run_dirs/README.md says how each was made) against figures computed here from their raw lines."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from ninferkit.params.sweeps import LatencyTargets
from ninferkit.params.variants import Objective
from ninferkit.rundir.records import RequestRow
from ninferkit.rundir.runs import read_rows
from ninferkit.sweeps.objective import Answer, Verdict, answer, figure, judge, next_launch
from tests.conftest import DATA

ORDER = [f"ctx{n}" for n in (1, 2, 4, 8, 16, 32, 64)]
"""Seven contexts in order: decode falls as the context grows."""


def _rows(launch: str, decode: list[float], ttft: list[float] | None = None, concurrency: int = 2) -> list[RequestRow]:
    cell: dict[str, Any] = {"concurrency": concurrency}
    if launch != "base":
        cell["variant"] = launch
    return [RequestRow(status="ok", sweep="concurrency", cell=cell, decode_tok_s_server=value,
                       ttft_client_s=(ttft or [0.1] * len(decode))[index])
            for index, value in enumerate(decode)]


def test_a_figure_is_a_median_or_a_percentile_and_absent_where_no_row_has_it() -> None:
    rows = _rows("base", [10.0, 20.0, 30.0], [0.1, 0.2, 1.0])
    assert figure(rows, "decode_tok_s_server") == 20.0
    assert figure(rows, "ttft_client_s_p50") == pytest.approx(0.2)
    assert figure(rows, "ttft_client_s_p99") == pytest.approx(0.984)
    assert figure(rows, "prefill_tok_s_server") is None


def test_a_launch_meets_the_limits_at_its_own_cells_only() -> None:
    objective = Objective(sweep="concurrency", cell={"concurrency": 2}, at_most={"ttft_client_s_p99": 0.5},
                          at_least={"decode_tok_s_server": 15})
    rows = [*_rows("base", [20.0, 22.0]), *_rows("t2", [30.0, 31.0], [0.2, 0.9]), *_rows("t2", [1.0], concurrency=1)]
    assert judge(objective, "base", rows).meets is True
    slow = judge(objective, "t2", rows)
    assert slow.meets is False and slow.missed == ["ttft_client_s_p99 0.893 > 0.5"] and slow.rows == 2
    assert judge(objective, "absent", rows).meets is None


def test_maximize_picks_the_best_launch_that_meets_the_limits() -> None:
    objective = Objective(sweep="concurrency", at_most={"ttft_client_s_p99": 0.5}, maximize="decode_tok_s_server")
    rows = [*_rows("base", [20.0]), *_rows("a", [40.0], [0.9]), *_rows("b", [30.0])]
    verdicts = {name: judge(objective, name, rows) for name in ("base", "a", "b")}
    found = answer(objective, ["base", "a", "b"], verdicts)
    assert found.best == "b" and "highest decode_tok_s_server (30)" in found.why
    assert found.outcomes["a"].startswith("misses: ttft_client_s_p99 0.9 > 0.5")
    assert next_launch(objective, ["a", "b", "c"], verdicts) == "c"  # unordered: every variant is measured


@pytest.mark.parametrize("last_passing", [-1, 0, 3, 6])
def test_an_ordered_search_bisects_and_stops_once_the_answer_is_pinned(last_passing: int) -> None:
    """Seven variants: at most three launches pin the last one that keeps decode >= 10, whichever it is, and the
    answer names what refuted each variant it did not launch."""
    objective = Objective(sweep="concurrency", at_least={"decode_tok_s_server": 10}, ordered=True)
    verdicts: dict[str, Verdict] = {}
    launched = []
    while (name := next_launch(objective, ORDER, verdicts)) is not None:
        launched.append(name)
        decode = 20.0 if ORDER.index(name) <= last_passing else 5.0
        verdicts[name] = judge(objective, name, _rows(name, [decode]))
    assert len(launched) <= 3
    found = answer(objective, ORDER, verdicts)
    assert found.best == (ORDER[last_passing] if last_passing >= 0 else None)
    for name in set(ORDER) - set(launched):
        assert found.outcomes[name].startswith("not launched: ")


def test_an_objective_asks_one_question() -> None:
    with pytest.raises(ValueError, match="give limits"):
        Objective(sweep="concurrency")
    with pytest.raises(ValueError, match="give one"):
        Objective(sweep="context", largest="target_prompt_tokens", at_least={"decode_tok_s_server": 1},
                  maximize="decode_tok_s_server")
    with pytest.raises(ValueError, match="none is given"):
        Objective(sweep="concurrency", maximize="goodput_rps")
    with pytest.raises(ValueError, match="no figure asks for them"):
        Objective(sweep="concurrency", maximize="decode_tok_s_server", goodput=LatencyTargets(ttft_s=1))
    Objective(sweep="concurrency", maximize="goodput_rps", goodput=LatencyTargets(ttft_s=1), ordered=True)


def _peak_search(figures: list[float], misses_from: int | None = None) -> tuple[list[str], Answer]:
    """Runs the ordered maximize search over len(figures) variants whose decode is `figures` (the ones from
    `misses_from` on under a TTFT limit they miss), launching as next_launch asks."""
    order = [f"v{index}" for index in range(len(figures))]
    objective = Objective(sweep="concurrency", maximize="decode_tok_s_server", at_most={"ttft_client_s": 1.0},
                          ordered=True)
    verdicts: dict[str, Verdict] = {}
    launched = []
    while (name := next_launch(objective, order, verdicts)) is not None:
        assert name not in launched  # no variant is launched twice
        launched.append(name)
        index = order.index(name)
        late = misses_from is not None and index >= misses_from
        verdicts[name] = judge(objective, name, _rows(name, [figures[index]], [2.0 if late else 0.1]))
    return launched, answer(objective, order, verdicts)


@pytest.mark.parametrize("peak", range(8))
def test_an_ordered_maximize_climbs_to_the_peak_and_stops_once_it_is_pinned(peak: int) -> None:
    """Eight variants whose figure rises to one peak and falls after it: the search finds the peak wherever it is,
    with fewer launches than variants, and says what ruled out each variant it did not launch."""
    figures = [100.0 - 10 * abs(index - peak) for index in range(8)]
    launched, found = _peak_search(figures)
    assert found.best == f"v{peak}" and found.why.startswith("the peak of decode_tok_s_server (100)")
    assert len(launched) <= 6
    for name in {f"v{index}" for index in range(8)} - set(launched):
        assert found.outcomes[name].startswith("not launched: decode_tok_s_server ")
    neighbours = {f"v{index}" for index in (peak - 1, peak + 1) if 0 <= index < 8}
    assert neighbours <= set(launched)  # the peak is pinned by both its neighbours (or the list's end)


def test_an_ordered_maximize_stays_where_the_limits_hold() -> None:
    """The figure keeps rising, but from v3 on the limits fail: the answer is the last variant that meets them."""
    launched, found = _peak_search([float(10 * index) for index in range(8)], misses_from=3)
    assert found.best == "v2" and "v3" in launched
    assert all(found.outcomes[name] == "not launched: v3, earlier in the order, misses the limits"
               for name in {"v4", "v5", "v6", "v7"} - set(launched))
    launched, found = _peak_search([1.0] * 4, misses_from=0)
    assert found.best is None and launched == ["v1", "v0"]


SPEC_AB = DATA / "run_dirs" / "embedded-spec-ab"
VARIANTS = DATA / "run_dirs" / "embedded-variants"


def _raw(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (path / "requests.jsonl").read_text().splitlines()]


def test_the_largest_context_that_keeps_decode_is_the_sweeps_own_cell_with_the_next_one_refuting_it() -> None:
    """The embedded default's context sweep (recorded): the limit between two cells' median decode picks the
    smaller, and the larger refutes the next; the medians are computed here from requests.jsonl's lines."""
    decode: dict[int, list[float]] = {}
    for row in _raw(SPEC_AB):
        if row["sweep"] == "context" and row["status"] == "ok" and not row.get("warmup"):
            decode.setdefault(row["cell"]["target_prompt_tokens"], []).append(row["decode_tok_s_server"])
    medians = {target: statistics.median(values) for target, values in sorted(decode.items())}
    rows = read_rows(SPEC_AB / "requests.jsonl", RequestRow)
    for floor in sorted(medians.values()):
        passing = [target for target, median in medians.items() if median >= floor]
        objective = Objective(sweep="context", largest="target_prompt_tokens", at_least={"decode_tok_s_server": floor})
        verdict = judge(objective, "base", rows)
        assert verdict.meets and verdict.figures["target_prompt_tokens"] == max(passing)
        assert verdict.figures["decode_tok_s_server"] == pytest.approx(medians[max(passing)])
        above = [target for target in medians if target > max(passing)]
        assert verdict.detail.startswith(f"the next measured, target_prompt_tokens {above[0]}, misses: "
                                         if above else "the largest cell measured")
        if any(target < max(passing) and medians[target] < floor for target in medians):
            assert "does not fall monotonically" in verdict.detail
    too_high = Objective(sweep="context", largest="target_prompt_tokens", at_least={"decode_tok_s_server": 1e6})
    missed = judge(too_high, "base", rows)
    assert missed.meets is False and missed.missed[0].startswith("at target_prompt_tokens 256, the smallest measured")


def _goodput(rows: list[dict[str, Any]], ttft_s: float) -> float:
    """Requests that finished within ttft_s over first send to last end, per attempt at the cell, their median."""
    attempts: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        attempts.setdefault((row["cell_id"], row["attempt"]), []).append(row)
    values = [sum(row["status"] == "ok" and row["ttft_client_s"] <= ttft_s for row in own)
              / (max(row["t_done"] for row in own) - min(row["t_send"] for row in own)) for own in attempts.values()]
    return float(statistics.median(values))


def test_goodput_at_a_cell_is_the_median_of_its_attempts_and_picks_the_best_launch() -> None:
    """The recorded variants run (two repeats of each cell, each timed on its own): goodput_rps under a TTFT target
    matches the count made here from requests.jsonl's lines, and maximize picks the launch with the most."""
    raw = [row for row in _raw(VARIANTS) if row["sweep"] == "concurrency" and not row.get("warmup")
           and row["cell"]["concurrency"] == 2]
    ttft = statistics.median(row["ttft_client_s"] for row in raw if row["status"] == "ok")  # about half are good
    objective = Objective(sweep="concurrency", cell={"concurrency": 2}, maximize="goodput_rps",
                          goodput=LatencyTargets(ttft_s=ttft))
    rows = read_rows(VARIANTS / "requests.jsonl", RequestRow)
    names = ["base", "ub32", "spec-off"]
    expected = {name: _goodput([row for row in raw if row["cell"].get("variant", "base") == name], ttft)
                for name in names}
    verdicts = {name: judge(objective, name, rows) for name in names}
    for name in names:
        assert verdicts[name].score == pytest.approx(expected[name]) and verdicts[name].meets
    assert len(set(expected.values())) == 3  # the launches differ, so the pick below can fail
    found = answer(objective, names, verdicts)
    best = max(expected, key=lambda name: expected[name])
    assert found.best == best and found.why.startswith(f"the highest goodput_rps ({expected[best]:.4g})")
    assert all(f"below {best}'s goodput_rps" in found.outcomes[name] for name in names if name != best)
