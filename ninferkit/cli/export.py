"""`ninferkit export RUN_DIR --format vllm-bench|aiperf|guidellm|csv|summary [-o PATH]`: a run's requests in a
peer tool's own result format (ninferkit/interop/), to read with that tool's loaders and dashboards."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

FORMATS = ("vllm-bench", "aiperf", "guidellm", "csv", "summary")
"""The formats `--format` takes (interop's registry has them; named here so --help does not load it)."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "export", help="write a run's requests as vllm bench serve's, AIPerf's or GuideLLM's files, or CSV (ms)")
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--format", required=True, metavar="FORMAT",
                        help=f"one of: {', '.join(FORMATS)} (docs/interop.md maps the metric names)")
    parser.add_argument("-o", "--out", type=Path, default=None,
                        help="the file to write (aiperf: the artifacts folder); "
                             "default RUN_DIR/exports/<format's name>")
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.errors import BadInput
    from ninferkit.interop import get_format
    from ninferkit.interop.source import run_source
    from ninferkit.rundir.runs import RunDir

    if args.format not in FORMATS:
        raise BadInput(f"--format {args.format}: allowed: {', '.join(FORMATS)}")
    chosen = get_format(args.format)
    assert chosen.export is not None  # every name in FORMATS can be written
    run_dir = RunDir(Path(args.run_dir).resolve())
    if not run_dir.path.is_dir():
        raise BadInput(f"{args.run_dir}: not a run directory (give the folder `ninferkit run` wrote)")
    source = run_source(run_dir.path)
    out = args.out or run_dir.exports / chosen.default_name
    for path in chosen.export(source, out):
        print(f"written: {path}")
    return 0
