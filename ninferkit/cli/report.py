"""`ninferkit report RUN_DIR`: regenerate a run's write-up from its raw files; prints its path."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "report", help=summary)
    parser.add_argument("run_dir", help="a run directory, e.g. runs/20261130-110000-local-cpu")
    parser.add_argument("--format", dest="formats", action="append", metavar="NAME",
                        help="renderer to write, e.g. markdown or html (repeatable; default: the profile's "
                             "report.formats; an unknown name is refused with the registered ones)")
    parser.add_argument("--as-recorded", action="store_true",
                        help="render the join and the tables as the run holds them, without re-deriving them from "
                             "the raw files first (what an older ninferkit made, for forensics)")
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.report import write_report
    from ninferkit.report.derive import rederive
    from ninferkit.rundir.runs import RunDir

    folder = RunDir(Path(args.run_dir).resolve())
    if args.as_recorded:
        print("derived files rendered as recorded (--as-recorded): not re-derived", file=sys.stderr)
    elif folder.manifest.is_file():  # write_report names what is wrong with a folder that is no run
        for line in rederive(folder).lines():
            print(line, file=sys.stderr)
    report = write_report(args.run_dir, args.formats)
    for path in [*report.files.values(), *report.appendix.values()]:
        print(path)
    return 0
