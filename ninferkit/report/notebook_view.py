"""The write-up's tables in a notebook: the same views the post uses, shown as the post shows them.

A notebook cell that ended with a sweep table's DataFrame showed its 60 columns with pandas hiding 40 behind
`...` (the decode and p50/p90/p99 ones), numbers with 6 decimals and capacity in raw bytes, while the
write-up showed the same data readably. A cell now ends with one of these: the write-up's own blocks (its
chosen columns, numbers rounded by report/fmt.py, units in the headers, bytes as GiB), rendered by the
report's own renderer as HTML in JupyterLab and as Markdown where only text is shown (papermill's log).
The raw frames stay what the steps return; the notebooks keep them by name beside the view.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ninferkit.errors import NinferkitError
from ninferkit.report.build import build_document
from ninferkit.report.data import load_run
from ninferkit.report.document import Block, Paragraph, Table, table_from_frame
from ninferkit.report.figures import SWEEP_FIGURES, write_figures
from ninferkit.report.render import html_fragment, markdown_fragment
from ninferkit.report.views import sweep_view


class Shown:
    """Write-up blocks for a cell's output: `_repr_html_` for a notebook front end, the Markdown as its text."""

    def __init__(self, blocks: Sequence[Block]) -> None:
        self.blocks = tuple(blocks)

    def _repr_html_(self) -> str:
        return html_fragment(self.blocks)

    def __repr__(self) -> str:
        return markdown_fragment(self.blocks)

    def tables(self) -> list[Table]:
        """The tables shown, as text cells (what a test or a caller compares)."""
        return [block for block in self.blocks if isinstance(block, Table)]


def section(run_dir: str | Path, title: str) -> Shown:
    """One section of the run's write-up as it stands now (built from the run directory, figures left out):
    "Environment", "Acceptance checks", "Benchmarks", "Appendix: latency", "Capacity", "Headline", ..."""
    document = build_document(load_run(run_dir), {})
    for found in document.sections:
        if found.title == title:
            return Shown(found.blocks)
    raise NinferkitError(f"the write-up has no section {title!r}; its sections: "
                         + ", ".join(repr(s.title) for s in document.sections))


def sweep_table(name: str, frame: pd.DataFrame) -> Shown:
    """tables/<name>.csv as the write-up's Benchmarks section shows it (report.views.sweep_view)."""
    return Shown(sweep_view(name, frame))


def frame_table(frame: pd.DataFrame, caption: str = "") -> Shown:
    """Any frame as the write-up shows a table: every cell whole (pandas cuts long text at 50 characters),
    numbers rounded by report/fmt.py."""
    return Shown([table_from_frame(frame, caption)])


def sweep_figures(run_dir: str | Path) -> Shown:
    """The sweeps' figures where they ran (report.figures.SWEEP_FIGURES: the context curves, the concurrency and
    prefix-reuse figures, the latency distributions), drawn from the run directory into sweeps/figures/; a
    figure without data is left out, and with none drawn the cell says so."""
    run = load_run(run_dir)
    drawn = write_figures(run, run.dir.sweep_figures, run.settings.figure_dpi, SWEEP_FIGURES)
    blocks: list[Block] = list(drawn.values())
    return Shown(blocks or [Paragraph("No figure: the sweeps measured no request yet.")])
