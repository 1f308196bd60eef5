"""The sessions sweep offline: its plan on each engine (what is skipped, what is sent otherwise), the seeded
think times, each API's turn request, and its table and per-turn view from a recorded run.

tests/data/run_dirs/embedded-sessions is a real run (README there): `ninferkit sweep params/local-cpu.yaml
--only sessions` of the embedded llama-server at the section's defaults (2 sessions of 4 turns, a 512-token
document, 32-token replies, on the chat, messages and responses APIs). The replies it carried back are not
kept (no field of a row); the prompt and cached tokens are llama-server's usage counts.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from ninferkit.engines import get_adapter
from ninferkit.errors import ProfileError
from ninferkit.measure.client import RequestResult
from ninferkit.rundir.runs import RunDir, open_run
from ninferkit.sweeps.cell import Cell
from ninferkit.sweeps.kinds.sessions import _turn_request, think_times, turn_view
from ninferkit.sweeps.plan import build_plan
from ninferkit.sweeps.tables import counted_rows, latest_outcomes, sweep_table
from tests.conftest import DATA, LOCAL_CPU, REPO

RECORDED = RunDir(DATA / "run_dirs" / "embedded-sessions")
LIVE_G1 = ["engine.fork=ziworkslab/ninfer-3090-ubuntu", "engine.version=null"]  # test_sweep_conditions' build


def planned(tmp_path: Path, profile: Path, *overrides: str) -> dict[str, Cell[Any]]:
    run = open_run(profile, tmp_path, list(overrides))
    return {c.params.api: c for c in build_plan(run.profile, get_adapter(run.profile.engine.kind), ["sessions"],
                                                explicit=True)}


def test_it_runs_only_when_named(tmp_path: Path) -> None:
    run = open_run(LOCAL_CPU, tmp_path, [])
    assert build_plan(run.profile, get_adapter("llama_server"), ["sessions"], explicit=False) == []


def test_llama_server_resends_the_history_on_every_api_and_the_notes_say_why(tmp_path: Path) -> None:
    cells = planned(tmp_path, LOCAL_CPU)
    assert list(cells) == ["chat", "messages", "responses"] and all(c.skip is None for c in cells.values())
    assert not any("not sent: llama_server" in note for note in cells["chat"].notes)
    assert ("cache_control not sent: llama_server does not read it (as its /props says); every turn resends the "
            "whole history") in cells["messages"].notes
    assert any(n.startswith("previous_response_id not sent: llama_server") for n in cells["responses"].notes)


def test_vllm_serves_all_three_apis(tmp_path: Path) -> None:
    """vLLM 0.26.0 answered chat, Messages and Responses on the H200 (tests/data/vllm-live/session2/http)."""
    cells = planned(tmp_path, REPO / "params" / "vllm-v100-baseline.yaml")
    assert all(cells[api].skip is None for api in ("chat", "messages", "responses"))


def test_a_ninfer_build_with_responses_is_sent_previous_response_id(tmp_path: Path) -> None:
    cells = planned(tmp_path, REPO / "params" / "ninfer-rtx3090-groupwise.yaml", *LIVE_G1)
    assert not any(n.startswith("previous_response_id not sent") for n in cells["responses"].notes)
    assert any(n.startswith("cache_control not sent: ninfer build ziworkslab") for n in cells["messages"].notes)


def test_a_session_that_outgrows_the_context_fails_before_anything_is_sent(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"sweeps.sessions.document_tokens: .* exceed serve.max_context = 4096"):
        planned(tmp_path, LOCAL_CPU, "sweeps.sessions.turns=40", "sweeps.sessions.output_tokens=128")


def test_think_times_are_fixed_or_seeded_draws_per_session(tmp_path: Path) -> None:
    params = planned(tmp_path, LOCAL_CPU, "sweeps.sessions.think_time_s=2", "sweeps.sessions.turns=5")["chat"].params
    assert think_times(params, 0) == [2.0] * 4
    drawn = replace(params, think_time="exponential")
    assert think_times(drawn, 0) == think_times(drawn, 0) != think_times(drawn, 1)
    assert think_times(replace(drawn, think_seed=1), 0) != think_times(drawn, 0)
    assert all(w > 0 for w in think_times(drawn, 0)) and len(think_times(drawn, 0)) == 4


def test_each_api_carries_the_history_its_own_way() -> None:
    history = [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}]
    previous = RequestResult(api="responses", response_id="resp_1")
    messages, extra = _turn_request("chat", "full", history, "q2", previous)
    assert messages == [*history, {"role": "user", "content": "q2"}] and extra == {}
    messages, extra = _turn_request("messages", "cache_control", history, "q2", previous)
    assert messages[-1] == {"role": "user", "content": [
        {"type": "text", "text": "q2", "cache_control": {"type": "ephemeral"}}]} and messages[:2] == history
    messages, extra = _turn_request("responses", "previous_response_id", history, "q2", previous)
    assert messages == [{"role": "user", "content": "q2"}] and extra == {"previous_response_id": "resp_1"}
    # the first turn has no response to name: it is sent whole
    assert _turn_request("responses", "previous_response_id", [], "q1", None) == ([{"role": "user", "content": "q1"}],
                                                                                  {})


def recorded_table() -> pd.DataFrame:
    outcomes = latest_outcomes(RECORDED)
    return sweep_table("sessions", counted_rows(RECORDED, outcomes), outcomes, None).set_index("api")


def test_the_recorded_table_says_which_api_kept_the_previous_turn() -> None:
    """llama-server kept the previous turn (prompt and reply) on every API; turn 1's document was cold."""
    table = recorded_table()
    assert list(table.index) == ["chat", "messages", "responses"] and set(table["status"]) == {"done"}
    assert list(table["n_ok"]) == [8, 8, 8] and list(table["sessions_finished"]) == [2, 2, 2]
    assert set(table["history_sent"]) == {"full"} and set(table["cached_source"]) == {"usage"}
    assert (table["kept_share_median"] > 0.99).all() and (table["kept_share_median"] <= 1).all()
    assert (table["cached_share_first_turn"] < 0.1).all()
    assert (table["ttft_later_turns_s"] * 5 < table["ttft_first_turn_s"]).all()
    assert list(table["sessions_by_turns"]) == ["2 x 4"] * 3


def test_the_turn_view_follows_each_turn() -> None:
    view = turn_view(pd.DataFrame([row.as_dict() for row in RECORDED.read_requests()]))
    assert len(view) == 12 and list(view["turns_ok"]) == [2] * 12
    for _, api in view.groupby("api"):
        prompts = list(api["prompt_tokens_median"])
        assert prompts == sorted(prompts) and len(set(prompts)) == 4  # the history grows every turn
        assert api["kept_share_median"].isna().tolist() == [True, False, False, False]


def test_the_write_up_shows_the_turn_view_below_the_sessions_table(tmp_path: Path) -> None:
    import shutil

    from ninferkit.report import write_report
    from ninferkit.report.fmt import number
    from ninferkit.sweeps.tables import save_tables

    copy = RunDir(tmp_path / "run")
    shutil.copytree(RECORDED.path, copy.path)
    outcomes = latest_outcomes(copy)
    save_tables(copy, {"sessions": sweep_table("sessions", counted_rows(copy, outcomes), outcomes, None)})
    text = write_report(copy.path, ["markdown"]).markdown.read_text()
    view = turn_view(pd.DataFrame([row.as_dict() for row in counted_rows(copy, outcomes)]))
    assert "how reuse and TTFT evolve with the turn, and which API kept the prefix" in text
    header = "| api | turn | turns_ok | prompt_tokens_median | cached_tokens_median | kept_share_median |"
    assert header in text
    second = view[(view["api"] == "chat") & (view["turn"] == 2)].iloc[0]
    assert (f"| chat | 2 | 2 | {number(second['prompt_tokens_median'])} | {number(second['cached_tokens_median'])} "
            f"| {100 * second['kept_share_median']:.0f}% |") in text
    assert "| chat | 1 | 2 |" in text and "| responses | 4 | 2 |" in text
