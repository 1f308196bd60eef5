"""The write-up step (05_writeup): the run's report/ from its raw files (ninferkit/report)."""

from __future__ import annotations

from ninferkit.report.build import Report, write_report
from ninferkit.rundir.runs import Run
from ninferkit.steps.catalog import Step


def writeup(run: Run, *, formats: list[str] | None = None) -> Report:
    """The run's report/ from its raw files, as `write_report` writes it."""
    return write_report(run.dir.path, formats)


STEP = Step("writeup", "05_writeup.ipynb", "report/", writeup, url=True)
