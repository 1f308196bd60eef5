"""How a command that measures ends: with its answer, the run's headline numbers, then where its files are.

The numbers are the write-up's headline table (ninferkit.report.headline, each recomputed from the run's raw
rows), so the terminal, the JSON and the write-up never disagree. Text shows every field a headline row
carries beyond its best value and range (percentiles, where the rows have them) without knowing their names, in
a table that fits 100 columns (ninferkit.console).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ninferkit.rundir.records import RequestRow

SHOWN_APART = ("metric", "unit", "best", "low", "high", "samples", "where", "source")
"""The fields of a headline row the text lays out in its own columns; every other field a row carries
(percentiles, a standard deviation) gets a column of its own name."""
ABOUT = "prompt_tokens"
"""The field that says which part of the run a row is about: `where` says it in words, under the metric."""


def add_answer_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print the answer as one JSON object (progress and step lines go to stderr)")
    add_quiet_arg(parser)


def add_quiet_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress (no bars, no progress lines): only the answer and errors; "
                             "also NINFERKIT_PROGRESS=off (bar or lines force that form)")


def say_for(args: argparse.Namespace) -> Callable[[str], None]:
    """Where a command's progress-like lines go: nowhere with --quiet, stderr with --json (stdout is the
    JSON), else stdout."""
    if args.quiet:
        return lambda line: None
    if args.json:
        return lambda line: print(line, file=sys.stderr, flush=True)
    return lambda line: print(line, flush=True)


def headline_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The run's headline rows as plain dicts (numbers unformatted), in the write-up's order."""
    from ninferkit.report import headline, load_run

    return [asdict(row) for row in headline(load_run(run_dir))]


def print_answer(run_dir: Path, paths: dict[str, Path | None], as_json: bool, latency: bool = False,
                 **more: Any) -> None:
    """The headline of `run_dir`, then `paths` (name -> path; None: not written); with `latency`, each cell's
    latency in the peers' terms first (latency_text). JSON: one object with `headline`, the paths, `more`, and with
    `latency` the cells' rows as `export --format summary` writes them."""
    rows = headline_rows(run_dir)
    cells = latency_rows(run_dir) if latency else []
    if as_json:
        shown = {name: None if path is None else str(path) for name, path in paths.items()}
        peers = {"latency": cells} if latency else {}
        print(json.dumps({**more, **peers, "headline": rows, **shown}, indent=2, default=str))
        return
    if latency:
        print(latency_text(cells))
    print(headline_text(rows))
    for name, path in paths.items():
        if path is not None:
            print(f"{name.replace('_', ' ')}: {path}")


def headline_text(rows: list[dict[str, Any]]) -> str:
    """The measured rows as a table that fits the console (ninferkit.console), then one line per metric the run
    has no number for."""
    from ninferkit.console import table, wrapped
    from ninferkit.report.fmt import number, span

    measured = [row for row in rows if row.get("best") is not None]
    lines = [wrapped("headline (the write-up's numbers, recomputed from the run's raw rows; under each metric, "
                     "where in the run it is and its spread):", "")]
    spread = [key for key in dict.fromkeys(key for row in measured for key in row)
              if key not in SHOWN_APART and key != ABOUT and any(row.get(key) is not None for row in measured)]
    header = ["metric", "best", "unit", "range", "samples"]
    cells = [[f"{row['metric']}\nat {row['where']}" + _spread_line(row, spread), number(row["best"]),
              str(row["unit"]), span(row["low"], row["high"]), number(row.get("samples"))] for row in measured]
    if measured:
        lines.append(table(header, cells, right={1, 4}, no_wrap={1, 2, 3, 4}, spaced=True))
    lines += [wrapped(f"  {row['metric']}: {row['where']}", "    ") for row in rows if row.get("best") is None]
    return "\n".join(lines)


def _spread_line(row: dict[str, Any], spread: list[str]) -> str:
    """The row's spread fields (p50, p90, p99, std: whichever it has) as one line under its where."""
    from ninferkit.report.fmt import number

    shown = [f"{key} {number(row[key])}" for key in spread if row.get(key) is not None]
    return "\n" + ", ".join(shown) if shown else ""


PEER_METRICS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "e2e"))
"""The latencies of the closing summary, under the names vLLM prints (AIPerf and GuideLLM call TPOT "ITL")."""
PEER_STATS = (("mean", "mean"), ("median", "p50"), ("p99", "p99"))


def latency_rows(run_dir: Path) -> list[dict[str, Any]]:
    """Each cell's row of `export --format summary` (interop.summary): latencies in ms, throughput; none where the
    run measured no request."""
    from ninferkit.interop.source import measured_source
    from ninferkit.interop.summary import summary_row
    from ninferkit.report.data import load_run
    from ninferkit.report.headline import params_label

    source = measured_source(load_run(run_dir))
    return [{"label": f"{cell.sweep} {params_label(cell.params)}{_launch_and_repeat(cell.variant, cell.params)}",
             **summary_row(source.run_id, cell)} for cell in source.cells]


def _launch_and_repeat(variant: str, params: dict[str, Any]) -> str:
    """What tells apart cells of the same parameters: the variant that measured it, the repeat (sweeps.repeats:
    the first attempt has no `repeat` key, the second has repeat 1)."""
    from ninferkit.params.variants import BASE

    said = [variant] if variant != BASE else []
    if isinstance(params.get("repeat"), int):
        said.append(f"repeat {params['repeat'] + 1}")
    return f" ({', '.join(said)})" if said else ""


def latency_text(cells: list[dict[str, Any]]) -> str:
    """Each cell's latency and throughput as AIPerf and GuideLLM end a run: TTFT, TPOT, ITL and end to end in ms
    (mean, p50, p99 over the measured requests), with request and output-token throughput over the cell's wall
    time (latency_rows: `export --format summary`'s numbers, so the two never disagree)."""
    from ninferkit.console import table, wrapped
    from ninferkit.report.fmt import number

    if not cells:
        return "latency per cell: none (no request was measured)"
    intro = ("latency per cell in ms, as AIPerf and GuideLLM print it (mean, p50, p99 over the measured requests; "
             "TPOT: (last token - first) / (tokens - 1), AIPerf's and GuideLLM's ITL; ITL: every gap between text "
             "events, pooled, vLLM's; e2e: send to end of stream), with request and output token throughput over "
             "the cell's wall time:")
    lines = [wrapped(intro, "")]
    for row in cells:
        failed = f" ({row['failed']} failed)" if row["failed"] else ""
        lines.append(wrapped(f"{row['label']}: {row['requests']} requests{failed}, {number(row['requests_per_s'])} "
                             f"req/s, {number(row['output_tok_s'])} output tok/s", "  "))
        metrics = [[name, *(number(row[f"{short}_{stat}_ms"]) for stat, _ in PEER_STATS)]
                   for short, name in PEER_METRICS]
        shown = table(["ms", *(label for _, label in PEER_STATS)], metrics, right={1, 2, 3}, no_wrap={0, 1, 2, 3})
        lines += ["  " + line for line in shown.splitlines()]
    return "\n".join(lines)


CHECK_REQUEST = "1 acceptance check (a short chat request, sent on attaching to or launching the server)"


def requests_sent(rows: list[RequestRow], checked: bool) -> dict[str, int]:
    """What a sweep sent, as the server counts requests: its rows by role, and the acceptance checks' one chat
    request when the command attached to the server or launched it (`checked`)."""
    measured = [row for row in rows if not row.warmup and row.prefix_role != "seed"]
    return {"total": len(rows) + checked, "measured": len(measured),
            "failed": sum(1 for row in measured if row.status != "ok"), "warmup": sum(1 for row in rows if row.warmup),
            "cache_seed": sum(1 for row in rows if not row.warmup and row.prefix_role == "seed"),
            "acceptance_check": int(checked)}


def sent_text(sent: dict[str, int]) -> str:
    """The requests a sweep sent, every one the server saw, by what each was for."""
    from ninferkit.console import wrapped

    parts = [f"{sent['measured']} measured" + (f" ({sent['failed']} failed)" if sent["failed"] else "")]
    parts += [f"{sent['warmup']} warm-up{'s' * (sent['warmup'] != 1)}"] if sent["warmup"] else []
    parts += [f"{sent['cache_seed']} cache seed{'s' * (sent['cache_seed'] != 1)}"] if sent["cache_seed"] else []
    parts += [CHECK_REQUEST] if sent["acceptance_check"] else []
    kept_out = "; only the measured ones are in the numbers" if len(parts) > 1 else ""
    return wrapped(f"requests sent to the server: {sent['total']} ({', '.join(parts)}){kept_out}", "  ")
