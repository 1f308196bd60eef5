"""`fleet submit` again leaves a task whose Slurm node was lost alone: it may still be measuring there,
unreachable, and a second copy would measure its cells twice. The state folder and Slurm's answers are those of a
real lost node on the fleet tests' cluster (tests/data/fleet_lost_node/README.md says how they were recorded);
producing one live takes a minute of the live test's time, so the decision is tested here on what Slurm said."""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

from ninferkit.fleet import slurm
from ninferkit.fleet.follow import lost_tasks, seen_lost
from ninferkit.fleet.tasks import StateDir
from tests.conftest import REPO

RECORDED = REPO / "tests" / "data" / "fleet_lost_node"


def recorded_state(tmp_path: Path) -> StateDir:
    state = tmp_path / "state"
    state.mkdir()
    for name in ("tasks.json", "slurm.json", "status"):
        source = RECORDED / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, state / name)
    return StateDir(state)


def slurm_word(node_state: str) -> dict[str, str]:
    word = slurm.scontrol_jobs((RECORDED / "scontrol-show-job.txt").read_text(), "8")["8_0"]
    return {**word, "node_state": node_state}


def test_a_task_on_a_lost_node_is_not_submitted_again(tmp_path: Path) -> None:
    state = recorded_state(tmp_path)
    node_state = slurm.sinfo_node_states((RECORDED / "sinfo.txt").read_text())["nodeb"]
    word = slurm_word(node_state)
    assert (word["state"], word["node"], node_state) == ("NODE_FAIL", "nodeb", "down*")
    status = state.read_status(0)
    lost = seen_lost(status, word, datetime.now())
    assert lost is not None and lost.state == "lost", lost
    reasons = lost_tasks({0: lost})
    assert list(reasons) == [0] and reasons[0].startswith("Slurm lost its node nodeb (NODE_FAIL")
    # what the real `fleet submit` printed over the lost node is what this decision says
    assert f"slurm: task 0 is not submitted again: {reasons[0]}\n" in (RECORDED / "submit-while-lost.txt").read_text()
    before = {path: path.read_bytes() for path in (state.slurm, state.status(0))}
    assert slurm.submit(state, state.read_tasks(), REPO, {index: "lost" for index in reasons}) == []
    assert {path: path.read_bytes() for path in before} == before  # no array, no status written over


def test_a_task_that_said_it_finished_is_not_lost(tmp_path: Path) -> None:
    """A task's own word stands (what a node that answers again means: tests/unit/fleet/test_node_back.py)."""
    status = recorded_state(tmp_path).read_status(0)
    assert status is not None
    finished = status.model_copy(update={"state": "ok"})
    assert seen_lost(finished, slurm_word("down*"), datetime.now()) is None
    assert lost_tasks({0: finished}) == {}
