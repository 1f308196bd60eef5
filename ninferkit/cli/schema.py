"""`ninferkit schema`: the profile's JSON Schema, for editors that check YAML as it is typed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "schema", help=summary)
    parser.add_argument("-o", "--output", type=Path, help="write it to this file instead of standard output")
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.params.schema import profile_schema
    from ninferkit.rundir.runs import write_text_atomic

    text = json.dumps(profile_schema(), indent=1, ensure_ascii=False) + "\n"
    if args.output is None:
        print(text, end="")
    else:
        write_text_atomic(args.output, text)
        print(f"wrote {args.output}")
    return 0
