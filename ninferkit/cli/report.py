"""`ninferkit report RUN_DIR`: regenerate a run's write-up from its raw files; prints its path."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "report", help="write RUN_DIR/report/ (index.md, index.html, figures) from the run's files")
    parser.add_argument("run_dir", help="a run directory, e.g. runs/20261130-110000-local-cpu")
    parser.add_argument("--format", dest="formats", action="append", metavar="NAME",
                        help="renderer to write, e.g. markdown or html (repeatable; default: the profile's "
                             "report.formats; an unknown name is refused with the registered ones)")
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.report import write_report

    report = write_report(args.run_dir, args.formats)
    for path in report.files.values():
        print(path)
    return 0
