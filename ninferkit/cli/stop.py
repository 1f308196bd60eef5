"""`ninferkit stop RUN_DIR`: stop the server a run started, and only that server (never one a --url run
measured)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser("stop", help=summary)
    parser.add_argument("run_dir")
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.rundir.runs import RunDir
    from ninferkit.server.process import read_record, stale_reason, stop

    run_dir = RunDir(Path(args.run_dir).resolve())
    record = read_record(run_dir)  # BadInput (exit 2) for a server.json a launch did not write
    if record is not None and record.external:
        print(f"the server of this run ({record.url}) was not started by ninferkit: nothing was signalled")
        return 0
    stale = stale_reason(record) if record is not None else None
    if stop(run_dir):
        print("server stopped")
    else:
        print(stale or "no running server in that run directory")
    return 0
