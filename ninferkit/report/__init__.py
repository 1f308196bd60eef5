"""The write-up of a run and the A/B comparison of runs, built from run directories only.

    >>> from ninferkit import report
    >>> report.write_report("runs/20261130-110000-local-cpu").markdown   # doctest: +SKIP
"""

from ninferkit.report.build import Report, build_document, write_report
from ninferkit.report.compare import Comparison, compare_runs
from ninferkit.report.data import RunData, load_run
from ninferkit.report.headline import HeadlineRow, headline, headline_table
from ninferkit.report.notebook_view import Shown, frame_table, section, sweep_figures, sweep_table
from ninferkit.report.render import get_renderer, register_renderer, renderers

__all__ = ["Comparison", "HeadlineRow", "Report", "RunData", "Shown", "build_document", "compare_runs", "frame_table",
           "get_renderer", "headline", "headline_table", "load_run", "register_renderer", "renderers", "section",
           "sweep_figures", "sweep_table", "write_report"]
