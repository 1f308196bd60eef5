"""`ninferkit lab PROFILE`: JupyterLab on a run's own copy of the notebooks (step by step, by hand)."""

from __future__ import annotations

import argparse
from typing import Any

from ninferkit.cli._common import add_profile_args, add_run_dir_arg


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "lab", help="open the notebooks in JupyterLab on a copy in RUN_DIR/lab (127.0.0.1, token on)")
    add_profile_args(parser)
    add_run_dir_arg(parser)
    parser.add_argument("--port", type=int, help="JupyterLab's port (default: its own, 8888 or the next free one)")
    parser.add_argument("--no-browser", action="store_true", help="print the URL only (no display: always)")
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.rundir.runs import open_run
    from ninferkit.steps import lab

    run = open_run(args.profile, args.run_dir, args.overrides)
    folder = lab.prepare(run)
    print(f"notebooks for this run: {folder} (the templates in notebooks/ are not touched)")
    lab.start(folder, args.port, open_browser=not args.no_browser)
