"""The agent loop: the model's own tool calls (Chat `tool_calls`, Anthropic `tool_use`) are parsed, run
against the small local tools of ninferkit/measure/agent_tools.py, and their results sent back, until the model
answers without a call or the session reaches `max_round_trips`. One cell per API.

Each row is one round trip (`session_index`, `agent_step`, `tool_calls`, `tool_calls_unparsed`, `tool_s`,
and `agent_end` on a session's last). The table says per cell how many sessions answered, the round trips,
the calls made and those that could not be run, the time in the model (the requests, end to end) against the
time in the tools, and speculative acceptance on the round trips that wrote tool calls against those that
wrote prose (report 003: 96-100% on tool-call JSON, 44-67% on prose). A cell is skipped where the engine's
model does not render tools (llama-server's /props), as the tasks' agent task is.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from ninferkit.bounded import loads_json
from ninferkit.measure.agent_tools import TOOLS, ToolRun, messages_tools, run_calls
from ninferkit.measure.client import RequestSpec, StreamedCall, StreamingClient
from ninferkit.measure.latency import Targets
from ninferkit.measure.workloads import new_salt
from ninferkit.params.sweeps import AgentSweep
from ninferkit.rundir.records import RequestRow
from ninferkit.sweeps.cell import TOOLS_NOTE, Cell, CellParams, Label, Planner
from ninferkit.sweeps.execute import Recorder, SweepContext, gather_or_cancel, request_spec
from ninferkit.sweeps.kinds import columns
from ninferkit.sweeps.kinds.base import SweepKind
from ninferkit.sweeps.kinds.columns import ViewColumn
from ninferkit.sweeps.metrics import numbers

SYSTEM = ("You are the operations assistant of the Harrowgate Valley Water Board. The board's operations record "
          "is the file record.md; use the tools to read it, search it and do arithmetic. Call a tool whenever a "
          "figure is not in the conversation; answer in plain sentences once you have what you need.")
QUESTION = ("What does the record say about leakage? Search record.md for it, then give the figure it reports "
            "and that figure divided by 7.")
"""The agent's task: written for this project, about the shipped document."""


@dataclass(frozen=True, kw_only=True)
class AgentCell(CellParams):
    sessions: int
    max_round_trips: int
    tool_choice: str


class Agent(SweepKind[AgentSweep, AgentCell]):
    name = "agent"
    params = AgentCell
    table_keys = ("api", "sessions", "max_round_trips", "tool_choice")
    labels = (Label("api"), Label("tool_choice", "tool_choice {}"))
    view = (columns.API, ViewColumn("tool_choice", "tool_choice"), columns.REQUESTS,
            ViewColumn("sessions answered", "sessions_answered", "plain"),
            ViewColumn("round trips (median)", "round_trips_median", "plain"),
            ViewColumn("tool calls (could not run)", "tool_calls_words", "plain"),
            ViewColumn("in the model, s", "model_s_total", "plain"),
            ViewColumn("in the tools, ms", "tool_s_total", "plain", 1000),
            ViewColumn("acceptance, tool-call turns", "acceptance_tool_turns", "percent"),
            ViewColumn("acceptance, prose turns", "acceptance_prose_turns", "percent"))
    loads_server = True

    def plan(self, section: AgentSweep, planner: Planner) -> list[Cell[AgentCell]]:
        """Chat is planned as the task suite's agent task is (tools, where the engine reads them); Messages
        carries the same tools in its own form, sent where the engine reads `tools` on chat."""
        cells = []
        for api in section.apis:
            params = AgentCell(sessions=section.sessions, max_round_trips=section.max_round_trips,
                               tool_choice=section.tool_choice, output_tokens=section.output_tokens, api=api,
                               pin_output=False, **planner.common)
            if api == "chat":
                cells.append(planner.cell(self, params, needs="tools"))
                continue
            cell = planner.cell(self, params)
            skip = cell.skip or (None if "tools" in planner.reads else
                                 f"{planner.who} does not read the request field tools{planner.source}")
            cells.append(Cell(cell.kind, cell.params, skip, cell.request, (*cell.notes, TOOLS_NOTE)))
        return cells

    async def run(self, ctx: SweepContext, cell: Cell[AgentCell], record: Recorder) -> None:
        async with ctx.client(connections=cell.params.sessions + 1) as client:
            await gather_or_cancel([_session(ctx, cell, client, record, index)
                                    for index in range(cell.params.sessions)])

    def metrics(self, ok: pd.DataFrame, finished: Sequence[RequestRow], sent: Sequence[RequestRow],
                measured: pd.DataFrame, targets: Targets) -> dict[str, Any]:
        """Per cell: sessions answered, round trips, calls made and not run, time in the model and in the
        tools, and acceptance on the round trips that wrote tool calls against those that wrote prose."""
        if not len(measured) or "agent_step" not in measured:
            return {}
        calls, unparsed = numbers(measured, "tool_calls"), numbers(measured, "tool_calls_unparsed")
        tool_turns = ok[pd.to_numeric(ok["tool_calls"], errors="coerce") > 0] if len(ok) else ok
        prose_turns = ok[pd.to_numeric(ok["tool_calls"], errors="coerce") == 0] if len(ok) else ok
        ends = measured["agent_end"].dropna() if "agent_end" in measured else pd.Series(dtype=object)
        made, failed = int(calls.sum()), int(unparsed.sum())
        acceptance = {"acceptance_tool_turns": numbers(tool_turns, "acceptance_server"),
                      "acceptance_prose_turns": numbers(prose_turns, "acceptance_server")}
        return {
            "sessions_answered": int((ends == "answer").sum()),
            "sessions_at_limit": int((ends == "limit").sum()),
            "round_trips_median": float(measured.groupby("session_index").size().median()),
            "tool_calls_total": made, "tool_calls_unparsed_total": failed,
            "tool_calls_words": f"{made} ({failed})",
            "model_s_total": float(numbers(measured, "e2e_client_s").sum()),
            "tool_s_total": float(numbers(measured, "tool_s").sum()),
            **{name: float(values.median()) if len(values) else None for name, values in acceptance.items()},
        }


async def _session(ctx: SweepContext, cell: Cell[AgentCell], client: StreamingClient, record: Recorder,
                   index: int) -> None:
    """One loop: send, run the reply's tool calls, send their results back; until an answer or the limit."""
    params = cell.params
    history: list[dict[str, Any]] = [{"role": "system", "content": new_salt() + SYSTEM},
                                     {"role": "user", "content": QUESTION}]
    for step in range(1, params.max_round_trips + 1):
        result = await client.send(_request(ctx, cell, history))
        calls = result.reply.tool_calls if result.status == "ok" else []
        start = time.perf_counter()
        runs = await run_calls(calls)
        tool_s = time.perf_counter() - start
        end = None if result.status != "ok" else "answer" if not calls else \
            "limit" if step == params.max_round_trips else None
        await record(result, step - 1, False, session_index=index, agent_step=step, tool_calls=len(calls),
                     tool_calls_unparsed=sum(not run.parsed for run in runs), tool_s=tool_s, agent_end=end)
        if end is not None or result.status != "ok":
            return
        history += _sent_back(params.api, step, result.reply.text, calls, runs)


def _request(ctx: SweepContext, cell: Cell[AgentCell], history: list[dict[str, Any]]) -> RequestSpec:
    """A round trip's request: the tools in the API's own form, and tool_choice where it is required."""
    required = cell.params.tool_choice == "required"
    if cell.params.api == "chat":
        spec = request_spec(ctx, cell, history, tools=[dict(tool) for tool in TOOLS])
        return replace(spec, extra={**spec.extra, **({"tool_choice": "required"} if required else {})})
    spec = request_spec(ctx, cell, history)
    choice: dict[str, Any] = {"tool_choice": {"type": "any"}} if required else {}
    return replace(spec, extra={**spec.extra, "tools": messages_tools(), **choice})


def _sent_back(api: str, step: int, text: str, calls: list[StreamedCall], runs: list[ToolRun]
               ) -> list[dict[str, Any]]:
    """The assistant turn with its calls, then their results, as the API takes them back."""
    ids = [call.call_id or f"call_{step}_{number}" for number, call in enumerate(calls, 1)]
    if api == "chat":
        assistant = {"role": "assistant", "content": text, "tool_calls": [
            {"id": id_, "type": "function", "function": {"name": call.name, "arguments": _arguments(call)}}
            for id_, call in zip(ids, calls, strict=True)]}
        return [assistant, *({"role": "tool", "tool_call_id": id_, "content": run.result}
                             for id_, run in zip(ids, runs, strict=True))]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks += [{"type": "tool_use", "id": id_, "name": call.name, "input": _input(call)}
               for id_, call in zip(ids, calls, strict=True)]
    results = [{"type": "tool_result", "tool_use_id": id_, "content": run.result}
               for id_, run in zip(ids, runs, strict=True)]
    return [{"role": "assistant", "content": blocks}, {"role": "user", "content": results}]


def _arguments(call: StreamedCall) -> str:
    """A chat call's arguments as sent back: the model's own text where it is a JSON object, else "{}" (its
    result says why it could not run). vLLM 0.26.0 parses the history's arguments and refused a call cut off at
    max_tokens mid-string with 400 "Unterminated string" (tests/data/vllm-live/session5), ending the session."""
    return call.arguments if call.arguments and _input(call) else json.dumps(_input(call))


def _input(call: StreamedCall) -> dict[str, Any]:
    """A tool_use block's input: the call's arguments where they are a JSON object, else empty (its result
    says why it could not run)."""
    try:
        parsed = loads_json(call.arguments or "{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


KIND = Agent()
