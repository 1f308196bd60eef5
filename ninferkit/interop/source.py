"""A run directory as an export reads it: the rows its tables count, cell by cell, and who served them."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from ninferkit.errors import BadInput
from ninferkit.interop.base import Cell, Source
from ninferkit.report.data import RunData, load_run
from ninferkit.rundir.records import RequestRow


def run_source(path: Path) -> Source:
    """The run's measured requests (`measured_source`), refused when there is none to export.

    Raises BadInput when the folder has no such request (the sweeps step never ran there)."""
    data = load_run(path)
    source = measured_source(data)
    if not source.cells and data.imported is not None:
        raise BadInput(f"{data.dir.path}: imported from {data.imported.tool}'s aggregates alone (imported.json): it "
                       "has no request to export, and an export makes none up from a mean")
    if not source.cells:
        raise BadInput(f"{data.dir.requests}: no measured request to export (run the sweeps step, 03_sweeps, first)")
    return source


def measured_source(data: RunData) -> Source:
    """The run's measured requests, failed ones included (a peer's file counts its failures), without warm-ups
    and the requests a prefix-reuse cell sends only to seed the cache; grouped by cell in the order they ran, the
    variants' cells (issue 39) after the base's, each naming its variant (no cell when none was measured)."""
    by_cell: dict[tuple[str, str], list[RequestRow]] = defaultdict(list)
    for row in [*data.requests, *data.variant_requests]:
        if not row.warmup and row.prefix_role != "seed" and row.status in ("ok", "errored"):
            by_cell[(str(row.sweep), str(row.cell_id))].append(row)
    cells = [Cell(sweep, cell_id, dict(rows[0].cell or {}), sorted(rows, key=_sent))
             for (sweep, cell_id), rows in by_cell.items()]
    cells.sort(key=lambda cell: min(_sent(row) for row in cell.rows))
    server = data.server
    model = (server.model_id if server else None) or (data.profile.get("serve") or {}).get("model_id")
    urls = {name: launched.url for name, (_, launched) in data.variants.items() if launched is not None}
    return Source(data.run_id, model, data.engine, server.url if server else None, cells, urls)


def _sent(row: RequestRow) -> float:
    return float(row.t_send) if row.t_send is not None else float("inf")
