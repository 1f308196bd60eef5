"""Prompts of an exact length by the server's tokenizer, salts, and the task suite's data files."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from ninferkit.engines import get_adapter
from ninferkit.measure.workloads import (
    Tokenizer,
    exact_prompt,
    exact_text,
    load_task,
    task_prompt,
    user_messages,
)
from ninferkit.rundir.runs import Run

ADAPTER = get_adapter("llama_server")


@pytest.fixture(scope="module")
def tokenizer(live_run: Run) -> Iterator[Tokenizer]:
    with Tokenizer(f"http://127.0.0.1:{live_run.profile.serve.port}", ADAPTER) as tok:
        yield tok


@pytest.mark.parametrize("target", [1, 37, 300, 1500])
def test_exact_length_by_the_servers_count(tokenizer: Tokenizer, target: int) -> None:
    prompt = exact_text(tokenizer, target)
    assert prompt.content_tokens == target == tokenizer.count(prompt.text)


def test_cold_prompts_differ_at_the_front(tokenizer: Tokenizer) -> None:
    first, second = exact_prompt(tokenizer, 200), exact_prompt(tokenizer, 200)
    # Compare the whole salt: the first ten characters hold only one random hex digit (1 in 16 alike).
    assert first.salt != second.salt
    assert first.text.startswith(first.salt) and second.text.startswith(second.salt)
    assert first.content_tokens == second.content_tokens == 200


def test_the_servers_usage_agrees_with_the_achieved_length(live_run: Run, tokenizer: Tokenizer) -> None:
    """Independent check: two prompts 250 tokens apart cost the server exactly 250 more prompt tokens."""
    url = f"http://127.0.0.1:{live_run.profile.serve.port}/v1/chat/completions"
    usage = []
    for target in (50, 300):
        prompt = exact_prompt(tokenizer, target)
        body = {"model": live_run.profile.serve.model_id, "messages": user_messages(prompt.text), "max_tokens": 1}
        usage.append(httpx.post(url, json=body, timeout=60).json()["usage"]["prompt_tokens"])
    assert usage[1] - usage[0] == 250


def test_task_prompt_puts_the_instruction_after_the_depth(tokenizer: Tokenizer) -> None:
    task = load_task("json_extraction")
    prompt = task_prompt(tokenizer, task, 400)
    assert prompt.text.endswith(task.instruction)
    assert prompt.content_tokens == tokenizer.count(prompt.text) > 400 + tokenizer.count(task.instruction) - 5
    context = prompt.text[: prompt.text.index("\n\n---\n\n")]
    assert tokenizer.count(context) == 400
