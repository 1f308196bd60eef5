"""Two starts of one SSH task at once (two `fleet submit`s) start it once, and the status that names its pid is
written before the task can write its own (ninferkit/fleet/start.py; issue 41's pending-pid race).

Real processes on this machine, as on an SSH host: two `python -m ninferkit.fleet.start` let go at the same
moment (both were waiting on the start lock, held by the test), and the task they start is a real `fleet task`
whose profile copy was removed, so it fails at once, writing its own status over the pending one."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import time
from pathlib import Path

from ninferkit.fleet.spec import load_fleet
from ninferkit.fleet.tasks import StateDir, plan_tasks, write_tasks
from tests.conftest import REPO
from tests.unit.fleet.test_fleet import written


def test_two_starts_at_once_start_the_task_once(tmp_path: Path) -> None:
    fleet = load_fleet(written(tmp_path), root=REPO)
    tasks = plan_tasks(fleet, lambda host: str(tmp_path / "runs"))
    write_tasks(fleet, tasks)
    state = StateDir(fleet.state_dir)
    (state.path / tasks[2].profile_file).unlink()  # the task fails before a step runs: nothing heavy starts
    lock_path = state.status(2).with_name("task-2.start.lock")
    lock_path.parent.mkdir(parents=True)
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # both starters queue behind it, then race for it
        starters = [subprocess.Popen([sys.executable, "-m", "ninferkit.fleet.start", str(state.path), "2"], cwd=REPO,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        deadline = time.monotonic() + 60
        while not all(_waits_on(lock_path, starter.pid) for starter in starters):
            assert time.monotonic() < deadline and all(s.poll() is None for s in starters), "starters never waited"
            time.sleep(0.05)
    said = sorted(starter.communicate(timeout=60)[0].strip() for starter in starters)
    assert all(starter.returncode == 0 for starter in starters), [starter.stderr for starter in starters]
    assert said[0].startswith("running ") and said[1].startswith("started "), said
    pid = int(said[1].split()[1])
    assert said[0] == f"running {pid}"  # the second found the first one's task, by its pid
    deadline = time.monotonic() + 120
    while (status := json.loads(state.status(2).read_text()))["state"] in ("pending", "running"):
        assert time.monotonic() < deadline, status
        time.sleep(0.1)
    # the task's own status (never overwritten by its starter), by the pid its starter recorded
    assert status["pid"] == pid and status["state"] == "failed", status
    assert status["reason"].startswith(f"profile {state.path / tasks[2].profile_file} does not "), status
    while "task 2 failed before a step ran" not in state.log(2).read_text():  # printed just after its status
        assert time.monotonic() < deadline, state.log(2).read_text()
        time.sleep(0.1)
    assert state.log(2).read_text().count("failed before a step ran") == 1  # one task ran


def test_a_finished_task_is_not_started_again(tmp_path: Path) -> None:
    from ninferkit.fleet.start import start
    from ninferkit.fleet.tasks import TaskStatus

    fleet = load_fleet(written(tmp_path), root=REPO)
    write_tasks(fleet, plan_tasks(fleet, lambda host: str(tmp_path / "runs")))
    state = StateDir(fleet.state_dir)
    state.write_status(TaskStatus(index=2, host="ssh-c", state="ok"))
    assert start(state, 2) == "finished" and not state.log(2).exists()


def _waits_on(lock: Path, pid: int) -> bool:
    """Whether process `pid` is blocked on a flock of `lock` (/proc/locks lists waiters with `->`)."""
    inode = lock.stat().st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields and fields[fields.index("->") + 4] == str(pid) \
                and fields[fields.index("->") + 5].endswith(f":{inode}"):
            return True
    return False
