"""Start one fleet task in the background on this host, at most once: `python -m ninferkit.fleet.start STATE_DIR
INDEX`, what `fleet submit` runs on an SSH host (`ssh.py`). It prints one line: `started PID`, `running PID`
(an attempt already runs) or `finished`.

Why a module on the host, and not a shell line: the start used to be read-then-write over SFTP (read the status,
start the task, read the status again and write the pid over it), so two `fleet submit`s at once could both
start the task, and the pid write could land on the task's own `running` status, losing its port (the resume
then picks a new one and measures finished cells again). Here the check and the start hold an exclusive lock
(`status/task-N.start.lock`, flock: the kernel releases it should the starter die), so a second start waits and
then finds the first one's task recorded with its live pid; and the task cannot write before its pending status
names its pid: it is started held at a `read` of its stdin, let go once that status is written.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from ninferkit.fleet.tasks import StateDir, pending

HELD = 'read go && exec "$0" "$@"'
"""The task's process waits here until its starter has written its status (EOF, should the starter die first:
no task runs without a status naming it)."""


def start(state: StateDir, index: int) -> str:
    """Start task `index` unless it finished or an attempt of it is alive; what happened, in one line."""
    task = state.read_tasks()[index]
    lock_path = state.status(index).with_name(f"task-{index}.start.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        status = state.read_status(index)
        if status is not None and status.state == "ok":
            return "finished"
        if status is not None and status.state in ("pending", "running") and alive(status.pid):
            return f"running {status.pid}"
        log = state.log(index)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as output:
            child = subprocess.Popen(
                ["sh", "-c", HELD, sys.executable, "-m", "ninferkit", "fleet", "task", str(state.path), str(index)],
                stdin=subprocess.PIPE, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "NINFERKIT_PROGRESS": "lines"})
        assert child.stdin is not None  # stdin=PIPE
        state.write_status(pending(status, task, f"started over SSH on {task.host}").model_copy(
            update={"pid": child.pid}))
        child.stdin.write(b"go\n")
        child.stdin.close()
        return f"started {child.pid}"


def alive(pid: int | None) -> bool:
    """Whether process `pid` runs here (a zombie does not)."""
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def main(argv: list[str]) -> int:
    state = StateDir(Path(argv[0]).resolve())
    print(start(state, state.task_index(argv[1])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
