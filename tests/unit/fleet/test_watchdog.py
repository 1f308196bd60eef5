"""A fleet task's watchdog, once its task died without a word (kill -9): its reason stands over the one `fleet
status` wrote from Slurm's job state alone, which it may have written first (the two race: the live fleet test saw
Slurm's "ended without saying how" win once in four runs), and never over the task's own."""

from __future__ import annotations

from pathlib import Path

from ninferkit.fleet.tasks import SLURM_WORD, StateDir, TaskStatus
from ninferkit.fleet.watchdog import after_task

SLURMS = ("Slurm: FAILED, exit code 9:0: the task ended without saying how (killed, out of memory, its node lost); "
          "the log ends:\n[1/4] setup running")


def test_the_watchdogs_word_replaces_what_slurm_alone_said(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "state")
    state.write_status(TaskStatus(index=0, host="slurm-a", state="failed", pid=4242, reason=SLURMS,
                                  **{SLURM_WORD: True}))
    said = after_task(4242, state.path, 0, tmp_path / "run")
    status = state.read_status(0)
    assert status is not None and status.reason == said
    assert said is not None and said.startswith("process 4242 ended without a status (a signal it cannot catch: "
                                                "kill -9, the out-of-memory killer) (Slurm: FAILED, exit code 9:0)")
    assert (status.model_extra or {}).get("watchdog") is True and not (status.model_extra or {}).get(SLURM_WORD)


def test_the_tasks_own_word_and_another_attempts_status_stand(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "state")
    own = TaskStatus(index=0, host="slurm-a", state="interrupted", pid=4242, reason="SIGTERM during sweeps")
    state.write_status(own)
    assert after_task(4242, state.path, 0, tmp_path / "run") is None
    assert state.read_status(0) == own
    other = TaskStatus(index=0, host="slurm-a", state="failed", pid=5151, reason=SLURMS, **{SLURM_WORD: True})
    state.write_status(other)  # Slurm's word on the next attempt: not this watchdog's to replace
    assert after_task(4242, state.path, 0, tmp_path / "run") is None
    assert state.read_status(0) == other
