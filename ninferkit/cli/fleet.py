"""`ninferkit fleet submit|status|collect FLEET`: a lab's hosts, each running its profile through Slurm or SSH.

`submit` checks the fleet file, every host's profile and every host (Slurm's partitions, and GRES, constraint
and memory on one node, pyxis for an image, account and QOS where the cluster keeps accounting, each SSH host
reached with its key and host key; nothing starts anywhere when one is refused, and what cannot be checked is said
as a note; `--dry-run` stops there and prints what would run where), then submits the Slurm tasks as sbatch
job arrays and starts the SSH hosts' tasks in the background there; again, it resumes only what has no finished
run and no job holding it. `status` says where each task stands (a host that does not answer within its bound:
`unknown`, with its reason, beside the others; `--watch` again at a bound until every task ended); `collect`
follows them all to their end (their lines prefixed by host), brings the SSH hosts' runs back and, with
`-o OUT`, merges every run into one write-up. A failed task is listed with its step, reason, diagnosis and log,
and the exit code is 1.
`fleet task STATE_DIR INDEX` is what runs on a host (the batch script and the SSH command call it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ninferkit.cli._answer import add_quiet_arg


def add_parser(subparsers: Any, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "fleet", help=summary)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, words in (("submit", "submit the fleet's tasks (again: only what has no finished run)"),
                        ("status", "where each task stands"),
                        ("collect", "follow every task to its end, bring the runs back, merge them (-o)")):
        action = actions.add_parser(name, help=words)
        action.add_argument("fleet", help="fleet file, e.g. params/fleets/embedded-three.yaml")
        action.add_argument("-p", "--param", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                            help="override a field of every host's profile (repeatable)")
        add_quiet_arg(action)
        if name == "submit":
            action.add_argument("--dry-run", action="store_true",
                                help="check every host (Slurm's partitions, GRES, constraint, memory, account and "
                                     "QOS; SSH keys and hosts), print what would run where; submit nothing")
        if name == "status":
            output = action.add_mutually_exclusive_group()
            output.add_argument("--json", action="store_true", help="print the tasks as JSON")
            output.add_argument("--watch", type=_watch_seconds, metavar="S", nargs="?", const=10.0,
                                help="a live view: the tasks again every S seconds (default 10, 2..3600) until "
                                     "none is pending or running; plain lines when not a terminal")
        if name == "collect":
            action.add_argument("-o", "--out", type=Path, help="merge every run into this folder")
            action.add_argument("--timeout", type=float, default=86_400.0, metavar="S",
                                help="give up following after S seconds (default a day)")
    task = actions.add_parser("task", help="run one task on this host (what Slurm and SSH call)")
    task.add_argument("state_dir", type=Path)
    task.add_argument("index", help="the task's index in the state folder's tasks.json")
    add_quiet_arg(task)
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.fleet import follow
    from ninferkit.fleet.spec import load_fleet
    from ninferkit.fleet.tasks import StateDir, line_printer, run_task

    if args.action == "task":
        state = StateDir(args.state_dir.resolve())
        index = state.task_index(args.index)
        return run_task(args.state_dir, index, say=line_printer(state.read_tasks()[index].host))
    def say(line: str) -> None:
        if not args.quiet:
            print(line, flush=True)

    fleet = load_fleet(args.fleet, args.overrides)
    if args.action == "submit":
        tasks = follow.submit(fleet, say, dry_run=args.dry_run)
        if args.dry_run:
            return 0
        say(f"{len(tasks)} task(s); state: {fleet.state_dir}; follow with `ninferkit fleet collect {args.fleet}`")
        return 0
    if args.action == "status" and args.watch is not None:
        try:
            shown = follow.watch(fleet, args.watch, _write, sys.stdout.isatty())
        except KeyboardInterrupt:
            return 130
        return _needs_you(shown)
    if args.action == "status":
        shown = follow.status(fleet)
        if args.json:
            print(json.dumps(shown, indent=2))
        else:
            _print_tasks(shown)
        return _needs_you(shown)
    shown = follow.collect(fleet, say, args.timeout)
    _print_tasks(shown)
    if args.out is not None:
        from ninferkit.report.merge import merge

        merged = merge(follow.run_dirs(fleet), args.out)
        print(f"merged report: {merged.folder / 'report' / 'index.md'}")
    return 1 if any(task["state"] != "ok" for task in shown) else 0


def _watch_seconds(given: str) -> float:
    from ninferkit.fleet.follow import WATCH_BOUNDS_S

    low, high = WATCH_BOUNDS_S
    try:
        seconds = float(given)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{given!r} is not a number of seconds") from None
    if not low <= seconds <= high:
        raise argparse.ArgumentTypeError(f"{given} s: give {low:g} to {high:g} seconds")
    return seconds


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _print_tasks(shown: list[dict[str, Any]]) -> None:
    for task in shown:
        print(f"task {task['task']} {task['host']} ({task['profile']}): {task['state']}")
        for key in ("step", "reason", "diagnosis", "log", "notebook", "run_dir"):
            if key in task and (task["state"] != "ok" or key == "run_dir"):
                print(f"  {key}: {task[key]}", file=sys.stdout)


NEEDS_YOU = ("failed", "interrupted", "unknown", "lost")
"""Task states `status` exits 1 for: each needs a look or a `fleet submit` to resume (an interrupted task stopped
midway, as a failed one did; it had exited 0)."""


def _needs_you(shown: list[dict[str, Any]]) -> int:
    return 1 if any(task["state"] in NEEDS_YOU for task in shown) else 0

