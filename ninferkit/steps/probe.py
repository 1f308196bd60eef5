"""Environment facts for the setup step, and the rules that turn facts into findings with a fix.

Facts come from NVML (pynvml), /proc, /sys (the PCI bus), nvcc and docker; a machine with no NVIDIA
driver is a fact ("no GPU"), not an error, because the embedded default needs no GPU. The rules are
the checks the field reports do by hand: open kernel module or a driver after R580 on Volta, a card
on the bus with no driver, a CUDA 13 toolkit for an sm_70 build, a KV dtype the architecture has no
kernel for, a power limit other than the profile's, too little disk, tensor parallel without two
NVLinked GPUs, vision without its image budget, `--kv-capacity auto` without room, and a CPU feature
that crashes the engine build (AMX with Q4_1 weights in llama.cpp 11434). A finding of severity error
stops the setup step unless the profile waives its code (`gpu.waive`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from ninferkit.artifact.paths import local_dir, planned_path
from ninferkit.engines import get_adapter
from ninferkit.finding import Finding, Severity
from ninferkit.host import evidence as host_evidence
from ninferkit.host import findings as evidence_findings
from ninferkit.host.cpu import host_cpu
from ninferkit.host.gpu import gpu_facts, power_limit_words
from ninferkit.host.machine import form, machine_facts
from ninferkit.host.mounts import file_system, read_mount
from ninferkit.params.profile import Profile
from ninferkit.rundir.records import GpuInfo, ProbeFacts, ProbeRecord, RecordedFinding
from ninferkit.units import GIB


def _run(argv: list[str], timeout: float = 10) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout + done.stderr).strip() if done.returncode == 0 else None


def kernel_module() -> dict[str, Any]:
    """Proprietary or open NVIDIA kernel module, from /proc/driver/nvidia/version."""
    path = Path("/proc/driver/nvidia/version")
    if not path.exists():
        return {"loaded": False, "flavour": None, "version_line": None}
    line = path.read_text().splitlines()[0]
    return {"loaded": True, "flavour": "open" if "Open Kernel Module" in line else "proprietary", "version_line": line}


def cuda_toolkit() -> dict[str, Any]:
    out = _run(["nvcc", "--version"])
    match = re.search(r"release (\d+\.\d+)", out or "")
    return {"nvcc": shutil.which("nvcc"), "version": match[1] if match else None}


def docker_facts() -> dict[str, Any]:
    client = _run(["docker", "--version"])
    runtimes = _run(["docker", "info", "--format", "{{json .Runtimes}}"])
    return {
        "client": client,
        "engine_running": runtimes is not None,
        "nvidia_runtime": bool(runtimes and "nvidia" in runtimes),
    }


def cpu_facts() -> dict[str, Any]:
    """The CPU's model and the flags that decide which kernels a CPU build runs (`amx`: Intel AMX's flags)."""
    cpu = host_cpu()
    return {"model": cpu.model, "cores": os.cpu_count(), "avx2": "avx2" in cpu.flags,
            "avx512f": "avx512f" in cpu.flags, "amx": sorted(flag for flag in cpu.flags if flag.startswith("amx"))}


def disk_facts(where: Path) -> dict[str, Any]:
    """Room at the artifact's folder, and the file system holding it (local or network: host/mounts.py)."""
    existing = where
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    usage = shutil.disk_usage(existing)
    mount = read_mount(where)
    return {"path": str(where), "free_bytes": usage.free, "total_bytes": usage.total,
            **({"mount_point": mount.mount_point, "fstype": mount.fstype, "mount_source": mount.source,
                "network": mount.network} if mount else {})}


PCI_DEVICES = Path("/sys/bus/pci/devices")
NVIDIA_VENDOR = "0x10de"


def pci_gpus(devices: Path = PCI_DEVICES) -> list[dict[str, Any]]:
    """NVIDIA display and 3D controllers on the PCI bus, with the kernel driver bound to each (None: none).

    What `lspci -n` shows when NVML cannot: a passed-through card with no driver installed is
    `10de:1db6` on the bus while nvidia-smi "couldn't communicate with the NVIDIA driver" (seed 000 §1.7).
    """
    found = []
    for device in sorted(devices.glob("*")):
        try:
            vendor, model, klass = ((device / name).read_text().strip() for name in ("vendor", "device", "class"))
        except OSError:
            continue
        if vendor != NVIDIA_VENDOR or not klass.startswith("0x03"):  # 0x03xxxx: display controllers (not audio)
            continue
        driver = device / "driver"
        found.append({"address": device.name, "id": f"10de:{model.removeprefix('0x')}", "class": klass,
                      "driver": driver.resolve().name if driver.exists() else None})
    return found


def collect(profile: Profile | None = None) -> ProbeFacts:
    """Every fact the setup step records; cheap enough to call from the CLI without a notebook."""
    artifact_dir = local_dir(profile) if profile else Path.home()
    return ProbeFacts.model_validate({
        "gpu": gpu_facts(),
        "pci_gpus": pci_gpus(),
        "kernel_module": kernel_module(),
        "kernel_log": host_evidence.kernel_log(),
        "driver_packages": host_evidence.driver_packages(),
        "gpu_topology": host_evidence.gpu_topology(),
        "cuda_toolkit": cuda_toolkit(),
        "docker": docker_facts(),
        "cpu": cpu_facts(),
        "disk": disk_facts(artifact_dir),
        "host": machine_facts(),
    })


# --- rules: facts (+ profile) -> findings -------------------------------------------------------

KV_DTYPES_BY_ARCH = {
    # From the field reports: Volta kernels exist for bf16/int8 KV only; fp8 KV is rejected below SM89.
    "fp8": 89,
}
LAST_BRANCH_BEFORE_TURING = 580  # seed 000 §1.1: "R580 是 Maxwell / Pascal / Volta 的最后一条驱动分支"
TURING = 75  # sm_75: the first architecture the open kernel module and drivers after R580 support
def _arch_number(arch: str | None) -> int | None:
    return int(arch[3:]) if arch and arch.startswith("sm_") else None


def findings(facts: ProbeFacts, profile: Profile | None = None) -> list[Finding]:
    """Every rule's finding on these facts (as probe.json records them), marked waived where the profile
    lists its code in gpu.waive."""
    gpus = facts.gpu.gpus
    out = _driver_findings(facts, profile, gpus)
    out += evidence_findings.findings(facts, profile, _before_turing(gpus, profile))
    if profile is not None:
        out += _toolkit_findings(facts, profile)
        out += _profile_findings(facts, profile, gpus)
        out += evidence_findings.tensor_parallel_findings(facts, profile, gpus)
        out += get_adapter(profile.engine.kind).setup_findings(profile, facts, planned_path(profile))
    waived = set(profile.gpu.waive) if profile is not None else set()
    return [replace(finding, waived=finding.code in waived) for finding in out]


def _driver_findings(facts: ProbeFacts, profile: Profile | None, gpus: list[GpuInfo]) -> list[Finding]:
    out: list[Finding] = []
    gpu = facts.gpu
    required = profile is not None and profile.gpu.required
    undriven = [card for card in facts.pci_gpus if card.driver != "nvidia"]
    if not gpu.available and undriven:
        cards = ", ".join(f"{c.id} at {c.address} (driver: {c.driver or 'none'})" for c in undriven)
        out.append(Finding("error" if required else "warning", "gpu_without_driver",
                           f"NVML sees no GPU ({gpu.reason or 'none found'}), but the PCI bus has NVIDIA "
                           f"card(s) no NVIDIA driver drives: {cards}",
                           evidence_findings.open_module_fix(facts.driver_packages)
                           if evidence_findings.open_evidence(facts) else
                           "install the proprietary NVIDIA driver (nvidia-driver-580-server for Maxwell, Pascal "
                           "and Volta; seed 000 §1.7), then: sudo modprobe nvidia && nvidia-smi -L"))
    elif not gpu.available:
        severity: Severity = "error" if required else "info"
        out.append(Finding(severity, "no_gpu", f"No NVIDIA GPU: {gpu.reason or 'none found'}",
                           "install the proprietary NVIDIA driver (R580 for Volta)" if severity == "error"
                           else "fine for the embedded default, which runs on the CPU"))
    old = _before_turing(gpus, profile)
    module = facts.kernel_module
    if module.flavour == "open" and old:
        out.append(Finding("error", "open_module_on_volta",
                           f"the open NVIDIA kernel module is loaded; {old} needs the proprietary module (the open "
                           "one requires a GPU System Processor, which GPUs before Turing lack)",
                           evidence_findings.open_module_fix(facts.driver_packages)))
    version = gpu.driver_version or _version_in(module.version_line)
    if version and old and int(version.split(".")[0]) > LAST_BRANCH_BEFORE_TURING:
        out.append(Finding("error", "driver_branch_too_new",
                           f"driver {version} is branch R{version.split('.')[0]}; R{LAST_BRANCH_BEFORE_TURING} is "
                           f"the last branch that supports Maxwell, Pascal and Volta, and the box has {old} "
                           "(seed 000 §1.1)",
                           "install the R580 proprietary driver: sudo apt-get install nvidia-driver-580-server"))
    return out


def _before_turing(gpus: list[GpuInfo], profile: Profile | None) -> str | None:
    """The pre-Turing GPU NVML lists, or, where NVML lists none (a driver that does not drive it), the
    pre-Turing architecture the profile expects; None when neither."""
    for g in gpus:
        number = _arch_number(g.arch)
        if number is not None and number < TURING:
            return f"GPU {g.index} ({g.name}, {g.arch})"
    if gpus or profile is None:
        return None
    expected = _arch_number(profile.gpu.arch)
    return f"the profile's gpu.arch {profile.gpu.arch}" if expected is not None and expected < TURING else None


def _version_in(line: str | None) -> str | None:
    """The driver version in /proc/driver/nvidia/version's first line (NVML may not start without a GPU)."""
    found = re.search(r"\s(\d{3,}\.\d+(?:\.\d+)?)\s", line or "")
    return found[1] if found else None


def _toolkit_findings(facts: ProbeFacts, profile: Profile) -> list[Finding]:
    toolkit = facts.cuda_toolkit.version
    build = profile.engine.build
    wants_sm70 = profile.gpu.arch == "sm_70" or (build is not None and build.cuda_arch == "70")
    if not toolkit or not wants_sm70 or int(toolkit.split(".")[0]) < 13:
        return []
    # ninferkit compiles an engine only when no engine.binary is given (llama-server); a given binary was
    # built beforehand (seed 000 §1.2 builds NInfer with CUDA 12.8), maybe on another host
    builds_here = profile.engine.binary is None and not profile.serve.docker
    return [Finding("error" if builds_here else "warning", "cuda13_for_sm70",
                    f"CUDA {toolkit} cannot compile for sm_70 (Volta support was removed in CUDA 13)"
                    + ("" if builds_here else "; fine if the engine binary was built with CUDA 12.8"),
                    "install the CUDA 12.8 toolkit for the engine build")]


def _profile_findings(facts: ProbeFacts, profile: Profile, gpus: list[GpuInfo]) -> list[Finding]:
    out: list[Finding] = []
    first = gpus[0] if gpus else None
    kv = (profile.serve.kv.dtype or "").lower()
    arch = _arch_number(first.arch if first else profile.gpu.arch)
    needed = KV_DTYPES_BY_ARCH.get(kv)
    if needed is not None and arch is not None and arch < needed:
        out.append(Finding("error", "kv_dtype_unsupported",
                           f"KV dtype {kv} has no kernel on sm_{arch} (needs sm_{needed} or newer)",
                           "use int8 (or bf16) KV on this GPU"))
    if first and profile.gpu.arch and first.arch != profile.gpu.arch:
        out.append(Finding("warning", "gpu_arch_differs",
                           f"GPU is {first.arch} ({first.name}), the profile expects {profile.gpu.arch}",
                           "use a profile written for this GPU"))
    if first and profile.gpu.power_limit_w and first.power_limit_w:
        actual = first.power_limit_w
        if abs(actual - profile.gpu.power_limit_w) > 1:
            out.append(Finding("warning", "power_limit_differs",
                               f"power limit is {actual:.0f} W, the profile expects {profile.gpu.power_limit_w:.0f} W",
                               f"sudo ninferkit probe --apply --profile PROFILE (persistence mode, the limit and "
                               f"the boot unit that re-applies it), or by hand: sudo nvidia-smi -pm 1 && sudo "
                               f"nvidia-smi -pl {profile.gpu.power_limit_w:.0f} (seed 000 §1.1)"))
    if first and profile.gpu.memory_gib and first.memory_total_bytes is not None:
        total_gib = first.memory_total_bytes / GIB
        if total_gib < profile.gpu.memory_gib * 0.97:
            out.append(Finding("error", "gpu_memory_low",
                               f"GPU has {total_gib:.1f} GiB, the profile expects {profile.gpu.memory_gib:.0f} GiB",
                               "use a profile sized for this GPU (smaller context or KV capacity)"))
    size = profile.artifact.size_bytes
    free = facts.disk.free_bytes
    if size and free is not None and free < size * 1.1:
        out.append(Finding("error", "disk_low",
                           f"{free / GIB:.1f} GiB free at {facts.disk.path}, the artifact needs "
                           f"{size / GIB:.1f} GiB", "free disk space or point artifact.local_dir elsewhere"))
    if profile.serve.docker and not facts.docker.nvidia_runtime:
        out.append(Finding("error", "no_nvidia_container_runtime",
                           "the profile launches in Docker but no Docker engine with the NVIDIA runtime answers",
                           "install Docker and the NVIDIA container toolkit, or set serve.docker: false"))
    return out


def probe(profile: Profile | None = None) -> ProbeRecord:
    """Facts plus findings, as written to probe.json."""
    facts = collect(profile)
    judged = [RecordedFinding.model_validate(asdict(finding)) for finding in findings(facts, profile)]
    return ProbeRecord(facts=facts, findings=judged)


def _gib(size: int | None) -> str:
    return "size not read" if size is None else f"{size / GIB:.1f} GiB"


def describe(record: ProbeRecord) -> str:
    """A few human lines: the GPUs, then each finding with its fix."""
    facts = record.facts
    lines = []
    gpu = facts.gpu
    if gpu.available:
        lines.append(f"driver {gpu.driver_version} (CUDA {gpu.cuda_driver_version}), "
                     f"module {facts.kernel_module.flavour}")
        for g in gpu.gpus:
            lines.append(f"GPU {g.index}: {g.name} {g.arch}, {_gib(g.memory_total_bytes)}, "
                         f"power limit {power_limit_words(g)}, PCIe gen {g.pcie_gen} x{g.pcie_width}")
    cpu = facts.cpu
    lines.append(f"CPU: {cpu.model} ({cpu.cores} cores, AVX-512: {'yes' if cpu.avx512f else 'no'}, "
                 f"AMX: {', '.join(cpu.amx or ()) or 'no'})")
    lines.append(f"CUDA toolkit: {facts.cuda_toolkit.version or 'not found'}; docker: "
                 f"{'running' if facts.docker.engine_running else 'no engine'}")
    lines.append(f"disk free at {facts.disk.path}: {_gib(facts.disk.free_bytes)}" + (
        f" ({file_system(facts.disk)})" if facts.disk.fstype else ""))
    host = facts.host
    lines.append(f"host: {form(host)}, memory {_gib(host.memory_total_bytes)}" + (
        f", system disk (/) {_gib(host.system_disk_total_bytes)} ({_gib(host.system_disk_free_bytes)} free)"
        if host.system_disk_total_bytes is not None else ""))
    lines += [f"{fact}: {value}" for fact, value in evidence_findings.environment_rows(facts)]
    for f in record.findings:
        waived = ", waived by gpu.waive" if f.waived else ""
        lines.append(f"[{f.severity}{waived}] {f.code}: {f.message}" + (f" -> {f.fix}" if f.fix else ""))
    return "\n".join(lines)
