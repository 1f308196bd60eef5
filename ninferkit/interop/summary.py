"""Each cell's latencies as the peers summarise them: mean, median, std, p90 and p99 in milliseconds, beside
the request and token throughput. The sweep tables (seconds, medians) stay as they are; this is the same
samples in the peers' units (stats.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ninferkit.interop.base import Cell, Format, Source
from ninferkit.interop.requests_csv import table_text
from ninferkit.interop.stats import STATS, throughput
from ninferkit.measure.latency import METRICS, distributions_ms
from ninferkit.rundir.runs import write_text_atomic

SHORT = {"ttft_client_s": "ttft", "tpot_client_s": "tpot", "itl_client_s": "itl", "e2e_client_s": "e2e"}
COLUMNS = ("run_id", "sweep", "cell_id", "cell", "variant", "requests", "failed", "duration_s", "requests_per_s",
           "output_tok_s", *(f"{SHORT[m]}_{stat}_ms" for m in METRICS for stat in STATS))


def summary_row(run_id: str, cell: Cell) -> dict[str, Any]:
    flow = throughput(cell)
    row: dict[str, Any] = {"run_id": run_id, "sweep": cell.sweep, "cell_id": cell.cell_id,
                           "cell": json.dumps(cell.params, sort_keys=True), "variant": cell.variant,
                           "requests": len(cell.rows),
                           "failed": flow.failed, "duration_s": flow.duration_s,
                           "requests_per_s": flow.requests_per_s, "output_tok_s": flow.output_tok_s}
    for metric, spread in distributions_ms(cell.rows).items():
        for stat in STATS:
            row[f"{SHORT[metric]}_{stat}_ms"] = spread.value(stat)
    return row


def export(source: Source, path: Path) -> list[Path]:
    rows = [summary_row(source.run_id, cell) for cell in source.cells]
    return [write_text_atomic(path, table_text(rows, COLUMNS))]


FORMAT = Format("summary", "any spreadsheet", "one row per cell: mean, median, std, p90, p99 in ms",
                export=export, default_name="summary.csv")
