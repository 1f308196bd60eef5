"""A flat CSV, one row per request, latencies in milliseconds (the unit every peer uses): for a spreadsheet or a
tool that reads none of the peers' files.

Each latency column names its formula and unit (`ttft_ms` is `ttft_client_s` x 1000; `itl_mean_ms` the mean
of the request's own gaps; `last_token_ms` vLLM's E2EL), an empty cell is a figure the row does not have
(never 0), and the server's own timings follow under their ninferkit names (seconds and tok/s as recorded).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from ninferkit.interop.base import Format, Source, ms
from ninferkit.interop.stats import last_token_s
from ninferkit.measure.latency import gaps, number, tpot_s
from ninferkit.rundir.records import RequestRow
from ninferkit.rundir.runs import write_text_atomic
from ninferkit.rundir.servings import launch_name

COLUMNS = ("run_id", "sweep", "cell_id", "cell", "variant", "repetition", "request_uid", "api", "status", "error",
           "prompt_tokens", "cached_tokens", "completion_tokens", "ttft_ms", "tpot_ms", "itl_mean_ms", "itl_max_ms",
           "last_token_ms", "e2e_ms", "decode_tok_s_client", "prompt_s_server", "prefill_tok_s_server",
           "decode_tok_s_server", "acceptance_server", "started_utc")


def row_of(run_id: str, row: RequestRow) -> dict[str, Any]:
    """One request as the CSV's row; `variant` names the launch that measured it (`base`: the profile's own)."""
    found = gaps(row) or []
    return {
        "run_id": run_id, "sweep": row.sweep, "cell_id": row.cell_id,
        "cell": json.dumps(row.cell, sort_keys=True) if row.cell else None,
        "variant": launch_name(row.cell), "repetition": row.repetition,
        "request_uid": row.request_uid, "api": row.api, "status": row.status, "error": row.error,
        "prompt_tokens": row.prompt_tokens, "cached_tokens": row.cached_tokens,
        "completion_tokens": row.completion_tokens, "ttft_ms": ms(number(row.ttft_client_s)),
        "tpot_ms": ms(tpot_s(row)),
        "itl_mean_ms": ms(sum(found) / len(found)) if found else None, "itl_max_ms": ms(max(found)) if found else None,
        "last_token_ms": ms(last_token_s(row)), "e2e_ms": ms(number(row.e2e_client_s)),
        "decode_tok_s_client": row.decode_tok_s_client, "prompt_s_server": row.prompt_s_server,
        "prefill_tok_s_server": row.prefill_tok_s_server, "decode_tok_s_server": row.decode_tok_s_server,
        "acceptance_server": row.acceptance_server, "started_utc": row.started_utc,
    }


def table_text(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """Rows as CSV text; None is an empty cell."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows({key: ("" if value is None else value) for key, value in row.items()} for row in rows)
    return out.getvalue()


def export(source: Source, path: Path) -> list[Path]:
    rows = [row_of(source.run_id, row) for cell in source.cells for row in cell.rows]
    return [write_text_atomic(path, table_text(rows, COLUMNS))]


FORMAT = Format("csv", "any spreadsheet", "one row per request, latencies in ms", export=export,
                default_name="requests.csv")
