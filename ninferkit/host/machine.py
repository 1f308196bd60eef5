"""The host machine itself: its memory, and whether it is a virtual machine or a container (and which).

Seed 000 §0 describes its box as "PVE 直通给 Ubuntu 24.04 VM（16 vCPU / 32G RAM / 200G 系统盘）": a GPU passed
through to a VM behaves unlike bare metal (its driver sees the card through the hypervisor's IOMMU, its CPU
and memory are a share), so the setup step records what systemd-detect-virt says (a VM and a container apart),
and, where it is absent, the CPU's `hypervisor` flag and the firmware's DMI names.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from ninferkit.host.cpu import host_cpu
from ninferkit.rundir.records import HostFacts

MEMINFO = Path("/proc/meminfo")
DMI = Path("/sys/class/dmi/id")


def memory_total_bytes(text: str) -> int | None:
    """MemTotal of a /proc/meminfo text, in bytes (the file says kB, meaning KiB)."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == "MemTotal":
            parts = value.split()
            return int(parts[0]) * 1024 if parts and parts[0].isdigit() else None
    return None


def _detect_virt(kind: str) -> str | None:
    """systemd-detect-virt's answer for a VM or a container: its name, "none", or None where it cannot say."""
    if shutil.which("systemd-detect-virt") is None:
        return None
    try:
        done = subprocess.run(["systemd-detect-virt", f"--{kind}"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    answer = done.stdout.strip()
    return answer if answer else None  # exit 1 with "none": it is not one


def _dmi() -> str | None:
    names = []
    for name in ("sys_vendor", "product_name"):
        try:
            names.append((DMI / name).read_text().strip())
        except OSError:
            continue
    return " ".join(name for name in names if name) or None


def system_disk(root: Path = Path("/")) -> dict[str, int | None]:
    """Size and room of the file system at `/` (seed 000 §0's "200G 系统盘"), which the artifact's folder need not
    be on; None each where it cannot be read."""
    try:
        usage = shutil.disk_usage(root)
    except OSError:
        return {"system_disk_total_bytes": None, "system_disk_free_bytes": None}
    return {"system_disk_total_bytes": usage.total, "system_disk_free_bytes": usage.free}


def machine_facts() -> dict[str, Any]:
    """Memory, the system disk and form: `vm` and `container` as systemd-detect-virt names them ("none": not one;
    None: not known), the CPU's hypervisor flag, the DMI vendor and product, and which of them said it."""
    try:
        memory = memory_total_bytes(MEMINFO.read_text())
    except OSError:
        memory = None
    vm, container = _detect_virt("vm"), _detect_virt("container")
    return {"memory_total_bytes": memory, **system_disk(), "vm": vm, "container": container,
            "hypervisor_flag": "hypervisor" in host_cpu().flags if host_cpu().flags else None, "dmi": _dmi(),
            "source": "systemd-detect-virt" if vm is not None or container is not None else
            ("/proc/cpuinfo and /sys/class/dmi" if host_cpu().flags else None)}


def form(facts: HostFacts) -> str:
    """The machine's form in words, from probe.json's host facts: a VM (which), a container, bare metal, or unknown."""
    vm, container, flag = facts.vm, facts.container, facts.hypervisor_flag
    said = []
    if vm not in (None, "none"):
        said.append(f"virtual machine ({vm})")
    elif vm == "none":
        said.append("bare metal (no hypervisor)")
    elif flag is True:
        said.append("virtual machine (the CPU's hypervisor flag)")
    elif flag is False:
        said.append("bare metal (no hypervisor flag)")
    if container not in (None, "none"):
        said.append(f"in a {container} container")
    text = ", ".join(said) or "not known (no systemd-detect-virt, CPU flags or DMI to read)"
    return text + (f"; firmware: {facts.dmi}" if facts.dmi else "")
