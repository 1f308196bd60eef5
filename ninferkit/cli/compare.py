"""`ninferkit compare RUN_A RUN_B [...]`: per-cell deltas of later runs against the first."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

SHOWN = ["candidate", "sweep", "cell", "metric", "median_a", "median_b", "delta_pct", "paired_delta",
         "spread_a_pct", "spread_b_pct", "verdict", "comparable"]
NUMERIC = ["median_a", "median_b", "delta_pct", "paired_delta", "spread_a_pct", "spread_b_pct"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "compare", help="A/B: per-cell deltas of RUN_B (and later runs) against RUN_A, with run-to-run spread")
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="baseline first, then the candidates")
    parser.add_argument("--out", type=Path,
                        help="folder for index.md, index.html and table.csv "
                             "(default: LAST_RUN/report/compare-vs-<first run id>)")
    return parser


def main(args: argparse.Namespace) -> int:
    import pandas as pd

    from ninferkit.report import compare_runs
    from ninferkit.report.fmt import number
    from ninferkit.runs import RunDir

    comparison = compare_runs(args.run_dirs)
    out = args.out or RunDir(Path(args.run_dirs[-1])).comparison(comparison.run_ids[0])
    files = comparison.write(out)
    shown = comparison.table[SHOWN] if not comparison.table.empty else comparison.table
    with pd.option_context("display.width", 200, "display.max_colwidth", 60, "display.max_rows", None):
        print(shown.to_string(index=False, na_rep="—", formatters={column: number for column in NUMERIC}))
    for line in comparison.unpaired:
        print(f"unpaired: {line}")
    for line in comparison.caveats:
        print(f"caveat: {line}")
    print(f"written: {files['markdown']}")
    return 0
