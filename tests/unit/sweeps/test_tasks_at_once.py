"""Seed 003 §二's conditions in a plan: the coding and agent rows up to 90K two at a time (C2), above one at a
time, with the engine's default sampling (no temperature sent). Planned from the seed profile itself; the requests
themselves are sent live (tests/live/test_sweeps.py)."""

from __future__ import annotations

import pytest

from ninferkit.engines import get_adapter
from ninferkit.errors import ProfileError
from ninferkit.measure.client import RequestSpec, request_body
from ninferkit.params import load_profile
from ninferkit.report.caveats import _sampling_by_cell, sampling
from ninferkit.rundir.records import RequestRow
from ninferkit.sweeps.plan import build_plan
from tests.conftest import REPO

RTX3090 = REPO / "params" / "ninfer-rtx3090-groupwise.yaml"


def _tasks(*overrides: str) -> list:  # type: ignore[type-arg]
    profile = load_profile(RTX3090, list(overrides)).profile
    return [cell for cell in build_plan(profile, get_adapter("ninfer"), ["tasks"], explicit=True)
            if cell.params.variant is None]


def test_the_seed_profile_plans_c2_up_to_64k_and_one_at_a_time_at_178k() -> None:
    cells = _tasks()
    at_once = {(cell.params.task, cell.params.context_depth): cell.params.concurrency for cell in cells}
    assert at_once == {(task, depth): (None if depth == 182272 else 2) for task in ("coding", "agent")
                       for depth in (8192, 32768, 65536, 182272)}
    assert {cell.params.temperature for cell in cells} == {None} and {cell.params.seed for cell in cells} == {None}
    assert "temperature" in cells[0].params.as_dict()  # planned as none: the post tells it from "not recorded"


def test_a_cell_sent_one_at_a_time_keeps_its_id_and_a_c2_cell_has_its_own() -> None:
    plain = {(c.params.task, c.params.context_depth): c.cell_id for c in _tasks("sweeps.tasks.concurrency={}")}
    paired = {(c.params.task, c.params.context_depth): c.cell_id for c in _tasks()}
    assert paired[("coding", 182272)] == plain[("coding", 182272)]
    assert paired[("coding", 8192)] != plain[("coding", 8192)]


def test_a_depth_the_sweep_does_not_hold_is_noted_and_a_bad_count_refused() -> None:
    """-p sweeps.tasks.depths=[8192] trims the plan without touching concurrency: the other depths it names are said to
    send nothing (a dry run's note), not refused."""
    with pytest.warns(UserWarning, match=r"sweeps.tasks.concurrency names depth\(s\) 32768, 65536 that "
                      r"sweeps.tasks.depths \(8192\) does not hold: nothing is sent at them"):
        cells = _tasks("sweeps.tasks.depths=[8192]")
    assert {cell.params.concurrency for cell in cells} == {2}
    with pytest.raises(ProfileError, match="sweeps.tasks.concurrency"):
        load_profile(RTX3090, ["sweeps.tasks.concurrency={8192: 0}"])


def test_no_temperature_is_sent_where_the_profile_leaves_sampling_to_the_engine() -> None:
    body = request_body(RequestSpec("chat", [{"role": "user", "content": "hi"}], 8, temperature=None, seed=None),
                        "m")
    assert "temperature" not in body and "seed" not in body
    assert request_body(RequestSpec("chat", [{"role": "user", "content": "hi"}], 8), "m")["temperature"] == 0.0


def test_the_post_says_which_sampling_each_cell_ran_under() -> None:
    """A run whose variant changed the sampling (or a merged one): each sampling with its cells; a row older than its
    cell's record says what it recorded."""
    default = RequestRow(sweep="tasks", cell={"task": "coding", "context_depth": 8192, "temperature": None},
                         temperature=None)
    greedy = RequestRow(sweep="context", cell={"target_prompt_tokens": 8192, "temperature": 0.0, "variant": "w350"},
                        temperature=0.0)
    assert sampling(default) == "the engine's default (no temperature sent)"
    assert sampling(RequestRow(temperature=0.7)) == "temperature 0.7"
    assert sampling(RequestRow()) == "temperature not recorded"
    assert _sampling_by_cell([default, default]) == "the engine's default (no temperature sent)"
    assert _sampling_by_cell([default, greedy]) == (
        "temperature 0 in 1 cell(s): context target_prompt_tokens=8192 (variant w350); the engine's default (no "
        "temperature sent) in 1 cell(s): tasks task=coding, context_depth=8192")
