"""`ninferkit diagnose LOG... [--profile P] [--json]`: read the logs of a server started by hand.

Exit code 0 when every log shows a healthy start, 1 when one shows a failure (or no start), 2 for
bad usage (a log that cannot be read, a bad profile).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "diagnose", help="what a server log says: build, ledger, throughput, requests, each failure with its fix")
    parser.add_argument("logs", nargs="+", metavar="LOG", help="a server's stderr, saved to a file")
    parser.add_argument("--profile", help="read the logs with this profile's engine and compare its build "
                                          "(default: a NInfer log)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per log, in a list")
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.bounded import LOG_FILE_BYTES, read_file
    from ninferkit.diagnose import diagnose, summary_text
    from ninferkit.params import load_profile

    profile = load_profile(args.profile).profile if args.profile else None
    texts = {log: read_file(Path(log), LOG_FILE_BYTES, "reading the log to diagnose").decode(errors="replace")
             for log in args.logs}
    reports = [{"log": log, **diagnose(text, profile)} for log, text in texts.items()]
    if args.json:
        print(json.dumps(reports, indent=2, default=str))
    else:
        print("\n\n".join(f"== {report['log']}\n{summary_text(report)}" for report in reports))
    return 0 if all(report["healthy"] for report in reports) else 1
