"""ninferkit: a reproducible runbook for standing up and measuring an LLM server on a lab GPU box.

Notebooks call these names; everything else is reachable through the submodules. Subpackages load on
first use (PEP 562), so the command line starts without pandas, matplotlib or papermill.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ninferkit.errors import (
    ArtifactError,
    ChecksumMismatch,
    NinferkitError,
    ProfileError,
    ReadinessTimeout,
    RequestFailed,
    ServerError,
    ServerExited,
    ServerStartError,
    StepFailed,
    ToolMissing,
)
from ninferkit.version import __version__

if TYPE_CHECKING:
    from ninferkit import artifact, capacity, console, deploy, report, steps, sweeps
    from ninferkit.params import Profile, load_profile
    from ninferkit.rundir.runs import Run, RunDir, open_run
    from ninferkit.steps import probe
    from ninferkit.steps.runner import run_runbook


_SUBMODULES = {"artifact": "ninferkit.artifact", "capacity": "ninferkit.capacity", "console": "ninferkit.console",
               "deploy": "ninferkit.deploy",
               "probe": "ninferkit.steps.probe", "report": "ninferkit.report", "steps": "ninferkit.steps",
               "sweeps": "ninferkit.sweeps"}
_NAMES = {"Profile": "ninferkit.params", "load_profile": "ninferkit.params", "run_runbook": "ninferkit.steps.runner",
          "Run": "ninferkit.rundir.runs", "RunDir": "ninferkit.rundir.runs", "open_run": "ninferkit.rundir.runs"}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(_SUBMODULES[name])
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'ninferkit' has no attribute {name!r}")


__all__ = [
    "ArtifactError",
    "ChecksumMismatch",
    "NinferkitError",
    "Profile",
    "ProfileError",
    "ReadinessTimeout",
    "RequestFailed",
    "Run",
    "RunDir",
    "ServerError",
    "ServerExited",
    "ServerStartError",
    "StepFailed",
    "ToolMissing",
    "__version__",
    "artifact",
    "capacity",
    "console",
    "deploy",
    "load_profile",
    "open_run",
    "probe",
    "report",
    "run_runbook",
    "steps",
    "sweeps",
]
