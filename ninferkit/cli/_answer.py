"""How a command that measures ends: with its answer, the run's headline numbers, then where its files are.

The numbers are the write-up's headline table (ninferkit.report.headline, each recomputed from the run's raw
rows), so the terminal, the JSON and the write-up never disagree. Text shows every field a headline row
carries beyond its best value and range (percentiles, where the rows have them) without knowing their names.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

SHOWN_APART = ("metric", "unit", "best", "low", "high", "samples", "where", "source")
"""The fields of a headline row the text lays out in its own columns; every other field a row carries (the
prompt length a row is about, percentiles, a standard deviation) gets a column of its own name."""
ABOUT = "prompt_tokens"
"""The field that says which part of the run a row is about: its column comes right after the metric."""


def add_answer_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print the answer as one JSON object (progress and step lines go to stderr)")
    add_quiet_arg(parser)


def add_quiet_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress (no bars, no progress lines): only the answer and errors; "
                             "also NINFERKIT_PROGRESS=off (bar or lines force that form)")


def say_for(args: argparse.Namespace) -> Callable[[str], None]:
    """Where a command's progress-like lines go: nowhere with --quiet, stderr with --json (stdout is the
    JSON), else stdout."""
    if args.quiet:
        return lambda line: None
    if args.json:
        return lambda line: print(line, file=sys.stderr, flush=True)
    return lambda line: print(line, flush=True)


def headline_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The run's headline rows as plain dicts (numbers unformatted), in the write-up's order."""
    from ninferkit.report import headline, load_run

    return [asdict(row) for row in headline(load_run(run_dir))]


def print_answer(run_dir: Path, paths: dict[str, Path | None], as_json: bool, **more: Any) -> None:
    """The headline of `run_dir`, then `paths` (name -> path; None: not written). JSON: one object with
    `headline`, the paths and `more`."""
    rows = headline_rows(run_dir)
    if as_json:
        shown = {name: None if path is None else str(path) for name, path in paths.items()}
        print(json.dumps({**more, "headline": rows, **shown}, indent=2, default=str))
        return
    print(headline_text(rows))
    for name, path in paths.items():
        if path is not None:
            print(f"{name.replace('_', ' ')}: {path}")


def headline_text(rows: list[dict[str, Any]]) -> str:
    """The measured rows as an aligned table, then one line per metric the run has no number for."""
    from ninferkit.report.fmt import number, span

    measured = [row for row in rows if row.get("best") is not None]
    lines = ["headline (the write-up's numbers, recomputed from the run's raw rows):"]
    extras = [key for key in dict.fromkeys(key for row in measured for key in row)
              if key not in SHOWN_APART and any(row.get(key) is not None for row in measured)]
    about = [key for key in extras if key == ABOUT]
    spread = [key for key in extras if key != ABOUT]
    header = ["metric", *about, "best", "unit", "range", *spread, "samples", "where"]
    table = [header] + [[str(row["metric"]), *(number(row.get(key)) for key in about), number(row["best"]),
                         str(row["unit"]), span(row["low"], row["high"]), *(number(row.get(key)) for key in spread),
                         number(row.get("samples")), str(row["where"])] for row in measured]
    if measured:
        widths = [max(len(cells[i]) for cells in table) for i in range(len(header))]
        lines += ["  " + "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))
                  for cells in table]
    lines += [f"  {row['metric']}: {row['where']}" for row in rows if row.get("best") is None]
    return "\n".join(line.rstrip() for line in lines)
