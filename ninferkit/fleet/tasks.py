"""A fleet as tasks (one per host x profile), the folder that records them, and one task run on its host.

The fleet's state folder (`state_dir`, on the machine that submits) holds `tasks.json` (the table every
transport reads), `profiles/` (each task's profile file, copied at submit, so what runs on a host is what was
validated here), `status/task-N.json` (written by the task itself: running, ok, failed with its step, reason,
diagnosis and log, or interrupted), `logs/task-N.log` and, for SSH hosts, `runs/` (the run directories copied
back). Slurm tasks share the folder through the cluster's filesystem; an SSH host gets its own copy under its
`run_root` (`.fleet-<name>/`).

A task's run directory is named by its host and profile, not by the time, so `fleet submit` again finds it: a
task whose status is ok is not run again, any other reopens its run directory, and the runner resumes it (the
sweeps skip the cells that have a result). Each task gets its own server port (kept for its resume) and the
runner its own kernel socket folder, so runbooks side by side on one box never meet.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ninferkit.errors import BadInput, NinferkitError, StepFailed
from ninferkit.fleet.spec import Host, LoadedFleet, run_dir_name
from ninferkit.params import LoadedProfile
from ninferkit.rundir.records import FleetTaskRecord
from ninferkit.rundir.runs import RunDir, json_object, read_json, utc_now, write_json_atomic

TASKS_FILE = "tasks.json"
TaskState = Literal["pending", "running", "ok", "failed", "interrupted", "lost"]
"""What a task says of itself; `lost` only as `fleet status` shows a running task whose node Slurm lost (never
written: the task may still write its own end)."""


class Task(BaseModel):
    """One host x profile, as every transport and the task itself read it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    host: str
    via: Literal["slurm", "ssh"]
    profile: str
    """The profile file as the fleet wrote it."""
    profile_name: str
    profile_hash: str
    profile_file: str
    """Its copy, relative to the state folder."""
    overrides: list[str]
    steps: list[str]
    run_dir: str
    """On the host: absolute, or relative to the state folder there."""
    gres: str | None
    partition: str | None
    time_limit_min: int
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    mem: str | None = None
    container_image: str | None = None


class TaskStatus(BaseModel):
    """What a task says of itself (status/task-N.json)."""

    model_config = ConfigDict(extra="allow")

    index: int
    host: str
    state: TaskState
    node: str | None = None
    job_id: str | None = None
    pid: int | None = None
    port: int | None = None
    started: str | None = None
    ended: str | None = None
    step: str | None = None
    reason: str | None = None
    diagnosis: str | None = None
    notebook: str | None = None
    log: str | None = None
    run_dir: str | None = None


SLURM_WORD = "slurm_word"
"""Marks a status `follow.slurm_statuses` wrote from Slurm's job state alone (the task wrote none): the task's watchdog,
which knows more (it stopped the server), may still replace it."""


class StateDir:
    """The one place that names a path of a fleet's state folder."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def tasks(self) -> Path:
        return self.path / TASKS_FILE

    def status(self, index: int) -> Path:
        return self.path / "status" / f"task-{index}.json"

    def log(self, index: int) -> Path:
        return self.path / "logs" / f"task-{index}.log"

    @property
    def profiles(self) -> Path:
        return self.path / "profiles"

    @property
    def collected(self) -> Path:
        """SSH hosts' run directories, copied back."""
        return self.path / "runs"

    @property
    def slurm(self) -> Path:
        return self.path / "slurm.json"

    def run_dir(self, task: Task) -> Path:
        """A task's run directory on the host that runs it (this machine: Slurm's shared filesystem or a task)."""
        path = Path(task.run_dir)
        return path if path.is_absolute() else self.path / path

    def read_tasks(self) -> list[Task]:
        if not self.tasks.exists():
            raise BadInput(f"{self.tasks} does not exist: `ninferkit fleet submit FLEET` writes it")
        data = read_json(self.tasks)
        try:
            return [Task.model_validate(entry) for entry in data["tasks"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInput(f"{self.tasks} is not a fleet's task table: {exc}") from None

    def task_index(self, given: str) -> int:
        """`given` as the index of one of the table's tasks; BadInput naming the valid range otherwise (the
        batch script and the SSH command pass it, and so may a person rerunning one task by hand)."""
        count = len(self.read_tasks())
        index = int(given) if re.fullmatch(r"[0-9]{1,9}", given) else None
        if index is None or index >= count:
            raise BadInput(f"task {given!r}: {self.tasks} has tasks 0..{count - 1}; give one of those")
        return index

    def fleet_name(self) -> str:
        return str(read_json(self.tasks).get("fleet"))

    def read_status(self, index: int) -> TaskStatus | None:
        path = self.status(index)
        if not path.exists():
            return None
        try:
            return TaskStatus.model_validate(read_json(path))
        except ValueError as exc:
            raise BadInput(f"{path} is not a task's status: {exc}") from None

    def write_status(self, status: TaskStatus) -> None:
        self.status(status.index).parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.status(status.index), status.model_dump(mode="json", exclude_none=True))


def pending(previous: TaskStatus | None, task: Task, reason: str) -> TaskStatus:
    """A task's status once it is submitted again: pending, keeping its port (its run's server had it)."""
    return TaskStatus(index=task.index, host=task.host, state="pending", port=previous.port if previous else None,
                      reason=reason)


def time_limit_min(host: Host, profile: LoadedProfile, fleet: LoadedFleet) -> int:
    """The host's own limit, else one estimated from the plan: the setup allowance, one startup timeout per
    launch the steps make (the speculation A/B's second server too) and the fleet's budget per planned cell."""
    if host.time_limit_min is not None:
        return host.time_limit_min
    from ninferkit.engines import get_adapter
    from ninferkit.sweeps.plan import build_plan, parse_only

    spec = fleet.spec
    cells = 0
    launches = 0
    if "sweeps" in spec.steps:
        cells = sum(1 for cell in build_plan(profile.profile, get_adapter(profile.profile.engine.kind),
                                             parse_only(None), explicit=False) if not cell.skip)
        tasks = profile.profile.sweeps.tasks
        launches += 2 if tasks.enabled and tasks.speculation_ab else 1
    elif "launch" in spec.steps:
        launches = 1
    startup = launches * profile.profile.serve.startup_timeout_s
    seconds = spec.setup_allowance_s + startup + cells * spec.seconds_per_cell
    return max(1, math.ceil(seconds / 60))


def plan_tasks(fleet: LoadedFleet, remote_root: Callable[[Host], str]) -> list[Task]:
    """One task per host x profile, in the fleet file's order; nothing is written (`write_tasks` does, so
    `fleet submit --dry-run` plans without a trace). `remote_root(host)` is where that host's run directories
    go, as the host sees it."""
    tasks: list[Task] = []
    for host in fleet.spec.hosts:
        for written in host.profiles:
            loaded = fleet.profiles[(host.name, written)]
            index = len(tasks)
            tasks.append(Task(
                index=index, host=host.name, via=host.via, profile=written, profile_name=loaded.profile.name,
                profile_hash=loaded.hash, profile_file=f"profiles/task-{index}-{Path(written).name}",
                overrides=list(loaded.overrides), steps=list(fleet.spec.steps),
                run_dir=str(Path(remote_root(host)) / run_dir_name(host, loaded)),
                gres=host.gres, partition=host.partition, time_limit_min=time_limit_min(host, loaded, fleet),
                account=host.account, qos=host.qos, constraint=host.constraint, mem=host.mem,
                container_image=host.container_image))
    return tasks


def write_tasks(fleet: LoadedFleet, tasks: list[Task]) -> None:
    """The task table and each task's profile, copied into the state folder (what runs on a host is what was
    validated here)."""
    state = StateDir(fleet.state_dir)
    state.profiles.mkdir(parents=True, exist_ok=True)
    for task in tasks:
        source = fleet.profiles[(task.host, task.profile)].source
        assert source is not None  # loaded from a file by load_fleet
        shutil.copyfile(source, state.path / task.profile_file)
    write_json_atomic(state.tasks, {"fleet": fleet.spec.name, "source": str(fleet.source),
                                    "tasks": [task.model_dump(mode="json") for task in tasks]})


def gres_missing(gres: str | None) -> str | None:
    """Why this host lacks the GPUs `gres` asks for (gpu:v100:2: two GPUs whose NVML name holds "v100", case
    aside), as NVML sees them; None when it has them or nothing was asked. An SSH host has no scheduler to
    refuse it, so the task does, before anything runs."""
    if gres is None:
        return None
    from ninferkit.host.gpu import gpu_facts

    _, kind, count = gres.split(":")
    facts = gpu_facts()
    names = [str(gpu.get("name") or "") for gpu in facts.get("gpus", [])]
    matching = [name for name in names if kind.lower() in name.lower()]
    if len(matching) >= int(count):
        return None
    seen = ", ".join(names) if names else f"no GPU ({facts.get('reason') or 'NVML found none'})"
    return f"the fleet asks for {gres} ({count} GPU(s) named like {kind!r}); this host has {seen}"


def _port_for(previous: TaskStatus | None, run_dir: Path) -> int:
    """The port the task had; a free one only for a task that never had one. The port is part of the profile
    (`serve.port`), so keeping it keeps the run's profile hash, and a resume skips the cells that have a result;
    a new port would make them all run again, so a kept port that another program holds is refused
    (TaskRefused), never swapped silently. A server this run started and a dead attempt left behind is
    stopped first (its identity checked: `server.process.stop`). Free means no one listens: a closed
    connection's TIME_WAIT does not count, as it does not for the server (SO_REUSEADDR)."""
    from ninferkit.capacity.launches import free_port
    from ninferkit.server.process import stop

    if previous is None or previous.port is None:
        return free_port()
    if not _free(previous.port):
        try:
            stop(RunDir(run_dir))  # what a killed attempt left serving (the watchdog's job, should it have died too)
        except NinferkitError as exc:
            raise TaskRefused("port", f"port {previous.port} is held, and the server this run started could not "
                              f"be stopped: {exc}") from None
    if not _free(previous.port):
        raise TaskRefused(
            "port", f"port {previous.port}, where this run's finished cells were measured (it is part of their "
            "profile hash), is held by another program; a new port would measure them all again. Free it "
            f"(`ss -ltnp 'sport = :{previous.port}'`) and `fleet submit` again")
    return previous.port


def _free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class TaskRefused(NinferkitError):
    """A task that must not run as things stand; its status says why, with `step` naming what refused it."""

    def __init__(self, step: str, reason: str) -> None:
        super().__init__(reason)
        self.step = step
        self.reason = reason


def _refuse_restart(previous: TaskStatus | None) -> None:
    """A task that finds itself started again by Slurm (its node lost: Slurm requeues by default, and the batch
    script says --no-requeue; an admin's `scontrol requeue` still can), or over a status that says an attempt
    is running (submit and the SSH start write pending first), is a second attempt no one asked for: the first
    may still be measuring, and a restart mid-cell would measure its finished cells again. It does not run."""
    restarts = os.environ.get("SLURM_RESTART_COUNT", "0").strip() or "0"
    if restarts != "0":
        raise TaskRefused("restart", f"Slurm started this task again (restart {restarts}: its node was lost, or the "
                          "job was requeued); a second attempt would measure finished cells again, so it did not "
                          "run. `fleet submit` again resumes it, keeping its finished cells")
    if previous is not None and previous.state == "running":
        raise TaskRefused("restart", f"an attempt of this task is recorded running (pid {previous.pid} on "
                          f"{previous.node}, since {previous.started}); this second start did not run. If it is "
                          "gone, `fleet submit` again resumes it, keeping its finished cells")


def where_it_runs() -> tuple[str, str | None]:
    """This task's node and, under Slurm, its job id (`<array>_<task>`, as squeue and sacct name it)."""
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    array, element = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return node, (f"{array}_{element}" if array and element else os.environ.get("SLURM_JOB_ID"))


def run_task(state_path: Path, index: int, say: Callable[[str], None] = print) -> int:
    """Run task `index` of the state folder on this host: 0 when its run is whole (now or before), 1 when a
    step failed or the task was refused (the status names the step, the reason, the diagnosis and the log),
    130 when interrupted (Slurm's scancel and a time limit send SIGTERM, which the runner turns into an
    interrupt). A watchdog (`watchdog.py`) outlives the task to stop its server should it die unannounced."""
    from ninferkit.server.process import release_elsewhere
    from ninferkit.steps.runner import run_runbook

    state = StateDir(state_path.resolve())
    task = state.read_tasks()[state.task_index(str(index))]
    fleet_name = state.fleet_name()
    previous = state.read_status(index)
    run_dir = state.run_dir(task)
    if previous is not None and previous.state == "ok":
        say(f"{task.host}: task {index} ({task.profile_name}) already finished: {run_dir}")
        return 0
    node, job = where_it_runs()
    try:
        _refuse_restart(previous)
        missing = gres_missing(task.gres) if task.via == "ssh" else None  # Slurm hands out its GRES itself
        if missing is not None:
            raise TaskRefused("gres", missing)
        port = _port_for(previous, run_dir)
    except TaskRefused as exc:
        kept = {"port": previous.port} if previous is not None and previous.port is not None else {}
        state.write_status(TaskStatus(index=index, host=task.host, state="failed", node=node, job_id=job,
                                      started=utc_now(), ended=utc_now(), step=exc.step, reason=exc.reason, **kept))
        say(f"{task.host}: task {index} refused: {exc.reason}")
        return 1
    status = TaskStatus(index=index, host=task.host, state="running", node=node, job_id=job, pid=os.getpid(),
                        port=port, started=utc_now(), run_dir=str(run_dir), log=str(state.log(index)))
    state.write_status(status)
    overrides = [*task.overrides, f"serve.port={port}"]
    run_dir.mkdir(parents=True, exist_ok=True)
    before = RunDir(run_dir).read_fleet_task()
    nodes, jobs = (before.nodes, before.jobs) if before is not None else ([], [])
    write_json_atomic(RunDir(run_dir).fleet_task, FleetTaskRecord(
        schema_version=FleetTaskRecord.SCHEMA_VERSION, profile_hash=task.profile_hash, fleet=fleet_name,
        host=task.host, task=index, via=task.via, gres=task.gres, nodes=list(dict.fromkeys([*nodes, node])),
        jobs=[*jobs, job] if job else jobs).model_dump(mode="json"))
    for folder in [run_dir, *(record.parent for record in sorted(run_dir.glob("*/**/server.json")))]:
        left = release_elsewhere(RunDir(folder), f"task {index} resumed on {node}: its attempt on the other node "
                                 "is over")
        if left is not None:
            say(f"{task.host}: task {index}: the server record of its attempt on {left} ({folder}) is marked "
                "stopped (that attempt is over)")
    _start_watchdog(state, index, run_dir)
    try:
        result = run_runbook(state.path / task.profile_file, run_dir, task.steps, overrides, say=say)
    except StepFailed as exc:
        state.write_status(status.model_copy(update={
            "state": "failed", "ended": utc_now(), "step": exc.step, "reason": exc.reason,
            "notebook": str(exc.notebook), "diagnosis": _diagnosis(run_dir, exc.step)}))
        say(f"{task.host}: task {index} failed at step {exc.step}: {exc.reason}")
        return 1
    except KeyboardInterrupt as exc:
        steps = RunDir(run_dir).read_manifest().steps
        step = next((name for name, entry in steps.items() if entry.status == "interrupted"), None)
        state.write_status(status.model_copy(update={"state": "interrupted", "ended": utc_now(), "step": step,
                                                     "reason": f"interrupted ({exc or 'Ctrl-C'})"}))
        say(f"{task.host}: task {index} interrupted at step {step}; `fleet submit` again resumes it")
        return 130
    except NinferkitError as exc:
        state.write_status(status.model_copy(update={"state": "failed", "ended": utc_now(), "reason": str(exc)}))
        say(f"{task.host}: task {index} failed before a step ran: {exc}")
        return 1
    state.write_status(status.model_copy(update={"state": "ok", "ended": utc_now(),
                                                 "run_dir": str(result.run.dir.path)}))
    say(f"{task.host}: task {index} ({task.profile_name}) finished: {result.run.dir.path}")
    return 0


def _start_watchdog(state: StateDir, index: int, run_dir: Path) -> None:
    """Start this task's watchdog (`watchdog.py`: it stops the server should the task die unannounced), in a
    session of its own so that a signal to the task's group does not take it along; its lines go to the log."""
    log = state.log(index)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as output:
        subprocess.Popen([sys.executable, "-m", "ninferkit.fleet.watchdog", str(os.getpid()), str(state.path),
                          str(index), str(run_dir)], stdin=subprocess.DEVNULL, stdout=output,
                         stderr=subprocess.STDOUT, start_new_session=True)


def _diagnosis(run_dir: Path, step: str) -> str | None:
    """The server log's verdict where the failing step had a server (launch, sweeps, capacity); None without a log."""
    log = RunDir(run_dir).server_log
    if step not in ("launch", "sweeps", "capacity") or not log.exists():
        return None
    from ninferkit.bounded import read_log
    from ninferkit.rundir.recorded import read_recorded
    from ninferkit.server.diagnose import diagnose

    try:
        report = diagnose(read_log(log, "diagnosing the failed task's server log"),
                          read_recorded(json_object(RunDir(run_dir).manifest)).profile)
    except NinferkitError as exc:
        return f"the server log {log} could not be diagnosed: {exc}"
    errors = report.get("errors") or []
    first = errors[0] if errors else None
    detail = f"; {first['code']}: {first['evidence']} (fix: {first['fix']})" if first else ""
    return f"{report['verdict']}{detail} [{log}]"


def whole_lines(data: bytes) -> tuple[list[str], int]:
    """A log's new bytes as its whole, non-blank lines and how many bytes they took (a part line waits for its
    end): how `fleet collect` relays a task's log, read from a shared folder or over SFTP."""
    whole = data[: data.rfind(b"\n") + 1]
    return [line for line in whole.decode(errors="replace").splitlines() if line.strip()], len(whole)


def line_printer(host: str) -> Callable[[str], None]:
    """Progress lines prefixed by their host, flushed at once (a batch log or an SSH stream reads them live)."""
    def say(line: str) -> None:
        sys.stdout.write(f"[{host}] {line}\n")
        sys.stdout.flush()
    return say


def summary(status: TaskStatus | None, task: Task) -> dict[str, Any]:
    """A task's state as `fleet status` shows it."""
    if status is None:
        return {"task": task.index, "host": task.host, "profile": task.profile_name, "state": "pending"}
    shown = {"task": task.index, "host": task.host, "profile": task.profile_name, "state": status.state}
    for key in ("node", "step", "reason", "diagnosis", "log", "notebook", "run_dir"):
        value = getattr(status, key)
        if value is not None:
            shown[key] = value
    return shown
