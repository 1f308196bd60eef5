"""`ninferkit import FILE --format vllm-bench|aiperf|guidellm -o RUN_DIR`: a peer tool's result file as a run
directory that `ninferkit compare` and `ninferkit report` read. Per-request rows where the file has them; the
tool's aggregates kept in imported.json as aggregates, never turned into rows."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

FORMATS = ("vllm-bench", "aiperf", "guidellm")


def add_parser(subparsers: Any, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "import", help=summary)
    parser.add_argument("file", type=Path, metavar="FILE",
                        help="the tool's file (aiperf: its artifacts folder, or profile_export.jsonl or "
                             "profile_export_aiperf.json in it)")
    parser.add_argument("--format", required=True, metavar="FORMAT", help=f"one of: {', '.join(FORMATS)}")
    parser.add_argument("-o", "--out", type=Path, required=True, metavar="RUN_DIR",
                        help="the run directory to make (new, or an empty folder)")
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.errors import BadInput
    from ninferkit.interop import get_format
    from ninferkit.interop.write_run import write_imported

    if args.format not in FORMATS:
        raise BadInput(f"--format {args.format}: allowed: {', '.join(FORMATS)}")
    if not args.file.exists():
        raise BadInput(f"{args.file}: no such file")
    chosen = get_format(args.format)
    assert chosen.read is not None  # every name in FORMATS can be read
    imported = chosen.read(args.file)
    run_dir = write_imported(imported, args.file, args.out)
    per_request = f"{len(imported.rows)} requests" if imported.rows else "no per-request rows"
    print(f"imported {imported.tool} {imported.version or '(version not in the file)'}: {per_request}, "
          f"{len(imported.aggregates)} aggregates")
    for note in imported.notes:
        print(f"note: {note}")
    print(f"written: {run_dir.path}")
    return 0
