"""The `report:` section of a profile: how 05_writeup titles, renders and frames the write-up.

The report reads this section from the profile recorded in the run's manifest, so re-rendering an
old run uses the settings that run was made with.
"""

from __future__ import annotations

from pydantic import Field

from ninferkit.params.base import Section


class ReportSection(Section):
    title: str | None = Field(None, description="default: the model, GPU, power limit, best figures and engine")
    formats: list[str] = Field(default_factory=lambda: ["markdown", "html"], min_length=1,
                               description="registered renderers to write (ninferkit.report.renderers())")
    figure_dpi: int = Field(100, ge=50, le=400, description="dots per inch of the PNG figures")
    acceptance_gap_pct: float = Field(5.0, ge=0, description="acceptance gap (percentage points) above which "
                                      "decode figures are flagged as not comparable")
    spread_pct: float = Field(10.0, ge=0, description="run-to-run spread (coefficient of variation, %) above "
                              "which a cell is flagged as noisy")
