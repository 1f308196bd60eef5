"""How idle this process's CPUs are right now, as the kernel counts it (/proc/stat), not how many there are.

A CPU the process may run on (its affinity) gives a new process only the time nobody else takes: on a 2-core box
that other work keeps busy, a second measuring process does not get a core of its own, it waits its turn at every
read (issue 43: there, worker processes made the client's inter-token times at 64 streams worse, 2.0-2.4x the
truth against 1.1-1.3x for one process). So the client's spread (measure/client_workers) weighs the idle share of
each CPU, measured over a window here, not the CPU count.

/proc/stat counts each CPU's time in ticks (USER_HZ, 100 a second) by what ran: idle and iowait are time no
process wanted the CPU; steal is time the hypervisor gave elsewhere (not idle: nobody here got it).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
IDLE_WINDOW_S = 0.5
"""How long the idle share is measured over: 50 ticks a CPU at USER_HZ 100, so one tick is 2% of it; long enough
to take in the bursts of other work on a shared machine (a test run, a compile), short beside a cell's run."""


@dataclass(frozen=True)
class CpuIdle:
    """The idle share (0-1) of each CPU this process may use, over a measured window, and how it was measured."""

    shares: dict[int, float]
    source: str

    def most_idle(self) -> list[float]:
        """The idle shares, most idle first."""
        return sorted(self.shares.values(), reverse=True)


def cpu_ticks(text: str) -> dict[int, tuple[int, int]]:
    """Each CPU's (idle ticks, all ticks) from /proc/stat's text: idle is `idle` + `iowait`, all is every column
    up to `steal` (guest time is counted inside user time already)."""
    out: dict[int, tuple[int, int]] = {}
    for line in text.splitlines():
        name, *columns = line.split()
        if not name.startswith("cpu") or name == "cpu" or len(columns) < 4:
            continue
        ticks = [int(value) for value in columns[:8]]
        out[int(name[3:])] = (ticks[3] + (ticks[4] if len(ticks) > 4 else 0), sum(ticks))
    return out


def idle_between(before: str, after: str, cpus: set[int]) -> dict[int, float]:
    """The idle share of each of `cpus` between two readings of /proc/stat; a CPU with no tick between them (or
    missing from either: offline) is left out, unknown."""
    first, second = cpu_ticks(before), cpu_ticks(after)
    shares: dict[int, float] = {}
    for cpu in sorted(cpus & first.keys() & second.keys()):
        idle, total = (second[cpu][0] - first[cpu][0]), (second[cpu][1] - first[cpu][1])
        if total > 0:
            shares[cpu] = min(1.0, max(0.0, idle / total))
    return shares


def usable_cpus() -> set[int]:
    """The CPUs this process may run on (its affinity)."""
    return set(os.sched_getaffinity(0))


def measure_idle(window_s: float = IDLE_WINDOW_S) -> CpuIdle | None:
    """The idle share of each usable CPU over the next `window_s` (this call waits that long); None where
    /proc/stat cannot be read (not Linux): unknown, never taken as idle."""
    cpus = usable_cpus()
    try:
        before = PROC_STAT.read_text()
        time.sleep(window_s)  # the measuring window itself: /proc/stat counts what ran on each CPU meanwhile
        after = PROC_STAT.read_text()
    except OSError:
        return None
    shares = idle_between(before, after, cpus)
    if not shares:
        return None
    said = ", ".join(f"cpu{cpu} {share:.0%}" for cpu, share in shares.items())
    return CpuIdle(shares, f"/proc/stat over {window_s:g} s: idle {said}")
