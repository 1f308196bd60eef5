"""The variants side by side (issue 39): one section of the post for the profile's own serving and its variants.

The field reports' most quoted tables compare launches, not requests: seed 003's prefill-chunk row and its
300 W vs 350 W, seed 004's MTP 3/4/5 at 2 and 4 concurrent, seed 000 §2.2's A/B. A run with `variants` measured
each on one artifact (sweeps/variants.py); this section lays them out as the reports do: the launches (what each
set, how long it took to start and to measure, the KV pool its startup books left, its GPU power and SM clock
where NVML sampled them), then per sweep, as seed 004 §四 lays its table out, one row per cell and launch: prefill,
decode, TTFT and acceptance, the cell's aggregate output and best engine window, and a variant's moves against the
base's, each difference said inside or beyond run-to-run spread (report/compare.py's `delta`: the repeats'
interval where `sweeps.repeats` gave one, else the cell's own spread, else the ±3% of seed 000 §2.2).
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from typing import Any

import pandas as pd

from ninferkit.params.variants import BASE
from ninferkit.report.compare import METRICS, RUN_TO_RUN_PCT, delta, move_words
from ninferkit.report.data import RunData
from ninferkit.report.document import Block, Paragraph, Section, Table
from ninferkit.report.fmt import gib, number
from ninferkit.report.headline import params_label
from ninferkit.rundir.records import RequestRow, ServerRecord
from ninferkit.rundir.servings import VARIANT, launch_name
from ninferkit.sweeps.cell import REPEAT

TITLE = "Variants side by side"
SHOWN = ("prefill_tok_s_server", "decode_tok_s_server", "ttft_client_s")
"""The figures each variant's cell shows, in this order (compare.METRICS judges their moves)."""


def section(run: RunData) -> Section | None:
    """The variants' section; None for a run whose profile has none."""
    if not run.variants:
        return None
    names = [BASE, *run.variants]
    blocks: list[Block] = [Paragraph(
        f"The profile's own serving ({BASE}) and {len(run.variants)} variant(s), each launched in turn on the same "
        "artifact and binary, measured with the same cells and stopped before the next. A difference no larger "
        "than run-to-run spread (the interval of the repeats where sweeps.repeats gave one, else the spread of "
        f"the cell's own repetitions, else the ±{RUN_TO_RUN_PCT:g}% a rerun of one setup moves by: seed 000 §2.2) "
        "is said to be inside it, never a speed-up.")]
    blocks.append(_launches(run, names))
    cells, figures = _cells(run), _cell_figures(run)
    for sweep in dict.fromkeys(sweep for sweep, _ in cells):
        blocks.append(_side_by_side(sweep, {key: by for key, by in cells.items() if key[0] == sweep}, names,
                                    figures))
    return Section(TITLE, blocks)


def _launches(run: RunData, names: list[str]) -> Table:
    """One row per launch: what it set, its serving, start-up and wall time, the pool it left, power and clock."""
    power, largest = _conditions(run), _largest_pools(run)
    rows = []
    for name in names:
        if name == BASE:
            changes, server, record = "the profile as written", run.server, None
            ledger = run.ledger
        else:
            record, server = run.variants[name]
            changes = "; ".join(f"{key} = {json.dumps(value)}" for key, value in
                                run.variant_set(name).items())
            if record and record.why:
                changes += f" ({record.why})"
            ledger = server.ledger if server else {}
        state = (record.state or "—") if record else ("done" if name == BASE and server else "not launched")
        if record and record.error:
            state += f": {record.error.splitlines()[0]}"
        rows.append((name, changes, _ready(server), number(record.seconds) if record else "—",
                     number(ledger.get("kv_tokens")), gib(ledger.get("kv_cache_bytes")), largest.get(name, "—"),
                     number(power.get(name, {}).get("power_w_median")),
                     number(power.get(name, {}).get("sm_clock_mhz_median")), state))
    return Table(("launch", "changes", "ready (s)", "variant wall time (s)", "KV pool (tokens)", "KV cache",
                  "largest KV pool (tokens)", "GPU power median (W)", "SM clock median (MHz)", "state"), tuple(rows),
                 "Each launch's start-up (server.json's ready time), the wall time from its launch to its stop, the "
                 "KV pool its startup books left (the engine's own lines), the largest pool the capacity step fits "
                 "at its setting (what bounds it in brackets; — where 04_capacity_fit has not run since it launched), "
                 "and the median over its cells of NVML's power and SM clock (— where no GPU was sampled, as on a "
                 "CPU).")


def _largest_pools(run: RunData) -> dict[str, str]:
    """Per launch, the largest KV pool capacity.json gives at its setting, with what bounds it: the base's answer
    and each variant's (the capacity each variant leaves)."""
    capacity = run.capacity
    if capacity is None:
        return {}
    found = {BASE: (capacity.max_kv_tokens, capacity.max_kv_tokens_bounded_by)}
    found |= {each.name: (each.max_kv_tokens, each.max_kv_tokens_bounded_by) for each in capacity.variants}
    return {name: f"{number(tokens)} ({bounded})" if tokens is not None else "unknown"
            for name, (tokens, bounded) in found.items()}


def _ready(server: ServerRecord | None) -> str:
    return number(server.ready_s) if server else "—"


def _conditions(run: RunData) -> dict[str, dict[str, float]]:
    """Per launch, the median over its cells of the tables' GPU power and SM clock medians."""
    found: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for table in run.variant_tables.values():
        if VARIANT not in table:
            continue
        for column in ("power_w_median", "sm_clock_mhz_median"):
            if column in table:
                for name, value in zip(table[VARIANT], table[column], strict=True):
                    if value is not None and not pd.isna(value):
                        found[str(name)][column].append(float(value))
    return {name: {column: statistics.median(values) for column, values in by.items()} for name, by in found.items()}


def _cells(run: RunData) -> dict[tuple[str, str], dict[str, list[RequestRow]]]:
    """(sweep, cell parameters without repeat and variant) -> launch name -> its measured rows."""
    cells: dict[tuple[str, str], dict[str, list[RequestRow]]] = defaultdict(lambda: defaultdict(list))
    for row in [*run.measured(), *run.measured_variants()]:
        cells[(str(row.sweep), _shared(row))][launch_name(row.cell)].append(row)
    return cells


def _shared(row: RequestRow) -> str:
    """A row's cell parameters without its repeat and variant: what one cell of every launch has alike."""
    return json.dumps({key: value for key, value in (row.cell or {}).items() if key not in (REPEAT, VARIANT)},
                      sort_keys=True)


def _cell_figures(run: RunData) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(sweep, shared cell parameters, launch) -> that cell's row of its sweep table (aggregate output, the best
    engine window): the figures a cell has once, not per request. A table row names its cell by the first repeat's
    id, which the rows carry."""
    keys = {str(row.cell_id): _shared(row) for row in [*run.measured(), *run.measured_variants()]}
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for sweep, table in run.launch_tables().items():
        for record in table.to_dict("records"):
            key = keys.get(str(record.get("cell_id")))
            if key is not None:
                found[(sweep, key, launch_name(record))] = record
    return found


CELL_FIGURES = ("aggregate_output_tok_s_client", "decode_tok_s_engine_peak")
"""The figures of a whole cell shown beside each launch's medians (seed 004 §四: aggregate for its concurrent rows,
the best 5 s window for its single ones)."""


def _side_by_side(sweep: str, cells: dict[tuple[str, str], dict[str, list[RequestRow]]], names: list[str],
                  figures: dict[tuple[str, str, str], dict[str, Any]]) -> Table:
    """Seed 004 §四's layout: one row per cell and launch that measured it, its prefill / decode / acceptance / TTFT,
    the cell's aggregate output and best engine window, and a variant's moves against the base."""
    lines = []
    for (_, key), by in sorted(cells.items(), key=lambda item: item[0][1]):
        for name in [name for name in names if by.get(name)]:
            cell = figures.get((sweep, key, name), {})
            moves = "—"
            if name != BASE and by.get(BASE):
                said = [move_words(metric, found) for metric in SHOWN
                        if (found := delta(by[BASE], by[name], metric, METRICS[metric])) is not None]
                moves = "; ".join(said) or "no figure on both sides"
            lines.append((params_label(json.loads(key)), name, *(_median(by[name], metric) for metric in SHOWN),
                          _share(by[name]), *(number(cell.get(column)) for column in CELL_FIGURES), moves))
    return Table(("cell", "launch", "prefill tok/s (server)", "decode tok/s (server, per request)", "TTFT, s (client)",
                  "acceptance (server)", "aggregate output tok/s (client)", "best window tok/s (engine)",
                  "against base"), tuple(lines),
                 f"The {sweep} sweep under each launch, one row per cell and launch that measured it: server-side "
                 "medians of prefill and decode per request, the client's TTFT, the engine's acceptance, the cell's "
                 "aggregate output over its wall and the best of the engine's windows of decode alone (— where no "
                 "window only decoded), and each variant's move against the base.")


def _median(rows: list[RequestRow], metric: str) -> str:
    values = [float(value) for row in rows if (value := getattr(row, metric)) is not None]
    return number(statistics.median(values)) if values else "—"


def _share(rows: list[RequestRow]) -> str:
    values = [float(row.acceptance_server) for row in rows if row.acceptance_server is not None]
    return f"{100 * statistics.median(values):.0f}%" if values else "—"

