"""A setup finding: a fact about the machine or the profile that decides whether a run can succeed.

The setup step's probe (ninferkit/probe.py) and each engine adapter (`EngineAdapter.setup_findings`)
make them; probe.json records them; one of severity error stops the run unless `gpu.waive` names its code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ninferkit.params.profile import FindingCode

Severity = Literal["info", "warning", "error"]


@dataclass(frozen=True)
class Finding:
    severity: Severity
    code: FindingCode
    message: str
    fix: str = ""
    waived: bool = False
    """The profile lists the code in gpu.waive: recorded, but it does not stop the run."""
