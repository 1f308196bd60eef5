"""The write-up of a run `ninferkit import` made (imported.json): where it came from, the tool's aggregates as the
tool printed them, and each load's latencies in ms from the tool's own per-request records. A run ninferkit
measured has no imported.json, and its write-up no such section."""

from __future__ import annotations

import json
from collections import defaultdict

from ninferkit.measure.latency import distributions_ms
from ninferkit.report.data import RunData
from ninferkit.report.document import Block, Bullets, Paragraph, Section, Table
from ninferkit.report.fmt import number
from ninferkit.rundir.records import RequestRow

SHOWN_AGGREGATES = 60
"""At most this many of the tool's aggregates are tabled (a vLLM file has a set per cell); imported.json has all."""
SHOWN_STATS = ("mean", "median", "p50", "p99", "total")
SHORT = {"ttft_client_s": "TTFT", "tpot_client_s": "TPOT", "itl_client_s": "ITL", "e2e_client_s": "E2E"}


def sections(run: RunData) -> list[Section]:
    record = run.imported
    if record is None:
        return []
    blocks: list[Block] = [Paragraph(
        f"Imported from {record.tool} {record.version or '(version not in the file)'}'s "
        + ", ".join(f"{name} (sha256 {digest})" for name, digest in record.files.items()) + ": "
        + ("its per-request records are this run's rows." if record.per_request else
           "the file has no per-request records; this run has only the tool's aggregates, below, and no rows "
           "made from them."))]
    if record.notes:
        blocks.append(Bullets(tuple(record.notes)))
    by_load: dict[str, list[RequestRow]] = defaultdict(list)
    for row in run.requests:
        by_load[json.dumps(row.cell, sort_keys=True)].append(row)
    lines = []
    for load, rows in sorted(by_load.items()):
        for metric, spread in distributions_ms(rows).items():
            if spread.n:
                lines.append((load, SHORT[metric], str(spread.n), number(spread.mean), number(spread.p50),
                              number(spread.p90), number(spread.p99)))
    if lines:
        blocks.append(Table(("load", "metric", "samples", "mean ms", "median ms", "p90 ms", "p99 ms"), tuple(lines),
                            "From the tool's per-request records, by ninferkit's formulas (docs/interop.md)."))
    shown = [a for a in record.aggregates if ":" not in str(a.get("metric")) and a.get("stat") in SHOWN_STATS]
    if shown:
        blocks.append(Table(("load", "theirs", "ninferkit", "stat", "value", "unit"), tuple(
            (str(a.get("load") or "—"), str(a.get("theirs")), str(a.get("metric")), str(a.get("stat")),
             number(a.get("value")), str(a.get("unit"))) for a in shown[:SHOWN_AGGREGATES]),
            "The tool's own aggregates, as its file holds them: those of a metric ninferkit has (docs/interop.md), "
            f"{min(len(shown), SHOWN_AGGREGATES)} of the {len(record.aggregates)} in imported.json."))
    elif record.aggregates:
        blocks.append(Paragraph(f"The tool's {len(record.aggregates)} aggregates are in imported.json, none of a "
                                "metric ninferkit has."))
    return [Section("Imported results", blocks)]
