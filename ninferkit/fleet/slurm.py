"""Slurm, for labs that have it: the fleet's Slurm tasks as one sbatch job array, followed through Slurm's own
commands.

The array's index is the task's index in tasks.json, so a resubmission names exactly the tasks without a
finished run. Slurm gives every element of an array the same resources, so tasks that ask for different GRES
(or partitions) go in one array per request: a lab whose hosts differ in GPU type gets one array per type.
The time limit is the longest of the array's tasks' (tasks.time_limit_min: from the plan unless the host sets
one). `squeue` says what is pending or running; what ended comes from `sacct`, or, on a cluster without an
accounting database (sacct: "accounting storage is disabled"), from `scontrol show job` while the controller
still holds the job (MinJobAge). A task Slurm says ended that never wrote its status died outside the runbook
(killed, out of memory, its node lost): it is reported with Slurm's state, exit code and its log's last lines.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ninferkit.errors import BadInput, NinferkitError
from ninferkit.fleet.tasks import StateDir, Task, pending
from ninferkit.rundir.runs import read_json, utc_now, write_json_atomic

ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE"}


class SlurmError(NinferkitError):
    """A Slurm command failed; the message names it and what it printed."""


ANSWER_S = 15.0
"""How long a Slurm command may take: a controller that is down makes squeue retry for most of a minute, and
`fleet status` must answer for every host within a bound (the SSH hosts beside it), saying Slurm did not."""

QUEUED = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING",
          "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"}
"""A job in these states still holds (or will hold) its task: a second submit would run the task twice."""


def slurm_command(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """A Slurm command's answer within ANSWER_S; SlurmError when it is not installed or does not answer."""
    if shutil.which(argv[0]) is None:
        raise SlurmError(f"{argv[0]} is not on PATH: this machine is no Slurm submit host (install slurm-client, "
                         "or use via: ssh)")
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=ANSWER_S)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"Slurm is unreachable: `{' '.join(argv[:2])}` did not answer in {ANSWER_S:.0f} s "
                         "(slurmctld down, or its host unreachable)") from None


def unreachable(argv: Sequence[str], done: subprocess.CompletedProcess[str]) -> SlurmError:
    """A Slurm command that answered with a failure, as the error that names it and its last line."""
    said = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
    return SlurmError(f"Slurm is unreachable: `{' '.join(argv[:2])}` exited {done.returncode}: {said}")


def batch_script(state: StateDir, tasks: Sequence[Task], workdir: Path, python: str = sys.executable) -> str:
    """The sbatch script of one array over `tasks` (one GRES request, one partition)."""
    first = tasks[0]
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name=ninferkit-{state.fleet_name()}",
             f"#SBATCH --array={','.join(str(task.index) for task in tasks)}",
             f"#SBATCH --time={max(task.time_limit_min for task in tasks)}",
             f"#SBATCH --output={sbatch_quote(str(state.path / 'logs' / 'task-%a.log'))}",
             "#SBATCH --open-mode=append",
             f"#SBATCH --chdir={sbatch_quote(str(workdir))}",
             "#SBATCH --ntasks=1",
             # Slurm requeues a job whose node is lost (its default); the first copy may still be measuring, and
             # the second would kill it mid-cell and measure finished cells again (issue 41). Never restart:
             # the task ends failed, and `fleet submit` again resumes it, keeping its finished cells.
             "#SBATCH --no-requeue"]
    lines += request_lines(first)
    command = [python, "-m", "ninferkit", "fleet", "task", str(state.path)]
    if first.container_image:  # pyxis: the task in the image, the checkout and the state folder mounted as here
        mounts = ",".join(f"{path}:{path}" for path in dict.fromkeys([str(workdir), str(state.path)]))
        command = ["srun", "--ntasks=1", f"--container-image={first.container_image}",
                   f"--container-mounts={mounts}", f"--container-workdir={workdir}", *command]
    lines += ["# one task of the fleet: its runbook, its status in status/task-$SLURM_ARRAY_TASK_ID.json",
              "export NINFERKIT_PROGRESS=lines",
              "exec " + " ".join(shlex.quote(part) for part in command) + ' "$SLURM_ARRAY_TASK_ID"', ""]
    return "\n".join(lines)


REQUESTS = (("gres", "gres"), ("partition", "partition"), ("account", "account"), ("qos", "qos"),
            ("constraint", "constraint"), ("mem", "mem"))
"""A task's fields that are sbatch options (field, option): tasks that differ in one go in separate arrays."""


def request_lines(task: Task) -> list[str]:
    """The `#SBATCH` lines of what a task asks of Slurm, each value quoted for sbatch's reader."""
    return [f"#SBATCH --{option}={sbatch_quote(str(getattr(task, field)))}" for field, option in REQUESTS
            if getattr(task, field)]


def sbatch_quote(value: str) -> str:
    """A value as one argument of an `#SBATCH` line. sbatch reads those lines with its own tokenizer, not the
    shell's: whitespace ends a value and an unquoted `#` starts a comment, while double quotes hold a value
    together and a backslash escapes the next character, inside quotes too (sbatch's _get_argument). A
    state folder with a space cut `--output` and `--chdir` short (issue 40)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def queued(state: StateDir, tasks: Sequence[Task]) -> dict[int, str]:
    """The Slurm tasks a job still holds (pending, running...): `<job id> <state>` by task index. A task there
    is not submitted again."""
    words = slurm_states(state)
    return {task.index: f"{job_ids(state)[task.index]} {words[task.index]['state']}" for task in tasks
            if task.via == "slurm" and words.get(task.index, {}).get("state") in QUEUED}


def submit(state: StateDir, tasks: Sequence[Task], workdir: Path, held: dict[int, str]) -> list[dict[str, Any]]:
    """Submit the Slurm tasks that have no finished run and no job holding them (`held`, from `queued`), one
    array per request (GRES, partition, account, QOS, constraint, memory, image); the arrays submitted (also
    appended to slurm.json)."""
    waiting = [task for task in tasks if task.via == "slurm" and not _finished(state, task)
               and task.index not in held]
    groups: dict[tuple[str, ...], list[Task]] = {}
    for task in waiting:
        groups.setdefault((*request_lines(task), task.container_image or ""), []).append(task)
    (state.path / "logs").mkdir(parents=True, exist_ok=True)
    (state.path / "slurm").mkdir(parents=True, exist_ok=True)
    known = _arrays(state)
    submitted: list[dict[str, Any]] = []
    for number, members in enumerate(groups.values(), len(known)):
        script = state.path / "slurm" / f"array-{number}.sbatch"
        script.write_text(batch_script(state, members, workdir))
        done = slurm_command(["sbatch", "--parsable", str(script)])
        if done.returncode != 0:
            raise SlurmError(f"sbatch {script} failed (exit {done.returncode}): {done.stderr.strip() or done.stdout}")
        job_id = done.stdout.strip().split(";")[0]
        for task in members:  # what a status said before (interrupted, failed) is no longer the task's state
            words = f"submitted to Slurm as {job_id}_{task.index}"
            state.write_status(pending(state.read_status(task.index), task, words))
        entry = {"job_id": job_id, "tasks": [task.index for task in members], "script": str(script),
                 "gres": members[0].gres, "partition": members[0].partition, "submitted": utc_now()}
        submitted.append(entry)
        known.append(entry)
        write_json_atomic(state.slurm, {"arrays": known})
    return submitted


def _finished(state: StateDir, task: Task) -> bool:
    status = state.read_status(task.index)
    return status is not None and status.state == "ok"


def _arrays(state: StateDir) -> list[dict[str, Any]]:
    if not state.slurm.exists():
        return []
    data = read_json(state.slurm)
    if not isinstance(data, dict) or not isinstance(data.get("arrays"), list):
        raise BadInput(f"{state.slurm} is not a fleet's Slurm record (no 'arrays' list)")
    return list(data["arrays"])


def job_ids(state: StateDir) -> dict[int, str]:
    """Each Slurm task's latest job id, `<array>_<task>`."""
    latest: dict[int, str] = {}
    for entry in _arrays(state):
        for index in entry["tasks"]:
            latest[int(index)] = f"{entry['job_id']}_{index}"
    return latest


class KillTimes:
    """The cluster's KillWait and MessageTimeout (`kill_times`), read from `scontrol show config` on first use and
    kept: one follower (`fleet collect`, `fleet status --watch`) asks Slurm every few seconds while a lost node is
    back, and the cluster's configuration does not change under it. A read that fails is not kept (SlurmError: the
    next poll asks again)."""

    def __init__(self) -> None:
        self._read: dict[str, str] | None = None

    def get(self) -> dict[str, str]:
        if self._read is None:
            self._read = kill_times(slurm_config())
        return self._read


def slurm_states(state: StateDir, cluster: KillTimes | None = None) -> dict[int, dict[str, str]]:
    """Slurm's word on each task's latest job: {"state", "exit_code", "node", "reason", "start_time",
    "end_time"} by task index, and for a running job or one whose node failed, its node's state now
    ("node_state", from sinfo: `alloc*` or `down*` for a node that does not answer). For a job whose node failed
    and answers again, also what tells whether the job's processes there are gone: the node's "boot_time",
    "slurmd_start_time" and "last_busy_time" (`node_times`), the cluster's "kill_wait_s" and
    "message_timeout_s" (`cluster`, read here when not given)."""
    ids = job_ids(state)
    arrays = sorted({job.split("_")[0] for job in ids.values()})
    if not arrays:
        return {}
    found: dict[str, dict[str, str]] = {}
    argv = ["squeue", "-h", "-r", "-j", ",".join(arrays), "-o", "%i|%T|%r|%N"]
    listed = slurm_command(argv)
    if listed.returncode != 0 and "Invalid job id" not in listed.stderr:  # (a job the controller forgot)
        raise unreachable(argv, listed)
    if listed.returncode == 0:
        for line in listed.stdout.splitlines():
            job, state_word, reason, node = (line.split("|") + ["", "", "", ""])[:4]
            found[job.strip()] = {"state": state_word, "reason": reason, "node": node}
    accounted = slurm_command(["sacct", "-n", "-P", "-X", "-j", ",".join(arrays), "-o",
                               "JobID,State,ExitCode,NodeList,Start,End"])
    if accounted.returncode == 0:
        for line in accounted.stdout.splitlines():
            job, state_word, code, node, start, end = (line.split("|") + [""] * 6)[:6]
            found.setdefault(job, {"state": state_word.split()[0] if state_word else "", "exit_code": code,
                                   "node": node, "start_time": start, "end_time": end})
    else:  # no accounting database: the controller's memory of jobs that ended
        for array in arrays:
            shown = slurm_command(["scontrol", "show", "job", "-o", array])
            for job, word in (scontrol_jobs(shown.stdout, array) if shown.returncode == 0 else {}).items():
                found.setdefault(job, word)
    mine = {index: found[job] for index, job in ids.items() if job in found}
    watched = {word["node"] for word in mine.values() if word["state"] in ("RUNNING", "NODE_FAIL") and word["node"]}
    nodes = node_states(watched) if watched else {}
    for word in mine.values():
        if word["node"] in nodes:
            word["node_state"] = nodes[word["node"]]
    back = {word["node"] for word in mine.values() if word["state"] == "NODE_FAIL"
            and not word.get("node_state", "*").endswith("*")}
    if back:  # a lost node that answers again: has Slurm ended what was left of the job there?
        config = (cluster or KillTimes()).get()
        for node in back:
            shown = slurm_command(["scontrol", "show", "node", "-o", node])
            facts = {**config, **(node_times(shown.stdout) if shown.returncode == 0 else {})}
            for word in mine.values():
                if word["node"] == node and word["state"] == "NODE_FAIL":
                    word.update(facts)
    return mine


def node_times(text: str) -> dict[str, str]:
    """`scontrol show node -o NODE`'s BootTime, SlurmdStartTime and LastBusyTime (local time, as Slurm prints
    it): a node booted after a task started has none of its processes; a slurmd started after the node was
    declared lost, or the node marked busy since, says when it came back to end what the job left there."""
    fields = dict(part.split("=", 1) for part in text.split() if "=" in part)
    return {key: fields[field] for key, field in (("boot_time", "BootTime"), ("slurmd_start_time", "SlurmdStartTime"),
                                                  ("last_busy_time", "LastBusyTime")) if field in fields}


def kill_times(config: dict[str, str]) -> dict[str, str]:
    """The cluster's KillWait and MessageTimeout (`slurm_config`), in seconds: a job that ended on a node
    (NODE_FAIL) still has processes there until that node's slurmd, once back, is told to end them (within
    MessageTimeout) and sends SIGTERM, then SIGKILL KillWait later."""
    found = {}
    for name, key in (("KillWait", "kill_wait_s"), ("MessageTimeout", "message_timeout_s")):
        number = config.get(name, "").split(" ")[0]
        if number.isdigit():
            found[key] = number
    return found


def slurm_config() -> dict[str, str]:
    """`scontrol show config`'s settings."""
    argv = ["scontrol", "show", "config"]
    done = slurm_command(argv)
    if done.returncode != 0:
        raise unreachable(argv, done)
    return config_settings(done.stdout)


def config_settings(text: str) -> dict[str, str]:
    """`scontrol show config`'s `Name = value` lines as settings."""
    pairs = (line.split("=", 1) for line in text.splitlines() if " = " in line)
    return {name.strip(): value.strip() for name, value in pairs}


def scontrol_jobs(text: str, array: str) -> dict[str, dict[str, str]]:
    """`scontrol show job -o ARRAY`'s lines as Slurm's word on each element (`<array>_<task>`): state, exit code,
    node and reason."""
    found = {}
    for line in text.splitlines():
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        job = f"{fields.get('ArrayJobId', array)}_{fields.get('ArrayTaskId', '')}"
        found[job] = {"state": fields.get("JobState", ""), "exit_code": fields.get("ExitCode", ""),
                      "node": fields.get("NodeList", ""), "reason": fields.get("Reason", ""),
                      "start_time": fields.get("StartTime", ""), "end_time": fields.get("EndTime", "")}
    return found


def node_states(nodes: set[str]) -> dict[str, str]:
    """sinfo's state of each node (`alloc`, `mix`; a `*` after it: the node is not responding), those it names."""
    shown = slurm_command(["sinfo", "-h", "-N", "-n", ",".join(sorted(nodes)), "-o", "%N|%t"])
    return sinfo_node_states(shown.stdout) if shown.returncode == 0 else {}


def sinfo_node_states(text: str) -> dict[str, str]:
    """`sinfo -h -N -o %N|%t`'s lines as each node's state."""
    pairs = (line.split("|", 1) for line in text.splitlines() if "|" in line)
    return {node: state.strip() for node, state in pairs}


def log_tail(path: Path, lines: int = 8) -> str:
    """The last lines of a task's log, for a task that died without saying why."""
    if not path.exists():
        return f"(no log at {path})"
    with path.open("rb") as handle:
        handle.seek(max(0, os.path.getsize(path) - 16_384))
        text = handle.read().decode(errors="replace")
    return "\n".join(text.splitlines()[-lines:])
