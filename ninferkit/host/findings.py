"""Setup findings from what failures leave on the host (host_evidence.py), each with the report's fix in its order.

Seed 000 §1.7's table is the source: the open kernel module on Volta is fixed by `apt purge "nvidia-*-open"`
first, then the proprietary R580 server driver, then `modprobe nvidia && nvidia-smi -L`. The kernel log and the
packages say so even where no module is loaded and NVML sees no GPU. Tensor parallel needs its GPUs linked to
each other (seed 004 §六.1), which an active link per GPU does not show: each link's far end does.

Only refusals whose text the field reports quote are matched in the kernel log (the GSP refusal, seed 000
§1.1); every NVIDIA line is still recorded in probe.json (facts.kernel_log) and shown in the write-up.
"""

from __future__ import annotations

import re

from ninferkit.finding import Finding
from ninferkit.host.evidence import OPEN_PACKAGE
from ninferkit.params.profile import Profile
from ninferkit.rundir.records import DriverPackages, GpuInfo, ProbeFacts

OPEN_MODULE_REFUSAL = re.compile(r"not supported by open(?: nvidia\.ko)?[ \t.]*$|not supported by open nvidia\.ko|"
                                 r"does not include the required GPU\b|System Processor \(GSP\)",
                                 re.IGNORECASE | re.MULTILINE)
"""What the open module prints on Volta: as seed 000 §1.1 and §1.7 quote it on one line, and as the kernel prints
it, over `NVRM:` lines (kernel-open/nvidia/nv.c: "...is not supported by open" / "NVRM: nvidia.ko because it does
not include the required GPU" / "NVRM: System Processor (GSP)."); each alternative matches within one line."""
PURGE_OPEN = 'sudo apt purge "nvidia-*-open"'
INSTALL_R580 = 'sudo apt-get install -y "linux-headers-$(uname -r)" nvidia-driver-580-server'
CHECK_DRIVER = "sudo modprobe nvidia && nvidia-smi -L"


def open_packages(packages: DriverPackages) -> list[str]:
    return [p.name for p in packages.packages if p.name and OPEN_PACKAGE.search(p.name)]


def open_module_fix(packages: DriverPackages) -> str:
    """Seed 000 §1.7's fix in its order: purge the open packages, install the proprietary R580 server driver,
    load it and list the GPUs (seed 000 §1.1). On an rpm system the report's apt lines become the packages."""
    if packages.manager == "rpm":
        names = " ".join(open_packages(packages)) or "the *-open driver packages"
        return (f"1. remove the open kernel module's packages ({names}); 2. install the proprietary R580 driver "
                f"(R580 is the last branch for Maxwell, Pascal and Volta); 3. {CHECK_DRIVER} (seed 000 §1.7)")
    return f"1. {PURGE_OPEN}; 2. {INSTALL_R580}; 3. {CHECK_DRIVER} (seed 000 §1.7, in its order)"


def open_evidence(facts: ProbeFacts) -> bool:
    """The kernel log has the open module's refusal, or the installed driver is the open module."""
    return bool(open_packages(facts.driver_packages)) or any(
        OPEN_MODULE_REFUSAL.search(line) for line in facts.kernel_log.lines)


def findings(facts: ProbeFacts, profile: Profile | None, before_turing: str | None) -> list[Finding]:
    """The kernel log's and the packages' findings; `before_turing` names the pre-Turing GPU the box has (NVML)
    or the profile expects, None when neither."""
    out: list[Finding] = []
    packages = facts.driver_packages
    open_names = open_packages(packages)
    refusal = next((line for line in facts.kernel_log.lines if OPEN_MODULE_REFUSAL.search(line)), None)
    if refusal is not None:
        out.append(Finding("error", "open_module_refused",
                           f"the kernel log has the open NVIDIA kernel module refusing a GPU (it needs a GPU System "
                           f"Processor, which GPUs before Turing lack): {refusal.strip()}",
                           open_module_fix(packages)))
    elif open_names and before_turing:
        out.append(Finding("error", "open_driver_packages_on_volta",
                           f"the installed NVIDIA driver is the open kernel module ({', '.join(open_names)}); "
                           f"{before_turing} needs the proprietary module",
                           open_module_fix(packages)))
    if facts.kernel_log.source is None and facts.kernel_log.reason and not facts.gpu.available:
        out.append(Finding("info", "kernel_log_unreadable",
                           f"the kernel log could not be read ({facts.kernel_log.reason}), so a driver's refusal "
                           "there is not seen", "run the setup step as root (or a user in group adm) to read it"))
    return out


def tensor_parallel_findings(facts: ProbeFacts, profile: Profile, gpus: list[GpuInfo]) -> list[Finding]:
    """serve.tensor_parallel needs that many GPUs, each pair linked by NVLink to each other (seed 004 §六.1)."""
    parallel = profile.serve.tensor_parallel_size()
    if parallel < 2 or not facts.gpu.available:
        return []  # no GPU at all: no_gpu or gpu_without_driver says so
    devices = list(profile.serve.gpu_devices or range(parallel))
    by_index = {g.index: g for g in gpus}
    if len(devices) < parallel or any(d not in by_index for d in devices):
        seen = ", ".join(f"{g.index}: {g.name}" for g in gpus)
        return [Finding("error", "tensor_parallel_gpus_missing",
                        f"serve.tensor_parallel {parallel} splits the model over GPUs {devices}, but NVML sees "
                        f"{len(gpus)} GPU(s) ({seen})",
                        f"run on a box with {parallel} GPUs joined by NVLink (seed 004: two V100-SXM2), or use a "
                        "one-GPU profile")]
    unlinked = []
    for position, first in enumerate(devices):
        for second in devices[position + 1:]:
            if not linked(by_index[first], by_index[second]):
                unlinked.append((first, second))
    if not unlinked:
        return []
    where = "; ".join(reach(by_index[d]) for d in devices)
    pairs = ", ".join(f"GPU {a} and GPU {b}" for a, b in unlinked)
    return [Finding("error", "tensor_parallel_without_nvlink",
                    f"{pairs} are not linked to each other by NVLink ({where}): tensor parallel {parallel} would "
                    "all-reduce over PCIe, where its speed collapses (seed 004 §六.1: a V100-PCIe card, or no "
                    "NVLink between the pair)",
                    "use GPUs joined by NVLink to each other (V100-SXM2 on an NVLink board; `nvidia-smi topo -m` shows "
                    "NV# between them), pick such a pair in serve.gpu_devices, or list tensor_parallel_without_nvlink "
                    "in gpu.waive to measure the PCIe case on purpose")]


def linked(first: GpuInfo, second: GpuInfo) -> bool:
    """An active link of one reaches the other. A probe.json from before links named their far end has only
    `active`: there, an active link on both is all that can be checked."""
    links = [link for gpu in (first, second) for link in gpu.nvlink if link.get("active")]
    if not any("remote_gpu" in link for link in links):
        return any(link.get("active") for link in first.nvlink) and any(link.get("active") for link in second.nvlink)
    return any(link.get("remote_gpu") == second.index for link in first.nvlink if link.get("active")) or \
        any(link.get("remote_gpu") == first.index for link in second.nvlink if link.get("active"))


def reach(gpu: GpuInfo) -> str:
    """Where a GPU's active links go, in words: 'GPU 0: 2 links to GPU 1, 1 to 0000:8a:00.0', or 'no active link'."""
    active = [link for link in gpu.nvlink if link.get("active")]
    if not active:
        return f"GPU {gpu.index}: no active NVLink"
    counts: dict[str, int] = {}
    for link in active:
        remote = link.get("remote_gpu")
        far = f"GPU {remote}" if remote is not None else link.get("remote_bus_id") or "an unnamed device"
        counts[far] = counts.get(far, 0) + 1
    return f"GPU {gpu.index}: " + ", ".join(f"{n} link{'s' if n > 1 else ''} to {far}" for far, n in counts.items())


def topology_pairs(facts: ProbeFacts) -> str:
    """Each GPU pair's connection as `nvidia-smi topo -m` printed it, in words ("GPU0–GPU1: NV4, a bonded set of 4
    NVLinks"); "" with fewer than two GPUs or no matrix read."""
    said = [(first, second, how) for first, row in facts.gpu_topology.links.items() for second, how in row.items()
            if int(first.removeprefix("GPU")) < int(second.removeprefix("GPU"))]  # each pair once
    return "; ".join(f"{a}–{b}: {how}" + (f", {_nvlinks(how)}" if re.fullmatch(r"NV\d+", how)
                                            else f", {TOPOLOGY_WORDS[how]}" if how in TOPOLOGY_WORDS else "")
                     for a, b, how in said)


def _nvlinks(how: str) -> str:
    """NV# in words, as the matrix's legend puts it ("a bonded set of # NVLinks"), one link as one."""
    return "one NVLink" if how == "NV1" else f"a bonded set of {how[2:]} NVLinks"


TOPOLOGY_WORDS = {"SYS": "PCIe and the interconnect between NUMA nodes, no NVLink",
                  "NODE": "PCIe and the interconnect between host bridges in one NUMA node, no NVLink",
                  "PHB": "PCIe through a host bridge, no NVLink", "PXB": "PCIe through several bridges, no NVLink",
                  "PIX": "PCIe through at most one bridge, no NVLink"}
"""The legend `nvidia-smi topo -m` prints under its matrix, shortened."""


def environment_rows(facts: ProbeFacts) -> list[tuple[str, str]]:
    """(fact, value) rows of the evidence for the write-up's Environment and `ninferkit probe`: where each GPU's
    NVLinks go (where any GPU has one), the driver packages with their flavour, and the kernel log's NVIDIA lines."""
    rows: list[tuple[str, str]] = []
    gpus = facts.gpu.gpus
    if any(link.get("active") for gpu in gpus for link in gpu.nvlink):
        rows.append(("NVLink", "; ".join(reach(gpu) for gpu in gpus)))
    pairs = topology_pairs(facts)
    if pairs:
        rows.append(("GPU pairs (nvidia-smi topo -m)", pairs))
    packages = facts.driver_packages
    if packages.manager is not None:
        names = ", ".join(f"{p.name} {p.version}" for p in packages.packages) or "none"
        rows.append(("driver packages", f"{packages.manager}: {names}"
                     + (f" ({packages.flavour} kernel module)" if packages.flavour else "")))
    log = facts.kernel_log
    if log.source is not None:
        rows.append(("kernel log", f"{log.source}: {len(log.lines)} NVIDIA line(s)"
                     + (f", last: {log.lines[-1].strip()}" if log.lines else "")))
    elif log.reason:
        rows.append(("kernel log", f"not read ({log.reason})"))
    return rows
