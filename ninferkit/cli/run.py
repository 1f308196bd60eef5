"""`ninferkit run PROFILE`: the whole runbook headless; ends with the run's headline numbers and its paths.
`ninferkit run --url URL [PROFILE]`: the sweeps, capacity and write-up of a server ninferkit did not start."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from ninferkit.cli._answer import add_answer_args, print_answer, say_for
from ninferkit.cli._common import add_profile_args, add_run_dir_arg, add_url_args, url_target
from ninferkit.errors import StepFailed


def add_parser(subparsers: Any, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser("run", help=summary, add_help=False)
    parser.add_argument("-h", "--help", action=_HelpNamingSteps, help="show this help message and exit")
    add_profile_args(parser, optional=True)
    add_run_dir_arg(parser)
    parser.add_argument("--steps", help="comma-separated subset of the steps below (default: all of them; with --url, "
                                        "those a --url run takes)")
    add_url_args(parser, "the server's own log, where you have it: the sweeps join the engine's request record "
                 "and the capacity step reads its books from it")
    parser.add_argument("--dry-run", action="store_true", help="check the profile and the whole plan, print each "
                        "launch's command, the sweep cells per launch and the capacity launches; do nothing")
    add_answer_args(parser)
    return parser


class _HelpNamingSteps(argparse.Action):
    """-h/--help, ending with the steps from the step catalog: looked up only when asked, as --version is (the
    catalog loads every step, seconds each command would pay at its start)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from ninferkit.steps.catalog import runbook_steps, url_steps

        parser.epilog = (f"steps, in order: {','.join(runbook_steps())}; a --url run takes "
                         f"{','.join(url_steps())}")
        parser.print_help()
        parser.exit()


def main(args: argparse.Namespace) -> int:
    from ninferkit.steps.runner import checked_plan, parse_steps, run_runbook

    if args.dry_run:
        from ninferkit.errors import BadInput, ProfileError
        from ninferkit.steps.dry_run import plan_lines, refused

        if args.url is not None or args.profile is None:
            raise BadInput("--dry-run shows the plan of a PROFILE's own server; a --url run launches nothing")
        try:
            loaded, chosen = checked_plan(args.profile, parse_steps(args.steps) if args.steps else None,
                                          args.overrides, here=False)
        except ProfileError as exc:
            raise refused(exc, args.profile, args.overrides) from None
        print("\n".join(plan_lines(loaded, chosen)))
        return 0

    try:
        result = run_runbook(args.profile, args.run_dir, parse_steps(args.steps) if args.steps else None,
                             args.overrides, say=say_for(args), url=url_target(args))
    except StepFailed as exc:
        print(f"ninferkit run: {exc}", file=sys.stderr)
        return 1
    folder = result.run.dir
    write_up = folder.write_up
    print_answer(folder.path, {"write_up": write_up if write_up.exists() else None, "run_directory": folder.path},
                 args.json, latency=True, steps=[{"step": s.step, "status": s.status, "seconds": round(s.seconds, 1)}
                                   for s in result.steps])
    return 0
