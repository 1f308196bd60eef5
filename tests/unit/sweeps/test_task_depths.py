"""`sweeps.tasks.task_depths`: a task measured at its own depths (seed 000 §2.3 sent the summary after its 5.9K
document and every other task as the instruction alone), planned by the sweep's own planner on the embedded
profile, and refused where it would plan nothing or more than the server takes, before anything runs."""

from __future__ import annotations

from collections import Counter

import pytest

from ninferkit.engines import get_adapter
from ninferkit.errors import ProfileError
from ninferkit.params import load_profile
from ninferkit.sweeps.plan import build_plan, sweep_names
from tests.conftest import LOCAL_CPU


def _tasks(overrides: list[str]) -> Counter[tuple[str, int]]:
    """The tasks cells planned, on one side (the embedded profile's speculation A/B off)."""
    profile = load_profile(LOCAL_CPU, ["sweeps.tasks.speculation_ab=false", *overrides]).profile
    cells = build_plan(profile, get_adapter(profile.engine.kind), sweep_names(), explicit=False)
    return Counter((cell.params.as_dict()["task"], cell.params.as_dict()["context_depth"]) for cell in cells
                   if cell.sweep == "tasks")


def test_a_task_with_its_own_depths_runs_at_those_alone() -> None:
    planned = _tasks(["sweeps.tasks.tasks=[coding, summarization]", "sweeps.tasks.depths=[0]",
                      "sweeps.tasks.task_depths={summarization: [256, 512]}"])
    assert planned == Counter({("coding", 0): 1, ("summarization", 256): 1, ("summarization", 512): 1})


def test_without_task_depths_every_task_runs_at_every_depth() -> None:
    planned = _tasks(["sweeps.tasks.tasks=[coding, summarization]", "sweeps.tasks.depths=[0, 256]"])
    assert set(planned) == {(task, depth) for task in ("coding", "summarization") for depth in (0, 256)}


@pytest.mark.parametrize(("overrides", "said"), [
    (["sweeps.tasks.tasks=[coding]", "sweeps.tasks.task_depths={summarization: [256]}"],
     "task_depths names summarization, not in sweeps.tasks.tasks; allowed: coding"),
    (["sweeps.tasks.tasks=[summarization]", "sweeps.tasks.task_depths={summarization: []}"],
     "task_depths gives summarization no depth"),
])
def test_a_depth_that_would_plan_nothing_is_refused(overrides: list[str], said: str) -> None:
    with pytest.raises(ProfileError, match=said):
        load_profile(LOCAL_CPU, overrides)


def test_a_task_depth_over_the_servers_context_names_its_own_field() -> None:
    context = load_profile(LOCAL_CPU).profile.serve.max_context
    with pytest.raises(ProfileError, match="sweeps.tasks.task_depths.summarization"):
        _tasks(["sweeps.tasks.tasks=[summarization]", f"sweeps.tasks.task_depths={{summarization: [{context}]}}"])
