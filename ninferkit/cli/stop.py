"""`ninferkit stop RUN_DIR`: stop the server a run started."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ninferkit.runs import RunDir
from ninferkit.server import stop


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser("stop", help="stop the server of a run directory")
    parser.add_argument("run_dir")
    return parser


def main(args: argparse.Namespace) -> int:
    stopped = stop(RunDir(Path(args.run_dir).resolve()))
    print("server stopped" if stopped else "no running server in that run directory")
    return 0
