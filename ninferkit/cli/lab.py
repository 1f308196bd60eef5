"""`ninferkit lab PROFILE`: JupyterLab on a run's own copy of the notebooks (step by step, by hand)."""

from __future__ import annotations

import argparse
from typing import Any

from ninferkit.cli._common import add_profile_args, add_run_dir_arg, add_url_args, url_target


def add_parser(subparsers: Any, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "lab", help=summary)
    add_profile_args(parser, optional=True)
    add_run_dir_arg(parser)
    add_url_args(parser, "the server's own log, where you have it (the sweeps join the engine's request record)")
    parser.add_argument("--allow-profile-change", action="store_true",
                        help="reopening a run: let PROFILE or -p change its profile (the manifest records it)")
    parser.add_argument("--port", type=int, help="JupyterLab's port (default: its own, 8888 or the next free one)")
    parser.add_argument("--no-browser", action="store_true", help="print the URL only (no display: always)")
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.steps import lab
    from ninferkit.steps.attach import open_url_run

    target = url_target(args)
    if target is not None:
        run = open_url_run(target, args.profile, args.run_dir, args.overrides)
        print(f"the run measures {target.url} ({run.profile.engine.kind}, model {run.profile.serve.model_id}); "
              "ninferkit did not start it and never stops it")
    else:
        run = lab.open_lab_run(args.profile, args.run_dir, args.overrides, args.allow_profile_change)
    folder = lab.prepare(run)
    print(f"notebooks for this run: {folder} (the templates in notebooks/ are not touched)")
    lab.start(folder, args.port, open_browser=not args.no_browser)
