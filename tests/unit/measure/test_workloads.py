"""Prompts of an exact length by the server's tokenizer, salts, and the task suite's data files."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from ninferkit.engines import get_adapter
from ninferkit.errors import ProfileError, RequestFailed
from ninferkit.measure.workloads import (
    TASK_NAMES,
    Tokenizer,
    document,
    exact_text,
    load_task,
    new_salt,
)
from ninferkit.rundir.runs import Run
from tests.conftest import free_port

ADAPTER = get_adapter("llama_server")


def test_every_task_of_the_suite_is_a_data_file() -> None:
    tasks = [load_task(name) for name in TASK_NAMES]
    assert [t.name for t in tasks] == list(TASK_NAMES)
    assert all(len(t.instruction) > 80 and t.output_tokens > 0 for t in tasks)
    assert len({t.instruction for t in tasks}) == len(tasks)


def test_unknown_task_names_the_suite() -> None:
    with pytest.raises(ProfileError, match="allowed: coding, json_extraction"):
        load_task("poetry")


def test_salts_are_unique_and_lead_the_prompt() -> None:
    assert len({new_salt() for _ in range(100)}) == 100
    assert "Harrowgate" in document()


def test_tokenizer_failure_is_request_failed() -> None:
    with Tokenizer(f"http://127.0.0.1:{free_port()}", ADAPTER) as tokenizer, \
            pytest.raises(RequestFailed, match="counting tokens") as caught:
        tokenizer.count("hello")
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


@pytest.fixture(scope="module")
def tokenizer(live_run: Run) -> Iterator[Tokenizer]:
    with Tokenizer(f"http://127.0.0.1:{live_run.profile.serve.port}", ADAPTER) as tok:
        yield tok


def test_bad_lengths_fail_before_any_request() -> None:
    with Tokenizer(f"http://127.0.0.1:{free_port()}", ADAPTER) as tokenizer, pytest.raises(ProfileError):
        exact_text(tokenizer, 0)
