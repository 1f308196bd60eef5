"""`ninferkit sweep PROFILE`: run the sweeps (all enabled kinds, or --only some) and save their tables.

Uses the server already running in the run directory, or launches one and stops it at the end; with --url,
the server someone else started there (recorded as external: nothing is launched, nothing is stopped). Ends
with the requests it sent (every one the server saw: measured, warm-ups, cache seeds and the acceptance check a
launch or an attach sends), the cells per table, each cell's latency in the peers' terms and units, the run's
headline numbers and the paths.
"""

from __future__ import annotations

import argparse
from typing import Any

from ninferkit.cli._answer import add_answer_args, print_answer, requests_sent, say_for, sent_text
from ninferkit.cli._common import add_profile_args, add_run_dir_arg, add_url_args, url_target


def add_parser(subparsers: Any, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sweep", help=summary)
    add_profile_args(parser, optional=True)
    add_run_dir_arg(parser)
    add_url_args(parser, "the server's own log, where you have it: the sweeps join the engine's request "
                 "record from it, as they do for a server ninferkit launched")
    parser.add_argument("--only", help="comma-separated sweep kinds, e.g. context,tasks (default: every enabled kind; "
                        "a kind named here runs even when the profile disables it; an unknown kind is refused "
                        "with the list)")
    add_answer_args(parser)
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.console import table, wrapped
    from ninferkit.errors import BadInput
    from ninferkit.rundir.runs import open_run
    from ninferkit.steps.attach import open_url_run
    from ninferkit.steps.sweeps import plan, serving, sweeps

    say = say_for(args)
    target = url_target(args)
    checked = False  # whether this command sent the acceptance checks' chat request (an attach, a launch)
    if target is not None:
        run = open_url_run(target, args.profile, args.run_dir, args.overrides)
        checked = True
        say(wrapped(f"measuring {target.url} ({run.profile.engine.kind}, model {run.profile.serve.model_id}; not "
                    "started by ninferkit, so it is left running)"))
        plan(run, args.only)
        before = len(run.dir.read_requests())
        tables = sweeps(run, only=args.only)
    else:
        if args.profile is None:
            raise BadInput("sweep needs a PROFILE, or --url URL for a server ninferkit did not start")
        run = open_run(args.profile, args.run_dir, args.overrides)
        plan(run, args.only)  # a bad plan fails here, before a server is launched
        before = len(run.dir.read_requests())
        with serving(run) as launched:
            if launched:
                say(wrapped(f"launched the server of {run.dir.path} (it is stopped at the end)"))
                checked = True
            tables = sweeps(run, only=args.only)
    sent = requests_sent(run.dir.read_requests()[before:], checked)
    counts = tables.cell_counts()
    if not args.json:
        print(sent_text(sent))
        print(table(list(counts.columns), counts.astype(str).values.tolist(), right=set(range(1, counts.shape[1]))))
    print_answer(run.dir.path, {"tables": run.dir.tables, "run_directory": run.dir.path}, args.json, latency=True,
                 requests_sent=sent, sweeps=counts.to_dict(orient="records"))
    return 0
