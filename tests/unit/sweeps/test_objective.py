"""The best setting for a target (issue 39): each launch judged from its rows, and the search that stops launching
once the answer is pinned. The rows are RequestRow records as the sweeps write them (only the fields judged)."""

from __future__ import annotations

from typing import Any

import pytest

from ninferkit.params.variants import Objective
from ninferkit.rundir.records import RequestRow
from ninferkit.sweeps.objective import Verdict, answer, figure, judge, next_launch

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
        Objective(sweep="concurrency", maximize="decode_tok_s_server", ordered=True)
