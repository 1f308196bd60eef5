"""The post's "What this run does not reproduce": the report's tables its profile cannot make, and why.

Read from the profile the run recorded (`not_reproduced`, params/not_reproduced.py), so a post re-rendered later
says what its run's profile said. A reader comparing the post with the report it follows sees a missing table named
with its reason, instead of guessing whether it was forgotten.
"""

from __future__ import annotations

from pydantic import ValidationError

from ninferkit.params.not_reproduced import NotReproduced
from ninferkit.report.data import RunData
from ninferkit.report.document import Bullets, Paragraph, Section

TITLE = "What this run does not reproduce"


def section(run: RunData) -> Section | None:
    """One bullet per entry ("item: why"); None for a run whose profile names none."""
    recorded = run.profile.get("not_reproduced")
    if not recorded or not isinstance(recorded, list):
        return None
    try:
        entries = [NotReproduced.model_validate(entry) for entry in recorded]
    except ValidationError:
        return Section(TITLE, [Paragraph("The recorded profile lists what it does not reproduce in a form this "
                                         "ninferkit no longer reads; see the profile in the run's manifest.json.")])
    return Section(TITLE, [Bullets(tuple(f"{entry.item}: {entry.why}" for entry in entries))])
