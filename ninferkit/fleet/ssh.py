"""SSH, for labs without a scheduler: each host's tasks run in the background there, followed from here.

Through asyncssh (a maintained asyncio SSH library: keys from a file, the host's key checked against a
known_hosts file, SFTP for the files). `start` copies the task table and the tasks' profiles into the host's
state folder (`<run_root>/.fleet-<fleet>/`) and starts each task not yet finished there through
`python -m ninferkit.fleet.start` on the host (`start.py`: checked and started under a lock, so two submits at
once start it once), in a session of its own, its output appended to its log: the task belongs to no SSH
session, so a dropped connection (or this machine going away) does not stop it. A task the host says is
running, with its process alive, is left alone; any other unfinished one starts again and resumes its run
directory.

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
from ninferkit.fleet.tasks import StateDir, Task, TaskStatus, whole_lines

ENDED = ("ok", "failed", "interrupted")
RECONNECT_S = 2.0
CONNECT_S = 10.0
"""How long reaching a host may take (TCP, key exchange, authentication): a host whose link is down answers
with this bound's reason, beside the others, instead of holding the fleet's status for a minute."""
HOST_S = 20.0
"""How long `fleet status` waits for one host's whole answer."""


def asyncssh_module() -> Any:
    """asyncssh, imported with the CryptographyDeprecationWarnings it triggers filtered (it names ciphers
    `cryptography` deprecates, which the fleet never negotiates): five of them on every fleet command read as
    a problem of the fleet's."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*", category=DeprecationWarning, module="asyncssh")
        warnings.filterwarnings("ignore", category=UserWarning, module="asyncssh")
        try:
            from cryptography.utils import CryptographyDeprecationWarning
        except ImportError:  # pragma: no cover (asyncssh requires cryptography)
            pass
        else:
            warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        import asyncssh
    return asyncssh


def reason_of(exc: BaseException, bound_s: float = CONNECT_S) -> str:
    """An exception in words, never empty (a timeout's own str() is)."""
    words = str(exc).strip()
    if words:
        return words
    if isinstance(exc, TimeoutError):
        return f"no answer in {bound_s:.0f} s (the host or its link is down)"
    return type(exc).__name__


class SshError(NinferkitError):
    """A host could not be reached or refused a command; the message names the host and what it said."""


def remote_state(fleet: LoadedFleet, host: Host) -> PurePosixPath:
    return PurePosixPath(host.run_root) / f".fleet-{fleet.spec.name}"


async def _connect(host: Host) -> Any:
    asyncssh = asyncssh_module()
    assert host.ssh is not None  # spec: via ssh has its section
    target = host.ssh
    try:
        return await asyncssh.connect(target.address, port=target.port, username=target.user,
                                      client_keys=[str(Path(target.identity_file).expanduser())],
                                      known_hosts=str(Path(target.known_hosts).expanduser()),
                                      agent_path=None, connect_timeout=CONNECT_S)
    except (TimeoutError, OSError, asyncssh.Error, ValueError) as exc:
        raise SshError(f"host {host.name}: cannot connect to {target.user}@{target.address}:{target.port}: "
                       f"{reason_of(exc)}") from None


async def _run(connection: Any, host: Host, argv: Sequence[str]) -> str:
    done = await connection.run(shlex.join(argv), check=False)
    if done.exit_status != 0:
        raise SshError(f"host {host.name}: `{shlex.join(argv)}` exited {done.exit_status}: "
                       f"{str(done.stderr).strip()[-800:]}")
    return str(done.stdout)


async def _remote_status(sftp: Any, folder: PurePosixPath, index: int) -> TaskStatus | None:
    asyncssh = asyncssh_module()

    try:
        async with sftp.open(str(folder / "status" / f"task-{index}.json")) as handle:
            return TaskStatus.model_validate(json.loads(await handle.read()))
    except (asyncssh.SFTPNoSuchFile, json.JSONDecodeError):
        return None  # not written yet (an atomic write never shows half a file)


async def _alive(connection: Any, pid: int | None) -> bool:
    if pid is None:
        return False
    done = await connection.run(shlex.join(["kill", "-0", str(pid)]), check=False)
    return bool(done.exit_status == 0)


async def _start_host(fleet: LoadedFleet, host: Host, tasks: Sequence[Task], say: Callable[[str], None]) -> None:
    """Start the host's unfinished tasks; SshError naming the host where it refuses (a full disk said as such)."""
    async with await _connect(host) as connection:
        try:
            await _start_tasks(connection, fleet, host, tasks, say)
        except SshError:
            raise
        except Exception as exc:  # asyncssh's own errors (an SFTP write refused) have no common base with ours
            if not isinstance(exc, asyncssh_module().Error):
                raise
            full = await _disk_full(connection, host)
            raise SshError(f"host {host.name}: starting its tasks failed: {reason_of(exc)}"
                           + (f"; {full}" if full else "")) from None


async def _start_tasks(connection: Any, fleet: LoadedFleet, host: Host, tasks: Sequence[Task],
                       say: Callable[[str], None]) -> None:
    assert host.ssh is not None
    state = StateDir(fleet.state_dir)
    folder = remote_state(fleet, host)
    await _run(connection, host, ["mkdir", "-p", str(folder / "profiles"), str(folder / "logs"),
                                  str(folder / "status")])
    async with connection.start_sftp_client() as sftp:
        await sftp.put(str(state.tasks), str(folder / "tasks.json"))
        for task in tasks:
            await sftp.put(str(state.path / task.profile_file), str(folder / task.profile_file))
    python = str(PurePosixPath(host.ssh.checkout) / host.ssh.python)
    for task in tasks:  # checked and started on the host under a lock: two submits at once start it once
        command = [python, "-m", "ninferkit.fleet.start", str(folder), str(task.index)]
        done = await connection.run(f"cd {shlex.quote(host.ssh.checkout)} && {shlex.join(command)}", check=False)
        said = str(done.stdout).strip()
        if done.exit_status != 0 or not said:
            raise SshError(f"host {host.name}: starting task {task.index} failed (exit {done.exit_status}): "
                           f"{str(done.stderr).strip()[-800:]}")
        if said == "finished":
            say(f"[{host.name}] task {task.index} ({task.profile_name}) already finished there")
        elif said.startswith("running "):
            say(f"[{host.name}] task {task.index} is running there (pid {said.split()[1]}); not started again")
        else:
            say(f"[{host.name}] task {task.index} ({task.profile_name}) started, pid {said.split()[-1]}")


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
                        if status is None:  # submit writes one before it starts a task: this one never started
                            say(f"[{host.name}] task {index} was never started there (no status); `fleet submit` "
                                "starts it")
                            del waiting[index]
                            continue
                        ended = status.state in ENDED
                        # pending: started by submit, its pid written just after (no pid: that write failed)
                        died = status.state in ("pending", "running") and not await _alive(connection, status.pid)
                        if ended or died:
                            await _bring_back(sftp, state, host, task, status,
                                              await _why_died(connection, host) if died else None, folder)
                            del waiting[index]
                    if time.monotonic() > deadline:
                        break
                    await asyncio.sleep(1.0)
        except (SshError, OSError) as exc:
            say(f"[{host.name}] connection lost ({reason_of(exc)}); reconnecting in {RECONNECT_S:.0f} s")
            await asyncio.sleep(RECONNECT_S)
        except Exception as exc:  # asyncssh's own errors (a connection closed by the host) have no common base
            asyncssh = asyncssh_module()

            if not isinstance(exc, asyncssh.Error):
                raise
            say(f"[{host.name}] connection lost ({reason_of(exc)}); reconnecting in {RECONNECT_S:.0f} s")
            await asyncio.sleep(RECONNECT_S)


async def _relay(sftp: Any, log: PurePosixPath, offset: int, say: Callable[[str], None]) -> int:
    """Print the log's whole lines from `offset` on; the new offset (a part line waits for its end)."""
    asyncssh = asyncssh_module()

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


async def _bring_back(sftp: Any, state: StateDir, host: Host, task: Task, status: TaskStatus, why_died: str | None,
                      folder: PurePosixPath) -> None:
    """Copy the task's run directory, log and status here; a task that died (`why_died`: the likely cause) gets
    a status that says so."""
    asyncssh = asyncssh_module()

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
    if why_died is not None:
        from ninferkit.fleet.slurm import log_tail

        update |= {"state": "failed", "reason": f"{_process(status)} on {host.name} ended without a status "
                   f"({why_died}); the log ends:\n{log_tail(state.log(task.index))}"}
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
            if status is not None and status.state in ("pending", "running") and not await _alive(connection,
                                                                                                  status.pid):
                status = status.model_copy(update={"state": "failed", "reason": f"{_process(status)} ended "
                                                   f"without a status ({await _why_died(connection, host)})"})
            into[task.index] = status


async def _bounded(host: Host, work: Any) -> str | None:
    """Run one host's work within HOST_S; None when it answered, else why not (its own reason)."""
    try:
        await asyncio.wait_for(work, HOST_S)
    except (TimeoutError, SshError, OSError) as exc:
        return str(exc) if isinstance(exc, SshError) else f"host {host.name}: {reason_of(exc, HOST_S)}"
    except Exception as exc:  # asyncssh's own errors have no common base with ours
        if not isinstance(exc, asyncssh_module().Error):
            raise
        return f"host {host.name}: {reason_of(exc)}"
    return None


def statuses(fleet: LoadedFleet, tasks: Sequence[Task]) -> tuple[dict[int, TaskStatus | None], dict[str, str]]:
    """Each SSH task's status as its host has it now (None: not started there), and, by host, why a host did
    not answer within its bound (the others' answers stand beside it)."""
    found: dict[int, TaskStatus | None] = {}
    hosts = _ssh_hosts(fleet, tasks)

    async def every() -> list[str | None]:
        return list(await asyncio.gather(*(_bounded(host, _statuses(fleet, host, mine, found))
                                           for host, mine in hosts)))

    answers = asyncio.run(every())
    return found, {host.name: why for (host, _), why in zip(hosts, answers, strict=True) if why is not None}


async def _why_died(connection: Any, host: Host) -> str:
    """Why a task's process may have ended unannounced: a full disk where its run and status are written (it
    could not write its end), else a signal it cannot catch, or the host going down."""
    full = await _disk_full(connection, host)
    return f"{full}: it could not write its end" if full else \
        "killed by a signal it cannot catch, or the host went down"


def _process(status: TaskStatus) -> str:
    return f"process {status.pid}" if status.pid is not None else "its process (pid never recorded)"


async def _disk_full(connection: Any, host: Host) -> str | None:
    """"the disk of RUN_ROOT on HOST is full (N KiB free)" when under 1 MiB is free there (df), else None."""
    done = await connection.run(shlex.join(["df", "-Pk", host.run_root]), check=False)
    lines = str(done.stdout).splitlines()
    if done.exit_status == 0 and len(lines) > 1:
        fields = lines[-1].split()
        if len(fields) >= 4 and fields[3].isdigit() and int(fields[3]) < 1024:
            return f"the disk of {host.run_root} on {host.name} is full ({fields[3]} KiB free)"
    return None


def check_hosts(fleet: LoadedFleet, tasks: Sequence[Task]) -> list[str]:
    """What would stop an SSH host's tasks, found before anything is submitted anywhere: its key and known_hosts
    files here, then (each host within HOST_S) reaching it with that key and host key, its checkout's Python,
    and the GPUs its gres asks for (as the task itself checks them, through NVML there)."""
    problems = []
    hosts = _ssh_hosts(fleet, tasks)
    reachable = []
    for host, mine in hosts:
        assert host.ssh is not None
        local = _local_files(host)
        problems += local
        if not local:
            reachable.append((host, mine))

    async def every() -> list[str | None]:
        return list(await asyncio.gather(*(_bounded(host, _check_host(host, problems)) for host, _ in reachable)))

    problems += [why for why in asyncio.run(every()) if why is not None]
    return problems


def _local_files(host: Host) -> list[str]:
    assert host.ssh is not None
    problems = []
    for field, value in (("identity_file", host.ssh.identity_file), ("known_hosts", host.ssh.known_hosts)):
        path = Path(value).expanduser()
        try:
            size = path.stat().st_size
            with path.open("rb"):
                pass
        except OSError as exc:
            problems.append(f"host {host.name}: ssh.{field} {path}: {exc.strerror or exc}")
            continue
        if size == 0:
            problems.append(f"host {host.name}: ssh.{field} {path} is empty"
                            + ("; add the host's key (ssh-keyscan, checked by hand)" if field == "known_hosts" else ""))
    return problems


async def _check_host(host: Host, problems: list[str]) -> None:
    assert host.ssh is not None
    python = str(PurePosixPath(host.ssh.checkout) / host.ssh.python)
    async with await _connect(host) as connection:
        done = await connection.run(shlex.join([python, "-c", "import ninferkit"]), check=False)
        if done.exit_status != 0:
            problems.append(f"host {host.name}: {python} cannot import ninferkit (exit {done.exit_status}): "
                            f"{str(done.stderr).strip()[-300:]}")
            return
        if host.gres is not None:
            probe = "import sys; from ninferkit.fleet.tasks import gres_missing; print(gres_missing(sys.argv[1]) or '')"
            done = await connection.run(shlex.join([python, "-c", probe, host.gres]), check=False)
            said = str(done.stdout).strip()
            if done.exit_status != 0 or said:
                problems.append(f"host {host.name}: {said or str(done.stderr).strip()[-300:]}")
