"""`ninferkit run PROFILE`: the whole runbook headless; ends with the run's headline numbers and its paths."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ninferkit.cli._answer import add_answer_args, print_answer, say_for
from ninferkit.cli._common import add_profile_args, add_run_dir_arg
from ninferkit.errors import StepFailed


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser("run", help="execute the runbook notebooks in order")
    add_profile_args(parser)
    add_run_dir_arg(parser)
    parser.add_argument("--steps", help="comma-separated subset of setup,verify,launch,sweeps,capacity,writeup "
                                        "(default: all)")
    add_answer_args(parser)
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.runner import parse_steps, run_runbook

    try:
        result = run_runbook(args.profile, args.run_dir, parse_steps(args.steps), args.overrides, say=say_for(args))
    except StepFailed as exc:
        print(f"ninferkit run: {exc}", file=sys.stderr)
        return 1
    folder = result.run.dir
    write_up = folder.write_up
    print_answer(folder.path, {"write_up": write_up if write_up.exists() else None, "run_directory": folder.path},
                 args.json, steps=[{"step": s.step, "status": s.status, "seconds": round(s.seconds, 1)}
                                   for s in result.steps])
    return 0
