"""Reasoning accounted, against the live embedded llama-server served with a template that opens a
thinking block (llama.cpp's `models/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja`, whose
generation prompt ends in `<think>`) and `--reasoning-format deepseek`: what SmolLM2 writes streams as
reasoning on every API. TTFT counts it; the first answer token comes only after it (here: not within
max_tokens); asked with thinking off (`chat_template_kwargs.enable_thinking: false`, which closes the block
in the prompt), the same request is all answer, and its first answer token is its first token."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from ninferkit import steps
from ninferkit.engines import get_adapter
from ninferkit.engines.llama_server.embedded import llama_cpp_source
from ninferkit.measure.client import RequestResult, RequestSpec, StreamingClient
from ninferkit.rundir.runs import Run, open_run
from ninferkit.server import process as server
from tests.conftest import LOCAL_CPU, free_port

HAIKU = [{"role": "user", "content": "Write a haiku about a lighthouse."}]


@pytest.fixture(scope="module")
def thinking_run(tmp_path_factory: pytest.TempPathFactory, llama_server: Path) -> Iterator[Run]:
    template = llama_cpp_source() / "models" / "templates" / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
    run = open_run(LOCAL_CPU, tmp_path_factory.mktemp("thinking"), [
        f"serve.port={free_port()}",
        f'serve.extra_args=["--chat-template-file", "{template}", "--reasoning-format", "deepseek"]'])
    steps.launch(run, progress=False)
    yield run
    server.stop(run.dir)


def send(run: Run, spec: RequestSpec) -> RequestResult:
    async def go() -> RequestResult:
        url = f"http://127.0.0.1:{run.profile.serve.port}"
        async with StreamingClient(url, get_adapter("llama_server"), run.profile.serve.model_id) as client:
            return await client.send(spec)
    return asyncio.run(go())


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_reasoning_counts_toward_ttft_but_is_no_answer(thinking_run: Run, api: str) -> None:
    result = send(thinking_run, RequestSpec(api, HAIKU, 16))  # type: ignore[arg-type]
    assert result.status == "ok" and result.ttft_client_s is not None
    assert result.reasoning_events == len(result.text_event_times) > 0
    assert result.t_first_answer_token is None and result.reply.text == ""
    assert result.reasoning_tokens is None  # llama-server's usage does not count them apart


def test_with_thinking_off_the_first_token_is_the_answer(thinking_run: Run) -> None:
    spec = RequestSpec("chat", HAIKU, 16, extra={"chat_template_kwargs": {"enable_thinking": False}})
    result = send(thinking_run, spec)
    assert result.status == "ok" and result.reasoning_events == 0 and result.reply.text
    assert result.t_first_answer_token == result.t_first_token is not None
