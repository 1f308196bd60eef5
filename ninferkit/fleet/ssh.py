"""SSH, for labs without a scheduler: each host's tasks run in the background there, followed from here.

Through asyncssh (a maintained asyncio SSH library: keys from a file, the host's key checked against a
known_hosts file, SFTP for the files). `start` copies the task table and the tasks' profiles into the host's
state folder (`<run_root>/.fleet-<fleet>/`) and starts each task not yet finished there as `setsid nohup
python -m ninferkit fleet task ...`, its output appended to its log: the task belongs to no SSH session, so a
dropped connection (or this machine going away) does not stop it. A task the host says is running, with its
process alive, is left alone; any other unfinished one starts again and resumes its run directory.

`follow` reconnects as often as it must: it reads each task's log from where it stopped (the lines carry their
host: the task prints them so), and when a task has ended copies its run directory, log and status back under
the local state folder (`runs/<host>/`, `logs/`, `status/`). A task whose process is gone without a status
died with its host: it is marked failed with its log's last lines, and its partial run directory comes back.

The commands run on the host are the one shell line SSH runs, joined from argv parts by `shlex.join`; the
parts are the fleet file's validated paths and the task's index.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from ninferkit.errors import NinferkitError
from ninferkit.fleet.spec import Host, LoadedFleet
from ninferkit.fleet.tasks import StateDir, Task, TaskStatus, pending, whole_lines

ENDED = ("ok", "failed", "interrupted")
RECONNECT_S = 2.0


class SshError(NinferkitError):
    """A host could not be reached or refused a command; the message names the host and what it said."""


def remote_state(fleet: LoadedFleet, host: Host) -> PurePosixPath:
    return PurePosixPath(host.run_root) / f".fleet-{fleet.spec.name}"


async def _connect(host: Host) -> Any:
    import asyncssh

    assert host.ssh is not None  # spec: via ssh has its section
    target = host.ssh
    try:
        return await asyncssh.connect(target.address, port=target.port, username=target.user,
                                      client_keys=[str(Path(target.identity_file).expanduser())],
                                      known_hosts=str(Path(target.known_hosts).expanduser()),
                                      agent_path=None, connect_timeout=20)
    except (OSError, asyncssh.Error) as exc:
        raise SshError(f"host {host.name}: cannot connect to {target.user}@{target.address}:{target.port}: "
                       f"{exc}") from None


async def _run(connection: Any, host: Host, argv: Sequence[str]) -> str:
    done = await connection.run(shlex.join(argv), check=False)
    if done.exit_status != 0:
        raise SshError(f"host {host.name}: `{shlex.join(argv)}` exited {done.exit_status}: "
                       f"{str(done.stderr).strip()[-800:]}")
    return str(done.stdout)


async def _remote_status(sftp: Any, folder: PurePosixPath, index: int) -> TaskStatus | None:
    import asyncssh

    try:
        async with sftp.open(str(folder / "status" / f"task-{index}.json")) as handle:
            return TaskStatus.model_validate(json.loads(await handle.read()))
    except (asyncssh.SFTPNoSuchFile, json.JSONDecodeError):
        return None  # not written yet (an atomic write never shows half a file)


async def _write_status(sftp: Any, folder: PurePosixPath, status: TaskStatus) -> None:
    """Replace a task's status on the host whole (written beside it, then renamed over it)."""
    path = folder / "status" / f"task-{status.index}.json"
    partial = path.with_name(path.name + ".partial")
    async with sftp.open(str(partial), "w") as handle:
        await handle.write(json.dumps(status.model_dump(mode="json", exclude_none=True)))
    await sftp.posix_rename(str(partial), str(path))


async def _alive(connection: Any, pid: int | None) -> bool:
    if pid is None:
        return False
    done = await connection.run(shlex.join(["kill", "-0", str(pid)]), check=False)
    return bool(done.exit_status == 0)


async def _start_host(fleet: LoadedFleet, host: Host, tasks: Sequence[Task], say: Callable[[str], None]) -> None:
    assert host.ssh is not None
    state = StateDir(fleet.state_dir)
    folder = remote_state(fleet, host)
    async with await _connect(host) as connection:
        await _run(connection, host, ["mkdir", "-p", str(folder / "profiles"), str(folder / "logs"),
                                      str(folder / "status")])
        async with connection.start_sftp_client() as sftp:
            await sftp.put(str(state.tasks), str(folder / "tasks.json"))
            for task in tasks:
                await sftp.put(str(state.path / task.profile_file), str(folder / task.profile_file))
            for task in tasks:
                status = await _remote_status(sftp, folder, task.index)
                if status is not None and status.state == "ok":
                    say(f"[{host.name}] task {task.index} ({task.profile_name}) already finished there")
                    continue
                if status is not None and status.state == "running" and await _alive(connection, status.pid):
                    say(f"[{host.name}] task {task.index} is running there (pid {status.pid}); following it")
                    continue
                await _write_status(sftp, folder, pending(status, task, f"started over SSH on {host.name}"))
                python = str(PurePosixPath(host.ssh.checkout) / host.ssh.python)
                log = str(folder / "logs" / f"task-{task.index}.log")
                command = [python, "-m", "ninferkit", "fleet", "task", str(folder), str(task.index)]
                # in ( ): the & takes only the task, whose output is its log, so the session closes at once
                line = (f"cd {shlex.quote(host.ssh.checkout)} && (NINFERKIT_PROGRESS=lines setsid nohup "
                        f"{shlex.join(command)} >> {shlex.quote(log)} 2>&1 < /dev/null & echo $!)")
                done = await connection.run(line, check=False)
                if done.exit_status != 0:
                    raise SshError(f"host {host.name}: starting task {task.index} failed: {str(done.stderr)[-800:]}")
                say(f"[{host.name}] task {task.index} ({task.profile_name}) started, pid {str(done.stdout).strip()}")


def start(fleet: LoadedFleet, tasks: Sequence[Task], say: Callable[[str], None] = print) -> None:
    """Start every SSH host's unfinished tasks (hosts in parallel)."""
    hosts = _ssh_hosts(fleet, tasks)
    asyncio.run(_each(hosts, lambda host, mine: _start_host(fleet, host, mine, say)))


def _ssh_hosts(fleet: LoadedFleet, tasks: Sequence[Task]) -> list[tuple[Host, list[Task]]]:
    out = []
    for host in fleet.spec.hosts:
        mine = [task for task in tasks if task.host == host.name and task.via == "ssh"]
        if mine:
            out.append((host, mine))
    return out


async def _each(hosts: list[tuple[Host, list[Task]]], work: Callable[[Host, list[Task]], Any]) -> None:
    results = await asyncio.gather(*(work(host, mine) for host, mine in hosts), return_exceptions=True)
    failures = [str(result) for result in results if isinstance(result, BaseException)]
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, NinferkitError):
            raise result
    if failures:
        raise SshError("\n".join(failures))


async def _follow_host(fleet: LoadedFleet, host: Host, tasks: list[Task], say: Callable[[str], None],
                       deadline: float, stream: bool) -> None:
    state = StateDir(fleet.state_dir)
    folder = remote_state(fleet, host)
    offsets = {task.index: 0 for task in tasks} if stream else {}
    waiting = {task.index: task for task in tasks}
    while waiting:
        if time.monotonic() > deadline:
            raise SshError(f"host {host.name}: tasks {sorted(waiting)} had not ended by the deadline")
        try:
            async with await _connect(host) as connection, connection.start_sftp_client() as sftp:
                while waiting:
                    for index, task in list(waiting.items()):
                        if stream:
                            offsets[index] = await _relay(sftp, folder / "logs" / f"task-{index}.log", offsets[index],
                                                          say)
                        status = await _remote_status(sftp, folder, index)
                        ended = status is not None and status.state in ENDED
                        died = status is not None and status.state == "running" and not await _alive(
                            connection, status.pid)
                        if ended or died:
                            assert status is not None
                            await _bring_back(sftp, state, host, task, status, died, folder)
                            del waiting[index]
                    if time.monotonic() > deadline:
                        break
                    await asyncio.sleep(1.0)
        except (SshError, OSError) as exc:
            say(f"[{host.name}] connection lost ({exc}); reconnecting in {RECONNECT_S:.0f} s")
            await asyncio.sleep(RECONNECT_S)
        except Exception as exc:  # asyncssh's own errors (a connection closed by the host) have no common base
            import asyncssh

            if not isinstance(exc, asyncssh.Error):
                raise
            say(f"[{host.name}] connection lost ({exc}); reconnecting in {RECONNECT_S:.0f} s")
            await asyncio.sleep(RECONNECT_S)


async def _relay(sftp: Any, log: PurePosixPath, offset: int, say: Callable[[str], None]) -> int:
    """Print the log's whole lines from `offset` on; the new offset (a part line waits for its end)."""
    import asyncssh

    try:
        async with sftp.open(str(log), "rb") as handle:
            await handle.seek(offset)
            data: bytes = await handle.read()
    except asyncssh.SFTPNoSuchFile:
        return offset
    lines, used = whole_lines(data)
    for line in lines:
        say(line)
    return offset + used


async def _bring_back(sftp: Any, state: StateDir, host: Host, task: Task, status: TaskStatus, died: bool,
                      folder: PurePosixPath) -> None:
    """Copy the task's run directory, log and status here; a task that died gets a status that says so."""
    import asyncssh

    local_runs = state.collected / host.name
    local_runs.mkdir(parents=True, exist_ok=True)
    remote_run = status.run_dir or task.run_dir
    local_run = local_runs / PurePosixPath(remote_run).name
    try:
        await sftp.get(remote_run, str(local_runs), recurse=True, preserve=True)
    except asyncssh.SFTPNoSuchFile:
        pass  # the task ended before its run directory existed (a refused profile): the status says why
    state.log(task.index).parent.mkdir(parents=True, exist_ok=True)
    try:
        await sftp.get(str(folder / "logs" / f"task-{task.index}.log"), str(state.log(task.index)))
    except asyncssh.SFTPNoSuchFile:
        pass
    update: dict[str, Any] = {"run_dir": str(local_run), "remote_run_dir": remote_run,
                              "log": str(state.log(task.index))}
    if died:
        from ninferkit.fleet.slurm import log_tail

        update |= {"state": "failed", "reason": f"process {status.pid} on {host.name} ended without a status "
                   f"(killed, or the host went down); the log ends:\n{log_tail(state.log(task.index))}"}
    state.write_status(status.model_copy(update=update))


def follow(fleet: LoadedFleet, tasks: Sequence[Task], say: Callable[[str], None] = print,
           timeout_s: float = 86_400.0, stream: bool = True) -> None:
    """Follow every SSH host's tasks to their end, streaming their lines (`stream`) and copying back their runs."""
    deadline = time.monotonic() + timeout_s
    hosts = _ssh_hosts(fleet, tasks)
    asyncio.run(_each(hosts, lambda host, mine: _follow_host(fleet, host, mine, say, deadline, stream)))


async def _statuses(fleet: LoadedFleet, host: Host, tasks: list[Task], into: dict[int, TaskStatus | None]) -> None:
    folder = remote_state(fleet, host)
    async with await _connect(host) as connection, connection.start_sftp_client() as sftp:
        for task in tasks:
            status = await _remote_status(sftp, folder, task.index)
            if status is not None and status.state == "running" and not await _alive(connection, status.pid):
                status = status.model_copy(update={"state": "failed", "reason": f"process {status.pid} ended "
                                                   "without a status (killed, or the host went down)"})
            into[task.index] = status


def statuses(fleet: LoadedFleet, tasks: Sequence[Task]) -> dict[int, TaskStatus | None]:
    """Each SSH task's status as its host has it now (None: not started there)."""
    found: dict[int, TaskStatus | None] = {}
    hosts = _ssh_hosts(fleet, tasks)
    asyncio.run(_each(hosts, lambda host, mine: _statuses(fleet, host, mine, found)))
    return found
