"""Progress of long work: a bar where a person watches one, a plain line every few seconds where output is kept.

A build that takes half an hour on two cores, a download, a sweep of forty cells: each says what it is doing.
The form follows where the output goes (`mode`):

- ``bar``: a terminal, or a Jupyter kernel a front end is attached to (tqdm.auto: a widget in JupyterLab);
- ``lines``: anything else (a pipe, a log file, a kernel papermill or nbclient executes, such as the headless
  runner's, whose printed lines the runner forwards to its terminal): a line when the work starts, then one
  every LINE_INTERVAL_S seconds also when nothing moved (a stall shows as a line whose numbers stay put), and a
  last one for work that took that long.
  A bar there is a stream of carriage-return frames, which a log shows as one endless line;
- ``off``: nothing (``--quiet``).

``NINFERKIT_PROGRESS=bar|lines|off`` chooses; tqdm's own ``TQDM_DISABLE`` means no bars, so lines.

    with progress.track("sweeps", total=len(cells), unit="cells") as shown:
        shown.note("cell 3/40 context target_prompt_tokens=512")
        shown.update()
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

from ninferkit.errors import BadInput
from ninferkit.plain_output import plain
from ninferkit.units import GIB, MIB

MODE_VARIABLE = "NINFERKIT_PROGRESS"
MODES = ("bar", "lines", "off")
LINE_INTERVAL_S = 9.0
"""Seconds between lines: under the 10 s a user should ever wait for a word, with room for the line to travel
(a kernel's output reaches the runner's terminal through papermill)."""


def mode() -> str:
    """How progress shows in this process: NINFERKIT_PROGRESS if set, else a bar on a terminal or in a
    Jupyter kernel a front end started, else lines (papermill's kernels among them). Raises BadInput for a
    value of NINFERKIT_PROGRESS that is not a mode."""
    chosen = os.environ.get(MODE_VARIABLE, "").strip().lower()
    if chosen:
        if chosen not in MODES:
            raise BadInput(f"{MODE_VARIABLE}={chosen!r}: allowed {', '.join(MODES)} (or unset: a bar on a terminal "
                           "or in JupyterLab, lines elsewhere)")
        return chosen
    if os.environ.get("TQDM_DISABLE", "").strip().lower() not in ("", "0", "false", "no", "off"):
        return "lines"
    if _in_jupyter_kernel():
        return "bar" if _front_end_session() else "lines"
    return "bar" if _is_terminal() else "lines"


@contextmanager
def forced(chosen: str | None) -> Iterator[None]:
    """NINFERKIT_PROGRESS set to `chosen` for the block (None: as it is), e.g. ``forced("off")`` for --quiet.
    An environment variable, not a flag in this module, so the kernels and commands this process starts
    inherit it."""
    if chosen is None:
        yield
        return
    before = os.environ.get(MODE_VARIABLE)
    os.environ[MODE_VARIABLE] = chosen
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(MODE_VARIABLE, None)
        else:
            os.environ[MODE_VARIABLE] = before


def _in_jupyter_kernel() -> bool:
    """A kernel with a frontend's widgets (tqdm.auto's own test), not a process that merely imported IPython."""
    if "ipykernel" not in sys.modules:
        return False
    from IPython import get_ipython

    shell = get_ipython()
    return shell is not None and "IPKernelApp" in shell.config


def _front_end_session() -> bool:
    """Whether a person's front end started this kernel, so a widget is drawn: a kernel executed by papermill
    or nbclient (`papermill` by hand, `jupyter execute`) has none, and its widget bar is a display message
    with no text, so a whole sweep was silent even with papermill's --log-output.

    The signal is JPY_SESSION_NAME in the kernel's environment: jupyter_server (JupyterLab, Notebook 7) sets it
    for every kernel it starts for a front end's session (sessionmanager.get_kernel_env, since jupyter_server
    2.0), and papermill and nbclient set nothing of their own in a kernel's environment. It is read at start,
    before any cell asks, where a frontend comm would be known only once the front end answers. A front end
    that starts its kernels without jupyter_server gets lines; NINFERKIT_PROGRESS=bar asks for the bar there."""
    return bool(os.environ.get("JPY_SESSION_NAME"))


def _is_terminal() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


def track(desc: str, total: float | None = None, unit: str = "", *, byte_counts: bool = False, initial: int = 0,
          enabled: bool = True) -> Progress:
    """The progress of one piece of work, shown as `mode` says (nothing when `enabled` is False).

    `unit` "%" counts percent (a build); `byte_counts` shows bytes in MiB/GiB with their rate (a download);
    without `total` or `unit` a line says only how long the work has run (waiting for a server, a lock).
    """
    shown = mode() if enabled else "off"
    kind = {"bar": _Bar, "lines": _Lines, "off": Progress}[shown]
    return kind(desc, total, unit, byte_counts, initial)


class Progress:
    """The state of one piece of work (count, total, the item at hand); this base class shows nothing."""

    def __init__(self, desc: str, total: float | None, unit: str, byte_counts: bool, initial: int) -> None:
        self.desc, self.total, self.unit, self.byte_counts = desc, total, unit, byte_counts
        self.count: float = initial
        self.counted_from: float = initial  # the rate counts what arrived since the start (or the restart)
        self.item = ""
        self.started = self.rate_started = time.monotonic()

    def update(self, n: float = 1) -> None:
        self.count += n

    def advance_to(self, value: float) -> None:
        self.count = value

    def set_total(self, total: float | None) -> None:
        self.total = total

    def restart(self, total: float | None = None) -> None:
        """Back to zero (a download the server sends again from byte 0)."""
        self.count = self.counted_from = 0
        self.total = total
        self.rate_started = time.monotonic()

    def note(self, text: str) -> None:
        """What the work is at now: the cell, the file being compiled, the server's last log line (without
        its colour codes: a line of progress goes to logs)."""
        self.item = " ".join(plain(text).split())[:160]

    def event(self, text: str) -> None:
        """Something to say at once (a cell that failed), beside the progress."""

    def close(self, finished: bool = True) -> None:
        """The end of the work (`finished` False: it stopped on an error, which its caller reports)."""

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close(finished=kind is None)

    def line(self) -> str:
        """'sweeps: 2 of 40 cells (5%), 1m10s; cell 3/40 context ...', or for a download
        'model.gguf: 120.0 MiB of 4.50 GiB (3%) at 11.2 MiB/s, 11 s'."""
        now = time.monotonic()
        amount = " ".join(part for part in (self._amount(), self._rate(now)) if part)
        text = f"{self.desc}: " + ", ".join(part for part in (amount, _duration(now - self.started)) if part)
        return f"{text}; {self.item}" if self.item else text

    def _amount(self) -> str:
        total, count = self.total, self.count
        if self.byte_counts:
            return _bytes(count) + (f" of {_bytes(total)} ({_percent(count, total)})" if total else "")
        if self.unit == "%":
            return f"{count:.0f}%"
        unit = f" {self.unit}" if self.unit else ""
        if total:
            return f"{count:.0f} of {total:.0f}{unit} ({_percent(count, total)})"
        return f"{count:.0f}{unit}" if unit else ""

    def _rate(self, now: float) -> str:
        moved, seconds = self.count - self.counted_from, now - self.rate_started
        if not self.byte_counts or moved <= 0 or seconds <= 0:
            return ""
        return f"at {_bytes(moved / seconds)}/s"


class _Lines(Progress):
    """A line at the start, one every LINE_INTERVAL_S seconds from a helper thread (so a stall still
    speaks), and a last one when any came between. Lines go to stderr, as a command's answer is its
    stdout; in a notebook kernel to stdout, as the cell's other printed lines do (a kernel sends each
    stream on its own, so lines of two streams can arrive out of order)."""

    def __init__(self, desc: str, total: float | None, unit: str, byte_counts: bool, initial: int) -> None:
        super().__init__(desc, total, unit, byte_counts, initial)
        self.stream = sys.stdout if _in_jupyter_kernel() else sys.stderr
        self.interval = LINE_INTERVAL_S
        self.ticks = 0
        self._print_lock = threading.Lock()
        self._stop = threading.Event()
        self._say(self.line())
        self._ticker = threading.Thread(target=self._tick, name=f"progress: {desc}"[:60], daemon=True)
        self._ticker.start()

    def _tick(self) -> None:
        due = self.started + self.interval
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            self._say(self.line())
            self.ticks += 1
            due = max(due + self.interval, time.monotonic())  # after a pause (a suspended machine), no burst

    def _say(self, text: str) -> None:
        with self._print_lock:
            print(text, file=self.stream, flush=True)

    def event(self, text: str) -> None:
        self._say(plain(text))

    def close(self, finished: bool = True) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._ticker.join()
        if self.ticks:
            self._say(f"{self.line()} ({'done' if finished else 'stopped'})")


class _Bar(Progress):
    """tqdm.auto's bar: drawn in place on a terminal, a widget in JupyterLab."""

    def __init__(self, desc: str, total: float | None, unit: str, byte_counts: bool, initial: int) -> None:
        super().__init__(desc, total, unit, byte_counts, initial)
        from tqdm.auto import tqdm

        options: dict[str, Any] = {"desc": desc, "total": total, "initial": initial, "unit": unit or "it"}
        if byte_counts:
            options.update(unit="B", unit_scale=True, unit_divisor=1024)
        elif unit == "%":
            options["bar_format"] = "{desc}: {percentage:3.0f}%|{bar}| {elapsed}{postfix}"
        elif total is None and not unit:
            options["bar_format"] = "{desc}: {elapsed}{postfix}"
        self._bar = tqdm(**options)

    def update(self, n: float = 1) -> None:
        super().update(n)
        self._bar.update(n)

    def advance_to(self, value: float) -> None:
        self._bar.update(value - self.count)
        super().advance_to(value)

    def set_total(self, total: float | None) -> None:
        if total == self.total:
            return
        super().set_total(total)
        self._bar.total = total
        self._bar.refresh()

    def restart(self, total: float | None = None) -> None:
        super().restart(total)
        self._bar.reset(total=total)

    def note(self, text: str) -> None:
        super().note(text)
        self._bar.set_postfix_str(self.item[:80], refresh=False)
        self._bar.update(0)  # redrawn at tqdm's own pace, so a waiting bar's clock moves

    def event(self, text: str) -> None:
        self._bar.write(text)

    def close(self, finished: bool = True) -> None:
        """The bar's last frame says how the work ended, not what it was at (a widget stays on the page: a
        waiting-for-health bar kept the server's raw last log line there)."""
        self._bar.set_postfix_str("done" if finished else "stopped", refresh=False)
        self._bar.close()


def _duration(seconds: float) -> str:
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _bytes(value: float) -> str:
    return f"{value / GIB:.2f} GiB" if value >= GIB else f"{value / MIB:.1f} MiB"


def _percent(count: float, total: float | None) -> str:
    return f"{100 * count / total:.0f}%" if total else "?%"
