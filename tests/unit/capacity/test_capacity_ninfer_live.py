"""The capacity step and search replayed on a real `ninfer-serve`'s launches (NInfer cannot run here).

Data: tests/data/ninfer_live/ (its README.md): the G1 fork ziworkslab/ninfer-3090-ubuntu driven by
ninferkit on an H200. g1-h200/capacity-search/ is `ninferkit capacity search` at 1 and 4 slots of
32,768 tokens with `--kv-capacity auto`; g1-h200-v100flags/ is a whole run with the V100 report's flags
(2 slots of 131,072, int8 KV, MTP) and its capacity search. Both folders are copied to tmp_path and the
capacity step is run again there: every launch it asks for was recorded, so it reuses them (the
launcher reads each one again from its log) and launches nothing. On that H200 both searches answered
with the engine's rule (pool <= max_context x max_concurrency) while more than 110 GiB stayed free.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from ninferkit.engines import get_adapter
from ninferkit.errors import ProfileError
from ninferkit.report import write_report
from ninferkit.rundir.recorded import read_recorded
from ninferkit.rundir.runs import Run, open_run
from ninferkit.steps.capacity import capacity
from tests.conftest import DATA, whole

LIVE = DATA / "ninfer_live"
SEARCH = LIVE / "g1-h200" / "capacity-search"
V100_FLAGS = LIVE / "g1-h200-v100flags"
ADAPTER = get_adapter("ninfer")
GIB = 2**30


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The profile's artifact is looked up in the cache: keep this machine's cache out of it."""
    monkeypatch.setenv("NINFERKIT_CACHE", str(tmp_path / "cache"))


def todays_profile(manifest: Path) -> dict[str, Any]:
    """The profile a capture's manifest recorded, as today's schema reads it (rundir/recorded.py: its
    engine.generation "G1" read as engine.fork's build, the serve options NInfer no longer has dropped)."""
    return read_recorded(json.loads(manifest.read_text())).profile.model_dump(mode="json")


def replayed(source: Path, manifest: Path, where: Path, overrides: tuple[str, ...] = ()) -> tuple[Run, list[str]]:
    """A copy of a captured run folder opened with its own profile; the capacity step not yet run."""
    run_dir = where / source.name
    shutil.copytree(source, run_dir, ignore=shutil.ignore_patterns("report"))
    profile = where / "profile.yaml"
    profile.write_text(yaml.safe_dump(todays_profile(manifest)))
    return open_run(profile, run_dir, overrides), []


def printed(log: Path) -> dict[str, Any]:
    return ADAPTER.parse_ledger(log.read_text())


def low(ledger: dict[str, Any], key: str) -> float:
    """The smallest value a figure printed rounded ("123.61 GiB") may stand for."""
    return float(ledger[key] - ledger[f"{key}_resolution_bytes"] / 2)


def high(ledger: dict[str, Any], key: str) -> float:
    return float(ledger[key] + ledger[f"{key}_resolution_bytes"] / 2)


def test_the_search_says_the_engines_rule_not_memory_set_its_answers(tmp_path: Path) -> None:
    run, said = replayed(SEARCH, SEARCH / "capacity" / "launches" / "01" / "manifest.json", tmp_path)
    summary = capacity(run, say=said.append)
    assert sum(line.startswith("reusing the earlier launch") for line in said) == 4  # no launch made here
    searches = {found.setting.concurrency: found for found in summary.searches}
    assert [searches[c].answer_kv_tokens for c in (1, 4)] == [32_768, 131_072]  # as in capsearch.json
    assert all(found.bounded_by == "engine" and found.verified_by_request for found in searches.values())
    # What memory would allow, from the launches' own lines: the fixed part is never negative at a setting
    # seen, so bytes per pool token are at most the smaller of runtime / pool (the model's layout is not
    # given: capacity.model is null); nor does it shrink as slots grow (4 slots' fixed part >= 1 slot's), so
    # they are at most the runtime's growth over the pool's from 1 to 4 slots; and the pool may grow until
    # runtime reaches free memory after weights.
    launches = SEARCH / "capacity" / "launches"
    one, four = printed(launches / "02" / "logs" / "server.log"), printed(launches / "04" / "logs" / "server.log")
    per_token = min(high(one, "runtime_bytes") / one["kv_tokens"], high(four, "runtime_bytes") / four["kv_tokens"],
                    (high(four, "runtime_bytes") - low(one, "runtime_bytes")) / (four["kv_tokens"] - one["kv_tokens"]))
    for slots, ledger in ((1, one), (4, four)):
        spare = low(ledger, "free_after_weights_bytes") - high(ledger, "runtime_bytes")
        memory = ledger["kv_tokens"] + math.floor(spare / per_token / 64) * 64
        # the fit solves the same constraints jointly (the 4 slots' runtime interval with the 1 slot's), so its
        # sure side is at or a few pages above this page-by-page bound
        sure = searches[slots].memory_allows_kv_tokens[0]
        assert 1_500_000 < memory <= sure <= memory + 4 * 64 and searches[slots].memory_allows_kv_tokens[1] is None
        memory = sure
        assert searches[slots].note == (
            f"{ledger['kv_tokens']:,} tokens: the engine's limit for {slots} slot{'s' if slots > 1 else ''} of 32,768 "
            f"(pool ≤ max_context × max_concurrency); memory is not the limit here: it would allow at least {memory:,} "
            "tokens; raise serve.max_context or serve.max_concurrency (up to 8) to use it")
    # the same words for the profile's own setting (1 slot), and in the decision table
    assert summary.max_kv_tokens_bounded_by == "engine"
    assert summary.max_kv_tokens_note == searches[1].note
    starts = [row for row in summary.decision_table if row.reading == "starts"]
    assert all("the engine's limit (pool ≤ max_context × max_concurrency; memory would allow at least" in row.verdict
               for row in starts)

    # the write-up, from the replayed folder alone (it has no server.json, requests or tables)
    text = whole(write_report(run.dir.path))
    assert f"| — | 1 | 32,768 | 32,768 | 32,768 | yes | 2 | engine | {searches[1].note} |" in text
    assert f"| — | 4 | 131,072 | 32,768 | 131,072 | yes | 2 | engine | {searches[4].note} |" in text
    largest = "| Memory: largest KV pool, the engine's cap (capacity fit) | tokens | 32,768 | 32,768 – 32,768 | 1 |"
    assert f"{largest} {searches[1].note} |" in text


def test_with_the_models_layout_memory_is_known_to_the_page(tmp_path: Path) -> None:
    """The V100 flags' run names its model (capacity.model qwen3.6-27b): 35,904 B per pool token for int8 KV
    with MTP, so what memory would allow is bounded on both sides by the rounding of the printed figures."""
    run, said = replayed(V100_FLAGS, V100_FLAGS / "manifest.json", tmp_path)
    summary = capacity(run, say=said.append)
    assert sum(line.startswith("reusing the earlier launch") for line in said) == 2
    (found,) = summary.searches
    assert summary.bytes_per_token == 35_904 and found.answer_kv_tokens == 262_144 == 2 * 131_072
    ledger = printed(V100_FLAGS / "capacity" / "launches" / "02" / "logs" / "server.log")
    sure = 262_144 + math.floor((low(ledger, "free_after_weights_bytes") - high(ledger, "runtime_bytes"))
                                / 35_904 / 64) * 64
    possible = 262_144 + math.floor((high(ledger, "free_after_weights_bytes") - low(ledger, "runtime_bytes"))
                                    / 35_904 / 64) * 64
    assert found.memory_allows_kv_tokens == [sure, possible] and possible - sure < 1_024  # +-0.005 GiB twice
    assert found.bounded_by == "engine" and found.note == (
        f"262,144 tokens: the engine's limit for 2 slots of 131,072 (pool ≤ max_context × max_concurrency); memory is "
        f"not the limit here: it would allow ~{sure:,} tokens; raise serve.max_context or serve.max_concurrency (up to "
        "8) to use it")
    # auto at the run's 2 x 131,072 is the engine's cap too; across max_context, one launch pins it only up to there
    (answer,) = summary.answers
    assert answer.auto is not None and answer.auto["kv_tokens"] == [262_144, 262_144]
    assert answer.auto["engine_limit"] is True
    across = answer.auto["by_context"]
    assert across["starts_up_to_context"] == 131_072 and across["refuses_from_context"] is None
    assert across["undecided"] is True
    # 163,840 per slot is past the one launch's max_context: its margin is bounded above only, so the row may have
    # memory left or be short by any amount; it printed "short by -116.69–? GiB (-3,489,600–? tokens)" before
    borderline = [row for row in summary.decision_table if row.context_per_slot == 163_840]
    assert borderline and all(row.fits is None for row in borderline)
    for row in borderline:
        assert row.margin_gib_interval is not None and row.margin_gib_interval[0] is None
        assert row.leftover_gib == [0.0, row.margin_gib_interval[1]] and row.shortfall_gib == [0.0, None]
        assert row.leftover_tokens is not None and row.leftover_tokens[0] == 0 and row.shortfall_tokens == [0, None]
    text = whole(write_report(run.dir.path))
    assert ("| auto at 2 slots, by max_context | starts up to max_context 131,072; above, the data does not say; at "
            "262,144, the largest the engine takes: auto: borderline |") in text
    row = borderline[0]
    assert (f"| borderline | up to {row.margin_gib_interval[1]:.2f} | leftover up to {row.leftover_tokens[1]:,} tokens "
            f"({row.margin_gib_interval[1]:.2f} GiB), or short by an amount the data does not bound |") in text
    assert "short by -" not in text and "(-" not in text
    assert "–?" not in text and "?–" not in text  # an open side in words ("up to 116.69"), never "?–116.69"


def test_more_slots_than_the_engine_takes_is_refused_before_any_launch(tmp_path: Path) -> None:
    """NInfer takes 1..8 slots (`--max-concurrency must be in [1,8]`: g1-h200/startup-errors/concurrency9.log)."""
    refused = (LIVE / "g1-h200" / "startup-errors" / "concurrency9.log").read_text()
    assert "--max-concurrency must be in [1,8]" in refused
    run, said = replayed(SEARCH, SEARCH / "capacity" / "launches" / "01" / "manifest.json", tmp_path,
                         ("capacity.concurrencies=[1, 9]",))
    launches = sorted((run.dir.path / "capacity" / "launches").iterdir())
    with pytest.raises(ProfileError, match=r"capacity.concurrencies: \[9\]: ninfer takes at most 8 slots"):
        capacity(run, say=said.append)
    assert said == [] and sorted((run.dir.path / "capacity" / "launches").iterdir()) == launches
    assert not run.dir.capacity.exists()
