"""Capacity launches: start the server at one setting, keep what its log says, stop it.

Each launch gets its own run directory under run_dir/capacity/launches/ (its log stays there) and
a free loopback port. The first launch stops the runbook's own server: on a GPU its memory is not
free for the launches. Every launch is appended to run_dir/capacity/observations.jsonl as soon as
it ends, so a rerun reuses it instead of launching again.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ninferkit.bounded import read_log
from ninferkit.capacity.interval import Interval
from ninferkit.capacity.observations import Observation, Setting, from_log, from_log_file, with_served
from ninferkit.engines import get_adapter
from ninferkit.engines.pool import PoolRule
from ninferkit.errors import ServerError
from ninferkit.rundir.runs import Run, RunDir, append_jsonl, open_run, read_jsonl
from ninferkit.server import process as server

Launcher = Callable[[Setting], Observation | None]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def relocated_log(run_dir: RunDir, source: str) -> Path:
    """A recorded observation's log: at its path as recorded, or, where the run folder has moved (a published
    example, a copy, a fleet host's run copied back), at the same place under this run folder: a capacity
    launch's `/tmp/runs/x/capacity/launches/03/logs/server.log` is `capacity/launches/03/logs/server.log` here,
    the launch step's `/tmp/runs/x/logs/server.log` is `logs/server.log` (never another launch's log)."""
    path = Path(source)
    if path.exists():
        return path
    parts = path.parts
    launches = [i for i in range(len(parts) - 1) if parts[i:i + 2] == ("capacity", "launches")]
    logs = [i for i, part in enumerate(parts) if part == "logs"]
    start = launches[-1] if launches else logs[-1] if logs else None
    if start is None or ".." in parts[start:]:
        return path
    return run_dir.path.joinpath(*parts[start:])


def reread(run_dir: RunDir, kind: str, saved: Observation, rule: PoolRule) -> Observation:
    """An observation read again from its log where the log is still there: the log is the record, so a newer
    ninferkit sees in an old launch what it now knows how to read; whether it served stays as recorded, and so
    does its source as written."""
    log = relocated_log(run_dir, saved.source)
    fresh = from_log_file(kind, log, saved.setting, rule) if log.is_file() else None
    return saved if fresh is None else replace(fresh, source=saved.source, served=saved.served,
                                               extra={**saved.extra, **fresh.extra})


def recorded(run: Run) -> list[Observation]:
    """Observations earlier launches of this run left behind (a rerun resumes from them), each read again from
    its log (`reread`)."""
    rule = get_adapter(run.profile.engine.kind).capacity_pool
    return [reread(run.dir, run.profile.engine.kind, Observation.from_dict(row), rule)
            for row in read_jsonl(run.dir.capacity_observations)]


def overrides_for(setting: Setting) -> list[str]:
    out = [f"serve.max_concurrency={setting.concurrency}", f"serve.max_context={setting.context_per_slot}"]
    if setting.kv_dtype is not None:
        out.append(f"serve.kv.dtype={setting.kv_dtype}")
    if setting.kv_capacity is not None:
        out.append(f"serve.kv.capacity={setting.kv_capacity}")
    return out


def launcher(run: Run, rule: PoolRule, say: Callable[[str], None] = print,
             available: Interval | None = None) -> Launcher:
    """A function that launches one setting for real and returns (and records) its observation.

    The observation is None when the server failed for a reason that is not a memory refusal
    (the error is re-raised then: a bad flag is not evidence about memory). `available` is the free
    memory after weights the run's own launch saw: a recorded launch that saw other free memory
    (made while something else held the GPU) is launched again rather than reused.
    """
    root = run.dir.capacity_launches

    def launch(setting: Setting) -> Observation | None:
        for earlier in recorded(run):  # a rerun resumes: the same setting is not launched twice
            stale = (available is not None and earlier.available is not None
                     and earlier.available.intersect(available) is None)
            if earlier.setting == setting and not stale:
                say(f"reusing the earlier launch at {setting.label()} ({earlier.source})")
                return replace(earlier, extra={**earlier.extra, "reused": True})
        index = len(list(root.glob("*"))) + 1 if root.exists() else 1
        sub_dir = root / f"{index:02d}"
        overrides = [*run.loaded.overrides, *overrides_for(setting), f"serve.port={free_port()}"]
        source = run.loaded.source
        if source is None:
            raise ServerError("capacity launches need the profile file the run was opened from")
        if server.stop(run.dir):  # on a GPU each launch would otherwise measure what the run's server left
            say("stopped the launch step's server: the capacity launches need the memory it holds")
        sub = open_run(source, sub_dir, overrides)
        say(f"launch {index:02d} {setting.label()}: starting (log {sub.dir.server_log})")
        served = False
        error: ServerError | None = None
        try:
            record = server.start(sub)  # its wait for readiness speaks: a large model loads for minutes
            served = server.passed_checks(record)
        except ServerError as exc:
            error = exc
        finally:
            server.stop(sub.dir)
        log_text = read_log(sub.dir.server_log, f"reading launch {index:02d}'s log")
        observation = from_log(run.profile.engine.kind, log_text, setting, rule, str(sub.dir.server_log))
        if observation is None:
            if error is not None:
                raise error  # it failed before printing any memory books: not evidence about memory
            return None
        # A launch that printed its books is evidence whatever stopped it afterwards (a refusal, or a
        # failure at warm-up at a very long context): it counts as not serving, with the reason kept.
        observation = with_served(observation, served and error is None and observation.kind == "ledger")
        if error is not None:
            observation = replace(observation, extra={**observation.extra, "failure": str(error).splitlines()[0]})
        elif not served:  # it started, but a check failed: say which (e.g. a context the server capped)
            problems = [f"{check.name}: {check.detail}" for check in record.checks if not check.ok]
            observation = replace(observation, extra={**observation.extra, "failure": "; ".join(problems)})
        append_jsonl(run.dir.capacity_observations, observation.as_dict())
        say(f"launch {index:02d} {setting.label()}: "
            + ("started and served a request" if served else f"{observation.kind}, did not serve"))
        return observation

    return launch
