"""The multi-turn sessions sweep: N sessions at once, K turns each, every turn's real reply sent back in the
next turn's history after a think time (fixed, or drawn from a seeded exponential law). One cell per API:

- Chat Completions resends the whole history every turn;
- Anthropic Messages resends it with a `cache_control` breakpoint on the newest turn, where the engine reads
  the field (else plain, and the cell's notes say so);
- Responses names the previous reply by `previous_response_id` and sends only the new turn, where the
  engine reads the field (else it resends the history as input items, and the notes say so).

Each row is one turn (`session_index`, `turn`, `think_s`, `history_sent`); its prompt and cached tokens are
the engine's own counts (usage, else the engine's per-request record). The table says per cell how much of
the previous turn the server kept (`kept_share_median`: cached tokens over the previous turn's prompt and
reply tokens, all of which the new prompt repeats) and TTFT at the first turn against the later ones;
`turn_view` is the per-turn evolution the write-up shows beside it. A session whose turn fails stops there:
its next turn has no reply to carry.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ninferkit.measure.client import RequestResult, StreamingClient
from ninferkit.measure.latency import Targets
from ninferkit.measure.workloads import exact_prompt
from ninferkit.params.sweeps import SessionsSweep
from ninferkit.rundir.records import RequestRow
from ninferkit.sweeps.cell import Cell, CellParams, Label, Planner, sent_output_tokens
from ninferkit.sweeps.execute import Recorder, SweepContext, gather_or_cancel, request_spec
from ninferkit.sweeps.kinds import columns
from ninferkit.sweeps.kinds.base import SweepKind
from ninferkit.sweeps.kinds.columns import ViewColumn
from ninferkit.sweeps.metrics import numbers

QUESTIONS = (
    "Which figures in this record matter most to the board, and why?",
    "Summarise what you just said in two sentences.",
    "What would an engineer check first on site, given the record?",
    "Name one risk the record understates.",
    "Which section would you read again before the board meeting?",
    "What should next year's record measure that this one does not?",
)
"""The user's turns after the document, in order (then again from the first): short questions about the
document and the replies, written for this project."""
TURN_TOKENS = 64
"""What one turn may add to the prompt beside the reply: a question and the chat template's tokens around it."""
HISTORY_FIELDS = {"messages": "cache_control", "responses": "previous_response_id"}
"""The request field that carries an API's history more cheaply than resending it, where the engine reads it."""


@dataclass(frozen=True, kw_only=True)
class SessionsCell(CellParams):
    sessions: int
    turns: int
    document_tokens: int
    think_time_s: float
    think_time: str
    think_seed: int


def history_sent(api: str, reads: frozenset[str]) -> str:
    """How a turn's history reaches this engine: by the API's field where the engine reads it, else resent."""
    field = HISTORY_FIELDS.get(api)
    return field if field is not None and field in reads else "full"


def think_times(params: SessionsCell, session: int) -> list[float]:
    """The waits before turns 2..K of a session: fixed, or exponential with the mean think_time_s, drawn from
    (think_seed, session) so a seed gives every session the same waits on every run."""
    if params.think_time == "fixed" or params.think_time_s == 0:
        return [params.think_time_s] * (params.turns - 1)
    draw = random.Random(f"{params.think_seed}:{session}")
    return [draw.expovariate(1 / params.think_time_s) for _ in range(params.turns - 1)]


class Sessions(SweepKind[SessionsSweep, SessionsCell]):
    name = "sessions"
    params = SessionsCell
    table_keys = ("api", "sessions", "turns", "document_tokens")
    labels = (Label("api"), Label("sessions", "{} sessions", one="{} session"), Label("turns", "{} turns"))
    view = (columns.API, ViewColumn("sessions x turns", "sessions_by_turns", "plain"), columns.REQUESTS,
            ViewColumn("history sent", "history_sent", "plain"),
            ViewColumn("previous turn kept (turns 2+)", "kept_share_median", "percent"),
            ViewColumn("cached share, turn 1", "cached_share_first_turn", "percent"),
            ViewColumn("cached share, turns 2+", "cached_share_later_turns", "percent"),
            ViewColumn("TTFT turn 1, s", "ttft_first_turn_s", "plain"),
            ViewColumn("TTFT turns 2+, s", "ttft_later_turns_s", "plain"), columns.DECODE, columns.ANSWER)
    loads_server = True
    detail_caption = ("Per API and turn over the sessions: turns finished, median prompt and cached tokens (the "
                      "engine's count), the share of the previous turn the server kept, TTFT and the server's decode "
                      "rate: how reuse and TTFT evolve with the turn, and which API kept the prefix.")

    def detail(self, rows: pd.DataFrame) -> pd.DataFrame | None:
        return turn_view(rows)

    def plan(self, section: SessionsSweep, planner: Planner) -> list[Cell[SessionsCell]]:
        """One cell per API; the last turn's prompt holds the document and every earlier turn and reply."""
        cells = []
        for api in section.apis:
            output = sent_output_tokens(api, section.output_tokens)
            planner.fits("sweeps.sessions.document_tokens",
                         section.document_tokens + section.turns * TURN_TOKENS + (section.turns - 1) * output, output)
            cell = planner.cell(self, SessionsCell(
                sessions=section.sessions, turns=section.turns, document_tokens=section.document_tokens,
                think_time_s=section.think_time_s, think_time=section.think_time, think_seed=section.think_seed,
                output_tokens=section.output_tokens, api=api, pin_output=section.pin_output, **planner.common))
            field = HISTORY_FIELDS.get(api)
            if field is not None and history_sent(api, planner.reads) == "full":
                cell = Cell(cell.kind, cell.params, cell.skip, cell.request, (*cell.notes, (
                    f"{field} not sent: {planner.who} does not read it{planner.source}; every turn resends the "
                    "whole history")))
            cells.append(cell)
        return cells

    async def run(self, ctx: SweepContext, cell: Cell[SessionsCell], record: Recorder) -> None:
        """Every session's document is built (tokenized) before the first turn is sent."""
        params = cell.params
        sent = history_sent(params.api, ctx.adapter.request_extensions(ctx.run.profile))
        documents = [exact_prompt(ctx.tokenizer, params.document_tokens) for _ in range(params.sessions)]
        async with ctx.client(connections=params.sessions + 1) as client:
            await gather_or_cancel([_session(ctx, cell, client, record, index, documents[index].text, sent)
                                    for index in range(params.sessions)])

    def metrics(self, ok: pd.DataFrame, finished: Sequence[RequestRow], sent: Sequence[RequestRow],
                measured: pd.DataFrame, targets: Targets) -> dict[str, Any]:
        """How much of each previous prompt the server kept, cached share and TTFT at turn 1 against later."""
        turns = turn_rows(ok)
        first, later = turns[turns["turn"] == 1], turns[turns["turn"] > 1]
        history = sorted(set(ok["history_sent"].dropna())) if "history_sent" in ok else []
        params = measured["cell"].iloc[0] if len(measured) else {}
        return {
            "sessions_by_turns": f"{params.get('sessions')} x {params.get('turns')}" if params else None,
            "history_sent": ", ".join(history) or None,
            "cached_source": ", ".join(sorted(set(turns["cached_source"].dropna()))) or None,
            "kept_share_median": _median(later, "kept_share"),
            "cached_share_first_turn": _median(first, "cached_share"),
            "cached_share_later_turns": _median(later, "cached_share"),
            "ttft_first_turn_s": _median(first, "ttft_client_s"),
            "ttft_later_turns_s": _median(later, "ttft_client_s"),
            "sessions_finished": _sessions_finished(measured),
        }


async def _session(ctx: SweepContext, cell: Cell[SessionsCell], client: StreamingClient, record: Recorder,
                   index: int, document: str, sent: str) -> None:
    """One session's turns, each after its think time; it ends at a failed turn (no reply to carry on)."""
    params = cell.params
    waits = [0.0, *think_times(params, index)]
    history: list[dict[str, Any]] = []
    previous: RequestResult | None = None
    for turn in range(1, params.turns + 1):
        if waits[turn - 1]:
            await asyncio.sleep(waits[turn - 1])
        question = QUESTIONS[(turn - 1) % len(QUESTIONS)]
        asked = f"{document}\n\n{question}" if turn == 1 else question
        messages, extra = _turn_request(params.api, sent, history, asked, previous)
        result = await record(await client.send(request_spec(ctx, cell, messages, **extra)), turn - 1, False,
                              session_index=index, turn=turn, think_s=waits[turn - 1], history_sent=sent)
        if result.status != "ok":
            return
        history += [_message(params.api, "user", asked), _message(params.api, "assistant", result.reply.text)]
        previous = result


def _turn_request(api: str, sent: str, history: list[dict[str, Any]], asked: str,
                  previous: RequestResult | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The messages (or input items) of a turn and the fields it adds: the history resent, behind a
    breakpoint on the newest turn, or named by the previous response's id."""
    if sent == "previous_response_id" and previous is not None and previous.response_id is not None:
        return [_message(api, "user", asked)], {"previous_response_id": previous.response_id}
    if sent == "cache_control":
        block = {"type": "text", "text": asked, "cache_control": {"type": "ephemeral"}}
        return [*history, {"role": "user", "content": [block]}], {}
    return [*history, _message(api, "user", asked)], {}


def _message(api: str, role: str, text: str) -> dict[str, Any]:
    """A turn of the history as the API takes it back (a Responses reply is an output message item)."""
    if api == "responses" and role == "assistant":
        return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
    return {"role": role, "content": text}


def turn_rows(ok: pd.DataFrame) -> pd.DataFrame:
    """The finished turns with `cached` (usage's count, else the engine's own record: `cached_source` says
    which), `cached_share` (of the turn's prompt) and `kept_share` (of the session's previous turn: its prompt
    and reply tokens, which this prompt repeats; None after a turn that is missing)."""
    wanted = ["cell_id", "api", "session_index", "turn", "prompt_tokens", "cached_tokens", "cached_tokens_server",
              "completion_tokens", "ttft_client_s", "decode_tok_s_server"]
    if not len(ok) or "turn" not in ok:
        return pd.DataFrame(columns=[*wanted, "cached", "cached_source", "cached_share", "kept_share"])
    turns = ok.reindex(columns=wanted).sort_values(["cell_id", "session_index", "turn"]).copy()
    usage = pd.to_numeric(turns["cached_tokens"], errors="coerce")
    server = pd.to_numeric(turns["cached_tokens_server"], errors="coerce")
    turns["cached"] = usage.where(usage.notna(), server)
    turns["cached_source"] = ["usage" if pd.notna(u) else "engine record" if pd.notna(e) else None
                              for u, e in zip(usage, server, strict=True)]
    prompt = pd.to_numeric(turns["prompt_tokens"], errors="coerce")
    turns["cached_share"] = turns["cached"] / prompt
    history = prompt + pd.to_numeric(turns["completion_tokens"], errors="coerce")
    before = history.groupby([turns["cell_id"], turns["session_index"]]).shift(1)
    consecutive = turns.groupby(["cell_id", "session_index"])["turn"].diff() == 1
    turns["kept_share"] = (turns["cached"] / before).where(consecutive)
    return turns


def turn_view(rows: pd.DataFrame) -> pd.DataFrame:
    """The write-up's per-turn table of a run's sessions rows (requests.jsonl, counted attempts, warm-ups
    none): per API and turn, the turns finished, median prompt and cached tokens, the share of the previous
    turn the server kept, TTFT and the server's decode rate: how reuse and TTFT evolve with the turn."""
    turns = turn_rows(rows[(rows["sweep"] == "sessions") & (rows["status"] == "ok")] if len(rows) else rows)
    if not len(turns):
        return pd.DataFrame()
    grouped = turns.groupby(["api", "turn"])
    return pd.DataFrame({
        "turns_ok": grouped.size(),
        "prompt_tokens_median": grouped["prompt_tokens"].median(),
        "cached_tokens_median": grouped["cached"].median(),
        "kept_share_median": grouped["kept_share"].median(),
        "ttft_client_s_median": grouped["ttft_client_s"].median(),
        "decode_tok_s_server_median": grouped["decode_tok_s_server"].median(),
    }).reset_index()


def _median(frame: pd.DataFrame, name: str) -> float | None:
    values = numbers(frame, name)
    return float(values.median()) if len(values) else None


def _sessions_finished(measured: pd.DataFrame) -> int | None:
    """Sessions whose every turn succeeded."""
    if not len(measured) or "session_index" not in measured:
        return None
    turns = int(measured["cell"].iloc[0]["turns"])
    ok = measured[measured["status"] == "ok"].groupby("session_index")["turn"].nunique()
    return int((ok == turns).sum())


KIND = Sessions()
