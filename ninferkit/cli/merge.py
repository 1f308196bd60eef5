"""`ninferkit merge RUN_DIR... -o OUT`: one write-up across hosts from their raw rows (ninferkit/report/merge.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "merge", help=summary)
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("-o", "--out", type=Path, required=True, help="folder for the merged rows and write-up")
    parser.add_argument("--same-serving", action="store_true",
                        help="state that the runs serve one configuration, to pool runs whose identity cannot be "
                             "proven alike (a --url run, an import); the write-up says you stated it and names "
                             "what differs")
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.report.merge import merge, serving_lines

    refuse_overlaps(args.run_dirs, args.out)
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


def refuse_overlaps(inputs: list[Path], out: Path) -> None:
    """BadInput, before anything is written, for an -o that is, holds or lies inside an input run (merge rewrote
    that run: 2 rows became 4, its report replaced) and for one folder given twice: every request would count
    twice (issue 40). A folder that is no run is left to merge, which names it."""
    from ninferkit.errors import BadInput
    from ninferkit.rundir.runs import RunDir

    target, folders = out.resolve(), dict[Path, Path]()
    for given in inputs:
        path = given.resolve()
        if path in folders:
            raise BadInput(f"{given}: given twice (also as {folders[path]}); each run is merged once")
        folders[path] = given
        where = "is" if target == path else "is inside" if target.is_relative_to(path) else \
            "holds" if path.is_relative_to(target) else None
        if where is not None and RunDir(path).manifest.is_file():
            raise BadInput(f"-o {out} {where} the input {given}; merge writes a new folder: give one outside its "
                           "inputs")
