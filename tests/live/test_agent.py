"""The agent loop against the live embedded llama-server.

On the embedded default the loop is planned as skipped: SmolLM2-135M's own chat template renders no tools
(/props `chat_template_caps` says `supports_tools: False`; llama-server runs Jinja templates by default in
this build, so `--jinja` changes nothing). Served with a template that renders tools (llama.cpp's own
`models/templates/Qwen-Qwen2.5-7B-Instruct.jinja`, ChatML like SmolLM2's, set here only), the loop runs:
every round trip is a row, and a session ends with an answer or at its limit. SmolLM2-135M wrote no tool
call in the runs made while writing this (tool_choice auto and required alike), so what the rows say
about calls is checked for consistency, not for a count.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ninferkit import steps
from ninferkit.engines.llama_server.embedded import llama_cpp_source
from ninferkit.rundir.runs import Run, open_run, read_jsonl
from ninferkit.server import process as server
from ninferkit.steps.sweeps import sweeps
from tests.conftest import LOCAL_CPU, free_port

SMALL = ["sweeps.agent.sessions=2", "sweeps.agent.max_round_trips=3", "sweeps.agent.output_tokens=48"]


def launched(path: Path, *extra: str) -> Iterator[Run]:
    run = open_run(LOCAL_CPU, path, [f"serve.port={free_port()}", *SMALL, *extra])
    steps.launch(run, progress=False)
    yield run
    server.stop(run.dir)


@pytest.fixture(scope="module")
def default_run(tmp_path_factory: pytest.TempPathFactory, llama_server: Path) -> Iterator[Run]:
    yield from launched(tmp_path_factory.mktemp("agent-default"))


@pytest.fixture(scope="module")
def tool_template_run(tmp_path_factory: pytest.TempPathFactory, llama_server: Path) -> Iterator[Run]:
    template = llama_cpp_source() / "models" / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja"
    yield from launched(tmp_path_factory.mktemp("agent-tools"), f'serve.extra_args=["--chat-template-file", '
                        f'"{template}"]')


def test_the_embedded_default_skips_the_loop_its_model_cannot_serve(default_run: Run) -> None:
    table = sweeps(default_run, only="agent", progress=False)["agent"].set_index("api")
    assert list(table.index) == ["chat", "messages"] and set(table["status"]) == {"skipped"}
    for reason in table["reason"]:
        assert "llama_server does not read the request field tools (as its /props says)" in reason
    assert not [r for r in read_jsonl(default_run.dir.requests) if r["sweep"] == "agent"] \
        if default_run.dir.requests.exists() else True


def test_with_a_tool_template_every_session_loops_to_an_answer_or_its_limit(tool_template_run: Run) -> None:
    table = sweeps(tool_template_run, only="agent", progress=False)["agent"].set_index("api")
    assert set(table["status"]) == {"done"}
    rows = [r for r in read_jsonl(tool_template_run.dir.requests) if r["sweep"] == "agent"]
    for api in ("chat", "messages"):
        for session in (0, 1):
            loop = sorted((r for r in rows if r["api"] == api and r["session_index"] == session),
                          key=lambda r: r["agent_step"])
            assert [r["agent_step"] for r in loop] == list(range(1, len(loop) + 1)) and 1 <= len(loop) <= 3
            assert all(r["agent_end"] is None and r["tool_calls"] > 0 for r in loop[:-1])  # it went on: it called
            last = loop[-1]
            assert last["agent_end"] == ("answer" if last["tool_calls"] == 0 else "limit")
            assert all(0 <= r["tool_calls_unparsed"] <= r["tool_calls"] and r["tool_s"] >= 0 for r in loop)
        cell = table.loc[api]
        assert cell["sessions_answered"] + cell["sessions_at_limit"] == 2
        assert cell["model_s_total"] > 0 and cell["tool_s_total"] >= 0
        assert cell["tool_calls_total"] == sum(r["tool_calls"] for r in rows if r["api"] == api)
