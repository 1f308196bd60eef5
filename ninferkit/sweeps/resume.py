"""What a rerun keeps and what it sends: a finished cell is kept while its serving and its own identity hold.

A cell's id is its identity (its kind, its parameters with the client-side workload settings, its repeat
index: sweeps/cell.py), and the serving it is measured under is the run's (rundir/servings.py). So adding a
context target sends that one cell, a new port sends nothing, `sweeps.repeats` 1 -> 2 sends one new repeat
of each cell, and a new KV dtype sends every cell again, each resend with its reason (issue 37). A cell
recorded done whose attempt measured nothing (sweeps/tables.py: `demote_unmeasured`) is sent again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ninferkit.rundir.records import CellEntry
from ninferkit.rundir.servings import RunServings
from ninferkit.sweeps.cell import Cell, repeat_of

SHOWN_RESENDS = 20
"""How many resends the summary lists one by one; the rest are counted."""


@dataclass(frozen=True)
class Resume:
    """The planned cells split into those kept (finished under this serving) and those sent, with why."""

    keep: list[Cell[Any]]
    send: list[tuple[Cell[Any], str]]

    def reasons(self) -> dict[str, int]:
        """How many cells are sent for each kind of reason (the reason up to its first colon)."""
        return dict(Counter(why.split(":")[0] for _, why in self.send))

    def summary(self, serving_id: str) -> str:
        total = len(self.keep) + len(self.send)
        head = (f"keeping {len(self.keep)} of {total} cells (finished under serving {serving_id}); "
                f"sending {len(self.send)}")
        lines = [f"  - {cell.label} ({why})" for cell, why in self.send[:SHOWN_RESENDS]]
        if len(self.send) > SHOWN_RESENDS:
            lines.append(f"  + {len(self.send) - SHOWN_RESENDS} more")
        return "\n".join([head + (":" if lines else ""), *lines])


def resume_plan(cells: list[Cell[Any]], entries: list[CellEntry], ok: Mapping[tuple[str, str], int],
                servings: RunServings) -> Resume:
    """Split the plan. `entries`: the whole ledger in order; `ok`: measured requests that succeeded per
    (cell_id, attempt) (tables.measured_ok); `servings`: the run's (its current serving per cell)."""
    current: dict[str, CellEntry] = {}
    elsewhere: dict[str, str] = {}
    for entry in entries:
        line = entry.as_dict()
        if servings.is_current(line):
            current[entry.cell_id] = entry
        else:
            elsewhere[entry.cell_id] = servings.of_line(line)
    keep: list[Cell[Any]] = []
    send: list[tuple[Cell[Any], str]] = []
    for cell in cells:
        why = _why_sent(cell, current.get(cell.cell_id), elsewhere.get(cell.cell_id), ok, servings)
        if why is None:
            keep.append(cell)
        else:
            send.append((cell, why))
    return Resume(keep, send)


def _why_sent(cell: Cell[Any], entry: CellEntry | None, other: str | None, ok: Mapping[tuple[str, str], int],
              servings: RunServings) -> str | None:
    """None to keep the cell, else why it is sent."""
    if entry is None:
        if other is not None:
            now = servings.for_cell(cell.params.as_dict())
            before = servings.identity(other)
            changed = "; ".join(before.differences(now) or before.unknown_in(now)) if before else ""
            return "serving changed: " + (changed or f"measured under {other}, a serving this run no longer has")
        repeat = repeat_of(cell.params.as_dict())
        return f"new repeat {repeat + 1}" if repeat else "new cell"
    if entry.status == "skipped":
        return None if cell.skip else "no longer skipped"
    if entry.status == "failed":
        return f"failed last time: {entry.reason or 'no reason recorded'}"
    if not ok.get((cell.cell_id, entry.attempt)):
        return "recorded done but measured nothing"
    if entry.request_fields is not None and entry.request_fields != cell.request:
        keys = set(entry.request_fields) | set(cell.request)
        fields = sorted(k for k in keys if entry.request_fields.get(k) != cell.request.get(k))
        return "request fields changed: " + ", ".join(fields)
    return None
