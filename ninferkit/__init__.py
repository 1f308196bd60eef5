"""ninferkit: a reproducible runbook for standing up and measuring an LLM server on a lab GPU box.

Notebooks call these names; everything else is reachable through the submodules.
"""

from ninferkit import artifact, capacity, probe, report, steps, sweeps
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
from ninferkit.params import Profile, load_profile
from ninferkit.runner import run_runbook
from ninferkit.runs import Run, RunDir, open_run

__version__ = "0.1.0"

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
    "artifact",
    "capacity",
    "load_profile",
    "open_run",
    "probe",
    "report",
    "run_runbook",
    "steps",
    "sweeps",
]
