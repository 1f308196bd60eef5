"""`ninferkit trace RUN_DIR > trace.jsonl`: a run's requests as a Mooncake-style trace, to replay yesterday's
load on today's build (`sweeps.trace.path`). What the rows cannot say (which prompts shared text) is said on
stderr, never guessed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "trace", help=summary)
    parser.add_argument("run_dir")
    parser.add_argument("--block-tokens", type=int, default=None,
                        help="prompt tokens per hash id (default 512, Mooncake's)")
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.errors import BadInput
    from ninferkit.measure.traces import BLOCK_TOKENS, from_requests, trace_lines
    from ninferkit.rundir.runs import RunDir

    run_dir = RunDir(Path(args.run_dir).resolve())
    if not run_dir.requests.is_file():
        raise BadInput(f"{run_dir.requests}: no such file (a run directory whose sweeps sent requests)")
    block = BLOCK_TOKENS if args.block_tokens is None else args.block_tokens
    if block < 1:
        raise BadInput(f"--block-tokens {block}: allowed: at least 1")
    requests, notes = from_requests(run_dir.read_requests(), block)
    if not requests:
        raise BadInput(f"{run_dir.requests}: no request with a prompt token count to write")
    for line in trace_lines(requests):
        print(line)
    for note in notes.lines:
        print(f"trace: {note}", file=sys.stderr)
    return 0
