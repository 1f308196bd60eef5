"""The sessions sweep against the live embedded llama-server: every turn's reply goes back into the
history, the prompt grows turn by turn, the server's prefix cache keeps the previous turn, and the
request fields llama-server does not read (cache_control, previous_response_id) are not sent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from ninferkit import steps
from ninferkit.rundir.runs import Run, open_run, read_jsonl
from ninferkit.server import process as server
from ninferkit.steps.sweeps import sweeps
from ninferkit.sweeps.kinds.sessions import SessionsCell, think_times, turn_view
from tests.conftest import LOCAL_CPU, free_port

SMALL = ["sweeps.sessions.sessions=2", "sweeps.sessions.turns=3", "sweeps.sessions.document_tokens=256",
         "sweeps.sessions.output_tokens=8", "sweeps.sessions.think_time_s=0.2",
         "sweeps.sessions.think_time=exponential", "sweeps.sessions.think_seed=7"]


@pytest.fixture(scope="module")
def sessions_run(tmp_path_factory: pytest.TempPathFactory, llama_server: Path) -> Iterator[Run]:
    run = open_run(LOCAL_CPU, tmp_path_factory.mktemp("sessions"), [f"serve.port={free_port()}", *SMALL])
    steps.launch(run, progress=False)
    yield run
    server.stop(run.dir)


@pytest.fixture(scope="module")
def table(sessions_run: Run) -> pd.DataFrame:
    return sweeps(sessions_run, only="sessions", progress=False)["sessions"].set_index("api")


def rows(run: Run) -> list[dict]:
    return [r for r in read_jsonl(run.dir.requests) if r["sweep"] == "sessions"]


def test_every_api_runs_its_sessions_to_the_last_turn(sessions_run: Run, table: pd.DataFrame) -> None:
    assert list(table.index) == ["chat", "messages", "responses"]
    assert set(table["status"]) == {"done"} and list(table["n_ok"]) == [6, 6, 6]
    assert list(table["sessions_finished"]) == [2, 2, 2]
    turns = {(r["api"], r["session_index"], r["turn"]) for r in rows(sessions_run)}
    assert turns == {(api, s, t) for api in ("chat", "messages", "responses") for s in (0, 1) for t in (1, 2, 3)}


def test_the_history_grows_with_each_reply(sessions_run: Run) -> None:
    """Each turn's prompt holds the previous prompt and its reply: it is longer by at least the reply."""
    by_turn = {(r["api"], r["session_index"], r["turn"]): r for r in rows(sessions_run)}
    for (api, session, turn), row in by_turn.items():
        if turn > 1:
            before = by_turn[(api, session, turn - 1)]
            assert row["prompt_tokens"] > before["prompt_tokens"] + before["completion_tokens"] - 2, (api, turn)


def test_llama_server_keeps_the_previous_turn_and_ttft_falls(table: pd.DataFrame) -> None:
    """llama-server's prefix cache (`cache_prompt`) serves the previous turn from the session's slot on
    every API, since each resends the history; the first turn's 256-token document is prefilled cold."""
    assert set(table["history_sent"]) == {"full"}
    assert (table["cached_share_first_turn"] < 0.2).all()
    assert (table["kept_share_median"] > 0.9).all()
    assert (table["ttft_later_turns_s"] < table["ttft_first_turn_s"]).all()


def test_fields_llama_server_does_not_read_are_not_sent_and_the_notes_say_so(table: pd.DataFrame) -> None:
    assert "cache_control not sent: llama_server does not read it (as its /props says)" in \
        table.loc["messages", "notes"]
    assert "previous_response_id not sent: llama_server does not read it" in table.loc["responses", "notes"]
    assert "output_tokens 8 raised to 16" in table.loc["responses", "notes"]


def test_think_times_are_the_seeded_draws(sessions_run: Run, table: pd.DataFrame) -> None:
    chat = [r for r in rows(sessions_run) if r["api"] == "chat"]
    params = SessionsCell.recorded(chat[0]["cell"])
    for session in (0, 1):
        waits = [r["think_s"] for r in sorted(chat, key=lambda r: r["turn"]) if r["session_index"] == session]
        assert waits == [0.0, *think_times(params, session)] and all(w > 0 for w in waits[1:])


def test_the_turn_view_shows_reuse_by_turn(sessions_run: Run, table: pd.DataFrame) -> None:
    view = turn_view(pd.DataFrame(rows(sessions_run)))
    assert list(view["turn"][view["api"] == "chat"]) == [1, 2, 3]
    chat = view[view["api"] == "chat"].set_index("turn")
    assert chat.loc[1, "kept_share_median"] != chat.loc[1, "kept_share_median"]  # NaN: turn 1 has no previous
    prompts = chat["prompt_tokens_median"]
    assert prompts[3] > prompts[2] > prompts[1]
