"""`ninferkit export RUN_DIR --format vllm-bench|aiperf|guidellm|csv|summary [-o PATH]`: a run's requests in a
peer tool's own result format (ninferkit/interop/), to read with that tool's loaders and dashboards."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ninferkit.interop.base import Source

FORMATS = ("vllm-bench", "aiperf", "guidellm", "csv", "summary")
"""The formats `--format` takes (interop's registry has them; named here so --help does not load it)."""


def add_parser(subparsers: Any, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "export", help=summary)
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--format", required=True, metavar="FORMAT",
                        help=f"one of: {', '.join(FORMATS)} (docs/interop.md maps the metric names)")
    parser.add_argument("-o", "--out", type=Path, default=None,
                        help="the file to write (aiperf: the artifacts folder), or - for standard output (one-file "
                             "formats); default RUN_DIR/exports/<format's name>")
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
    if args.out == Path("-"):
        return _to_stdout(chosen.export, source, chosen.default_name)
    out = args.out or run_dir.exports / chosen.default_name
    for path in chosen.export(source, out):
        print(f"written: {path}")
    return 0


def _to_stdout(export: Callable[[Source, Path], list[Path]], source: Source, name: str) -> int:
    """`-o -`: the format's one file on standard output (written in a scratch folder first, as the exporter
    writes files); a format that writes a folder is refused, naming what to give instead."""
    import shutil
    import sys
    import tempfile

    from ninferkit.errors import BadInput

    with tempfile.TemporaryDirectory(prefix="ninferkit-export-") as scratch:
        written = list(export(source, Path(scratch) / name))
        files = [path for path in written if path.is_file()]
        if len(written) != 1 or len(files) != 1:
            raise BadInput(f"-o -: this format writes {len(written)} files or a folder ({name}); give -o PATH")
        with files[0].open("rb") as read:
            shutil.copyfileobj(read, sys.stdout.buffer)
    sys.stdout.flush()
    return 0
