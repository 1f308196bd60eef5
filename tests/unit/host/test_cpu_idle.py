"""How idle this process's CPUs are (host/cpu_idle): /proc/stat read as the kernel writes it, and a CPU kept busy
here reads as busy."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ninferkit.host.cpu_idle import PROC_STAT, cpu_ticks, idle_between, measure_idle, usable_cpus

# Two readings of this project's 2-core development machine's /proc/stat one second apart (2026-12-06; the
# interrupt lines cut): cpu0 ran a process the whole second, cpu1 was all but idle.
BEFORE = """cpu  2273256 176692 290516 1106876 11278 0 6083 3241 0 0
cpu0 1016489 92168 133501 685306 1844 0 2038 1636 0 0
cpu1 1256767 84523 157014 421570 9433 0 4044 1604 0 0
intr 17584779 0 0 0
ctxt 412
procs_running 3
"""
AFTER = """cpu  2273357 176692 290518 1106974 11278 0 6083 3241 0 0
cpu0 1016588 92168 133501 685306 1844 0 2038 1636 0 0
cpu1 1256768 84523 157016 421668 9433 0 4044 1604 0 0
intr 17585221 0 0 0
ctxt 500
procs_running 2
"""


def test_each_cpus_idle_share_is_its_idle_and_iowait_ticks_over_all_of_its_ticks() -> None:
    assert cpu_ticks(BEFORE)[1] == (421570 + 9433, 1256767 + 84523 + 157014 + 421570 + 9433 + 0 + 4044 + 1604)
    shares = idle_between(BEFORE, AFTER, {0, 1})
    assert shares[0] == 0.0  # 99 ticks of user time, none idle
    assert shares[1] == pytest.approx(98 / 101)
    assert idle_between(BEFORE, AFTER, {1}) == {1: shares[1]}  # only the CPUs this process may use
    offline = AFTER.replace("cpu1 1256768 84523 157016 421668 9433 0 4044 1604 0 0\n", "")
    assert idle_between(BEFORE, offline, {0, 1}) == {0: 0.0}  # a CPU gone offline: unknown, left out
    assert idle_between(BEFORE, BEFORE, {0, 1}) == {}  # no tick between the readings: nothing measured


@pytest.mark.skipif(not PROC_STAT.exists(), reason="no /proc/stat (not Linux)")
def test_a_cpu_kept_busy_here_reads_as_busy() -> None:
    cpu = min(usable_cpus())
    spinner = subprocess.Popen([sys.executable, "-c", "import os, time\n"
                                f"os.sched_setaffinity(0, {{{cpu}}})\n"
                                "print('spinning', flush=True)\n"
                                "end = time.monotonic() + 5\n"
                                "while time.monotonic() < end: pass\n"], stdout=subprocess.PIPE, text=True)
    try:
        assert spinner.stdout is not None
        assert spinner.stdout.readline() == "spinning\n"  # measured once it spins, not while Python starts
        measured = measure_idle(0.5)
    finally:
        spinner.kill()
        spinner.communicate()
    assert measured is not None and set(measured.shares) == usable_cpus() == set(os.sched_getaffinity(0))
    assert all(0 <= share <= 1 for share in measured.shares.values())
    assert measured.shares[cpu] < 0.1, measured.source  # a process always runnable there: the CPU is never idle
    assert f"cpu{cpu} " in measured.source and "/proc/stat over 0.5 s" in measured.source
