"""The `report:` section of a profile: how 05_writeup titles and frames the write-up."""

from __future__ import annotations

from ninferkit.params.base import Section


class ReportSection(Section):
    title: str | None = None
