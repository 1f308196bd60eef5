"""Server lifecycle: start the engine from a profile, wait until ready, check it, stop it for sure.

The server runs in its own process group (its own session), so it outlives the notebook kernel that
started it; `server.json` in the run directory is how later steps, and the runner's final stop, find
it. `server.json` is written as soon as the process exists, so even a launch that fails midway can be
stopped. Stop is graceful (SIGTERM to the group, then SIGKILL after a grace period) and verified.

Process ids are reused, so server.json also records who the process is (its start time since boot,
the boot, its executable): stop signals a group only while its leader is still that process (same
start time in the same boot; a wrapper script may exec the engine, so the executable is for the
message) or the leader is gone and its group lives on; a stale record signals nothing. Readiness is asked of
the process that was started: it must be alive, and (natively) hold the socket listening on its
port, so an engine that binds late is never mistaken for another program answering there: it fails
to bind and is diagnosed as a port clash.
"""

from __future__ import annotations

import enum
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from pydantic import ValidationError

from ninferkit import bounded
from ninferkit.artifact.paths import model_path, planned_path
from ninferkit.engines import get_adapter
from ninferkit.engines.api_dialect import ApiDialect
from ninferkit.engines.base import EngineAdapter
from ninferkit.engines.docker import container_name, docker_argv
from ninferkit.engines.launcher import Launcher
from ninferkit.errors import (
    BadInput,
    NinferkitError,
    ReadinessTimeout,
    ServerError,
    ServerExited,
    ServerStartError,
)
from ninferkit.params.profile import Profile
from ninferkit.plain_output import child_env
from ninferkit.progress import track
from ninferkit.redaction import remember_env, scrub
from ninferkit.rundir.hashing import sha256_file
from ninferkit.rundir.records import AcceptanceCheck, ServerRecord
from ninferkit.rundir.runs import (
    Run,
    RunDir,
    earlier_logs,
    open_for_write,
    read_json,
    utc_now,
    write_record,
    write_text_atomic,
)
from ninferkit.transports import proxy_note, uses_proxy

STOP_GRACE_S = 10.0

_children: dict[int, subprocess.Popen[bytes]] = {}
"""Servers this process started, kept so they can be reaped (no zombies, no ResourceWarning)."""


class ServerState(enum.StrEnum):
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    STOPPED = "stopped"


@dataclass
class Check:
    """One acceptance check: what was asked, whether it passed, and what came back."""

    name: str
    ok: bool
    detail: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def base_url(profile: Profile) -> str:
    host = profile.serve.host
    connect = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)  # every interface: reach it on loopback
    return f"http://{f'[{connect}]' if ':' in connect else connect}:{profile.serve.port}"


def api_key(profile: Profile) -> str | None:
    """The API key from the environment variable the profile names; never stored anywhere."""
    return env_key(profile.serve.api_key_env, "serve.api_key_env")


def env_key(name: str | None, named_by: str) -> str | None:
    """The key held by environment variable `name` (None when no variable is named); `named_by` is where the
    name came from (a profile field, `--api-key-env`), for the error when the variable is not set."""
    if name is None:
        return None
    value = remember_env(name)  # whatever this process stores is scrubbed of it
    if not value:
        raise NinferkitError(f"{named_by} names {name}, but it is not set; export {name}=<key> first")
    return value


def auth_headers(profile: Profile) -> dict[str, str]:
    return bearer(api_key(profile))


def bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def start(run: Run, progress: bool = True) -> ServerRecord:
    """Stop a server this run left behind, start a fresh one on the run's model, check it, write server.json.

    In Docker mode the Dockerfile and the boot-time power-limit unit are written to run_dir/docker/
    first, so the deployment can be reproduced by hand from the run directory.
    """
    stop(run.dir)
    if run.profile.serve.docker:
        for name, text in get_adapter(run.profile.engine.kind).docker_files(run.profile).items():
            write_text_atomic(run.dir.docker / name, text)
    return launch(run, model_path(run.profile), progress=progress)


def launch(run: Run, model_path: Path, progress: bool = True) -> ServerRecord:
    """Start the server, wait for readiness, run the acceptance checks; return the record server.json holds.

    Raises ServerStartError (with a diagnosis from the log) when the process exits during startup,
    ReadinessTimeout when it never becomes ready, ServerError when an acceptance check fails. The
    server is stopped before any of these is raised.
    """
    profile = run.profile
    adapter = get_adapter(profile.engine.kind)
    api_key(profile)  # fail before starting anything when the key's variable is missing
    binary = None if profile.serve.docker else adapter.binary(profile)
    argv = command(profile, adapter, model_path, binary)
    log_path = run.dir.server_log
    url = base_url(profile)
    keep_earlier_log(log_path)
    with open_for_write(log_path) as log:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, env=child_env(adapter.env(profile)),
        )
    _children[process.pid] = process
    record = ServerRecord(
        schema_version=ServerRecord.SCHEMA_VERSION,
        state=ServerState.STARTING.value,
        engine=profile.engine.kind,
        argv=adapter.redact(argv),
        pid=process.pid,
        pgid=process.pid,
        process=process_identity(process.pid),
        container=container_name(profile) if profile.serve.docker else None,
        url=url,
        log=str(log_path),
        started=utc_now(),
        profile_hash=run.profile_hash,
        # The binary's hash pins the engine in the write-up's recipe (a rebuilt binary is a new engine).
        binary=str(binary) if binary else None,
        binary_sha256=sha256_file(binary).hexdigest if binary else None,
    )
    write_record(run.dir.server, record)
    started = time.monotonic()
    try:
        _wait_ready(process, adapter, profile, url, log_path, argv, progress)
        record.ready_s = round(time.monotonic() - started, 3)
        record.ledger = adapter.parse_ledger(bounded.read_log(log_path, "reading the startup ledger"))
        checks = acceptance_checks(profile, adapter, url)
        record.checks = recorded_checks(checks)
        record.model_id = served_model_id(profile, checks[1].detail.get("ids"))
        failed = [check.name for check in checks if not check.ok]
        if failed:
            raise ServerError(f"acceptance checks failed: {', '.join(failed)}", argv=adapter.redact(argv), url=url,
                              log_path=log_path)
    except BaseException as exc:
        record.state = ServerState.FAILED.value
        record.error = str(exc)
        write_record(run.dir.server, record)
        stop(run.dir)
        raise
    record.state = ServerState.READY.value
    write_record(run.dir.server, record)
    return record


def keep_earlier_log(path: Path) -> Path | None:
    """An earlier launch's log, kept beside the new one as `server.N.log` (N counting up) rather than overwritten:
    the rows that launch answered are joined to its record (sweeps/truth.py), and the sweeps step launches the run's
    server again after its variants. Returns where it went; None when there was none."""
    if not path.is_file() or path.is_symlink() or path.stat().st_size == 0:
        return None
    earlier = earlier_logs(path)
    kept = path.with_name(f"{path.stem}.{int(earlier[-1].suffixes[-2][1:]) + 1 if earlier else 1}{path.suffix}")
    os.replace(path, kept)
    _scrub_log(kept)  # a server that died is never stopped, so its log was never scrubbed
    return kept


def attach(run: Run, url: str, signs: dict[str, list[str]], given: bool, version: str | None,
           log: Path | None = None, pool: dict[str, Any] | None = None) -> ServerRecord:
    """Take a server someone else started as the run's server (`--url`): run the acceptance checks against it
    and write server.json marked external, with the answers that named its engine. Nothing is started, and
    `stop` never signals it. `log` is the server's own log, where the user has it: the sweeps then read the
    engine's request record and the capacity step its ledger from it. `pool` is the KV pool the server reports
    of itself (the capacity step's observation where no log is given).

    Raises ServerError when an acceptance check fails (server.json says which, state failed).
    """
    profile = run.profile
    adapter = get_adapter(profile.engine.kind)
    record = ServerRecord(
        schema_version=ServerRecord.SCHEMA_VERSION,
        state=ServerState.STARTING.value,
        engine=profile.engine.kind,
        external=True,
        engine_signs=signs,
        engine_given=given,
        engine_version=version,
        served_pool=pool,
        url=url,
        log=str(log) if log is not None else None,
        started=utc_now(),
        profile_hash=run.profile_hash,
    )
    checks = acceptance_checks(profile, adapter, url)
    record.checks = recorded_checks(checks)
    if log is not None:
        record.ledger = adapter.parse_ledger(bounded.read_log(log, "reading the server's log for its ledger"))
    failed = [check.name for check in checks if not check.ok]
    if failed:
        record.state = ServerState.FAILED.value
        record.error = f"acceptance checks failed: {', '.join(failed)}"
        write_record(run.dir.server, record)
        raise ServerError(f"{url}: acceptance checks failed: {', '.join(failed)} (see {run.dir.server})", url=url)
    record.model_id = served_model_id(profile, checks[1].detail.get("ids"))
    record.state = ServerState.READY.value
    write_record(run.dir.server, record)
    return record


def _wait_ready(process: subprocess.Popen[bytes], adapter: EngineAdapter, profile: Profile, url: str,
                log_path: Path, argv: list[str], progress: bool) -> None:
    timeout = profile.serve.startup_timeout_s
    deadline = time.monotonic() + timeout
    headers = auth_headers(profile)
    impostor = False  # the port answered ready, but from a program other than the one started
    with httpx.Client(timeout=2.0, headers=headers, trust_env=uses_proxy(url)) as client, \
            track(f"waiting for {url}{adapter.health_path}", enabled=progress) as shown:
        while True:
            code = process.poll()
            if code is not None:
                raise _start_error(ServerStartError, "the server exited during startup", adapter, argv, url,
                                   log_path, code)
            try:
                status, body = bounded.get(client, url + adapter.health_path, deadline_s=2.0)
                if not body.cut and adapter.is_ready(status, body.text()):
                    # Docker publishes the port from its own proxy; `docker run` fails when the port is taken
                    if profile.serve.docker or _listens(process.pid, profile.serve.port):
                        return
                    impostor = True
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                clash = (f"; port {profile.serve.port} answers, but from another program, not the server this "
                         "launch started: a port clash (stop that program or pick another serve.port)"
                         if impostor else "")
                raise _start_error(ReadinessTimeout, f"the server did not become ready within {timeout:.0f} s "
                                   "(raise serve.startup_timeout_s for a large model or a slow disk)" + clash
                                   + proxy_note(url),
                                   adapter, argv, url, log_path, None)
            shown.note(_last_line(log_path))
            time.sleep(0.2)


def _start_error(kind: type[ServerError], message: str, adapter: EngineAdapter, argv: list[str], url: str,
                 log_path: Path, exit_code: int | None) -> ServerError:
    log_text = bounded.read_log(log_path, "diagnosing the failed start")
    diagnosis = adapter.diagnose(log_text)
    tail = "\n".join(log_text.splitlines()[-15:])
    if exit_code is not None:
        message += f" (exit code {exit_code})"
    return kind(message, argv=adapter.redact(argv), url=url, exit_code=exit_code, log_path=log_path,
                log_tail=tail, diagnosis=diagnosis)


def _listens(pgid: int, port: int) -> bool:
    """A process of group `pgid` holds a TCP socket (IPv4 or IPv6) listening on `port` (psutil's view of each
    process's sockets: on Linux its descriptors joined to /proc/net/tcp{,6})."""
    for pid in _group_pids(pgid):
        try:
            sockets = psutil.Process(pid).net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if any(s.status == psutil.CONN_LISTEN and s.laddr and s.laddr.port == port for s in sockets):
            return True
    return False


def process_identity(pid: int) -> dict[str, Any] | None:
    """Who process `pid` is, beyond its reusable number: start time (clock ticks after boot), the boot
    it started in, its executable and the machine it runs on; None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        exe = os.readlink(f"/proc/{pid}/exe")
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except (OSError, IndexError):
        return None
    return {"start_ticks": int(fields[19]), "boot_id": boot, "exe": exe, "host": socket.gethostname()}


def elsewhere(record: ServerRecord) -> str | None:
    """Why this machine cannot act on the record's process: it was started on another one (a fleet task's run
    directory read from a login node or another task's node, over shared storage). Its pid means nothing here,
    so it is neither signalled nor marked stopped; None when it started here, or the record predates the host
    field."""
    started_on = (record.process or {}).get("host")
    here = socket.gethostname()
    if record.external or started_on is None or started_on == here:
        return None
    return (f"the server of this run was started on {started_on}, not on this machine ({here}): nothing was "
            f"signalled and server.json is unchanged; stop it there (`ninferkit stop RUN_DIR` on {started_on}, "
            "or end the Slurm job that runs it)")


def release_elsewhere(run_dir: RunDir, note: str) -> str | None:
    """Mark stopped, signalling nothing, a record of a server started on another host whose attempt is known to be
    over (a fleet task resumed on another node once `fleet status` found its first attempt gone: its node died with
    its watchdog, so the record still says ready). Without this the resumed launch, which stops the run's server
    first, would refuse to act on the other host's record. The host it names, or None when there is nothing to
    release (no record, stopped, started here)."""
    record = read_record(run_dir)
    if record is None or record.state == ServerState.STOPPED.value or elsewhere(record) is None:
        return None
    started_on = str((record.process or {}).get("host"))
    record.state, record.stopped = ServerState.STOPPED.value, utc_now()
    record.stop_note = f"{note}; it was started on {started_on}, and nothing was signalled from {socket.gethostname()}"
    write_record(run_dir.server, record)
    return started_on


def _last_line(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - 400))
            lines = handle.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""


def served_model_id(profile: Profile, listed: list[str] | None) -> str:
    """The model id requests name: the profile's, else the first the server lists (NInfer serves the
    artifact's identity when the command line names none, as the field reports run it)."""
    if profile.serve.model_id is not None:
        return profile.serve.model_id
    if not listed:
        raise ServerError("serve.model_id is not set and the server lists no model at /v1/models; "
                          "set serve.model_id to the id the engine serves")
    return listed[0]


def record_model_id(record: ServerRecord, profile: Profile) -> str:
    """The model id a launched server's requests name (server.json; older records: the profile's)."""
    return record.model_id or served_model_id(profile, None)


def acceptance_checks(profile: Profile, adapter: EngineAdapter, url: str) -> list[Check]:
    """/health, /v1/models (and the context it reports), and one short chat request with usage."""
    checks: list[Check] = []
    with httpx.Client(base_url=url, timeout=60.0, headers=auth_headers(profile), trust_env=uses_proxy(url)) as client:
        checks.append(_check("health", lambda: _get_health(client, adapter.health_path)))
        models = _check("models", lambda: adapter.models_check(_get_json(client, "/v1/models"), profile))
        checks.append(models)
        model = served_model_id(profile, models.detail.get("ids"))
        checks.append(chat_check(client, adapter, model))
    return checks


def chat_check(client: httpx.Client, adapter: ApiDialect, model: str) -> Check:
    """One short chat request with usage: does the server serve the model (the acceptance checks, `diagnose --url`)."""
    chat = {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8,
            "temperature": 0}
    return _check("chat", lambda: adapter.chat_check(_post_json(client, "/v1/chat/completions", chat)))


def passed_checks(record: ServerRecord) -> bool:
    """The acceptance checks of a launch record ran and all passed (they served a real request),
    whether or not the server has been stopped since."""
    return bool(record.checks) and all(check.ok for check in record.checks)


def recorded_checks(checks: list[Check]) -> list[AcceptanceCheck]:
    """The checks as server.json holds them."""
    return [AcceptanceCheck.model_validate(asdict(check)) for check in checks]


def _check(name: str, call: Any) -> Check:
    started = time.perf_counter()
    try:
        detail = call()
        ok = bool(detail.pop("ok", True))
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        detail, ok = {"error": f"{type(exc).__name__}: {exc}"}, False
    return Check(name, ok, detail, round(time.perf_counter() - started, 4))


def _get_health(client: httpx.Client, path: str) -> dict[str, Any]:
    """A 200 is health; its body is kept where it is JSON (llama-server, NInfer) and noted where it is empty
    (vLLM 0.26.0 answers /health with 200 and no body, seen on the H200)."""
    status, body = bounded.get(client, path)
    _answered(path, status, body)
    return _json_of(body) if body.data.strip() else {"status_code": status, "body": "empty"}


def _get_json(client: httpx.Client, path: str) -> dict[str, Any]:
    status, body = bounded.get(client, path)
    _answered(path, status, body)
    return _json_of(body)


def _post_json(client: httpx.Client, path: str, payload: dict[str, Any]) -> dict[str, Any]:
    with client.stream("POST", path, json=payload) as response:
        status, body = response.status_code, bounded.read_body(response, bounded.ANSWER_BYTES, 60.0)
    _answered(path, status, body)
    return _json_of(body)


def _json_of(body: bounded.Body) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(body.data)
    return found


def _answered(path: str, status: int, body: bounded.Body) -> None:
    """ValueError (a failed check that says why) for an error status or an answer cut at its cap."""
    if status >= 400:
        raise ValueError(f"{path} answered HTTP {status}: {scrub(body.text()[:300])}")
    if body.cut:
        raise ValueError(f"{path}: the answer was {body.cut}")


def command(profile: Profile, adapter: Launcher, model_path: Path, binary: Path | None) -> list[str]:
    """The server's argv: native with the given binary, or wrapped in `docker run` when the profile says so."""
    if profile.serve.docker:
        return docker_argv(profile, adapter, model_path)
    assert binary is not None
    return adapter.argv(profile, model_path, binary)


def planned_argv(profile: Profile) -> list[str]:
    """The argv a launch would run, without building, generating or downloading anything (--dry-run)."""

    adapter = get_adapter(profile.engine.kind)
    binary = Path(profile.engine.binary or adapter.default_binary)
    return adapter.redact(command(profile, adapter, planned_path(profile), binary))


def read_record(run_dir: RunDir) -> ServerRecord | None:
    """server.json of a run (None when there is none); BadInput when it is not a record a launch wrote."""
    if not run_dir.server.exists():
        return None
    found = read_json(run_dir.server)
    if isinstance(found, dict) and found.get("external") is True and isinstance(found.get("url"), str) \
            and "state" in found:
        return _validated(run_dir, found)  # nothing of it is signalled; its log is the user's own file, only read
    if not isinstance(found, dict) or not all(isinstance(found.get(key), int) and found[key] > 1
                                               for key in ("pid", "pgid")) or "state" not in found:
        raise BadInput(f"{run_dir.server} is not a server record written by ninferkit launch (it needs a state, "
                       "a pid and a pgid); nothing was signalled. Restore it, or stop the server by hand")
    record = _validated(run_dir, found)
    record.log = str(run_dir.server_log)  # the run's own log, whatever the file says (it may be stale or sent)
    return record


def _validated(run_dir: RunDir, found: dict[str, Any]) -> ServerRecord:
    try:
        return ServerRecord.model_validate(found)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise BadInput(f"{run_dir.server} is not a server record written by ninferkit ({first['msg']} at "
                       f"{'.'.join(map(str, first['loc']))}); nothing was signalled. Restore it, or stop the server "
                       "by hand") from exc


def stale_reason(record: ServerRecord) -> str | None:
    """Why signalling the record's process group could hit another program (None: it is still the
    server that was started, or nothing of it is left)."""
    if record.state == ServerState.STOPPED.value or record.external:
        return None
    pgid = _pgid(record)
    recorded = record.process
    if recorded is None:
        return (f"server.json records process group {pgid} but not who its process was (start time, "
                "executable): nothing was signalled; check `ps -g " + str(pgid) + "` and stop it by hand")
    now = process_identity(pgid)
    if now is None or all(now[key] == recorded.get(key) for key in ("start_ticks", "boot_id")):
        return None  # gone (its group is checked by the caller), or the same process, even if it exec'd a binary
    return (f"the server this run started (pid {pgid}, {recorded.get('exe')}) is gone: pid {pgid} now belongs to "
            f"another program ({now.get('exe')}, started later). server.json is stale; nothing was signalled")


def stop(run_dir: RunDir, grace_s: float = STOP_GRACE_S) -> bool:
    """Stop the server a run started (idempotent); True when a live server was stopped.

    Nothing is signalled when server.json is stale (`stale_reason`): its state becomes stopped with the
    reason. Raises BadInput for a server.json a launch did not write, ServerError when the server was started on
    another machine (`elsewhere`) or a process of the group survives SIGKILL.
    """
    record = read_record(run_dir)
    if record is None or record.external:
        return False  # an external server is someone else's: never signalled
    away = elsewhere(record)
    if away is not None and record.state != ServerState.STOPPED.value:
        raise ServerError(away)
    pgid = _pgid(record)
    _reap(pgid)
    if record.state == ServerState.STOPPED.value:
        return False
    stale = stale_reason(record)
    if stale is not None:
        record.state, record.stopped, record.stop_note = ServerState.STOPPED.value, utc_now(), stale
        write_record(run_dir.server, record)
        return False
    was_alive = _group_alive(pgid)
    if record.container:
        subprocess.run(["docker", "stop", "-t", str(int(grace_s)), record.container], capture_output=True)
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _group_alive(pgid) and time.monotonic() < deadline:
        _reap(pgid)
        time.sleep(0.05)
    if _group_alive(pgid):
        _signal_group(pgid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while _group_alive(pgid) and time.monotonic() < deadline:
            _reap(pgid)
            time.sleep(0.05)
    if _group_alive(pgid):
        raise ServerError(f"process group {pgid} survived SIGKILL; check `ps -g {pgid}` and kill it by hand")
    _reap(pgid, wait=True)
    record.state = ServerState.STOPPED.value
    record.stopped = utc_now()
    write_record(run_dir.server, record)
    _scrub_log(run_dir.server_log)  # the run's own log: never the path server.json names (it may be stale or sent)
    return was_alive


def _pgid(record: ServerRecord) -> int:
    """The process group of a launched server's record (read_record checked that it has one)."""
    assert record.pgid is not None
    return record.pgid


def _scrub_log(path: Path) -> None:
    """Rewrite a stopped server's log without the secrets this process knows, if it printed one (the
    engines here print none: llama-server shows a key's last 4 characters, NInfer redacts its argv)."""
    try:
        data = path.read_bytes()
    except OSError:
        return
    text = data.decode(errors="replace")
    scrubbed = scrub(text)
    if scrubbed != text:
        write_text_atomic(path, scrubbed)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _reap(pid: int, wait: bool = False) -> None:
    """Collect our own exited child, so it does not linger as a zombie; `wait` once the group is
    known to be gone (it may still be between its last instruction and becoming a zombie)."""
    process = _children.get(pid)
    if process is None:
        return
    if wait:
        process.wait(timeout=STOP_GRACE_S)
    if process.poll() is not None:
        del _children[pid]


def _group_alive(pgid: int) -> bool:
    """Any non-zombie process whose process group is pgid."""
    return bool(_group_pids(pgid))


def _group_pids(pgid: int) -> list[int]:
    """The non-zombie processes of group `pgid`: psutil's process list, each one's group from os.getpgid (psutil
    has no process group); a process that ends meanwhile is left out."""
    found = []
    for process in psutil.process_iter(["status"]):
        if process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if os.getpgid(process.pid) == pgid:
                found.append(process.pid)
        except ProcessLookupError:
            continue
    return found


def ensure_running(run_dir: RunDir) -> ServerRecord:
    """The ready server of a run, for steps after launch; a clear error when there is none."""
    record = read_record(run_dir)
    if record is None:
        raise ServerError(f"no server.json in {run_dir.path}; run the launch step (02_launch) first")
    if record.external:
        return _answering(record, run_dir)
    away = elsewhere(record)
    if away is not None:
        raise ServerError(away.replace("stop it there", "run this step there"))
    alive = stale_reason(record) is None and _group_alive(_pgid(record))
    if record.state != ServerState.READY.value or not alive:
        raise ServerExited(f"the server of this run is not running (state: {record.state}); "
                           "re-run the launch step (02_launch)", url=record.url or "",
                           log_path=run_dir.server_log)
    return record


def confirm_running(run_dir: RunDir, grace_s: float = STOP_GRACE_S) -> ServerRecord:
    """`ensure_running`, for after a request broke off without the server's answer (a stream cut mid-way, a
    connection reset): a server killed mid-request closes its sockets before its process has ended, so the
    process check alone can still find it alive and the death was blamed on the next cell (issue 29). A server
    that refuses connections at its URL is given `grace_s` to end; ServerExited once it has, or when it still
    refuses after that."""
    record = ensure_running(run_dir)
    deadline = time.monotonic() + grace_s
    while not _accepts(str(record.url)):
        if time.monotonic() > deadline:
            raise ServerExited(f"the server of this run refuses connections at {record.url} although its process "
                               f"is still there after {grace_s:g} s; re-run the launch step (02_launch)",
                               url=str(record.url), log_path=run_dir.server_log)
        time.sleep(0.1)
        record = ensure_running(run_dir)
    return record


def _accepts(url: str) -> bool:
    """Whether `url`'s host and port accept a TCP connection; a refusal is the only answer that says no (a slow
    accept under load is not evidence of a death)."""
    parsed = httpx.URL(url)
    try:
        with socket.create_connection((parsed.host, parsed.port or 80), timeout=2.0):
            return True
    except ConnectionRefusedError:
        return False
    except OSError:
        return True


def _answering(record: ServerRecord, run_dir: RunDir) -> ServerRecord:
    """An external server's record while it answers its health path (it is someone else's: whether it runs is
    asked of it, not of a process); ServerExited when it does not."""
    url = str(record.url)
    adapter = get_adapter(str(record.engine))
    if record.state == ServerState.READY.value:
        try:
            with httpx.Client(timeout=10.0, trust_env=uses_proxy(url)) as client:
                status, _ = bounded.get(client, url + adapter.health_path, deadline_s=10.0)
            if status < 500:
                return record
        except httpx.TransportError:
            pass
    raise ServerExited(f"the server at {url} (not started by ninferkit) does not answer {adapter.health_path} "
                       f"(state: {record.state}); start it again, or check its address", url=url,
                       log_path=Path(record.log) if record.log else None)
