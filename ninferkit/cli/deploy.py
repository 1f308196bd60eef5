"""`ninferkit deploy PROFILE`: leave the profile's server running as a service; `deploy status|logs|stop PROFILE`.

As report 000's script and run.sh (seed 000 §3, §1.5): start is a container `-d --restart unless-stopped` (or a
systemd unit for a native binary), the power-limit boot unit, a health wait and the acceptance checks; status,
logs and stop find the service by the profile's deploy.name.
"""

from __future__ import annotations

import argparse
import os
import subprocess
from typing import Any

from ninferkit.cli._common import add_profile_args

ACTIONS = ("status", "logs", "stop")


def add_parser(subparsers: Any, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "deploy", help=summary,
        description="ninferkit deploy PROFILE starts the service; ninferkit deploy status|logs|stop PROFILE asks "
                    "about it, shows its log or stops it.")
    parser.add_argument("action", nargs="?", choices=ACTIONS, help="status, logs or stop (omitted: start)")
    add_profile_args(parser)
    parser.add_argument("--from-run", metavar="RUN_DIR",
                        help="deploy this run's capacity answer: the largest pool that started and served")
    parser.add_argument("--dir", help="the deployment's folder (default: deployments/<name>)")
    parser.add_argument("--no-boot-unit", action="store_true",
                        help="do not install the power-limit boot unit (gpu.power_limit_w)")
    parser.add_argument("--dry-run", action="store_true", help="print the command and the files; change nothing")
    parser.add_argument("--lines", type=int, default=100, help="logs: how many lines (default 100, as run.sh)")
    parser.add_argument("--follow", "-f", action="store_true", help="logs: keep following (docker logs -f)")
    return parser


def main(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ninferkit.deploy import mode_of, service_name
    from ninferkit.deploy import service as deployment

    loaded = deployment.load(args.profile, args.overrides, args.from_run)
    profile = loaded.profile
    name = service_name(profile)
    if args.action == "status":
        state = deployment.state(profile)
        restarts = "" if state.restarts is None else f", restarted {state.restarts} time(s)"
        pid = "" if state.pid is None else f", pid {state.pid}"
        print(f"{name} ({mode_of(profile).name}): {state.status}{pid}{restarts}")
        for key, value in state.detail.items():
            print(f"  {key}: {value}")
        return 0 if state.running else 1
    if args.action == "logs":
        argv = mode_of(profile).logs_argv(name, args.lines, args.follow)
        return subprocess.call(argv, env={**os.environ, "NO_COLOR": "1"})
    if args.action == "stop":
        print(f"{name} stopped" if deployment.stop(profile) else f"{name} was not running")
        return 0
    if args.dry_run:
        print(deployment.describe(profile), end="")
        return 0
    record = deployment.deploy(loaded, folder=Path(args.dir) if args.dir else None, from_run=args.from_run,
                               boot_unit=not args.no_boot_unit)
    print(f"{name} is up at {record.url} ({record.mode}, ready after {record.ready_s} s, acceptance checks passed)")
    print(f"its record: {Path(args.dir) if args.dir else deployment.DEPLOYMENTS / name}/{deployment.RECORD}")
    print(f"ninferkit deploy status|logs|stop {args.profile}")
    return 0
