"""The host CPU as the kernel describes it (/proc/cpuinfo): its model name and feature flags.

The flags decide which kernels a CPU build of an engine runs (AVX-512, AMX), and so which of its bugs a
machine meets: the setup step records them, and engine adapters read them to avoid a known crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class HostCPU:
    model: str | None
    flags: frozenset[str]


def read_cpuinfo(text: str) -> HostCPU:
    """The first processor's model name and flags from /proc/cpuinfo's text (x86: `flags`, Arm: `Features`)."""
    model: str | None = None
    flags: frozenset[str] | None = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("flags", "Features") and flags is None:
            flags = frozenset(value.split())
        elif key == "model name" and model is None:
            model = value.strip()
    return HostCPU(model, flags or frozenset())


@cache
def host_cpu() -> HostCPU:
    """This machine's CPU; no flags where /proc/cpuinfo cannot be read."""
    try:
        return read_cpuinfo(CPUINFO.read_text())
    except OSError:
        return HostCPU(None, frozenset())
