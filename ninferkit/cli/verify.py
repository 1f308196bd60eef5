"""`ninferkit verify`: the artifact step without a notebook, or the checks of any one file.

    ninferkit verify PROFILE [-p k=v]... [--run-dir DIR]     download if missing, verify, write artifact.json
    ninferkit verify --file PATH [--sha256 HEX] [--size N] [--json]

Exit code 0 only when every check passes; each mismatch names the expected and the actual value.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from ninferkit.cli._answer import add_quiet_arg
from ninferkit.cli._common import add_run_dir_arg
from ninferkit.errors import ProfileError


def _sha256_arg(text: str) -> str:
    if not re.fullmatch(r"[0-9a-fA-F]{64}", text):
        raise argparse.ArgumentTypeError(f"'{text}' is not a sha256 (64 hex digits)")
    return text.lower()


def _size_arg(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive byte count")
    return int(text)


def add_parser(subparsers: Any, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "verify", help=summary)
    parser.add_argument("profile", nargs="?", help="profile YAML, e.g. params/local-cpu.yaml")
    parser.add_argument("-p", "--param", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a profile field, e.g. -p artifact.revision=<commit> (repeatable)")
    add_run_dir_arg(parser)
    parser.add_argument("--file", type=Path, help="verify this file instead of a profile's artifact")
    parser.add_argument("--sha256", type=_sha256_arg, help="expected sha256 of --file")
    parser.add_argument("--size", type=_size_arg, help="expected size of --file in bytes")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    add_quiet_arg(parser)
    return parser


def main(args: argparse.Namespace) -> int:
    if (args.profile is None) == (args.file is None):
        raise ProfileError("give either a PROFILE or --file PATH (not both, not neither)")
    if args.file is not None:
        return _verify_one_file(args)
    if args.sha256 or args.size:
        raise ProfileError("--sha256 and --size go with --file; a profile pins artifact.sha256 / artifact.size_bytes")
    # imported here, not above: the profile's step brings the report's modules (pandas, matplotlib), ~1 s that
    # a --file check does not need (issue 43)
    from ninferkit.artifact import describe
    from ninferkit.rundir.runs import open_run
    from ninferkit.steps.verify import verify

    run = open_run(args.profile, args.run_dir, args.overrides)
    record = verify(run)  # raises (exit 1) with every problem listed when a check fails
    if args.json:
        print(json.dumps(record.model_dump(mode="json", exclude_unset=True), indent=2, sort_keys=True))
    else:
        print(describe(record))
        print(f"artifact.json: {run.dir.artifact}")
    return 0


def _verify_one_file(args: argparse.Namespace) -> int:
    from ninferkit.artifact import verify_file

    report = verify_file(args.file, expected_size=args.size, expected_sha256=args.sha256, progress=True)
    result = report.to_json()
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print(f"path       {result['path']}")
        print(f"size       {result['size']}")
        print(f"sha256     {result['sha256']}  ({(result['sha256_bytes_per_s'] or 0) / 2**20:,.0f} MiB/s)")
        print(f"container  {result['container_version'] or 'not a .ninfer file'}")
        for problem in result["problems"]:
            print(f"PROBLEM    {problem}")
        print("ok" if report.ok else "FAILED")
    return 0 if report.ok else 1
