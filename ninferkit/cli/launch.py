"""`ninferkit launch PROFILE`: start (or with --dry-run, only show) the server of a profile."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from ninferkit.cli._answer import add_quiet_arg
from ninferkit.cli._common import add_profile_args, add_run_dir_arg


def add_parser(subparsers: Any, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser("launch", help=summary)
    add_profile_args(parser)
    add_run_dir_arg(parser)
    parser.add_argument("--dry-run", action="store_true",
                        help="print the exact argv (and, in Docker mode, the Docker files) and start nothing")
    add_quiet_arg(parser)
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.engines import get_adapter
    from ninferkit.params import load_profile
    from ninferkit.rundir.runs import open_run
    from ninferkit.server.process import planned_argv
    from ninferkit.steps.launch import launch

    if args.dry_run:
        profile = load_profile(args.profile, args.overrides).profile
        print(shlex.join(planned_argv(profile)))
        if profile.serve.docker:
            adapter = get_adapter(profile.engine.kind)
            for name, text in adapter.docker_files(profile).items():
                print(f"\n# ---- run_dir/docker/{name} ----")
                print(text, end="")
        return 0
    run = open_run(args.profile, args.run_dir, args.overrides)
    record = launch(run)
    print(f"ready at {record.url} after {record.ready_s} s (pid {record.pid})")
    print(f"stop it with: ninferkit stop {run.dir.path}")
    return 0
