"""What an engine says about a box and a model before anything is launched: the setup step's findings
beyond every engine's (ninferkit/steps/probe.py), and the artifact step's accepted container versions."""

from __future__ import annotations

from pathlib import Path

from ninferkit.engines.part import EnginePart
from ninferkit.finding import Finding
from ninferkit.params.profile import Profile
from ninferkit.rundir.records import ProbeFacts


class SetupRules(EnginePart):
    """An engine's own setup findings and the model containers it reads."""

    def setup_findings(self, profile: Profile, facts: ProbeFacts, model_path: Path) -> list[Finding]:
        """What the setup step's facts (probe.json's `facts`) mean for this engine, profile and model file
        (where the artifact step puts it; it may not be there yet), beyond what every engine shares (GPU,
        driver, disk, Docker: ninferkit/steps/probe.py)."""
        return []

    def accepted_container_versions(self, profile: Profile) -> frozenset[int] | None:
        """Artifact container versions this engine build reads; None when it has no container format."""
        return None
