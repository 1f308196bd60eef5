"""The GPUs as NVML sees them: what the setup probe records and what the llama.cpp build takes its CUDA
architecture from. Its own module, so the build asks NVML itself rather than the setup step (which finds the
model files through the build: the circle this module ends)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ninferkit.host import evidence as host_evidence
from ninferkit.rundir.records import GpuInfo


def gpu_facts() -> dict[str, Any]:
    """GPUs as NVML sees them; {'available': False, 'reason': ...} when there is no driver."""
    try:
        import pynvml
    except ImportError:
        return {"available": False, "reason": "pynvml is not installed", "gpus": []}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"available": False, "reason": f"NVML could not start ({exc}): no NVIDIA driver loaded", "gpus": []}
    try:
        gpus = [_one_gpu(pynvml, index) for index in range(pynvml.nvmlDeviceGetCount())]
        host_evidence.join_peers(gpus)
        return {
            "available": bool(gpus),
            "driver_version": _text(pynvml.nvmlSystemGetDriverVersion()),
            "cuda_driver_version": _cuda_version(pynvml),
            "gpus": gpus,
        }
    finally:
        pynvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cuda_version(pynvml: Any) -> str | None:
    try:
        version = int(pynvml.nvmlSystemGetCudaDriverVersion())
    except pynvml.NVMLError:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def _optional(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception:  # NVML raises many subclasses for "not supported on this GPU"
        return None


def _watts(milliwatts: Any) -> float | None:
    """NVML's milliwatts as watts; None where NVML did not say."""
    return milliwatts / 1000 if milliwatts is not None else None


def _one_gpu(pynvml: Any, index: int) -> dict[str, Any]:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
    power_limit = _optional(lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle))
    default_limit = _optional(lambda: pynvml.nvmlDeviceGetPowerManagementDefaultLimit(handle))
    limit_range = _optional(lambda: pynvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)) or (None, None)
    power_draw = _optional(lambda: pynvml.nvmlDeviceGetPowerUsage(handle))
    return {
        "index": index,
        "name": _text(pynvml.nvmlDeviceGetName(handle)),
        "uuid": _text(_optional(lambda: pynvml.nvmlDeviceGetUUID(handle)) or ""),
        "compute_capability": f"{major}.{minor}",
        "arch": f"sm_{major}{minor}",
        "memory_total_bytes": int(memory.total),
        "memory_free_bytes": int(memory.free),
        "power_limit_w": _watts(power_limit),
        "power_limit_default_w": _watts(default_limit),
        "power_limit_min_w": _watts(limit_range[0]),
        "power_limit_max_w": _watts(limit_range[1]),
        "power_draw_w": _watts(power_draw),
        "sm_clock_mhz": _optional(lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
        "sm_clock_max_mhz": _optional(lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)),
        "mem_clock_mhz": _optional(lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)),
        "temperature_c": _optional(lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
        "pcie_gen": _optional(lambda: pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
        "pcie_gen_max": _optional(lambda: pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
        "pcie_width": _optional(lambda: pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
        "pci_bus_id": host_evidence.pci_bus_id(pynvml, handle),
        "nvlink": host_evidence.nvlink_links(pynvml, handle),
    }


def power_limit_words(gpu: GpuInfo) -> str:
    """The power limit in force beside the card's default and the range it may be set to, as seed 000 §0 and §2.7
    write it ("200 W (default 250 W, settable 100–250 W)"): a lowered limit changes every figure measured under it,
    and the default says whether it was lowered. Where no default was read (probes before ninferkit read it, or a
    driver that does not say), that is said too: a bare "700 W" would read as the card's own figure, and the post's
    title keeps the limit for the same reason (report/lead.title_power_limit_w)."""
    if gpu.power_limit_w is None:
        return "not read"
    said = [f"default {gpu.power_limit_default_w:g} W" if gpu.power_limit_default_w is not None
            else "default not read"]
    if gpu.power_limit_min_w is not None and gpu.power_limit_max_w is not None:
        said.append(f"settable {gpu.power_limit_min_w:g}–{gpu.power_limit_max_w:g} W")
    return f"{gpu.power_limit_w:g} W ({', '.join(said)})"
