"""`ninferkit run PROFILE`: the whole runbook headless."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ninferkit.cli._common import add_profile_args, add_run_dir_arg
from ninferkit.errors import StepFailed


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser("run", help="execute the runbook notebooks in order")
    add_profile_args(parser)
    add_run_dir_arg(parser)
    parser.add_argument("--steps", help="comma-separated subset of setup,verify,launch,sweeps,capacity,writeup "
                                        "(default: all)")
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.runner import parse_steps, run_runbook

    try:
        run_runbook(args.profile, args.run_dir, parse_steps(args.steps), args.overrides)
    except StepFailed as exc:
        print(f"ninferkit run: {exc}", file=sys.stderr)
        return 1
    return 0
