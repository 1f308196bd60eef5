"""The decision table in words (capacity/summary.py), on recorded capacity answers of the published H200
examples (docs/examples/h200-vllm: vLLM 0.26.0's fit, whose margins are bounded below only, and its llama-server
run, whose q8_0 launches contradict each other): one-sided intervals in words, one row per pool, one row for a
dtype the data cannot answer."""

from __future__ import annotations

from ninferkit.capacity.summary import gib, table_rows, tokens
from ninferkit.report.data import load_run
from tests.conftest import REPO

VLLM = REPO / "docs" / "examples" / "h200-vllm"


def test_an_open_side_is_said_in_words() -> None:
    assert tokens([6_395_280, None]) == "at least 6,395,280" and tokens([None, 100_066]) == "up to 100,066"
    assert gib([137.23, None]) == "at least 137.23" and gib([None, -11.41]) == "at most -11.41"
    assert tokens([None, None]) == "?" and gib([2.0, 2.004]) == "2.00" and tokens([1, 2]) == "1–2"


def test_vllms_decision_table_has_no_question_marks_and_one_row_per_pool() -> None:
    capacity = load_run(VLLM).capacity
    assert capacity is not None
    [answer] = capacity.answers
    rows = table_rows(answer.decision_table)
    assert not any("?" in cell for row in rows for cell in row)
    # one slot: the pool that starts is the full one, so the two readings are one row (8 rows were 6 settings)
    assert len(rows) == len(answer.decision_table) - 2
    one = next(row for row in rows if row[1:3] == ("1", "2,048"))
    assert one[3:8] == ("starts and full", "2,048", "yes", "at least 137.23",
                        "leftover at least 6,395,280 tokens (137.23 GiB)")
    assert [row[3] for row in rows if row[1] == "32"] == ["starts", "full", "starts", "full"]


def test_a_dtype_the_observations_cannot_answer_is_one_row() -> None:
    capacity = load_run(VLLM / "h200-llamacpp-smollm2").capacity
    assert capacity is not None
    rows = [row for answer in capacity.answers for row in table_rows(answer.decision_table)]
    q8 = [row for row in rows if row[0] == "q8_0"]
    assert q8 == [("q8_0", "1; 32", "2,048; 8,192", "every reading", "—", "—", "—",
                   "observations contradict each other", "—")]
    assert all(row[5] == "yes" for row in rows if row[0] == "f16")  # answered rows keep their verdict
