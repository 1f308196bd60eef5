"""`ninferkit merge RUN_DIR... -o OUT`: one write-up across hosts from their raw rows (ninferkit/report/merge.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "merge", help="one write-up across hosts: percentiles over the union of their requests.jsonl rows")
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("-o", "--out", type=Path, required=True, help="folder for the merged rows and write-up")
    parser.add_argument("--same-serving", action="store_true",
                        help="state that the runs serve one configuration, to pool runs whose identity cannot be "
                             "proven alike (a --url run, an import); the write-up says you stated it and names "
                             "what differs")
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.report.merge import merge, serving_lines

    merged = merge(args.run_dirs, args.out, args.same_serving)
    for line in serving_lines(merged.servings, merged.stated):
        print(line, file=sys.stderr)
    for run in merged.runs:
        state = "complete" if not run.missing else "incomplete: " + ", ".join(run.missing)
        print(f"{run.host}: {run.gpu}, {len(run.rows)} rows, {state}")
    print(f"comparable cells: {merged.cells['cell'].nunique() if not merged.cells.empty else 0}; "
          f"not comparable: {len(merged.apart)}")
    print(f"write-up: {merged.folder / 'report' / 'index.md'}")
    return 0
