"""The agent loop offline: its local tools (deterministic, and a call they cannot run is a parse failure
whose result says why), what it sends back per API, and its plan on each engine. Real streams with tool calls
(vLLM 0.26.0, tests/data/vllm-live/session5) are parsed in tests/unit/measure/test_tool_streams.py; the loop's
own rows on vLLM are in that session's run directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ninferkit.engines import get_adapter
from ninferkit.measure.agent_tools import TOOLS, calculate, messages_tools, read_file, run_call, search_document
from ninferkit.measure.client import Reply, StreamedCall
from ninferkit.measure.workloads import document
from ninferkit.rundir.runs import open_run
from ninferkit.sweeps.cell import Cell
from ninferkit.sweeps.kinds.agent import _sent_back
from ninferkit.sweeps.plan import build_plan
from tests.conftest import LOCAL_CPU, REPO

LIVE_G1 = ["engine.fork=ziworkslab/ninfer-3090-ubuntu", "engine.version=null"]


def test_the_calculator_does_arithmetic_and_nothing_else() -> None:
    assert json.loads(calculate("17.4 / 0.19"))["result"] == 17.4 / 0.19
    assert json.loads(calculate("-(2 + 3) ** 2"))["result"] == -25
    assert calculate("1 / 0").startswith("error: ZeroDivisionError")
    assert calculate("__import__('os')").startswith("error: ValueError: not arithmetic")
    assert calculate("9 ** 999").startswith("error: ValueError: the result would be over 1024 bits")


def test_search_and_read_answer_from_the_shipped_document() -> None:
    found = search_document("leakage")
    assert found != "No passages matched." and all("leakage" in p.lower() for p in found.split("\n\n"))
    assert search_document("zzqx") == "No passages matched."
    assert read_file("record.md") == document()[:2000]
    assert read_file("../etc/passwd") == "error: no file '../etc/passwd' (files: record.md, notes.txt)"


def test_a_call_the_loop_cannot_run_is_a_parse_failure_that_says_why() -> None:
    assert run_call(StreamedCall("c1", "calculate", '{"expression": "2 * 21"}')).parsed
    for call, why in ((StreamedCall("c", "calculate", '{"expression": '), "the arguments are not JSON"),
                      (StreamedCall("c", "shell", "{}"), "no tool named 'shell'"),
                      (StreamedCall("c", "calculate", '{"expr": "1"}'), "calculate takes a string argument"),
                      (StreamedCall("c", "calculate", "[1]"), "calculate takes a string argument")):
        run = run_call(call)
        assert not run.parsed and why in run.result and run.seconds >= 0


def test_streamed_pieces_of_a_call_join_in_index_order() -> None:
    """How the client assembles calls whose arguments arrive in pieces (the parsers' one method)."""
    reply = Reply()
    reply.call_part(1, "b", "calculate", '{"expression"')
    reply.call_part(0, "a", "search_document", '{"query": "leak"}')
    reply.call_part(1, None, None, ': "1+1"}')
    assert reply.tool_calls == [StreamedCall("a", "search_document", '{"query": "leak"}'),
                                StreamedCall("b", "calculate", '{"expression": "1+1"}')]


def test_each_api_gets_the_calls_and_results_back_in_its_own_form() -> None:
    calls = [StreamedCall("call_a", "calculate", '{"expression": "1+1"}'), StreamedCall(None, "shell", "{")]
    runs = [run_call(call) for call in calls]
    chat = _sent_back("chat", 1, "", calls, runs)
    assert chat[0]["tool_calls"][1]["function"]["arguments"] == "{}"  # vLLM refuses "{" in the history (400)
    assert chat[0]["tool_calls"][0]["function"]["arguments"] == '{"expression": "1+1"}'  # the model's own text
    assert chat[0]["tool_calls"][1]["id"] == "call_1_2" and chat[1] == {
        "role": "tool", "tool_call_id": "call_a", "content": '{"result": 2}'}
    messages = _sent_back("messages", 1, "Let me see.", calls, runs)
    assert messages[0]["content"][0] == {"type": "text", "text": "Let me see."}
    assert messages[0]["content"][1] == {"type": "tool_use", "id": "call_a", "name": "calculate",
                                         "input": {"expression": "1+1"}}
    assert messages[0]["content"][2]["input"] == {}  # arguments that are no JSON object
    assert [r["tool_use_id"] for r in messages[1]["content"]] == ["call_a", "call_1_2"]
    assert [t["name"] for t in messages_tools()] == [t["function"]["name"] for t in TOOLS]


def planned(tmp_path: Path, profile: Path, *overrides: str, served: dict[str, Any] | None = None
            ) -> dict[str, Cell[Any]]:
    run = open_run(profile, tmp_path, list(overrides))
    return {c.params.api: c for c in build_plan(run.profile, get_adapter(run.profile.engine.kind), ["agent"],
                                                explicit=True, served=served)}


def test_llama_server_runs_the_loop_only_where_its_template_renders_tools(tmp_path: Path) -> None:
    caps_off = {"chat_template_caps": "{'supports_tools': False}"}
    for cell in planned(tmp_path / "a", LOCAL_CPU, served=caps_off).values():
        assert "llama_server does not read the request field tools (as its /props says)" in str(cell.skip)
    caps_on = {"chat_template_caps": "{'supports_tools': True}"}
    assert all(c.skip is None for c in planned(tmp_path / "b", LOCAL_CPU, served=caps_on).values())


def test_ninfer_reads_tools_and_vllm_serves_messages(tmp_path: Path) -> None:
    ninfer = planned(tmp_path / "n", REPO / "params" / "ninfer-rtx3090-groupwise.yaml", *LIVE_G1)
    assert all(c.skip is None for c in ninfer.values())
    vllm = planned(tmp_path / "v", REPO / "params" / "vllm-v100-baseline.yaml")
    # vLLM 0.26.0 answered /v1/messages (tests/data/vllm-live), but says nothing of reading tools there
    assert vllm["messages"].skip == "vllm does not read the request field tools"


def test_vllm_runs_the_loop_where_the_profile_names_a_tool_parser(tmp_path: Path) -> None:
    vllm = planned(tmp_path / "v", REPO / "params" / "h200-vllm.yaml", "serve.tool_call_parser=hermes")
    assert all(c.skip is None for c in vllm.values())
