"""A setup finding: a fact about the machine or the profile that decides whether a run can succeed.

The setup step's probe (ninferkit/steps/probe.py) and each engine adapter (`EngineAdapter.setup_findings`)
make them; probe.json records them; one of severity error stops the run unless `gpu.waive` names its code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FindingCode = Literal[
    "no_gpu", "gpu_without_driver", "open_module_on_volta", "driver_branch_too_new", "cuda13_for_sm70",
    "kv_dtype_unsupported", "gpu_arch_differs", "power_limit_differs", "gpu_memory_low", "disk_low",
    "no_nvidia_container_runtime", "tensor_parallel_gpus_missing", "tensor_parallel_without_nvlink",
    "kv_auto_no_room", "amx_weight_repacking", "open_module_refused", "open_driver_packages_on_volta",
    "kernel_log_unreadable",
]
"""The codes of the setup step's findings (ninferkit/steps/probe.py), which `gpu.waive` may name."""

Severity = Literal["info", "warning", "error"]


@dataclass(frozen=True)
class Finding:
    severity: Severity
    code: FindingCode
    message: str
    fix: str = ""
    waived: bool = False
    """The profile lists the code in gpu.waive: recorded, but it does not stop the run."""
