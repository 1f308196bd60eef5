"""`ninferkit capacity fit LOG...` (no launch) and `ninferkit capacity search PROFILE` (launches)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from ninferkit.cli._answer import add_quiet_arg
from ninferkit.cli._common import add_profile_args, add_run_dir_arg

if TYPE_CHECKING:
    from ninferkit.records import CapacityRecord

DEFAULT_PROFILE = "params/local-cpu.yaml"
JSON_KEYS = ("bytes_per_token", "fixed_bytes", "fixed_bytes_at", "free_after_weights_bytes", "first_use_bytes",
             "max_kv_tokens", "max_kv_tokens_interval", "decision_table", "terms_pinned", "terms_unpinned",
             "conflicts", "searches")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "capacity", help="fit the memory formula, tabulate what fits, search the largest KV pool")
    commands = parser.add_subparsers(dest="capacity_command", required=True, metavar="{fit,search}")
    fit = commands.add_parser("fit", help="fit saved startup logs; launches nothing")
    fit.add_argument("logs", nargs="+", metavar="LOG", help="startup logs (ledger or refusal) of one engine")
    fit.add_argument("--profile", default=DEFAULT_PROFILE,
                     help=f"engine, model and grid of the table (default {DEFAULT_PROFILE})")
    fit.add_argument("-p", "--param", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a profile field, e.g. -p capacity.free_after_weights_bytes=7000000000")
    fit.add_argument("--json", action="store_true", help="print the fit and the table as JSON")
    search = commands.add_parser("search", help="launch the server to find the largest KV pool that serves")
    add_profile_args(search)
    add_run_dir_arg(search)
    search.add_argument("--json", action="store_true", help="print capacity.json's main keys as JSON")
    add_quiet_arg(search)
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.capacity import capacity, fit_logs
    from ninferkit.params import load_profile
    from ninferkit.runs import open_run

    if args.capacity_command == "fit":
        record = fit_logs(load_profile(args.profile, args.overrides).profile, args.logs)
    else:
        overrides = [*args.overrides, "capacity.search=true"]
        run = open_run(args.profile, args.run_dir, overrides)
        record = capacity(run, say=lambda line: None if args.json else print(line))
        if not args.json:
            print(f"capacity.json: {run.dir.capacity}")
    if args.json:
        held = record.model_dump(mode="json", exclude_unset=True)  # as capacity.json holds it
        print(json.dumps({key: held.get(key) for key in JSON_KEYS}, indent=2))
        return 0
    print(_text(record))
    return 0


def _text(record: CapacityRecord) -> str:
    from ninferkit.capacity import table_frame

    lines = [f"bytes/token: {record.bytes_per_token} ({record.bytes_per_token_source})",
             f"fixed part: {record.fixed_bytes} B at {record.fixed_bytes_at}",
             f"free after weights: {record.free_after_weights_bytes} B ({record.free_after_weights_source})",
             f"taken at first use: {record.first_use_bytes} B",
             f"largest pool at the profile's setting: {record.max_kv_tokens_interval} tokens"]
    lines += [f"  pinned: {term}" for term in record.terms_pinned]
    lines += [f"  open:   {term}" for term in record.terms_unpinned]
    lines += [f"  CONFLICT: {text}" for text in record.conflicts]
    for found in record.searches:
        lines.append(f"search C={found.setting.concurrency} kv={found.setting.kv_dtype} ({found.mode}): "
                     f"{found.answer_kv_tokens} tokens after {found.launches} launch(es); {found.note}")
    frame = table_frame(record)
    lines.append(frame.to_string(index=False))
    return "\n".join(lines)
