"""The headless runner: the notebooks in order under papermill, each step's printed lines as they come.

A run whose chosen steps cannot finish with its profile is refused before anything is written
(ninferkit.steps.preflight). A failing step stops the run with an error that names the step and the
diagnosis (the setup step fails on a finding of severity error the profile does not waive); the
server is stopped in every case (Ctrl-C and SIGTERM included); the executed notebooks and every file
written so far stay in the run directory.

Nothing is silent for long: a step's kernel shows its progress as lines (ninferkit.progress, mode
``lines``: a build's stage and percent, a download's bytes and rate, a sweep's cell and requests, at least
every 10 s), and whatever its cells print reaches the runner's terminal while the step runs, through
papermill's stdout_file and stderr_file, prefixed with the step's name. The executed notebook keeps the
same lines; nothing else stores them.
"""

from __future__ import annotations

import io
import logging
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO

from ninferkit import progress
from ninferkit.errors import NinferkitError, ProfileError, StepFailed
from ninferkit.os_errors import named
from ninferkit.params import LoadedProfile, load_profile
from ninferkit.plain_output import plain
from ninferkit.rundir.runs import Run, RunDir, open_run, utc_now
from ninferkit.server import process as server
from ninferkit.server.target import Target
from ninferkit.steps import catalog, preflight
from ninferkit.steps.attach import open_url_run

NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"
class _RunbookNotebooks(Mapping[str, str]):
    """The steps `ninferkit run` runs, in order, each with its notebook: the catalog's (ninferkit.steps.catalog),
    asked on each use, since the catalog loads this module among the steps' while it gathers them."""

    def _found(self) -> dict[str, str]:
        return {step.name: step.notebook for step in catalog.steps() if step.notebook and step.runbook}

    def __getitem__(self, step: str) -> str:
        return self._found()[step]

    def __iter__(self) -> Iterator[str]:
        return iter(self._found())

    def __len__(self) -> int:
        return len(self._found())


STEPS: Mapping[str, str] = _RunbookNotebooks()
"""A --url run's steps by default are those the catalog marks `url` (sweeps, capacity, writeup): the server is
someone else's, so there is nothing to verify or launch, and the setup step would probe this machine, which need
not be the server's."""


@dataclass
class StepResult:
    step: str
    status: str  # ok | failed | not_available | interrupted
    seconds: float = 0.0
    notebook: Path | None = None


@dataclass
class RunbookResult:
    run: Run
    steps: list[StepResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(s.status in ("ok", "not_available") for s in self.steps)


def parse_steps(text: str | None) -> list[str]:
    if not text:
        return list(STEPS)
    chosen = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in STEPS]
    if unknown:
        raise ProfileError(f"--steps: unknown step(s) {', '.join(unknown)}; allowed: {', '.join(STEPS)}")
    return [s for s in STEPS if s in chosen]


class _DeadKernelAfterInterrupt(logging.Filter):
    """Drops asyncio's "Task exception was never retrieved" for nbclient's DeadKernelError: after an interrupt
    (Ctrl-C, or Slurm's SIGTERM, which reaches the kernel too) the cell's task is left with it, and asyncio
    prints its traceback when the task is collected, so an interrupted run's log ended in a traceback that read
    as a crash (issue 41). The step is recorded interrupted; any other asyncio error still prints."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return type(error).__name__ != "DeadKernelError"


def _quiet_dead_kernel() -> None:
    logger = logging.getLogger("asyncio")
    if not any(isinstance(each, _DeadKernelAfterInterrupt) for each in logger.filters):
        logger.addFilter(_DeadKernelAfterInterrupt())


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_runbook(
    profile: str | Path | None,
    run_dir: str | Path | None = None,
    steps: Sequence[str] | None = None,
    overrides: Sequence[str] = (),
    notebooks_dir: Path = NOTEBOOKS_DIR,
    say: Callable[[str], None] = print,
    url: Target | None = None,
) -> RunbookResult:
    """Execute the chosen steps in order; raise StepFailed at the first failing step.

    `say` gets the runner's lines (a step's start and end) and every line a step's cells print, as it
    comes, prefixed ``  <step> | ``. Raises ProfileError, leaving nothing behind, when the profile is
    invalid or the chosen steps cannot finish with it (ninferkit.steps.preflight).
    With `url`, the server is the one running there (`steps/attach.py`): no verify or launch step, and the final
    stop never signals it; `profile` may then be None (params/url.yaml).
    Example: ``run_runbook("params/local-cpu.yaml", steps=["setup", "launch"])``.
    """
    if url is not None:
        chosen = url_steps(steps)
        run = open_url_run(url, profile, run_dir, list(overrides), lambda loaded: preflight.check(loaded, chosen))
    else:
        if profile is None:
            raise ProfileError("run needs a PROFILE, or --url URL for a server ninferkit did not start")
        _, chosen = checked_plan(profile, steps, overrides)
        run = open_run(profile, run_dir, list(overrides))
    kernel_progress = "off" if progress.mode() == "off" else "lines"
    preflight.record_plan(run.dir, chosen)  # the setup notebook checks the same steps
    result = RunbookResult(run)
    say(f"run directory: {run.dir.path}")
    say(f"profile {run.profile.name} (hash {run.profile_hash})")
    try:
        with _sigterm_as_interrupt():
            for index, step in enumerate(chosen, 1):
                label = f"[{index}/{len(chosen)}] {step:<9}"
                source = notebooks_dir / STEPS[step]
                if not source.exists():
                    run.dir.record_step(step, status="not_available")
                    result.steps.append(StepResult(step, "not_available"))
                    say(f"{label} not available (no {STEPS[step]} yet)")
                    continue
                say(f"{label} running {STEPS[step]}")
                outcome = _run_step(run, step, source, kernel_progress, _prefixed(say, f"  {step} | "))
                result.steps.append(outcome)
                say(f"{label} {outcome.status} ({outcome.seconds:.1f} s)")
    finally:
        if server.stop(run.dir):
            say("server stopped")
        for record in sorted(run.dir.path.glob("*/**/server.json")):  # the speculation A/B's, capacity launches'
            server.stop(RunDir(record.parent))
    return result


def checked_plan(profile: str | Path, steps: Sequence[str] | None, overrides: Sequence[str],
                 *, here: bool = True) -> tuple[LoadedProfile, list[str]]:
    """The profile and the chosen steps (all by default), once the whole plan of those steps passed preflight (and
    an A/B's baseline run is on this machine): before anything is written, downloaded or launched. `here` false (a
    dry run): what only the machine that runs can answer (preflight.machine_problems) is left to that run."""
    chosen = list(steps) if steps else list(STEPS)
    loaded = load_profile(profile, list(overrides))
    preflight.check(loaded, chosen, here=here)
    if "sweeps" in chosen and loaded.profile.sweeps.ab.enabled:
        preflight.ab_baseline(loaded.profile)  # the other side of the A/B, on this machine
    return loaded, chosen


def url_steps(steps: Sequence[str] | None) -> list[str]:
    """The steps of a --url run: the catalog's url steps by default; verify and launch refused (there is no
    model or server of ninferkit's to check or start)."""
    if not steps:
        return catalog.url_steps()
    refused = [step for step in steps if step in ("verify", "launch")]
    if refused:
        raise ProfileError(f"--steps {','.join(refused)} with --url: the server is someone else's, so ninferkit "
                           f"verifies and launches nothing; allowed: setup, {', '.join(catalog.url_steps())}")
    return list(steps)


def _prefixed(say: Callable[[str], None], prefix: str) -> Callable[[str], None]:
    return lambda line: say(prefix + line)


class PrintedLines:
    """A file papermill writes a kernel's printed text into (its stdout_file or stderr_file): each whole
    line goes to `echo` as it arrives, without control sequences (a coloured line a cell printed), a line
    rewritten with carriage returns as its last state, blank lines not at all. One per stream, so the
    halves of two streams' lines never meet."""

    def __init__(self, echo: Callable[[str], None]) -> None:
        self.echo = echo
        self.pending = ""

    def write(self, text: str) -> int:
        *whole, self.pending = (self.pending + text).split("\n")
        for line in whole:
            self._echo(line)
        return len(text)

    def flush(self) -> None:
        """Nothing to do: a line goes out the moment it ends (papermill flushes after every write)."""

    def close(self) -> None:
        """The step ended: a last line printed without its newline goes out too."""
        if self.pending:
            self._echo(self.pending)
            self.pending = ""

    def _echo(self, line: str) -> None:
        last = plain(line).rstrip("\r").rsplit("\r", 1)[-1].rstrip()  # a CRLF ending is no rewrite
        if last.strip():
            self.echo(last)


def _kernel_manager_class(environment: dict[str, str], sockets: Path, stderr: BinaryIO) -> type:
    """Kernels over Unix-domain sockets: nothing of the kernel listens on TCP (where any local user
    could connect to it in plain text, which ipykernel warns about at every start); started with this
    process's environment plus `environment` (how a step's kernel learns to show its progress as lines).
    The kernel process's own stderr (ipykernel's log, not the cells' output, which comes as messages) goes to
    `stderr`, the step's kernel log: a SIGTERM printed ipykernel's ZMQError tracebacks on the terminal (issue 40).
    The sockets go in `sockets`, a folder of this step's own: jupyter_client's default is `kernel-ipc-<port>` in
    the working directory (the notebooks folder), where runbooks side by side on one box (a fleet's tasks) pick
    their random ports in the same folder and race for them."""
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class IPCKernelManager(AsyncKernelManager):
        @default("transport")
        def _transport_default(self) -> str:
            return "ipc"

        @default("ip")
        def _ip_default(self) -> str:
            return str(sockets / "kernel")

        async def start_kernel(self, **kw: Any) -> None:  # type: ignore[override]  # typed on the sync base
            kw["env"] = {**kw.get("env", os.environ), **environment}
            kw["stderr"] = stderr
            await super().start_kernel(**kw)

    return IPCKernelManager


def _kernel_log(run_dir: RunDir, step: str) -> BinaryIO:
    """logs/kernel-<step>.log, appended to: what the step's kernel process and the libraries running it log
    (a kernel killed mid-cell, a shutdown's socket errors), kept in the run rather than printed."""
    path = run_dir.logs / f"kernel-{step}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644), "ab")


@contextmanager
def _libraries_logging_to(handle: BinaryIO) -> Iterator[None]:
    """While a step runs, what papermill, nbclient, jupyter_client and asyncio log goes to the step's kernel log,
    not the terminal (Python's last-resort handler printed a dead kernel's DeadKernelError traceback there when
    a SIGTERM ended the write-up: issue 40). Their errors that end the step still reach the user as its result."""
    handler = logging.StreamHandler(io.TextIOWrapper(handle, write_through=True))
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.stream.detach()


def _run_step(run: Run, step: str, source: Path, kernel_progress: str, echo: Callable[[str], None]) -> StepResult:
    import papermill as pm  # here, not at the top: it costs seconds of start-up for every other command

    output = run.dir.notebooks / STEPS[step]
    output.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    run.dir.record_step(step, status="running", started=utc_now(), notebook=str(output), error=None)
    parameters = {"profile": str(run.loaded.source.resolve()) if run.loaded.source else "",
                  "run_dir": str(run.dir.path), "overrides": list(run.loaded.overrides)}
    printed, errors = PrintedLines(echo), PrintedLines(echo)
    sockets = tempfile.TemporaryDirectory(prefix="ninferkit-kernel-")  # short: a socket path holds 107 bytes
    kernel_log = _kernel_log(run.dir, step)
    try:
        with _libraries_logging_to(kernel_log):
            pm.execute_notebook(str(source), str(output), parameters=parameters, cwd=str(source.parent),
                                progress_bar=False, kernel_name="python3", stdout_file=printed, stderr_file=errors,
                                kernel_manager_class=_kernel_manager_class(
                                    {progress.MODE_VARIABLE: kernel_progress}, Path(sockets.name), kernel_log))
    except pm.PapermillExecutionError as exc:
        seconds = time.monotonic() - started
        reason = f"{exc.ename}: {exc.evalue}"
        run.dir.record_step(step, status="failed", ended=utc_now(), seconds=round(seconds, 2), error=reason)
        raise StepFailed(step, output, reason) from exc
    except KeyboardInterrupt:
        run.dir.record_step(step, status="interrupted", ended=utc_now())
        _quiet_dead_kernel()
        raise
    except (NinferkitError, OSError, RuntimeError) as exc:
        met = named(exc, f"running the {step} notebook", run.dir.path) if isinstance(exc, OSError) else exc
        run.dir.record_step(step, status="failed", ended=utc_now(), error=str(met))
        raise StepFailed(step, output, f"{type(met).__name__}: {met}") from exc
    finally:
        printed.close()
        errors.close()
        sockets.cleanup()
        kernel_log.close()
    seconds = time.monotonic() - started
    run.dir.record_step(step, status="ok", ended=utc_now(), seconds=round(seconds, 2))
    return StepResult(step, "ok", seconds, output)
