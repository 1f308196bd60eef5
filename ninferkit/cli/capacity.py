"""`ninferkit capacity fit [LOG...]` (no launch) and `ninferkit capacity search PROFILE` (launches).

`fit` takes startup logs, terms typed from a report or a datasheet (`--fixed 2.75GiB --bytes-per-token 35904
--free-after-weights 11.70GiB`: the profile's capacity.known), or both; the flags are written into the
profile as overrides, so a bad value is refused by the profile's own check, naming the field.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ninferkit.cli._answer import add_quiet_arg
from ninferkit.cli._common import add_profile_args, add_run_dir_arg, add_url_args, url_target

if TYPE_CHECKING:
    from ninferkit.rundir.records import CapacityRecord
    from ninferkit.server.target import Target

DEFAULT_PROFILE = "params/local-cpu.yaml"
JSON_KEYS = ("bytes_per_token", "fixed_bytes", "fixed_bytes_at", "free_after_weights_bytes", "first_use_bytes",
             "max_kv_tokens", "max_kv_tokens_interval", "decision_table", "terms_pinned", "terms_unpinned",
             "conflicts", "searches", "known_terms", "answers")
KNOWN_FLAGS = (("fixed", "the fixed part F, e.g. 2.75GiB"), ("bytes_per_token", "bytes per KV pool token, e.g. 35904"),
               ("free_after_weights", "device memory free after weights, e.g. 11.70GiB"),
               ("weights", "the weights' size, e.g. 19.7GiB"), ("page_tokens", "KV page size in tokens, e.g. 64"),
               ("source", "where the typed figures come from, e.g. 'report 000 §2.5'"))
_WHAT_IF = re.compile(r"^(\d+)x(\d+)(?::(.+))?$")


def add_parser(subparsers: Any, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "capacity", help=summary)
    commands = parser.add_subparsers(dest="capacity_command", required=True, metavar="{fit,search}")
    fit = commands.add_parser("fit", help="fit saved startup logs and typed terms; launches nothing")
    fit.add_argument("logs", nargs="*", metavar="LOG", help="startup logs (ledger or refusal) of one engine")
    known = fit.add_argument_group("typed terms (capacity.known; a figure is as exact as its printed digits)")
    for name, words in KNOWN_FLAGS:
        known.add_argument(f"--{name.replace('_', '-')}" if name != "source" else "--known-source", dest=name,
                           metavar="TEXT" if name == "source" else "VALUE", help=f"{words} (capacity.known.{name})")
    fit.add_argument("--slots", type=int, metavar="N", help="planned concurrency (serve.max_concurrency, and the "
                     "table's capacity.concurrencies)")
    fit.add_argument("--context", type=int, metavar="TOKENS", help="per-slot context (serve.max_context, and the "
                     "table's capacity.contexts)")
    fit.add_argument("--what-if", dest="what_if", action="append", default=[], metavar="SLOTSxCONTEXT[:LESS]",
                     help="a setting to answer in tokens and GiB, e.g. 2x163840, or 2x163840:622MiB with that much "
                     "taken off the fixed part (capacity.what_if)")
    fit.add_argument("--profile", help=f"engine, model and grid of the table (default {DEFAULT_PROFILE}; with "
                     "--url params/url.yaml, whose engine, model, slots and context the server's answers replace)")
    fit.add_argument("-p", "--param", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a profile field, e.g. -p capacity.free_after_weights_bytes=7000000000")
    fit.add_argument("--json", action="store_true", help="print the fit and the table as JSON")
    add_url_args(fit, "the server's startup log, where you have it (as a LOG is): its books beside the pool the "
                 "server reports (llama-server's /props, vLLM's /metrics cache_config_info)")
    search = commands.add_parser("search", help="launch the server to find the largest KV pool that serves")
    add_profile_args(search)
    add_run_dir_arg(search)
    search.add_argument("--json", action="store_true", help="print capacity.json's main keys as JSON")
    add_quiet_arg(search)
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.bounded import LOG_FILE_BYTES, regular_file
    from ninferkit.capacity import fit_logs
    from ninferkit.params import load_profile
    from ninferkit.rundir.runs import open_run
    from ninferkit.steps.capacity import capacity

    if args.capacity_command == "fit":
        from ninferkit.errors import BadInput

        flags = typed_overrides(args)
        target = url_target(args)
        if target is not None:
            record = _fit_server(args, target, flags)
        elif not args.logs and not any(item.startswith("capacity.known.") for item in [*flags, *args.overrides]):
            raise BadInput("give startup logs, typed terms (--fixed, --bytes-per-token, --free-after-weights), "
                           "or both")
        else:
            for log in args.logs:
                regular_file(Path(log), LOG_FILE_BYTES, "reading a startup log to fit")
            record = fit_logs(load_profile(args.profile or DEFAULT_PROFILE, [*flags, *args.overrides]).profile,
                              args.logs)
            if all(value is None for value in (record.bytes_per_token, record.fixed_bytes,
                                               record.free_after_weights_bytes)):  # a table of "None" was exit 0
                raise BadInput(f"nothing to fit: {', '.join(args.logs) or 'no log'} holds no startup line an engine "
                               "prints of its memory, and no term was typed; give a server's startup log (a profile "
                               "goes after --profile) or --fixed, --bytes-per-token, --free-after-weights")
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


def _fit_server(args: argparse.Namespace, target: Target, flags: list[str]) -> CapacityRecord:
    """The fit of a running server someone else started: what it reports of its pool, and its logs."""
    from ninferkit.bounded import LOG_FILE_BYTES, regular_file
    from ninferkit.capacity.gather import fit_server
    from ninferkit.engines import get_adapter
    from ninferkit.params import load_profile
    from ninferkit.server.target import reach
    from ninferkit.steps.attach import URL_PROFILE, served_overrides

    logs = [regular_file(Path(log), LOG_FILE_BYTES, "reading a startup log to fit") for log in args.logs]
    url, answers, detection = reach(target)
    overrides = served_overrides(target, answers, detection, [*flags, *args.overrides])
    profile = load_profile(args.profile or URL_PROFILE, overrides).profile
    pool = get_adapter(detection.kind).served_pool(answers.props, answers.metrics)
    return fit_server(profile, url, pool, [*logs, *([target.log] if target.log else [])])


def typed_overrides(args: argparse.Namespace) -> list[str]:
    """The typed flags as profile overrides (before the user's own -p, which win)."""
    from ninferkit.errors import BadInput

    # a figure goes in as written (35904 is a number of bytes, 2.75GiB text, 2.75 a number refused for lack of
    # a unit); the source as a quoted string, whatever it holds
    out = [f"capacity.known.{name}={json.dumps(value) if name == 'source' else value}" for name, _ in KNOWN_FLAGS
           if (value := getattr(args, name)) is not None]
    if args.slots is not None:
        out += [f"serve.max_concurrency={args.slots}", f"capacity.concurrencies=[{args.slots}]"]
    if args.context is not None:
        out += [f"serve.max_context={args.context}", f"capacity.contexts=[{args.context}]"]
    cases = []
    for text in args.what_if:
        found = _WHAT_IF.match(text.replace(" ", ""))
        if found is None:
            raise BadInput(f"--what-if {text!r}: allowed: SLOTSxCONTEXT, e.g. 2x163840, or SLOTSxCONTEXT:LESS, "
                           "e.g. 2x163840:622MiB")
        case: dict[str, Any] = {"slots": int(found.group(1)), "context": int(found.group(2))}
        if found.group(3):
            case["fixed_less"] = found.group(3)
        cases.append(case)
    if cases:
        out.append(f"capacity.what_if={json.dumps(cases)}")
    return out


def _text(record: CapacityRecord) -> str:
    from ninferkit.capacity import table_frame
    from ninferkit.capacity.summary import TABLE_COLUMNS, summary_rows, table_rows

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
    if not record.answers:  # a capacity.json written before answers: the table as it was
        lines.append(table_frame(record).to_string(index=False))
    for number, answer in enumerate(record.answers, 1):
        heading = f"answer {number} of {len(record.answers)}" if len(record.answers) > 1 else "answer"
        lines.append(f"== {heading}: from the {answer.basis}")
        rows = summary_rows(answer)
        width = max(len(name) for name, _ in rows)
        lines += [f"  {name.ljust(width)}  {value}" for name, value in rows]
        lines.append("  decision table:")
        lines += ["    " + line for line in _columns([TABLE_COLUMNS, *table_rows(answer.decision_table)])]
    return "\n".join(lines)


def _columns(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
