"""`ninferkit diagnose LOG... [--profile P] [--json]`: read the logs of a server started by hand;
`ninferkit diagnose --url URL [LOG...]`: ask a live server (never signalled) what it is and whether it serves,
and read its logs with the engine it answers as.

Exit code 0 when every log shows a healthy start, 1 when one shows a failure (or no start), 2 for
bad usage (a log that cannot be read, a bad profile).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "diagnose", help=summary)
    parser.add_argument("logs", nargs="*", metavar="LOG", help="a server's stderr, saved to a file")
    parser.add_argument("--profile", help="read the logs with this profile's engine and compare its build "
                                          "(default: a NInfer log, or with --url the server's engine)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per log (and the server), in a "
                        "list")
    group = parser.add_argument_group("a live server ninferkit did not start")
    group.add_argument("--url", help="the server's base URL: its engine, build, models, context, one chat request, "
                       "and its /metrics load gauges")
    group.add_argument("--api-key-env", metavar="VAR", help="the environment variable holding its API key")
    group.add_argument("--model", help="the model id for the chat request (default: the first it lists)")
    group.add_argument("--engine", help="its engine (default: read from its answers)")
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.bounded import LOG_FILE_BYTES, read_file
    from ninferkit.errors import BadInput
    from ninferkit.params import load_profile
    from ninferkit.server.diagnose import diagnose, summary_text

    if not args.logs and args.url is None:
        raise BadInput("diagnose needs a LOG, or --url URL for a live server")
    profile = load_profile(args.profile).profile if args.profile else None
    texts = {log: read_file(Path(log), LOG_FILE_BYTES, "reading the log to diagnose").decode(errors="replace")
             for log in args.logs}
    live = _live(args) if args.url is not None else None
    if live is not None and profile is None:
        from ninferkit.engines import get_adapter
        from ninferkit.server.diagnose import diagnose_log

        adapter = get_adapter(live["engine"])
        reports = [{"log": log, **diagnose_log(text, adapter)} for log, text in texts.items()]
    else:
        reports = [{"log": log, **diagnose(text, profile)} for log, text in texts.items()]
    if args.json:
        print(json.dumps(([live] if live else []) + reports, indent=2, default=str))
    else:
        shown = [f"== {live['url']}\n{_server_text(live)}"] if live else []
        print("\n\n".join(shown + [f"== {report['log']}\n{summary_text(report)}" for report in reports]))
    return 0 if all(report["healthy"] for report in ([live] if live else []) + reports) else 1


def _live(args: argparse.Namespace) -> dict[str, Any]:
    from ninferkit.server.diagnose_url import diagnose_server
    from ninferkit.server.target import Target

    return diagnose_server(Target(args.url, args.api_key_env, args.model, args.engine))


def _server_text(report: dict[str, Any]) -> str:
    from ninferkit.server.diagnose_url import server_text

    return server_text(report)
