"""Whether the measuring client's clock can be trusted: its event loop's own delay and its CPU share.

The client stamps an event when asyncio hands it the socket read that carried it (ninferkit.transports):
that is when the bytes arrived only while the event loop is free to read them. A loop that is busy
(the client's Python on one saturated core, a garbage collection, a slow callback) reads late, and every
stamp taken then is late by as much, which the tables would publish as the server's inter-token time
(issue 43: at 64 streams the stamps were 8.6-15.9 ms late at p99 while the true gap was 5.2 ms).

So while a cell runs, a probe sleeps PROBE_S at a time and notes how much later than asked it woke (the
loop's lag: how late any socket read would have been handled), and the cell's process CPU time over its
wall time is kept (a share near 1 is a saturated core). A row whose largest lag is more than
VOUCH_SHARE of its own median inter-token gap (its time to first token where it has none) is one whose
timing the client cannot vouch for; so is a cell with such rows or a CPU share of CPU_SHARE_LIMIT and more.

Where a cell's streams are spread over worker processes (measure/client_workers), each worker watches its own
loop; a row's lag is its worker's, and the cell's figures are the worst worker's (`absorb`).
"""

from __future__ import annotations

import asyncio
import bisect
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

PROBE_S = 0.02
"""How often the probe wakes: 50 wakeups a second, a few microseconds of CPU each, off the measured server."""
VOUCH_SHARE = 0.05
"""The lag a row's timing tolerates, as a share of its median inter-token gap (ITL within 5% of the truth)."""
CPU_SHARE_LIMIT = 0.9
"""The client process's CPU time over wall time above which one core is saturated and every stamp queues."""


@dataclass(frozen=True)
class CellClock:
    """What the probe saw over a cell: the event loop's lag p99 and largest (seconds), the process's CPU share;
    with worker processes, the worst worker's of each, how many stamped, and what went wrong with them."""

    lag_p99_s: float | None
    lag_max_s: float | None
    cpu_share: float | None
    workers: int | None = None
    """How many worker processes stamped the cell's streams; None: the cell's own process did."""
    trouble: tuple[str, ...] = ()
    """What happened to the workers that the rows alone do not say (a worker that died)."""

    def fields(self) -> dict[str, Any]:
        """The cell ledger's fields (sweeps/cells.jsonl, rundir.records.CellEntry)."""
        return {"client_lag_p99_s": self.lag_p99_s, "client_lag_max_s": self.lag_max_s,
                "client_cpu_share": self.cpu_share, "client_workers": self.workers}


class ClockWatch:
    """Probes the running event loop's lag over a cell; `async with ClockWatch() as watch:` around the cell.

        async with ClockWatch() as watch:
            ...  # the cell's requests
            lag = watch.lag_max_s(result.t_send, result.t_done)
        watch.cell()  # CellClock
    """

    def __init__(self) -> None:
        self._woke: list[float] = []
        """When each probe woke (monotonic seconds, in order)"""
        self._lags: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._cpu0 = self._wall0 = 0.0
        self._cpu_share: float | None = None
        self._workers: list[CellClock] = []
        self._trouble: list[str] = []
        self._worker_count = 0

    async def __aenter__(self) -> ClockWatch:
        self._cpu0, self._wall0 = time.process_time(), time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._probe())
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._task is not None:
            self._task.cancel()
        wall = time.monotonic() - self._wall0
        self._cpu_share = (time.process_time() - self._cpu0) / wall if wall > 0 else None

    async def _probe(self) -> None:
        while True:
            asked = time.monotonic() + PROBE_S
            await asyncio.sleep(PROBE_S)
            woke = time.monotonic()
            self._woke.append(woke)
            self._lags.append(max(0.0, woke - asked))

    def lag_max_s(self, start: float | None, end: float | None) -> float | None:
        """The largest lag of the probes that woke between `start` and `end` (monotonic seconds); None where
        none did (a request shorter than PROBE_S): unknown, not zero."""
        if start is None or end is None:
            return None
        first, last = bisect.bisect_left(self._woke, start), bisect.bisect_right(self._woke, end)
        return max(self._lags[first:last]) if last > first else None

    def absorb(self, worker: CellClock | None, trouble: str | None = None) -> None:
        """A worker process's own watch over the cell (None: it died before it could say), and what went wrong."""
        self._worker_count += 1
        if worker is not None:
            self._workers.append(worker)
        if trouble:
            self._trouble.append(trouble)

    def cell(self) -> CellClock:
        """The cell's figures, once the watch has ended: this process's, or where workers stamped the streams,
        the worst worker's (the one whose stamps are the latest is the one the tables would be wrong by)."""
        if self._worker_count:
            return CellClock(_worst(w.lag_p99_s for w in self._workers), _worst(w.lag_max_s for w in self._workers),
                             _worst(w.cpu_share for w in self._workers), self._worker_count,
                             tuple(self._trouble))
        lags = sorted(self._lags)
        p99 = lags[min(len(lags) - 1, round(0.99 * (len(lags) - 1)))] if lags else None
        return CellClock(p99, lags[-1] if lags else None, self._cpu_share)


def _worst(values: Iterable[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return max(known) if known else None


def row_unsure(lag_max_s: float | None, itl_s: list[float], ttft_s: float | None) -> str | None:
    """Why the client cannot vouch for a row's timing (its event loop ran late by more than VOUCH_SHARE of the
    row's median inter-token gap, or of its time to first token where it has no gaps), or None."""
    if lag_max_s is None:
        return None
    scale, what = (statistics.median(itl_s), "median inter-token gap") if itl_s else (ttft_s, "time to first token")
    if not scale or lag_max_s <= VOUCH_SHARE * scale:
        return None
    return (f"the client's event loop ran up to {lag_max_s * 1000:.1f} ms late during this request, over "
            f"{VOUCH_SHARE:.0%} of its {what} ({scale * 1000:.1f} ms): its stamps may carry the client's delay")


def cell_unsure(clock: CellClock, unsure_rows: int, rows: int) -> str | None:
    """Why the client cannot vouch for a cell's timing, or None."""
    said = list(clock.trouble)
    if clock.cpu_share is not None and clock.cpu_share >= CPU_SHARE_LIMIT:
        who = "a client worker" if clock.workers else "the client"
        said.append(f"{who} used {clock.cpu_share:.0%} of a core (one core saturated: its stamps queue)")
    if unsure_rows:
        p99 = "" if clock.lag_p99_s is None else f" (loop lag p99 {clock.lag_p99_s * 1000:.1f} ms)"
        said.append(f"{unsure_rows} of {rows} requests ran while the client's event loop was late by more than "
                    f"{VOUCH_SHARE:.0%} of their inter-token gap{p99}")
    return "the client cannot vouch for this cell's timing: " + "; ".join(said) if said else None
