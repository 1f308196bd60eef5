"""vLLM's second model shape (issue 42 item 4) as it ran on an H100 on 2026-12-06: the runbook on
params/h200-vllm-qwen3.yaml through its capacity search (docs/examples/h200-vllm-qwen3/, that run directory as it
came back, with its write-up made here) and the two plain launches after it (tests/data/vllm-live/session6/; its
README row says how each file was made). No GPU here: the search is replayed on the H100's own launches, each read
again from its log, and every expected number is read from the recorded files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ninferkit.capacity.gather import fit_observations
from ninferkit.capacity.launches import reread
from ninferkit.capacity.observations import Observation, Setting
from ninferkit.capacity.refit import CannotRefit, refit
from ninferkit.capacity.search import SearchResult, search
from ninferkit.engines import get_adapter
from ninferkit.engines.base import OUT_OF_MEMORY_AT_FIRST_USE
from ninferkit.params.load import load_profile
from ninferkit.params.profile import Profile
from ninferkit.report import write_report
from ninferkit.rundir.runs import RunDir
from tests.conftest import REPO, assert_regenerates

EXAMPLE = REPO / "docs" / "examples" / "h200-vllm-qwen3"
SESSION = REPO / "tests" / "data" / "vllm-live" / "session6"
ADAPTER = get_adapter("vllm")
RULE = ADAPTER.capacity_pool


def _profile(config: Path = SESSION / "logs" / "qwen3-config.json") -> Profile:
    """The profile as committed, its config.json the one the H100 made (the run's path is that machine's)."""
    return load_profile(REPO / "params" / "h200-vllm-qwen3.yaml", [f"capacity.vllm_config={config}"]).profile


def _recorded() -> tuple[dict[str, Any], list[Observation]]:
    """The run's search as capacity.json recorded it, and every observation it was fitted from, re-read from the
    logs the example holds (the launch step's own first, then the search's launches)."""
    capacity = json.loads((EXAMPLE / "capacity.json").read_text())
    observed = [reread(RunDir(EXAMPLE), "vllm", Observation.from_dict(row), RULE) for row in capacity["observations"]]
    (found,) = capacity["searches"]
    return found, observed


def _replay(max_launches: int) -> tuple[SearchResult, list[int]]:
    """The search again from the launch step's observation alone, each launch answered by the H100's own launch at
    that pool: a pool the H100 never launched fails the test (the replay must ask for exactly what ran)."""
    found, observed = _recorded()
    by_pool = {o.kv_tokens: o for o in observed[1:]}
    launched: list[int] = []

    def launch(setting: Setting) -> Observation:
        launched.append(int(setting.kv_capacity or 0))
        assert launched[-1] in by_pool, f"the replay asked for {launched[-1]:,} tokens, which the H100 never launched"
        return by_pool[launched[-1]]

    profile = _profile()
    base = Setting.from_dict(found["setting"])
    result = search(base, RULE, launch, lambda obs: fit_observations(profile, obs), observed[:1], max_launches)
    return result, launched


def test_the_search_pins_its_answer_to_one_page_and_the_replay_makes_the_same_launches() -> None:
    """12 launches: the largest pool that served, and one 16-token block more (vLLM's page, the adapter's rule)
    refused by a launch, not by the fit; replayed here, the search asks for the same pools in the same order."""
    found, _ = _recorded()
    assert found["refused_kv_tokens"] - found["answer_kv_tokens"] == found["step_tokens"] == RULE.page_tokens == 16
    assert found["refused_by"] == "launch" and found["verified_by_request"]
    ran = [step["kv_tokens"] for step in found["results"] if not step["settled"]]
    assert len(ran) == found["launches"] <= _profile().capacity.max_launches
    served = {step["kv_tokens"]: step["fits"] for step in found["results"]}
    assert served[found["answer_kv_tokens"]] and not served[found["refused_kv_tokens"]]
    result, launched = _replay(_profile().capacity.max_launches)
    assert launched == ran
    assert (result.answer_tokens, result.refused_tokens, result.refused_by) == (
        found["answer_kv_tokens"], found["refused_kv_tokens"], "launch")


def test_with_the_last_sessions_4_launches_the_bracket_is_346_pages_wide_and_says_so() -> None:
    """The first session on this shape allowed 4 launches (on a machine lost since): the same first four launches,
    and a note that says how far apart the two sides still are, in pages."""
    result, launched = _replay(4)
    assert result.launches == len(launched) == 4 and result.refused_by == "launch"
    assert result.answer_tokens is not None and result.refused_tokens is not None
    pages = (result.refused_tokens - result.answer_tokens) // RULE.page_tokens
    assert pages == 346 and f"({pages:,} step(s) of 16 apart)" in result.note


def test_the_search_record_keeps_its_refused_side() -> None:
    """capacity.json's search reads back with its refused side and unit; a record from before them reads None."""
    found, _ = _recorded()
    fields = ("refused_kv_tokens", "refused_by", "step_tokens")
    again = SearchResult.from_dict(found).as_dict()
    assert {key: again[key] for key in fields} == {key: found[key] for key in fields}
    read = SearchResult.from_dict({key: value for key, value in found.items() if key not in fields})
    assert (read.refused_tokens, read.refused_by, read.step_tokens) == (None, None, None)


@pytest.mark.parametrize("offset", [0, 1])
def test_two_plain_launches_repeat_it_at_the_answer_and_one_page_more(offset: int) -> None:
    """`ninferkit launch -p serve.kv.capacity=N` at the search's answer served (the acceptance checks passed); one
    page more reserved its pool and then died at warm-up, in vLLM's own words (torch's out-of-memory line)."""
    found, _ = _recorded()
    tokens = found["answer_kv_tokens"] + offset * found["step_tokens"]
    run = SESSION / f"byhand-{tokens}"
    log = (run / "logs" / "server.log").read_text()
    assert f"GPU KV cache size: {tokens:,} tokens" in log  # the pool asked for, reserved in whole blocks
    record = json.loads((run / "server.json").read_text())
    exits = (SESSION / "logs" / "byhand.txt").read_text()
    if offset == 0:
        assert record["ready_s"] and all(check["ok"] for check in record["checks"]) and ADAPTER.diagnose(log) is None
        assert f"serve.kv.capacity={tokens}: launch exit 0" in exits
    else:
        diagnosis = ADAPTER.diagnose(log)
        assert diagnosis is not None and diagnosis.code == OUT_OF_MEMORY_AT_FIRST_USE
        assert "torch.OutOfMemoryError: CUDA out of memory." in log and "ready_s" not in record
        assert f"serve.kv.capacity={tokens}: launch exit 1" in exits


def test_a_refit_here_needs_the_config_the_fit_read_and_with_it_agrees(tmp_path: Path) -> None:
    """The run's capacity.vllm_config is the H100's path: without that file `report` keeps the recorded fit (a fit
    without the bytes per token would be a worse one); with the H100's config.json the refit gives the same
    answer from the same launches."""
    recorded = json.loads((EXAMPLE / "capacity.json").read_text())
    with pytest.raises(CannotRefit, match="capacity.vllm_config"):
        refit(_profile(tmp_path / "absent" / "config.json"), RunDir(EXAMPLE), recorded)
    again = refit(_profile(), RunDir(EXAMPLE), recorded)
    assert again["max_kv_tokens"] == recorded["max_kv_tokens"] == recorded["searches"][0]["answer_kv_tokens"]
    assert again["bytes_per_token"] == recorded["bytes_per_token"] == 16_384


def test_the_published_write_up_regenerates_from_the_raw_files(tmp_path: Path) -> None:
    run = tmp_path / "h200-vllm-qwen3"
    shutil.copytree(EXAMPLE, run, ignore=shutil.ignore_patterns("report"))
    write_report(run)
    text = (run / "report" / "index.md").read_text()
    found, _ = _recorded()
    assert f"{found['answer_kv_tokens']:,} tokens fit; {found['refused_kv_tokens']:,} does not" in text
    assert_regenerates(EXAMPLE, run, "run `ninferkit report docs/examples/h200-vllm-qwen3` and commit report/")
