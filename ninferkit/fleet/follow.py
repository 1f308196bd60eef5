"""The fleet as one thing: submit every host's tasks through its transport, say where each stands, and follow
them all to their end (Slurm's by its own commands and the shared logs, SSH's by `ssh.follow`), so that a
task that failed or died is reported with its step, reason, diagnosis and log, never dropped."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ninferkit.errors import NinferkitError, ProfileError
from ninferkit.fleet import cluster, slurm, ssh
from ninferkit.fleet.spec import LoadedFleet
from ninferkit.fleet.tasks import SLURM_WORD, StateDir, Task, TaskStatus, plan_tasks, summary, whole_lines, write_tasks
from ninferkit.rundir.runs import utc_now

POLL_S = 2.0


def _root(fleet: LoadedFleet) -> Callable[[Any], str]:
    return lambda host: host.run_root


def submit(fleet: LoadedFleet, say: Callable[[str], None] = print, dry_run: bool = False) -> list[Task]:
    """Check everything that can be checked before submitting (`check`: nothing is submitted or started when one
    host fails it), then write the task table and start what is not finished and not already held by a job:
    the Slurm tasks as job arrays, the SSH hosts' tasks in the background there. A task whose run finished
    before is left as it is (a resubmission resumes only what is missing); one Slurm still holds (pending,
    running) is not submitted twice. `dry_run`: the checks, then what would run where; nothing written."""
    tasks = plan_tasks(fleet, _root(fleet))
    state = StateDir(fleet.state_dir)
    for note in check(fleet, tasks):
        say(f"note: {note}")
    if dry_run:
        for line in where(fleet, tasks):
            say(line)
        return tasks
    write_tasks(fleet, tasks)
    held = slurm.queued(state, tasks) if state.slurm.exists() else {}
    for index, job in sorted(held.items()):
        say(f"slurm: task {index} is still held by job {job}; not submitted again")
    if state.slurm.exists():
        for index, reason in lost_tasks(slurm_statuses(state, tasks)).items():
            held[index] = "lost"
            say(f"slurm: task {index} is not submitted again: {reason}")
    for entry in slurm.submit(state, tasks, Path.cwd(), held):
        say(f"slurm: job array {entry['job_id']} (tasks {', '.join(map(str, entry['tasks']))}; "
            f"gres {entry['gres'] or 'none'}; script {entry['script']})")
    finished = [task.index for task in tasks if task.via == "slurm" and _ok(state.read_status(task.index))]
    if finished:
        say(f"slurm: tasks {', '.join(map(str, finished))} already finished; not submitted again")
    ssh.start(fleet, tasks, say)
    return tasks


def check(fleet: LoadedFleet, tasks: Sequence[Task]) -> list[str]:
    """The cluster has what each Slurm host asks on one node (`cluster.check_cluster`: partition, GRES, constraint,
    memory, pyxis, account and QOS), each SSH host answers with its key and host key within a bound, runs ninferkit
    and has the GPUs asked for: ProfileError naming every host that does not, before anything is submitted or
    started. What cannot be checked from here (Slurm decides) comes back as notes, for the user to read."""
    hosts = {task.host for task in tasks if task.via == "slurm"}
    checked = cluster.check_cluster([host for host in fleet.spec.hosts if host.name in hosts])
    problems = checked.problems + ssh.check_hosts(fleet, tasks)
    if problems:
        raise ProfileError(f"{fleet.source}: nothing was submitted or started; {len(problems)} host problem(s):\n"
                           + "\n".join(f"  - {line}" for line in problems))
    return checked.notes


def where(fleet: LoadedFleet, tasks: Sequence[Task]) -> list[str]:
    """What would run where, a line per task (`fleet submit --dry-run`)."""
    state = StateDir(fleet.state_dir)
    hosts = {host.name: host for host in fleet.spec.hosts}
    lines = []
    for task in tasks:
        host = hosts[task.host]
        if host.ssh is not None:
            target = f"ssh {host.ssh.user}@{host.ssh.address}:{host.ssh.port}, checkout {host.ssh.checkout}"
        else:
            target = (f"slurm partition {task.partition or '(default)'}, gres {task.gres or 'none'}, "
                      f"time limit {task.time_limit_min} min")
        status = state.read_status(task.index) if state.tasks.exists() else None
        now = f"; now {status.state}" if status is not None else ""
        lines.append(f"task {task.index} {task.host} ({task.profile}, name {task.profile_name}): {target}; "
                     f"steps {', '.join(task.steps)}; run directory {task.run_dir}{now}")
    lines.append(f"dry run: {len(tasks)} task(s) checked; nothing was submitted or started")
    return lines


def _ok(status: TaskStatus | None) -> bool:
    return status is not None and status.state == "ok"


def slurm_statuses(state: StateDir, tasks: Sequence[Task], held: set[int] | None = None,
                   cluster: slurm.KillTimes | None = None) -> dict[int, TaskStatus | None]:
    """The Slurm tasks' own statuses, with Slurm's word where a task ended without writing one: it died outside
    the runbook, and its status (written here, its port kept for the resume) says how, with its log's last
    lines. A task Slurm's time limit ended says so: its SIGTERM reads as a scancel's to the task itself.
    `held` (when given) gets the tasks whose job Slurm still holds (a job ending is COMPLETING a while after its
    task wrote its status; its TIMEOUT comes after). `cluster`: the cluster's kill times as a follower keeps them
    (read once per `collect` or `watch`); None reads them where needed. SlurmError when Slurm does not answer."""
    mine = [task for task in tasks if task.via == "slurm"]
    if not mine:
        return {}
    words = slurm.slurm_states(state, cluster)
    now = datetime.now()  # Slurm prints its times in local time, without a zone
    found: dict[int, TaskStatus | None] = {}
    for task in mine:
        status = state.read_status(task.index)
        word = words.get(task.index, {})
        slurm_state = word.get("state", "")
        if held is not None and slurm_state in slurm.QUEUED:
            held.add(task.index)
        if (lost := seen_lost(status, word, now)) is not None:  # shown, not written: it may still be measuring
            status = lost
        elif slurm_state in slurm.ENDED and (status is None or status.state in ("running", "pending")):
            shown = status or TaskStatus(index=task.index, host=task.host, state="failed")
            how = ENDED_WORDS.get(slurm_state, "killed, out of memory, its node lost")
            gone = copy_gone(word, now) if slurm_state == "NODE_FAIL" else None
            status = shown.model_copy(update={
                "state": "failed", "node": word.get("node") or shown.node, "log": str(state.log(task.index)),
                "run_dir": str(state.run_dir(task)), SLURM_WORD: True,
                "reason": f"Slurm: {slurm_state}, exit code {word.get('exit_code', '?')}: the task ended without "
                          f"saying how ({how}{'; ' + gone if gone else ''}); "
                          f"the log ends:\n{slurm.log_tail(state.log(task.index))}"})
            now_said = state.read_status(task.index)
            if now_said is not None and now_said.state not in ("running", "pending"):
                status = now_said  # its watchdog (or the task) said how it ended since it was read: its word stands
            else:
                state.write_status(status)
        elif status is not None and status.state == "interrupted" and slurm_state in INTERRUPTED_BY \
                and not (status.reason or "").startswith(INTERRUPTED_BY[slurm_state][:20]):
            cause = INTERRUPTED_BY[slurm_state].format(limit=task.time_limit_min, node=word.get("node") or status.node)
            status = status.model_copy(update={"reason": f"{cause} ({status.reason})"})
            state.write_status(status)
        elif status is not None and status.state == "running" and slurm_state == "RUNNING" \
                and word.get("node_state", "").endswith("*"):  # shown, not written: the node may answer again
            status = status.model_copy(update={"reason": f"Slurm: its node {word.get('node')} is not responding "
                                               f"(sinfo: {word['node_state']}); if it stays silent past the "
                                               "cluster's SlurmdTimeout, Slurm ends the task (NODE_FAIL) and does "
                                               "not run it again"})
        elif status is None and slurm_state:
            status = TaskStatus(index=task.index, host=task.host, state="pending", node=word.get("node") or None,
                                reason=f"Slurm: {slurm_state} {word.get('reason', '')}".strip())
        found[task.index] = status
    return found


def seen_lost(status: TaskStatus | None, word: dict[str, str], now: datetime) -> TaskStatus | None:
    """A task that says it runs (or waits) on a node Slurm declared failed (NODE_FAIL), as `lost` while its old
    copy may still run there: the node does not answer (sinfo's `*`), or it answers again and nothing yet says
    the copy is gone (`copy_gone`): Slurm ends it only once the node's slurmd is back (SIGTERM, then SIGKILL
    KillWait later), and a `fleet submit` in between would start a second copy beside the first. `now`: this
    machine's local time, as Slurm prints its times. None for any other task."""
    if word.get("state") != "NODE_FAIL" or status is None or status.state not in ("running", "pending"):
        return None
    node = word.get("node") or status.node
    if word.get("node_state", "*").endswith("*"):
        reason = (f"Slurm lost its node {node} (NODE_FAIL: it stopped answering) while the task ran; it may "
                  "still run there, unreachable, or have died with the node. Slurm does not run it again "
                  "(--no-requeue); when the node answers again Slurm ends what is left of it, and `fleet submit` "
                  "resumes it, keeping its finished cells")
    elif copy_gone(word, now) is None:
        until = kill_deadline(word)
        reason = (f"Slurm lost its node {node} (NODE_FAIL) while the task ran, and the node answers again; Slurm "
                  "is ending what is left of the task there (SIGTERM, then SIGKILL after KillWait). `fleet submit` "
                  "resumes it once the task says it ended or Slurm says its batch script did"
                  + (f", or from {until.isoformat(sep=' ')} (the node back + MessageTimeout + KillWait)"
                     if until is not None else "") + ", keeping its finished cells")
    else:
        return None
    return status.model_copy(update={"state": "lost", "reason": reason})


def copy_gone(word: dict[str, str], now: datetime) -> str | None:
    """Why Slurm's answers say no process of a NODE_FAIL job is left on its node (None: nothing says so yet):
    Slurm heard its batch script end (the job's exit code, 0:0 until then, is set); the node booted after the
    job started; or since the node came back (`node_back`) MessageTimeout (for the controller's order to reach
    its slurmd) and KillWait (slurmd's SIGTERM-to-SIGKILL wait) have passed. Recorded on a real cluster in
    tests/data/fleet_node_back."""
    code = word.get("exit_code", "")
    if code not in ("", "0:0"):
        return f"Slurm heard its batch script end (exit code {code})"
    boot, start = slurm_time(word.get("boot_time")), slurm_time(word.get("start_time"))
    if boot is not None and start is not None and boot > start:
        return f"its node booted at {boot.isoformat(sep=' ')}, after the task started"
    back, until = node_back(word), kill_deadline(word)
    if back is not None and until is not None and now >= until:
        return (f"{back[1]} at {back[0].isoformat(sep=' ')}, and MessageTimeout + KillWait "
                f"({int((until - back[0]).total_seconds())} s) have passed since: Slurm killed what was left of it")
    return None


def node_back(word: dict[str, str]) -> tuple[datetime, str] | None:
    """When a NODE_FAIL job's node came back, and how Slurm says so: its slurmd started after the job was ended
    (SlurmdStartTime; it was restarted), or else Slurm marked it busy after that (LastBusyTime: set when the node
    answered again, and moved on as what the job left there ended). None while neither is after the job's end."""
    ended = slurm_time(word.get("end_time"))
    if ended is None:
        return None
    for key, how in (("slurmd_start_time", "its node's slurmd restarted"),
                     ("last_busy_time", "its node answered again (LastBusyTime)")):
        when = slurm_time(word.get(key))
        if when is not None and when > ended:
            return when, how
    return None


def kill_deadline(word: dict[str, str]) -> datetime | None:
    """When the processes a NODE_FAIL job left on its node are killed at the latest: its node back
    (`node_back`), plus MessageTimeout and KillWait. None while the node is not back or a time is unknown."""
    back = node_back(word)
    wait, message = word.get("kill_wait_s", ""), word.get("message_timeout_s", "")
    if back is None or not wait.isdigit() or not message.isdigit():
        return None
    return back[0] + timedelta(seconds=int(wait) + int(message))


def slurm_time(text: str | None) -> datetime | None:
    """A Slurm time (`2026-12-06T08:05:39`, local time, no zone) as a datetime; None for Unknown, None, blank."""
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def lost_tasks(found: dict[int, TaskStatus | None]) -> dict[int, str]:
    """The tasks `fleet submit` leaves alone because their node was lost, with why: a second copy beside one still
    measuring (unreachable, or being ended by Slurm now that its node answers) would measure its cells twice.
    Once the old copy is known gone (`copy_gone`, or its own status), it is submitted again and resumes."""
    return {index: status.reason or "lost" for index, status in found.items()
            if status is not None and status.state == "lost"}


INTERRUPTED_BY = {
    "TIMEOUT": "Slurm's time limit ({limit} min) ended it, not a scancel; give the host a larger time_limit_min (or "
               "the fleet a larger seconds_per_cell)",
    "NODE_FAIL": "Slurm lost its node {node} (NODE_FAIL: it stopped answering) and ended the task there, not a "
                 "scancel; it was not run again (--no-requeue): `fleet submit` again resumes it, keeping its finished "
                 "cells, once the node (or another with its GRES) is back"}
"""What a task interrupted by SIGTERM learns only from Slurm: its signal reads as a scancel's to the task itself."""

ENDED_WORDS = {"TIMEOUT": "Slurm's time limit", "CANCELLED": "cancelled", "NODE_FAIL": "its node was lost",
               "OUT_OF_MEMORY": "out of memory", "PREEMPTED": "preempted", "BOOT_FAIL": "its node did not boot"}


def status(fleet: LoadedFleet, cluster: slurm.KillTimes | None = None) -> list[dict[str, Any]]:
    """Every task's state now: one dict per task (`tasks.summary`). A transport or host that does not answer
    within its bound makes its own tasks `unknown`, with its reason and what the task last said; the others
    answer beside it. `cluster`: as `slurm_statuses` takes it."""
    state = StateDir(fleet.state_dir)
    tasks = state.read_tasks()
    unknown: dict[int, str] = {}
    try:
        found = slurm_statuses(state, tasks, cluster=cluster)
    except slurm.SlurmError as exc:
        found = {}
        unknown |= {task.index: str(exc) for task in tasks if task.via == "slurm"}
    answered, silent = ssh.statuses(fleet, tasks)
    found |= answered
    unknown |= {task.index: silent[task.host] for task in tasks if task.host in silent}
    shown = []
    for task in tasks:
        if task.index in unknown:
            last = state.read_status(task.index)
            shown.append({"task": task.index, "host": task.host, "profile": task.profile_name, "state": "unknown",
                          "reason": f"{unknown[task.index]}; the task last said: {last.state if last else 'nothing'}"})
        else:
            shown.append(summary(found.get(task.index), task))
    return shown


CLEAR = "\x1b[H\x1b[2J"
"""Cursor home and erase: a terminal's view is redrawn in place; a log gets no control codes."""
WATCH_BOUNDS_S = (2.0, 3600.0)
"""`fleet status --watch S`: asking Slurm and every SSH host more often than every 2 s loads the controller for
nothing (a task's state changes in minutes); less often than hourly is no live view."""


def watch(fleet: LoadedFleet, every_s: float, write: Callable[[str], None], terminal: bool,
          sleep: Callable[[float], None] = time.sleep) -> list[dict[str, Any]]:
    """A live view of the fleet: its tasks' states every `every_s` seconds until none is pending, running or lost
    (each round bounded as `status` is). On a terminal the view is redrawn in place; elsewhere (a log, a pipe)
    a round is printed as plain lines, stamped, and only when a task's line changed. The last round's tasks."""
    last: list[str] = []
    cluster = slurm.KillTimes()
    while True:
        shown = status(fleet, cluster)
        lines = [watch_line(task) for task in shown]
        going = sum(1 for task in shown if task["state"] in ("pending", "running", "lost"))
        head = f"{utc_now()}  {fleet.spec.name}: {len(shown)} task(s), {going} pending or running"
        if terminal:
            write(CLEAR + "\n".join([head, *lines, f"(every {every_s:g} s; Ctrl-C stops watching, not the tasks)"])
                  + "\n")
        elif lines != last:
            write("\n".join([head, *lines]) + "\n")
        last = lines
        if not going:
            return shown
        sleep(every_s)


def watch_line(task: dict[str, Any]) -> str:
    """One task on one line: its state, where it runs, and the first line of why (not for a finished task)."""
    where = f" on {task['node']}" if task.get("node") else ""
    step = f" at {task['step']}" if task.get("step") else ""
    why = str(task.get("reason") or "").splitlines()[0] if task["state"] != "ok" and task.get("reason") else ""
    return f"task {task['task']} {task['host']} ({task['profile']}): {task['state']}{where}{step}" + \
        (f": {why[:160]}" if why else "")


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
    silent = ""
    lost: dict[int, str | None] = {}
    cluster = slurm.KillTimes()  # asked of Slurm once, where a lost node's answer first needs it
    while waiting and time.monotonic() < deadline:
        for task in waiting:
            offsets[task.index] = _relay(state.log(task.index), offsets.get(task.index, 0), locked)
        held: set[int] = set()
        try:
            found = slurm_statuses(state, waiting, held, cluster)
        except slurm.SlurmError as exc:  # said when it starts and when it ends, its tasks still followed
            if str(exc) != silent:
                locked(f"[slurm] {exc}; tasks {', '.join(str(task.index) for task in waiting)} wait for its answer")
            silent = str(exc)
            time.sleep(POLL_S)
            continue
        if silent:
            locked("[slurm] Slurm answers again")
            silent = ""
        for task in waiting:
            found_now = found.get(task.index)
            if found_now is not None and found_now.state == "lost" and lost.get(task.index) != found_now.reason:
                lost[task.index] = found_now.reason  # said again when its node answers: Slurm is ending it
                locked(f"[slurm] task {task.index} {task.host}: {found_now.reason}")
        waiting = [task for task in waiting if _unfinished(found.get(task.index)) or task.index in held]
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
    """Still to follow: pending or running; and lost (its node does not answer, or its old copy there is not yet
    known gone; the task may still write its end), which `collect` follows until it is, or the deadline, saying
    so."""
    return status is None or status.state in ("running", "pending", "lost")


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
