"""The fleet as one thing: submit every host's tasks through its transport, say where each stands, and follow
them all to their end (Slurm's by its own commands and the shared logs, SSH's by `ssh.follow`), so that a
task that failed or died is reported with its step, reason, diagnosis and log, never dropped."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ninferkit.errors import NinferkitError
from ninferkit.fleet import slurm, ssh
from ninferkit.fleet.spec import LoadedFleet
from ninferkit.fleet.tasks import StateDir, Task, TaskStatus, plan_tasks, summary, whole_lines

POLL_S = 2.0


def _root(fleet: LoadedFleet) -> Callable[[Any], str]:
    return lambda host: host.run_root


def submit(fleet: LoadedFleet, say: Callable[[str], None] = print) -> list[Task]:
    """Write the task table and start what is not finished: the Slurm tasks as job arrays, the SSH hosts'
    tasks in the background there. A task whose run finished before is left as it is (a resubmission
    resumes only what is missing)."""
    tasks = plan_tasks(fleet, _root(fleet))
    state = StateDir(fleet.state_dir)
    for entry in slurm.submit(state, tasks, Path.cwd()):
        say(f"slurm: job array {entry['job_id']} (tasks {', '.join(map(str, entry['tasks']))}; "
            f"gres {entry['gres'] or 'none'}; script {entry['script']})")
    finished = [task.index for task in tasks if task.via == "slurm" and _ok(state.read_status(task.index))]
    if finished:
        say(f"slurm: tasks {', '.join(map(str, finished))} already finished; not submitted again")
    ssh.start(fleet, tasks, say)
    return tasks


def _ok(status: TaskStatus | None) -> bool:
    return status is not None and status.state == "ok"


def slurm_statuses(state: StateDir, tasks: Sequence[Task]) -> dict[int, TaskStatus | None]:
    """The Slurm tasks' own statuses, with Slurm's word where a task ended without writing one: it died outside
    the runbook, and its status (written here) says how, with its log's last lines."""
    mine = [task for task in tasks if task.via == "slurm"]
    if not mine:
        return {}
    words = slurm.slurm_states(state)
    found: dict[int, TaskStatus | None] = {}
    for task in mine:
        status = state.read_status(task.index)
        word = words.get(task.index, {})
        slurm_state = word.get("state", "")
        if slurm_state in slurm.ENDED and (status is None or status.state in ("running", "pending")):
            status = TaskStatus(
                index=task.index, host=task.host, state="failed", node=word.get("node") or None,
                reason=f"Slurm: {slurm_state}, exit code {word.get('exit_code', '?')}: the task ended without "
                       f"saying how (killed, out of memory, its node lost); the log ends:\n"
                       f"{slurm.log_tail(state.log(task.index))}",
                log=str(state.log(task.index)), run_dir=str(state.run_dir(task)),
                step=status.step if status else None)
            state.write_status(status)
        elif status is None and slurm_state:
            status = TaskStatus(index=task.index, host=task.host, state="pending", node=word.get("node") or None,
                                reason=f"Slurm: {slurm_state} {word.get('reason', '')}".strip())
        found[task.index] = status
    return found


def status(fleet: LoadedFleet) -> list[dict[str, Any]]:
    """Every task's state now: one dict per task (`tasks.summary`)."""
    state = StateDir(fleet.state_dir)
    tasks = state.read_tasks()
    found = slurm_statuses(state, tasks)
    found |= ssh.statuses(fleet, tasks)
    return [summary(found.get(task.index), task) for task in tasks]


def collect(fleet: LoadedFleet, say: Callable[[str], None] = print,
            timeout_s: float = 86_400.0) -> list[dict[str, Any]]:
    """Follow every task to its end, streaming each one's lines (they carry their host) and bringing the SSH
    hosts' run directories back; then each task's state."""
    state = StateDir(fleet.state_dir)
    tasks = state.read_tasks()
    failure: list[BaseException] = []
    lock = threading.Lock()

    def locked(line: str) -> None:
        with lock:
            say(line)

    def follow_ssh() -> None:
        try:
            ssh.follow(fleet, tasks, locked, timeout_s)
        except (NinferkitError, OSError) as exc:
            failure.append(exc)

    follower = threading.Thread(target=follow_ssh, name="fleet-ssh")
    follower.start()
    deadline = time.monotonic() + timeout_s
    offsets: dict[int, int] = {}
    waiting = [task for task in tasks if task.via == "slurm"]
    while waiting and time.monotonic() < deadline:
        for task in waiting:
            offsets[task.index] = _relay(state.log(task.index), offsets.get(task.index, 0), locked)
        found = slurm_statuses(state, waiting)
        waiting = [task for task in waiting if _unfinished(found.get(task.index))]
        if waiting:
            time.sleep(POLL_S)
    for task in tasks:
        if task.via == "slurm":
            offsets[task.index] = _relay(state.log(task.index), offsets.get(task.index, 0), locked)
    follower.join()
    if failure:
        raise failure[0]
    shown = [summary(state.read_status(task.index), task) for task in tasks]
    if waiting:
        late = ", ".join(str(task.index) for task in waiting)
        raise slurm.SlurmError(f"tasks {late} had not ended after {timeout_s:.0f} s")
    return shown


def _unfinished(status: TaskStatus | None) -> bool:
    return status is None or status.state in ("running", "pending")


def _relay(log: Path, offset: int, say: Callable[[str], None]) -> int:
    """Print the log's whole lines from `offset`; the new offset."""
    if not log.exists():
        return offset
    with log.open("rb") as handle:
        handle.seek(offset)
        data = handle.read()
    lines, used = whole_lines(data)
    for line in lines:
        say(line)
    return offset + used


def run_dirs(fleet: LoadedFleet) -> list[Path]:
    """Every task's run directory here (the SSH hosts' as copied back), those that exist."""
    state = StateDir(fleet.state_dir)
    found = []
    for task in state.read_tasks():
        status = state.read_status(task.index)
        path = Path(status.run_dir) if status is not None and status.run_dir and task.via == "ssh" \
            else state.run_dir(task)
        if task.via == "ssh" and (status is None or status.state not in ssh.ENDED):
            continue  # still on its host
        if (path / "manifest.json").exists():
            found.append(path)
    return found
