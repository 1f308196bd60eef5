"""The headless runner: the notebooks in order under papermill, one progress line per step.

A run whose chosen steps cannot finish with its profile is refused before anything is written
(ninferkit.preflight). A failing step stops the run with an error that names the step and the
diagnosis (the setup step fails on a finding of severity error the profile does not waive); the
server is stopped in every case (Ctrl-C and SIGTERM included); the executed notebooks and every file
written so far stay in the run directory.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from ninferkit import preflight, server
from ninferkit.errors import NinferkitError, ProfileError, StepFailed
from ninferkit.params import load_profile
from ninferkit.runs import Run, RunDir, open_run, utc_now

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
STEPS: dict[str, str] = {
    "setup": "00_setup.ipynb",
    "verify": "01_artifact_verify.ipynb",
    "launch": "02_launch.ipynb",
    "sweeps": "03_sweeps.ipynb",
    "capacity": "04_capacity_fit.ipynb",
    "writeup": "05_writeup.ipynb",
}


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
    profile: str | Path,
    run_dir: str | Path | None = None,
    steps: Sequence[str] | None = None,
    overrides: Sequence[str] = (),
    notebooks_dir: Path = NOTEBOOKS_DIR,
    say: Callable[[str], None] = print,
) -> RunbookResult:
    """Execute the chosen steps in order; raise StepFailed at the first failing step.

    Raises ProfileError, leaving nothing behind, when the profile is invalid or the chosen steps cannot
    finish with it (ninferkit.preflight). Example: ``run_runbook("params/local-cpu.yaml", steps=["setup", "launch"])``.
    """
    chosen = list(steps) if steps else list(STEPS)
    # the profile, then the whole plan of the chosen steps, before anything is written, downloaded or launched
    preflight.check(load_profile(profile, list(overrides)), chosen)
    run = open_run(profile, run_dir, list(overrides))
    preflight.record_plan(run.dir, chosen)  # the setup notebook checks the same steps
    result = RunbookResult(run)
    say(f"run directory: {run.dir.path}")
    say(f"profile {run.profile.name} (hash {run.profile_hash})")
    try:
        with _sigterm_as_interrupt():
            for index, step in enumerate(chosen, 1):
                outcome = _run_step(run, step, notebooks_dir)
                result.steps.append(outcome)
                label = f"[{index}/{len(chosen)}] {step:<9}"
                if outcome.status == "not_available":
                    say(f"{label} not available (no {STEPS[step]} yet)")
                else:
                    say(f"{label} {outcome.status} ({outcome.seconds:.1f} s)")
    finally:
        if server.stop(run.dir):
            say("server stopped")
        for record in sorted(run.dir.path.glob("*/**/server.json")):  # the speculation A/B's, capacity launches'
            server.stop(RunDir(record.parent))
    report = run.dir.report / "index.md"
    if report.exists():
        say(f"write-up: {report}")
    say(f"run directory: {run.dir.path}")
    return result


def _kernel_manager_class() -> type:
    """Kernels over Unix-domain sockets: nothing of the kernel listens on TCP (where any local user
    could connect to it in plain text, which ipykernel warns about at every start)."""
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class IPCKernelManager(AsyncKernelManager):
        @default("transport")
        def _transport_default(self) -> str:
            return "ipc"

    return IPCKernelManager


def _run_step(run: Run, step: str, notebooks_dir: Path) -> StepResult:
    import papermill as pm  # here, not at the top: it costs seconds of start-up for every other command

    source = notebooks_dir / STEPS[step]
    if not source.exists():
        run.dir.record_step(step, status="not_available")
        return StepResult(step, "not_available")
    output = run.dir.notebooks / STEPS[step]
    output.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    run.dir.record_step(step, status="running", started=utc_now(), notebook=str(output), error=None)
    parameters = {"profile": str(run.loaded.source.resolve()) if run.loaded.source else "",
                  "run_dir": str(run.dir.path), "overrides": list(run.loaded.overrides)}
    try:
        pm.execute_notebook(str(source), str(output), parameters=parameters, cwd=str(notebooks_dir),
                            progress_bar=False, kernel_name="python3",
                            kernel_manager_class=_kernel_manager_class())
    except pm.PapermillExecutionError as exc:
        seconds = time.monotonic() - started
        reason = f"{exc.ename}: {exc.evalue}"
        run.dir.record_step(step, status="failed", ended=utc_now(), seconds=round(seconds, 2), error=reason)
        raise StepFailed(step, output, reason) from exc
    except KeyboardInterrupt:
        run.dir.record_step(step, status="interrupted", ended=utc_now())
        raise
    except (NinferkitError, OSError, RuntimeError) as exc:
        run.dir.record_step(step, status="failed", ended=utc_now(), error=str(exc))
        raise StepFailed(step, output, f"{type(exc).__name__}: {exc}") from exc
    seconds = time.monotonic() - started
    run.dir.record_step(step, status="ok", ended=utc_now(), seconds=round(seconds, 2))
    return StepResult(step, "ok", seconds, output)
