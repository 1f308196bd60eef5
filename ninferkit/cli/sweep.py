"""`ninferkit sweep PROFILE`: run the sweeps (all enabled kinds, or --only some) and save their tables.

Uses the server already running in the run directory, or launches one and stops it at the end. Ends with
the cells per table, the run's headline numbers and the paths.
"""

from __future__ import annotations

import argparse
from typing import Any

from ninferkit.cli._answer import add_answer_args, print_answer, say_for
from ninferkit.cli._common import add_profile_args, add_run_dir_arg


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sweep", help="run the measurement sweeps; rerun to resume")
    add_profile_args(parser)
    add_run_dir_arg(parser)
    parser.add_argument("--only", help="comma-separated sweep kinds, e.g. context,tasks (default: every enabled kind; "
                        "a kind named here runs even when the profile disables it; an unknown kind is refused "
                        "with the list)")
    add_answer_args(parser)
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.runs import open_run
    from ninferkit.sweeps import plan, serving, sweeps

    say = say_for(args)
    run = open_run(args.profile, args.run_dir, args.overrides)
    plan(run, args.only)  # a bad plan fails here, before a server is launched
    with serving(run) as launched:
        if launched:
            say(f"launched the server of {run.dir.path} (it is stopped at the end)")
        tables = sweeps(run, only=args.only)
    counts = tables.cell_counts()
    if not args.json:
        print(counts.to_string(index=False))
    print_answer(run.dir.path, {"tables": run.dir.tables, "run_directory": run.dir.path}, args.json,
                 sweeps=counts.to_dict(orient="records"))
    return 0
