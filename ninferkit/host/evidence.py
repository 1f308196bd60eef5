"""What a failed driver or GPU leaves behind on the host, read for the setup step.

NVML answers only once a driver drives a GPU, so the reports' worst failures show nowhere NVML looks: the
open kernel module on a Volta card refuses it in the kernel log (seed 000 §1.1: "not supported by open
nvidia.ko ... does not include the required GPU System Processor (GSP)") and no module stays loaded, so the
loaded module's flavour cannot tell. Here: the kernel log's NVIDIA lines (`dmesg`, else `journalctl -k`, when
this user may read them; unreadable is said, never taken for "nothing there"), the NVIDIA driver packages the
package manager holds with their flavour (dpkg or rpm), which GPU each active NVLink reaches (NVML's
remote PCI address per link: a pair is linked only where a link of one reaches the other), and the GPU matrix of
`nvidia-smi topo -m` as the tool prints it (NV# between a pair: a bonded set of # NVLinks; seed 004 §六.1 tells a
reader to look there), quoted in the write-up's environment.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from typing import Any

KERNEL_LOG_LINES = 400
"""The last NVIDIA lines kept from the kernel log (a box with Xid storms prints thousands)."""
_NVIDIA_LINE = re.compile(r"NVRM|nvidia|Xid|GPU has fallen off the bus", re.IGNORECASE)
_NO_JOURNAL = re.compile(r"No journal files were found\.|^-- No entries --$", re.MULTILINE)
"""journalctl's words, with exit code 0, on a machine that keeps no journal (seen on the CI machine)."""
OPEN_PACKAGE = re.compile(r"-open(?:-|$)|^nvidia-open|kmod-nvidia-open")
"""Driver packages of the open kernel module: Ubuntu's nvidia-driver-580-open, nvidia-kernel-open-580,
linux-modules-nvidia-580-open-*; NVIDIA's nvidia-open and kmod-nvidia-open-dkms (rpm)."""
_DRIVER_PACKAGE = re.compile(r"^(nvidia-driver|nvidia-kernel|linux-modules-nvidia|nvidia-dkms|nvidia-open|kmod-nvidia|"
                             r"xorg-x11-drv-nvidia)")
"""Packages that carry a kernel module (or pull one in): their names say its flavour."""


def _output(argv: list[str]) -> tuple[int, str] | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.returncode, done.stdout + done.stderr


def kernel_log() -> dict[str, Any]:
    """The kernel log's NVIDIA lines: {"source": "dmesg" | "journalctl -k", "lines": [...]} when readable, else
    {"source": None, "reason": why each reader could not read it, "lines": []}."""
    reasons = []
    for source, argv in (("dmesg", ["dmesg"]), ("journalctl -k", ["journalctl", "-k", "-b", "--no-pager"])):
        found = _output(argv)
        if found is None:
            reasons.append(f"{argv[0]} is not installed")
            continue
        code, text = found
        empty = _NO_JOURNAL.search(text)  # journalctl exits 0 where it has no journal to read
        if code != 0 or empty:
            last = empty[0] if empty else text.strip().splitlines()[-1] if text.strip() else f"exit code {code}"
            reasons.append(f"{source}: {last}")
            continue
        return {"source": source, "reason": None, "lines": nvidia_lines(text)}
    return {"source": None, "reason": "; ".join(reasons), "lines": []}


TOPOLOGY = ["nvidia-smi", "topo", "-m"]
_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
"""nvidia-smi underlines the matrix's header with terminal codes even into a pipe (seen on an H100, driver 580)."""


def gpu_topology() -> dict[str, Any]:
    """`nvidia-smi topo -m`: {"source": "nvidia-smi topo -m", "lines": the GPU matrix as printed, its header and one
    line per GPU (legend left out), "links": {"GPU0": {"GPU1": "NV4"}, ...}}; {"source": None, "reason": why} when
    nvidia-smi is missing or fails."""
    found = _output(TOPOLOGY)
    if found is None:
        return {"source": None, "reason": "nvidia-smi is not installed", "lines": [], "links": {}}
    code, text = found
    if code != 0:
        last = text.strip().splitlines()[-1] if text.strip() else f"exit code {code}"
        return {"source": None, "reason": f"nvidia-smi topo -m: {last}", "lines": [], "links": {}}
    return topology_record(text)


def topology_record(text: str) -> dict[str, Any]:
    """What `nvidia-smi topo -m` printed, read: its GPU matrix lines (terminal codes removed) and each GPU pair's
    connection (X, NV#, PIX, PXB, PHB, NODE, SYS)."""
    rows = [_ESCAPE.sub("", line).rstrip() for line in text.split("\nLegend:", 1)[0].splitlines() if line.strip()]
    if not rows:
        return {"source": "nvidia-smi topo -m", "lines": [], "links": {}}
    header = [cell.strip() for cell in rows[0].split("\t") if cell.strip()]
    gpus = [name for name in header if re.fullmatch(r"GPU\d+", name)]
    links: dict[str, dict[str, str]] = {}
    matrix = [rows[0]]
    for line in rows[1:]:
        cells = [cell.strip() for cell in line.split("\t")]
        if cells[0] in gpus:
            matrix.append(line)
            links[cells[0]] = {far: cells[1 + i] for i, far in enumerate(gpus)
                               if far != cells[0] and 1 + i < len(cells)}
    return {"source": "nvidia-smi topo -m", "lines": matrix, "links": links}


def nvidia_lines(text: str) -> list[str]:
    """The NVIDIA driver's lines of a kernel log, the last KERNEL_LOG_LINES of them."""
    return [line.rstrip() for line in text.splitlines() if _NVIDIA_LINE.search(line)][-KERNEL_LOG_LINES:]


DPKG_QUERY = ["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n", "*nvidia*"]
RPM_QUERY = ["rpm", "-qa", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\n"]


def driver_packages() -> dict[str, Any]:
    """The NVIDIA driver packages installed: {"manager": "dpkg" | "rpm" | None, "packages": [{"name", "version"}],
    "flavour": "open" | "proprietary" | "both" | None (no driver package)}."""
    dpkg = _output(DPKG_QUERY)
    if dpkg is not None:
        return packages_record("dpkg", dpkg_packages(dpkg[1]))
    rpm = _output(RPM_QUERY)
    if rpm is not None:
        return packages_record("rpm", rpm_packages(rpm[1]))
    return {"manager": None, "packages": [], "flavour": None}


def packages_record(manager: str, packages: list[dict[str, str]]) -> dict[str, Any]:
    return {"manager": manager, "packages": packages, "flavour": flavour(p["name"] for p in packages)}


def dpkg_packages(text: str) -> list[dict[str, str]]:
    """Installed packages (status `ii`) of DPKG_QUERY's output; dpkg lists removed ones too (`rc`, `un`)."""
    rows = [line.split("\t") for line in text.splitlines() if line.count("\t") == 2]
    return [{"name": name, "version": version} for name, version, status in rows if status.startswith("ii")]


def rpm_packages(text: str) -> list[dict[str, str]]:
    rows = [line.split("\t") for line in text.splitlines() if line.count("\t") == 1 and "nvidia" in line.lower()]
    return [{"name": name, "version": version} for name, version in rows]


def flavour(names: Iterable[str]) -> str | None:
    """open, proprietary or both, from the driver packages among `names` (libraries and tools say nothing)."""
    opened = {bool(OPEN_PACKAGE.search(name)) for name in names
              if _DRIVER_PACKAGE.match(name) or OPEN_PACKAGE.search(name)}
    if not opened:
        return None
    return "both" if opened == {True, False} else "open" if True in opened else "proprietary"


def nvlink_links(pynvml: Any, handle: Any) -> list[dict[str, Any]]:
    """One GPU's NVLinks: {"link", "active", "remote_bus_id"} (the PCI address the link reaches, for an
    active link; None where NVML does not say), in link order."""
    links = []
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            active = bool(pynvml.nvmlDeviceGetNvLinkState(handle, link))
        except pynvml.NVMLError:  # no such link (or no NVLink at all on this GPU)
            break
        remote = None
        if active:
            try:
                remote = _bus_id(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            except pynvml.NVMLError:
                remote = None
        links.append({"link": link, "active": active, "remote_bus_id": remote})
    return links


def _bus_id(value: Any) -> str:
    """A PCI address in /sys/bus/pci's spelling (0000:1b:00.0); NVML prints 00000000:1B:00.0."""
    text = (value.decode() if isinstance(value, bytes) else str(value)).strip().lower()
    parts = text.split(":")
    return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}" if len(parts) == 3 else text


def join_peers(gpus: list[dict[str, Any]]) -> None:
    """Name the GPU each active link reaches (`remote_gpu`: its NVML index; None: a switch or a device NVML does
    not list), from the GPUs' own PCI addresses (`pci_bus_id`)."""
    by_address = {gpu["pci_bus_id"]: gpu["index"] for gpu in gpus if gpu.get("pci_bus_id")}
    for gpu in gpus:
        for link in gpu.get("nvlink", []):
            link["remote_gpu"] = by_address.get(link.get("remote_bus_id") or "")


def pci_bus_id(pynvml: Any, handle: Any) -> str | None:
    try:
        return _bus_id(pynvml.nvmlDeviceGetPciInfo(handle).busId)
    except pynvml.NVMLError:
        return None
