"""The engine dies with its task: a small process beside each fleet task (started by `tasks.run_task` as
`python -m ninferkit.fleet.watchdog TASK_PID STATE_DIR INDEX RUN_DIR`) that waits for the task to end and
then stops the server the task's run started, if it is still there.

Why a watchdog, and not the alternatives: the server is in a process group of its own on purpose (it outlives
the kernel of the step that launched it, and the later steps' kernels find it by server.json), so a signal to
the task's group never reaches it, and PR_SET_PDEATHSIG would tie it to the launching kernel, which exits after
the launch step. Reaping only when the task is next started leaves the server holding its GPU memory until
someone resubmits (1 min 47 s and counting in issue 41), and on another node never. A task killed with
SIGKILL (kill -9, the OOM killer) runs no code of its own, so something outside it must act: this watchdog,
started by the task in a session of its own (a signal to the task's group or terminal does not take it along),
waits on the task's pidfd (no polling), then stops the server through `server.process.stop`, which checks the
recorded process identity first (a stale server.json is never signalled), and records in the task's status
that the task ended without saying how and that its server was stopped. It ignores SIGTERM, SIGINT and SIGHUP
(Slurm's scancel signals every process of the job: the watchdog must outlast the task to clean after it);
Slurm's SIGKILL after KillWait still ends it, and under proctrack/cgroup Slurm kills the server with the job.
"""

from __future__ import annotations

import os
import select
import signal
import sys
from pathlib import Path

from ninferkit.errors import NinferkitError
from ninferkit.fleet.tasks import SLURM_WORD, StateDir
from ninferkit.rundir.runs import RunDir, utc_now
from ninferkit.server.process import read_record, stop


def wait_for_exit(pid: int) -> None:
    """Return once process `pid` has ended (at once if it has)."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        poller = select.poll()
        poller.register(handle, select.POLLIN)
        while not poller.poll():
            pass
    finally:
        os.close(handle)


def after_task(task_pid: int, state_path: Path, index: int, run_dir: Path) -> str | None:
    """What is left to do once the task `task_pid` ended: stop its server if it still runs, and where the task
    wrote no status of its end, say so in its status. The words written, or None when nothing was left."""
    state = StateDir(state_path)
    stopped = None
    try:
        record = read_record(RunDir(run_dir))
        if record is not None and stop(RunDir(run_dir)):
            stopped = f"its server (pid {record.pid}, {record.url or 'no url'}) was stopped by its watchdog"
    except NinferkitError as exc:
        stopped = f"its server could not be stopped: {exc}"
    status = state.read_status(index)
    slurms = status is not None and bool((status.model_extra or {}).get(SLURM_WORD))
    if status is None or status.pid != task_pid or (status.state != "running" and not slurms):
        return stopped  # the task said how it ended (or another attempt owns the status now)
    seen = (status.reason or "").partition(": the task ended")[0] if status is not None and slurms else ""
    also = f" ({seen})" if seen else ""
    reason = (f"process {task_pid} ended without a status (a signal it cannot catch: kill -9, the out-of-memory "
              f"killer){also}{'; ' + stopped if stopped else ''}; `fleet submit` again resumes it, keeping its "
              "finished cells")
    state.write_status(status.model_copy(update={"state": "failed", "ended": utc_now(), "reason": reason,
                                                 "watchdog": True, SLURM_WORD: False}))
    return reason


def main(argv: list[str]) -> int:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    task_pid, state_path, index, run_dir = int(argv[0]), Path(argv[1]), int(argv[2]), Path(argv[3])
    wait_for_exit(task_pid)
    said = after_task(task_pid, state_path, index, run_dir)
    if said is not None:
        host = StateDir(state_path).read_tasks()[index].host
        print(f"[{host}] watchdog of task {index}: {said}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
