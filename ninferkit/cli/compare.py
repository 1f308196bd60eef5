"""`ninferkit compare RUN_A RUN_B [...]`: per-cell deltas of later runs against the first.

`--fail-on-regression PCT` gates a new build in CI: exit 1, one line per metric, when a metric got worse by
more than PCT percent and outside the bootstrap interval of the runs' repeats (`sweeps.repeats` >= 2)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

SHOWN = ["candidate", "sweep", "cell", "metric", "median_a", "median_b", "delta_pct", "paired_delta",
         "spread_a_pct", "spread_b_pct", "verdict", "comparable"]
NUMERIC = ["median_a", "median_b", "delta_pct", "paired_delta", "spread_a_pct", "spread_b_pct", "interval_low",
           "interval_high"]
INTERVAL = ["repeats_a", "repeats_b", "interval_low", "interval_high", "outside_interval"]
"""Shown where both runs repeated a cell (the table has these columns only then)."""


def _percentage(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < 1000:  # NaN fails too
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage; allowed: a number from 0 to 1000, e.g. 5")
    return value


def add_parser(subparsers: Any, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "compare", help=summary)
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="baseline first, then the candidates")
    parser.add_argument("--out", type=Path,
                        help="folder for index.md, index.html and table.csv "
                             "(default: LAST_RUN/report/compare-vs-<first run id>)")
    parser.add_argument("--same-serving", action="store_true",
                        help="state that the runs serve one configuration (a --url run, an import: what the rule "
                             "cannot prove); the write-up says you stated it")
    parser.add_argument("--fail-on-regression", type=_percentage, metavar="PCT",
                        help="exit 1 when a metric got worse by more than PCT percent and outside the bootstrap "
                             "interval of the runs' repeats (needs sweeps.repeats >= 2 in both runs)")
    return parser


def main(args: argparse.Namespace) -> int:
    import pandas as pd

    from ninferkit.report import compare_runs
    from ninferkit.report.compare import regressions
    from ninferkit.report.fmt import number
    from ninferkit.rundir.runs import RunDir

    comparison = compare_runs(args.run_dirs, args.same_serving)
    for line in comparison.serving:
        print(f"serving: {line}")
    gate = regressions(comparison, args.fail_on_regression) if args.fail_on_regression is not None else None
    out = args.out or RunDir(Path(args.run_dirs[-1])).comparison(comparison.run_ids[0])
    files = comparison.write(out)
    columns = SHOWN + [column for column in INTERVAL if column in comparison.table]
    shown = comparison.table[columns] if not comparison.table.empty else comparison.table
    with pd.option_context("display.width", 200, "display.max_colwidth", 60, "display.max_rows", None):
        print(shown.to_string(index=False, na_rep="—", formatters={column: number for column in NUMERIC}))
    for line in comparison.unpaired:
        print(f"unpaired: {line}")
    for line in comparison.caveats:
        print(f"caveat: {line}")
    print(f"written: {files['markdown']}")
    if gate is None:
        return 0
    found, ungated = gate
    for line in ungated:
        print(line)
    for regression in found:
        print(regression.line())
    if not found:
        print(f"no regression beyond {args.fail_on_regression:g}% outside the interval")
    return 1 if found else 0
