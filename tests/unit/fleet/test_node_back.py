"""A task whose Slurm node was lost is not submitted again until its old copy is known gone, even once the node
answers: Slurm ends that copy only when the node's slurmd is back (SIGTERM, then SIGKILL after KillWait), and a
`fleet submit` in those seconds started a second copy beside the first. The answers are a real cluster's, second
by second after the node's slurmd was started again (tests/data/fleet_node_back/README.md says how they were
recorded); the decision is tested on them at the times they were recorded."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from ninferkit.fleet import slurm
from ninferkit.fleet.follow import copy_gone, kill_deadline, lost_tasks, seen_lost
from ninferkit.fleet.tasks import TaskStatus
from tests.conftest import REPO

RECORDED = REPO / "tests" / "data" / "fleet_node_back"
BACK = datetime(2026, 12, 6, 8, 5, 39, 815_000)
"""When the `back` answers were recorded (local time, as Slurm prints it: this machine's is UTC)."""
EXITED = datetime(2026, 12, 6, 8, 5, 42, 907_000)


CUT_BACK = datetime(2026, 12, 6, 8, 20, 29, 105_000)
"""When the cut-off node's `back` answers were recorded (cut-off/: its link cut, its slurmd never restarted)."""


def read(name: str) -> str:
    return (RECORDED / name).read_text()


def slurm_word(moment: str, node: str | None = None, folder: str = "") -> dict[str, str]:
    """What `slurm.slurm_states` gathers for the task at one recorded moment: the job's line, sinfo's state, the
    node's times (`node`: another recording of them) and the cluster's kill times (the same on both runs).
    `folder`: "cut-off/" for the run whose node was cut off rather than its slurmd killed."""
    return {**slurm.scontrol_jobs(read(f"{folder}scontrol-show-job-{moment}.txt"), "1")["1_0"],
            "node_state": slurm.sinfo_node_states(read(f"{folder}sinfo.txt"))["nodeb"],
            **slurm.node_times(read(f"{folder}scontrol-show-node-{node or moment}.txt")),
            **slurm.kill_times(slurm.config_settings(read("scontrol-show-config.txt")))}


def task_status(name: str, folder: str = "") -> TaskStatus:
    return TaskStatus.model_validate(json.loads(read(f"{folder}task-status-{name}.json")))


def test_slurm_answers_are_read() -> None:
    word = slurm_word("back")
    assert {key: word[key] for key in ("state", "exit_code", "node", "node_state", "start_time", "end_time",
                                       "boot_time", "slurmd_start_time", "last_busy_time", "kill_wait_s",
                                       "message_timeout_s")} == {
        "state": "NODE_FAIL", "exit_code": "0:0", "node": "nodeb", "node_state": "idle",
        "start_time": "2026-12-06T08:05:12", "end_time": "2026-12-06T08:05:34", "boot_time": "2026-12-06T02:02:25",
        "slurmd_start_time": "2026-12-06T08:05:39", "last_busy_time": "2026-12-06T08:05:39", "kill_wait_s": "30",
        "message_timeout_s": "10"}
    assert slurm_word("exited")["exit_code"] == "130:0"


def test_the_node_back_with_the_old_copy_running_keeps_the_task_lost() -> None:
    """At 08:05:39.8 the node answered (idle) and the old copy ran on, its status still `running`: before the
    fix this read as ended ("failed", written) and `fleet submit` resubmitted it."""
    word, status = slurm_word("back"), task_status("back")
    assert status.state == "running" and copy_gone(word, BACK) is None
    lost = seen_lost(status, word, BACK)
    assert lost is not None and lost.state == "lost", lost
    assert lost.reason is not None and lost.reason.startswith(
        "Slurm lost its node nodeb (NODE_FAIL) while the task ran, and the node answers again; Slurm is ending what "
        "is left of the task there"), lost.reason
    # slurmd restarted 08:05:39, + MessageTimeout 10 s + KillWait 30 s
    assert "or from 2026-12-06 08:06:19 (the node back + MessageTimeout + KillWait)" in lost.reason
    assert lost_tasks({0: lost}) == {0: lost.reason}  # what `fleet submit` leaves alone, saying why


def test_the_task_saying_it_ended_or_slurm_hearing_its_script_end_frees_it() -> None:
    """08:05:41: the task wrote `interrupted` itself (its own word stands, not lost); 08:05:42.9: its process gone,
    Slurm set the job's exit code (130:0), which frees it even where the task could not write (a SIGKILL)."""
    assert seen_lost(task_status("interrupted"), slurm_word("back"), BACK) is None
    word = slurm_word("exited")
    assert copy_gone(word, EXITED) == "Slurm heard its batch script end (exit code 130:0)"
    assert seen_lost(task_status("back"), word, EXITED) is None  # a still-`running` status then reads as ended


def test_killwait_after_slurmd_restarted_frees_it_and_nothing_else_in_time_does() -> None:
    word, status = slurm_word("back"), task_status("back")
    until = kill_deadline(word)
    assert until == datetime(2026, 12, 6, 8, 6, 19)
    assert seen_lost(status, word, until - timedelta(milliseconds=1)) is not None
    assert seen_lost(status, word, until) is None
    assert copy_gone(word, until) == ("its node's slurmd restarted at 2026-12-06 08:05:39, and MessageTimeout + "
                                      "KillWait (40 s) have passed since: Slurm killed what was left of it")
    # while the node was down nothing said it was back (SlurmdStartTime before the job ended, LastBusyTime at its
    # end): no time bound, however long it takes
    silent = slurm_word("back", node="lost")
    assert (silent["slurmd_start_time"], silent["last_busy_time"]) == ("2026-12-06T08:05:10", "2026-12-06T08:05:34")
    assert kill_deadline(silent) is None and seen_lost(status, silent, BACK + timedelta(days=1)) is not None
    # the recorded node had not rebooted (BootTime 02:02:25, before the job's start); one booted after it has
    # none of the job's processes (BootTime moved past the job's start: the one field not as recorded)
    assert copy_gone(word, BACK) is None
    rebooted = {**word, "boot_time": "2026-12-06T08:05:38"}
    assert copy_gone(rebooted, BACK) == "its node booted at 2026-12-06 08:05:38, after the task started"


def test_a_node_cut_off_and_back_with_the_same_slurmd() -> None:
    """The node's link cut, not its slurmd (which never restarts): at 08:20:28 it answered again, Slurm set its
    LastBusyTime then and its slurmd sent SIGTERM; at 08:20:29.1 the old copy still ran (lost), by 08:20:31 it
    had ended (exit code 130:0)."""
    word, status = slurm_word("back", folder="cut-off/"), task_status("back", folder="cut-off/")
    assert (word["slurmd_start_time"], word["end_time"], word["last_busy_time"], word["exit_code"]) == (
        "2026-12-06T08:20:01", "2026-12-06T08:20:23", "2026-12-06T08:20:28", "0:0")
    lost = seen_lost(status, word, CUT_BACK)
    assert lost is not None and lost.state == "lost" and lost.reason is not None
    assert "or from 2026-12-06 08:21:08 (the node back + MessageTimeout + KillWait)" in lost.reason, lost.reason
    assert copy_gone(word, datetime(2026, 12, 6, 8, 21, 8)) == (
        "its node answered again (LastBusyTime) at 2026-12-06 08:20:28, and MessageTimeout + KillWait (40 s) have "
        "passed since: Slurm killed what was left of it")
    exited = slurm_word("exited", folder="cut-off/")
    assert copy_gone(exited, CUT_BACK + timedelta(seconds=2)) == "Slurm heard its batch script end (exit code 130:0)"
    while_cut = slurm_word("back", node="lost", folder="cut-off/")  # LastBusyTime = the job's end: not back
    assert kill_deadline(while_cut) is None


def test_a_node_still_silent_keeps_the_task_lost_whatever_the_time() -> None:
    word = {**slurm_word("back"), "node_state": "down*"}
    lost = seen_lost(task_status("back"), word, BACK + timedelta(days=1))
    assert lost is not None and lost.reason is not None and "(NODE_FAIL: it stopped answering)" in lost.reason


SCONTROL = '''#!/bin/sh
echo "$*" >> {calls}
if [ -e {down} ]; then echo "stand-in: no controller answers" >&2; exit 1; fi
cat {config}
'''


def test_the_cluster_kill_times_are_asked_once_per_follower(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`fleet collect` polls Slurm every 2 s, and while a lost node is back each poll needs the cluster's KillWait and
    MessageTimeout, which do not change under it: one `slurm.KillTimes` per follower asks `scontrol show config`
    once. A stand-in `scontrol` on PATH answers with the recorded config (scontrol-show-config.txt) and counts its
    calls; while the controller does not answer, nothing is kept and the next poll asks again."""
    bin_dir, calls, down = tmp_path / "bin", tmp_path / "calls", tmp_path / "down"
    bin_dir.mkdir()
    stand_in = bin_dir / "scontrol"
    stand_in.write_text(SCONTROL.format(calls=calls, down=down, config=RECORDED / "scontrol-show-config.txt"))
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    down.touch()
    cluster = slurm.KillTimes()
    with pytest.raises(slurm.SlurmError, match="stand-in: no controller answers"):
        cluster.get()
    down.unlink()
    for _ in range(3):  # three polls
        assert cluster.get() == {"kill_wait_s": "30", "message_timeout_s": "10"}
    assert calls.read_text().splitlines() == ["show config", "show config"]  # the failed read, then one
