"""The capacity step against a live llama-server serving the generated model of tests/data/profiles/generated-cpu.yaml
(the embedded default before issue 18; about ten launches of ~1 s each).

On the CPU there is no device limit to find (host memory is ~24 GB), so: the fit runs over two slot
counts and two cache types and is checked against the KV sizes the server logs; one search per slot
count and cache type looks for the largest pool within a 128 MiB budget standing in for GPU memory,
and each answer is a real launch that served a request.

The memory books must not depend on the CPU: on a CPU with AMX, llama.cpp loads the weights into an
`AMX` model buffer beside the file mapping (`AMX model buffer size = 80.19 MiB` and `CPU_Mapped model
buffer size = 80.20 MiB`), where a machine without AMX prints only the `CPU_Mapped` line; both must book
80.20 MiB of weights against the 128 MiB budget (tests/unit/engines/test_llama_ledger_amx.py replays both on recorded
logs). This file passed on an AMX CPU (the device machine's Xeon, 16 cores) after that fix.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ninferkit import steps
from ninferkit.artifact import model_path
from ninferkit.capacity.interval import Interval
from ninferkit.capacity.launches import launcher, recorded
from ninferkit.capacity.observations import Observation
from ninferkit.engines import get_adapter
from ninferkit.engines.llama_server.kv_layout import gguf_metadata, llama_cpp_kv_layout
from ninferkit.errors import ProfileError
from ninferkit.rundir.runs import Run, open_run, read_json
from ninferkit.server import process as server
from ninferkit.steps.capacity import capacity
from tests.conftest import GENERATED_CPU, free_port

BUDGET = 128 * 2**20
GRID = ["capacity.concurrencies=[1, 2]", "capacity.contexts=[2048]", "capacity.kv_dtypes=[f16, q8_0]",
        "capacity.fit_launches=true", "capacity.search=true", f"capacity.memory_budget_bytes={BUDGET}",
        "capacity.max_launches=4", "serve.max_concurrency=2", "serve.max_context=2048", "serve.kv.dtype=f16"]


@pytest.fixture(scope="module")
def capacity_run(tmp_path_factory: pytest.TempPathFactory, llama_server: Path) -> tuple[Run, dict]:
    run = open_run(GENERATED_CPU, tmp_path_factory.mktemp("capacity"), [*GRID, f"serve.port={free_port()}"])
    return run, capacity(run, say=lambda line: None)


def test_fit_over_slots_and_cache_types_matches_the_logged_kv_sizes(capacity_run: tuple[Run, dict]) -> None:
    run, summary = capacity_run
    meta = gguf_metadata(model_path(run.profile))
    grid = [o for o in summary.observations if o.kind == "ledger"]
    assert {(o.setting.concurrency, o.setting.kv_dtype) for o in grid} >= {
        (1, "f16"), (2, "f16"), (1, "q8_0"), (2, "q8_0")}
    for row in grid:
        obs = Observation.from_dict(row.as_dict())
        b = llama_cpp_kv_layout(meta, obs.setting.kv_dtype or "f16", obs.setting.kv_dtype or "f16").bytes_per_token
        assert obs.kv_bytes is not None and obs.kv_bytes.holds(b * obs.kv_tokens), row.source
    assert summary.bytes_per_token == 2048 and summary.conflicts == []
    assert summary.payload_bytes_per_token_by_dtype["q8_0"][0] <= 1088 <= \
        summary.payload_bytes_per_token_by_dtype["q8_0"][1]
    assert any("per extra slot" in term for term in summary.terms_pinned)
    assert run.dir.capacity.exists()


def test_each_search_answer_is_a_launch_that_served_within_the_budget(capacity_run: tuple[Run, dict]) -> None:
    run, summary = capacity_run
    searches = summary.searches
    assert {(s.setting.concurrency, s.setting.kv_dtype) for s in searches} == {
        (1, "f16"), (2, "f16"), (1, "q8_0"), (2, "q8_0")}
    assert summary.search_launches == sum(s.launches for s in searches)
    for search in searches:
        concurrency = search.setting.concurrency
        assert search.mode == "budget-bisection" and search.verified_by_request, search
        assert search.launches <= 4
        answer = search.answer_kv_tokens
        assert search.answer_context_per_slot == answer // concurrency
        assert search.server_kv_tokens == answer  # the server's KV line: the cells it really allocated
        observation = next(o for o in recorded(run) if o.kv_tokens == answer and o.setting.concurrency == concurrency
                           and o.setting.kv_dtype == search.setting.kv_dtype)
        assert observation.served
        total = observation.runtime + observation.weights  # type: ignore[operator]
        assert total.high is not None and total.high <= BUDGET
        # one page per slot more would not fit: by a launch or by the fit (the note and the record say which)
        assert f"{answer + 256 * concurrency:,} does not" in search.note
        assert search.step_tokens == 256 * concurrency and search.refused_by in ("launch", "fit")
        assert search.refused_kv_tokens == answer + search.step_tokens
    answers = {(s.setting.concurrency, s.setting.kv_dtype): s.answer_kv_tokens for s in searches}
    assert answers[(1, "q8_0")] > answers[(1, "f16")]  # a smaller cache type leaves room for more tokens


def test_rerun_reuses_the_recorded_launches(capacity_run: tuple[Run, dict]) -> None:
    run, first = capacity_run
    before = len(list((run.dir.path / "capacity" / "launches").iterdir()))
    again = capacity(run, say=lambda line: None)
    assert len(list((run.dir.path / "capacity" / "launches").iterdir())) == before
    assert [s.answer_kv_tokens for s in again.searches] == [s.answer_kv_tokens for s in first.searches]
    assert all(step.reused or step.settled for search in again.searches for step in search.results)


def test_search_stops_at_the_trained_context_when_memory_allows_more(tmp_path: Path, llama_server: Path) -> None:
    """llama-server serves no slot longer than the model's trained context (it caps it, as the H200 run
    showed), so with memory to spare the search ends there, verified by a launch, not above it."""
    run = open_run(GENERATED_CPU, tmp_path, [
        "capacity.concurrencies=[1]", "capacity.contexts=[2048]", "capacity.kv_dtypes=[f16]", "capacity.search=true",
        f"capacity.memory_budget_bytes={2**30}", "capacity.max_launches=4", "serve.max_concurrency=1",
        "serve.max_context=2048", "serve.kv.dtype=f16", f"serve.port={free_port()}"])
    (search,) = capacity(run, say=lambda line: None).searches
    trained = gguf_metadata(model_path(run.profile))["qwen3.context_length"]
    assert search.answer_context_per_slot == trained and search.verified_by_request
    assert "memory is not the limit" in search.note
    assert all(step.kv_tokens <= trained for step in search.results)


def test_capacity_launches_stop_the_launch_steps_server_first(tmp_path: Path, llama_server: Path) -> None:
    """On a GPU the launch step's server holds the memory the launches measure: on an H200 the capacity
    launches of a full runbook saw 41,935 MiB free of 143,155 while it held 98 GiB
    (tests/data/llama_server_cuda_h200_capacity/). The step stops it first, and still counts its launch."""
    run = open_run(GENERATED_CPU, tmp_path, [
        "capacity.concurrencies=[1]", "capacity.contexts=[1024]", "capacity.kv_dtypes=[f16]",
        "capacity.fit_launches=true", "capacity.search=false", f"serve.port={free_port()}"])
    steps.launch(run, progress=False)
    pgid = int(read_json(run.dir.server)["pgid"])
    said: list[str] = []
    summary = capacity(run, say=said.append)
    assert said[0] == "stopped the launch step's server: the capacity launches need the memory it holds"
    assert read_json(run.dir.server)["state"] == "stopped"
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    own = summary.observations[0]
    assert own.source == str(run.dir.server_log) and own.served  # its acceptance checks passed at launch
    assert len(summary.observations) == 2  # and the grid point was launched after it


def test_a_bad_grid_is_refused_before_the_launch_steps_server_is_stopped(tmp_path: Path, llama_server: Path) -> None:
    run = open_run(GENERATED_CPU, tmp_path, ["capacity.kv_dtypes=[f16, q9_9]", f"serve.port={free_port()}"])
    steps.launch(run, progress=False)
    try:
        with pytest.raises(ProfileError, match=r"capacity.kv_dtypes: 'q9_9'.*not a ggml type"):
            capacity(run, say=lambda line: None)
        assert read_json(run.dir.server)["state"] == "ready"
    finally:
        server.stop(run.dir)


def test_a_recorded_launch_that_saw_other_free_memory_is_launched_again(tmp_path: Path, llama_server: Path) -> None:
    """A rerun reuses recorded launches, but not ones made while something else held the memory (the
    H200 run's, beside the runbook's server): the same setting is launched again."""
    run = open_run(GENERATED_CPU, tmp_path, [
        "capacity.concurrencies=[1]", "capacity.contexts=[1024]", "capacity.kv_dtypes=[f16]",
        "capacity.fit_launches=true", "capacity.search=false", f"serve.port={free_port()}"])
    capacity(run, say=lambda line: None)
    (earlier,) = recorded(run)
    assert earlier.available is not None and earlier.available.high is not None
    rule = get_adapter("llama_server").capacity_pool
    said: list[str] = []
    assert launcher(run, rule, said.append, earlier.available)(earlier.setting) is not None
    assert said[0].startswith("reusing the earlier launch")
    other = Interval.exact(earlier.available.high + 2**30)  # a GPU with 1 GiB more free than that launch saw
    again = launcher(run, rule, said.append, other)(earlier.setting)
    assert again is not None and again.source != earlier.source and said[-1].startswith("launch 02")
