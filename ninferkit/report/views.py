"""The sweep tables as the write-up shows them: the columns a reader compares, so a table fits the page.

tables/<name>.csv keeps every column; a view (the columns its kind names: sweeps/kinds/<kind>.py) shows
one cell per quantity (a median with its range in brackets; for a cell run several times, `sweeps.repeats`, the
median of its repeats with its confidence interval in square brackets), moves a column that holds the same value in
every row into the caption ("in every cell: api chat"), leaves out a column with no value, and lists what a
failed or skipped cell and the plan's notes say below the table instead of in it. The latency tables are
recomputed from the request rows (TTFT, TPOT, ITL and end-to-end latency as ninferkit/measure/latency.py defines
them, with requests per second).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ninferkit.capacity.summary import dtype_words
from ninferkit.measure.latency import distribution, recorded_itl, requests_per_s, samples
from ninferkit.params.report import ReportSection
from ninferkit.report.compare import CACHED, CACHED_SHARE, RUN_TO_RUN_PCT, acceptance_differs
from ninferkit.report.document import Block, Bullets, Table, table_from_frame
from ninferkit.report.fmt import count, counts, number, seconds, span
from ninferkit.rundir.records import CapacitySearch, DecisionRow, RequestRow
from ninferkit.sweeps.cell import Label
from ninferkit.sweeps.kinds import find_kind
from ninferkit.sweeps.kinds.columns import RATE_DECIMALS, Shape, ViewColumn
from ninferkit.sweeps.metrics import cell_acceptance
from ninferkit.sweeps.plan import AB

Row = Mapping[str, Any]
Getter = Callable[[Row], "str | None"]

ACCEPTANCE_GAP_PCT: float = ReportSection.model_fields["acceptance_gap_pct"].default
"""report.acceptance_gap_pct's default, for a view shown without the run's settings (a notebook's table)."""


@dataclass(frozen=True)
class Column:
    header: str
    value: Getter


def _get(row: Row, name: str) -> Any:
    """A table cell's value; None for an absent one (a missing column, or a NaN from the CSV)."""
    value: Any = row.get(name)
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def plain(name: str, scale: float = 1.0, decimals: int | None = None) -> Getter:
    def get(row: Row) -> str | None:
        if _is_count(name):
            return _counted(row, name.removesuffix("_median"))
        value = _get(row, name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return str(value)
        return number(value * scale if scale != 1 else value, decimals)
    return get


def _is_count(name: str) -> bool:
    """A count's median column (tokens, events): shown as a count, never as the half between two."""
    return name.endswith(("_tokens_median", "_tokens_server_median", "_events_median"))


def _counted(row: Row, base: str) -> str | None:
    """A count stated as `{base}_median` (and `_min`/`_max` where the table has them) as a count
    (report/fmt.py counts); None where the table has no value."""
    median = _get(row, f"{base}_median")
    return None if median is None else counts(median, _get(row, f"{base}_min"), _get(row, f"{base}_max"))


def param(name: str) -> Getter:
    """A cell parameter as it was asked: a count stays a whole number (a CSV may hold it as a float)."""
    def get(row: Row) -> str | None:
        value = _get(row, name)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return None if value is None else number(value) if isinstance(value, (int, float)) else str(value)
    return get


def spread(name: str, decimals: int | None = None) -> Getter:
    """`median (min – max)` of a metric the table states as `{name}_median/_min/_max`; `median [low – high]`
    where the cell has repeats (its `_ci_low/_ci_high`: the interval, sweeps/tables.py)."""
    def shown(value: Any) -> str:
        return number(value, decimals)

    def get(row: Row) -> str | None:
        median, low, high = (_get(row, f"{name}_{part}") for part in ("median", "min", "max"))
        if median is None:
            return None
        ci_low, ci_high = _get(row, f"{name}_ci_low"), _get(row, f"{name}_ci_high")
        if ci_low is not None and ci_high is not None:
            return f"{shown(median)} [{shown(ci_low)} – {shown(ci_high)}]"
        if low is None or high is None or shown(low) == shown(high):
            return shown(median)
        return f"{shown(median)} ({shown(low)} – {shown(high)})"
    return get


def slowest(name: str) -> Getter:
    """`median; slowest max` of a time the table states as `{name}_median/_max` (a request's end to end): the
    typical request and the one that waited longest, which a p99 of a cell of a few requests cannot give; the
    one value where every request took the same (or one ran)."""
    def get(row: Row) -> str | None:
        median, most = _get(row, f"{name}_median"), _get(row, f"{name}_max")
        if median is None:
            return None
        if most is None or seconds(most) == seconds(median):
            return seconds(median)
        return f"{seconds(median)}; slowest {seconds(most)}"
    return get


def percent(name: str) -> Getter:
    def get(row: Row) -> str | None:
        value = _get(row, name)
        return None if value is None else f"{100 * float(value):.0f}%"
    return get


def _requests(row: Row) -> str | None:
    ok, errored = _get(row, "n_ok"), _get(row, "n_errored")
    if ok is None:
        return None
    return f"{int(ok)}" + (f" (+{int(errored)} errored)" if errored else "")


def _decode(decimals: int | None) -> Getter:
    """The engine's decode rate; where the client saw a different one beyond the run's spread (a stalled
    stream: `decode_gap_note`), the client's beside it, so a stall never reads as fast."""
    def get(row: Row) -> str | None:
        shown = spread("decode_tok_s_server", decimals)(row)
        client = _get(row, "decode_tok_s_client_median")
        if shown is None or not _get(row, "decode_gap_note") or client is None:
            return shown
        return f"{shown}; client {number(client, decimals)}"
    return get


def _acceptance(row: Row) -> str | None:
    """The cell's acceptance (sweeps/metrics.cell_acceptance) with the engine's accepted / drafted tokens summed over
    its requests (seed 000 §2.1's `47%（38/81）`); a table written before the sums shows the counts' medians only
    where each is a count (two requests of 0 / 8 and 5 / 13 have no pair to show: the share stands alone)."""
    share = cell_acceptance(_get(row, "accepted_tokens_server_sum"), _get(row, "drafted_tokens_server_sum"),
                            _get(row, "acceptance_server_median"))
    if share is None:
        return None
    accepted, drafted = _get(row, "accepted_tokens_server_sum"), _get(row, "drafted_tokens_server_sum")
    if accepted is None or drafted is None:  # a table built before the sums: the medians, where they are counts
        accepted, drafted = _get(row, "accepted_tokens_server_median"), _get(row, "drafted_tokens_server_median")
    whole = accepted is not None and drafted is not None and float(accepted).is_integer() and \
        float(drafted).is_integer()
    return f"{100 * float(share):.0f}%" + (f" ({counts(accepted)} / {counts(drafted)})" if whole else "")


def _hit_tokens(row: Row) -> str | None:
    """The prefix-cache hit tokens and whose count they are; "unknown" (never 0) where neither the usage nor
    the engine's record counted them."""
    if "hit_tokens_median" not in row:  # a table built before the engine's count was read: the usage's only
        tokens, source = _counted(row, "cached_tokens"), "usage"
    else:
        tokens, source = _counted(row, "hit_tokens"), _get(row, "hit_tokens_source")
    if tokens is None:
        return None if _get(row, "n_ok") in (0, None) else "unknown"
    return f"{tokens} ({source})" if source else tokens


def _answer(row: Row) -> str | None:
    """The first answer token's time beside the reasoning events before it, where the cell's requests reasoned
    (rows with reasoning_events); a cell that reasoned but answered in none of its requests says so."""
    events = _get(row, "reasoning_events_median")
    if not events:
        return None
    answer = _get(row, "ttft_answer_client_s_median")
    said = number(answer) if answer is not None else "no answer token"
    return f"{said} ({_counted(row, 'reasoning_events')} reasoning events)"


def _engine_decode(row: Row) -> str | None:
    mean, peak = _get(row, "decode_tok_s_engine_mean"), _get(row, "decode_tok_s_engine_peak")
    return None if mean is None and peak is None else f"{number(mean)} / {number(peak)}"


def _gpu(row: Row) -> str | None:
    power, clock = _get(row, "power_w_median"), _get(row, "sm_clock_mhz_median")
    if power is None and clock is None:
        return None
    throttled = str(_get(row, "throttled")).lower() == "true"
    return f"{number(power)} W, {number(clock)} MHz" + (", throttled" if throttled else "")


def _wait(row: Row) -> str | None:
    median, most = _get(row, "wait_before_prefill_s_median"), _get(row, "wait_before_prefill_s_max")
    return None if median is None else f"{number(median)} (max {number(most)})"


def _goodput(row: Row) -> str | None:
    rate, share = _get(row, "goodput_rps"), _get(row, "good_fraction")
    return None if rate is None else f"{number(rate)} ({100 * float(share):.0f}% good)"


def _kept_up(row: Row) -> str | None:
    verdict, growth = _get(row, "kept_up"), _get(row, "backlog_growth")
    if growth is None:
        return None
    failed = _get(row, "n_errored")
    said = "unclear" if verdict is None else "yes" if verdict else "no"
    return f"{said} ({number(float(growth))} s/s" + (f", {failed} failed)" if failed else ")")


SHAPES: dict[Shape, Callable[[ViewColumn], Getter]] = {
    "param": lambda c: param(c.column), "plain": lambda c: plain(c.column, c.scale, c.decimals),
    "spread": lambda c: spread(c.column, c.decimals), "percent": lambda c: percent(c.column),
    "requests": lambda c: _requests, "engine_decode": lambda c: _engine_decode, "gpu": lambda c: _gpu,
    "wait_before_prefill": lambda c: _wait, "goodput": lambda c: _goodput, "kept_up": lambda c: _kept_up,
    "decode": lambda c: _decode(c.decimals), "acceptance": lambda c: _acceptance, "hit_tokens": lambda c: _hit_tokens,
    "answer": lambda c: _answer, "slowest": lambda c: slowest(c.column),
}
"""How each shape of a kind's write-up column (sweeps/kinds/columns.py) is shown."""


def view_columns(name: str) -> list[Column] | None:
    """The columns of a kind's compact table (None: no kind of that name, as the A/B: shown whole)."""
    kind = find_kind(name)
    if kind is None:
        return None
    return [Column(spec.header, SHAPES[spec.shape](spec)) for spec in kind.view]


REQUESTS = Column("requests", _requests)
STATUS = Column("status", plain("status"))


def sweep_view(name: str, frame: pd.DataFrame, acceptance_gap_pct: float = ACCEPTANCE_GAP_PCT) -> list[Block]:
    """The compact table of tables/<name>.csv and, below it, what its failed or skipped cells and notes say;
    the A/B as seed 000 §2.2 lays it out (its rows flagged where acceptance differs by more than
    `acceptance_gap_pct` points, the run's report.acceptance_gap_pct); a table of no kind this ninferkit knows is
    shown whole."""
    if name == AB:
        return [ab_view(frame, acceptance_gap_pct)]
    columns = view_columns(name)
    if columns is None:
        shown = frame.dropna(axis="columns", how="all")
        return [table_from_frame(shown, f"tables/{name}.csv")]
    records = frame.to_dict("records")
    if any(_get(row, "status") not in ("done", None) for row in records):
        columns = [*columns, STATUS]
    cells = [[column.value(row) for column in columns] for row in records]
    kept, same = [], []
    for index, column in enumerate(columns):
        values = [row[index] for row in cells]
        if all(value is None for value in values):
            continue
        if len(records) > 1 and len(set(values)) == 1 and column not in (REQUESTS, STATUS):
            same.append(f"{column.header} {values[0]}")
            continue
        kept.append(index)
    caption = (f"tables/{name}.csv (every column), {len(records)} cells: a median over each cell's measured "
               "requests, with their range in brackets" + _repeats_words(records)
               + (f"; in every cell: {', '.join(same)}" if same else ""))
    table = Table(tuple(columns[i].header for i in kept),
                  tuple(tuple(row[i] or "—" for i in kept) for row in cells), caption)
    notes = _notes(name, records)
    return [table, Bullets(tuple(notes))] if notes else [table]


AB_SIDE = "prefill / decode tok/s / MTP"
AB_MOVED = (("prefill", "prefill_tok_s_server"), ("decode", "decode_tok_s_server"))


def ab_view(frame: pd.DataFrame, acceptance_gap_pct: float = ACCEPTANCE_GAP_PCT) -> Table:
    """Seed 000 §2.2's layout of tables/ab.csv (sweeps.ab): one row per cell both runs measured, each side's prefill
    / decode / acceptance (the engine's medians; the acceptance with the engine's accepted / drafted counts over the
    cell, the report's "464/523"), and the candidate's prefill and decode over the baseline's, each said inside or
    beyond the ±3% a rerun of one setup moves by (seed 000 §2.2). A row whose two acceptances differ by more than
    `acceptance_gap_pct` points says that its decode is not comparable, by compare/'s rule (compare.py
    acceptance_differs)."""
    lines = []
    batched = False
    for row in frame.to_dict("records"):
        shares = {side: _ab_share(row, side) for side in ("a", "b")}
        cached = {side: _ab_cached(row, side) for side in ("a", "b")}
        sides = [" / ".join(("— (cache hit)" if cached[side] else
                             number(_get(row, f"prefill_tok_s_server_{side}"), RATE_DECIMALS),
                             number(_get(row, f"decode_tok_s_server_{side}"), RATE_DECIMALS),
                             _ab_acceptance(row, side, shares[side]))) + _ab_batch(row, side)
                 for side in ("a", "b")]
        moved = [*AB_MOVED, *(AB_BATCH_MOVED if _ab_batch(row, "a") or _ab_batch(row, "b") else ())]
        batched = batched or len(moved) > len(AB_MOVED)
        moves = [f"prefill: not comparable ({CACHED})" if metric == "prefill_tok_s_server" and any(cached.values())
                 else _ab_move(words, _get(row, f"{metric}_ratio_b_over_a")) for words, metric in moved]
        if acceptance_differs(shares["a"], shares["b"], acceptance_gap_pct):
            moves.append(f"acceptance {_share(shares['a'])} vs {_share(shares['b'])}: decode not comparable")
        lines.append((f"{_get(row, 'sweep')}: {_get(row, 'cell')}", *sides, "; ".join(moves)))
    return Table(("cell", f"A, baseline: {AB_SIDE}", f"B, this run: {AB_SIDE}", "B / A"), tuple(lines),
                 "tables/ab.csv: the cells both runs measured, paired by cell (A is the run "
                 "sweeps.ab.baseline_run_dir names); server-side medians of prefill and decode, and the acceptance of "
                 "drafted tokens (MTP) with the engine's accepted / drafted tokens over the cell's requests where it "
                 f"counted them, seed 000 §2.2's layout. A ratio within ±{RUN_TO_RUN_PCT:g}% (what a rerun of "
                 "one setup moves by: seed 000 §2.2) is inside run-to-run spread, never a speed-up; decode at "
                 f"acceptances more than {acceptance_gap_pct:g} points apart (report.acceptance_gap_pct) is not "
                 "comparable, and the row says so."
                 + (" A concurrency cell also gives its batch (the client's): the wall from the first "
                    "request sent to the last byte, the output tokens of all its requests and their aggregate rate "
                    "(seed 000 §2.2's \"批 wall / tok / tok/s\")." if batched else ""))


def _ab_cached(row: Row, side: str) -> bool:
    """Whether the side's engine served most of the cell's prompt from its cache (compare/'s rule): its prompt time
    is then an overhead over the few tokens left, no prefill rate."""
    share = _get(row, f"cached_share_{side}")
    return share is not None and float(share) > CACHED_SHARE


def _ab_share(row: Row, side: str) -> float | None:
    """One side's acceptance, as every table gives a cell's (sweeps/metrics.cell_acceptance)."""
    return cell_acceptance(_get(row, f"accepted_tokens_server_{side}"), _get(row, f"drafted_tokens_server_{side}"),
                           _get(row, f"acceptance_server_{side}"))


def _ab_acceptance(row: Row, side: str, share: float | None) -> str:
    """"89% (464 / 523)" where the engine counted the drafts, "89%" where it gave a share alone, "—" without
    speculative decoding."""
    accepted, drafted = _get(row, f"accepted_tokens_server_{side}"), _get(row, f"drafted_tokens_server_{side}")
    if share is None:
        return "—"
    return _share(share) + (f" ({count(accepted)} / {count(drafted)})" if accepted is not None and drafted else "")


def _share(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


AB_BATCH_MOVED = (("aggregate", "aggregate_output_tok_s_client"),)


def _ab_batch(row: Row, side: str) -> str:
    """A concurrent cell's batch on one side of the A/B ("; batch wall 3.84 s / 188 tok / 48.9 tok/s"); "" for a
    cell of one request at a time, or an A/B built before the batch was kept."""
    wall, output = _get(row, f"wall_s_{side}"), _get(row, f"output_tokens_{side}")
    if wall is None and output is None:
        return ""
    return (f"; batch wall {seconds(wall)} s / {count(output)} tok / "
            f"{number(_get(row, f'aggregate_output_tok_s_client_{side}'), RATE_DECIMALS)} tok/s")


def _ab_move(words: str, ratio: Any) -> str:
    if ratio is None:
        return f"{words} —"
    inside = abs(float(ratio) - 1) * 100 <= RUN_TO_RUN_PCT
    return f"{words} {float(ratio):.2f}x ({'inside' if inside else 'beyond'} ±{RUN_TO_RUN_PCT:g}%)"


def _repeats_words(records: Sequence[Row]) -> str:
    """The caption's words for the cells run several times: how many repeats, and the interval's method."""
    repeated = [row for row in records if (_get(row, "repeats") or 0) > 1]
    if not repeated:
        return ""
    counts = sorted({int(_get(row, "repeats")) for row in repeated})
    methods = sorted({str(_get(row, "ci_method")) for row in repeated if _get(row, "ci_method")})
    return (f"; {len(repeated)} of the cells ran {' or '.join(map(str, counts))} times (sweeps.repeats): there the "
            "median of the repeats' medians, with its interval in square brackets"
            + (f" ({'; '.join(methods)})" if methods else ""))


def detail_view(name: str, rows: Sequence[RequestRow]) -> Table | None:
    """The kind's breakdown below its table (sessions: per turn), shares as percentages; None where the kind
    has none or the run has no row for it."""
    kind = find_kind(name)
    frame = pd.DataFrame([row.as_dict() for row in rows])
    found = kind.detail(frame) if kind is not None and len(frame) else None
    if found is None or found.empty:
        return None
    shown = found.astype(object).where(found.notna(), None)
    for column in shown.columns:
        if "share" in str(column):
            shown[column] = [percent(column)({column: value}) for value in shown[column]]
    return table_from_frame(shown, kind.detail_caption if kind is not None else "")


def _notes(name: str, records: Sequence[Row]) -> list[str]:
    """Why a cell failed or was skipped, and each distinct plan note or server note with the cells it concerns."""
    out: list[str] = []
    shared: dict[str, list[str]] = defaultdict(list)
    for row in records:
        label = _label(name, row)
        status, reason = _get(row, "status"), _get(row, "reason")
        if status not in ("done", None):
            diagnosis = _get(row, "diagnosis")
            out.append(f"{label}: {status}: {reason or 'no reason recorded'}"
                       + (f" ({diagnosis})" if diagnosis else ""))
        for field in ("notes", "server_note", "decode_gap_note"):
            text = _get(row, field)
            if text:
                shared[str(text)].append(label)
    for text, labels in shared.items():
        out.append(f"{text} ({', '.join(labels) if len(labels) < len(records) else 'every cell'})")
    return out


def _labels(name: str) -> tuple[Label, ...]:
    kind = find_kind(name)
    return () if kind is None else kind.labels


def _label(name: str, cell: Row) -> str:
    """A cell in words: '1,024 prompt tokens', 'coding depth 1,024', '8 clients', '2 requests/s'."""
    parts = []
    for label in _labels(name):
        value = param(label.key)(cell)
        if value is not None:
            parts.append((label.one if value == "1" and label.one is not None else label.words).format(value))
    parts = [part for part in parts if part]  # a label whose `one` is "" says nothing of the usual value
    repeat = _get(cell, "repeat")
    return (" ".join(parts) or str(_get(cell, "cell_id"))) + (f" (repeat {repeat})" if repeat else "")


def latency_view(name: str, cell_rows: Mapping[str, Sequence[RequestRow]]) -> Table | None:
    """TTFT, TPOT, ITL and end-to-end latency (p50 / p90 / p99 and standard deviation, in milliseconds) and
    requests per second, per cell of one sweep, from its finished requests (None: the sweep finished none);
    requests per second count the wall time of every request the cell sent. The ITL column is left out when
    none of the rows recorded their gaps."""
    cells = {cell_id: [row for row in rows if row.status == "ok"] for cell_id, rows in cell_rows.items()}
    cells = {cell_id: rows for cell_id, rows in cells.items() if rows}
    if not cells:
        return None
    rows = [row for group in cells.values() for row in group]
    order = sorted(cells, key=lambda cell_id: _order(name, cells[cell_id][0].cell or {}))
    metrics = [("TTFT", "ttft_client_s"), ("TPOT", "tpot_client_s"), ("ITL", "itl_client_s"),
               ("end to end", "e2e_client_s")]
    with_itl = recorded_itl(rows)
    if not with_itl:
        metrics = [m for m in metrics if m[1] != "itl_client_s"]
    table_rows = []
    for cell_id in order:
        group = cells[cell_id]
        table_rows.append((_label(name, group[0].cell or {}), str(len(group)),
                           number(requests_per_s(group, cell_rows[cell_id])),
                           *(_distribution_ms(samples(group, metric)) for _, metric in metrics)))
    return Table(("cell", "requests", "requests/s", *(f"{label}, ms" for label, _ in metrics)), tuple(table_rows),
                 f"{name.replace('_', ' ')} sweep: p50 / p90 / p99 (sd) over {PERCENTILES_FROM} or more values; "
                 "over fewer, the median (range), or the one value" + ("" if with_itl else "; no ITL recorded"))


PERCENTILES_FROM = 10
"""Fewer values than this show their median and range: a p90 or p99 of one or a few requests says nothing more."""


def _distribution_ms(values: list[float]) -> str:
    found = distribution(values)
    if found.p50 is None or found.p90 is None or found.p99 is None or found.std is None:
        return "—"
    if len(values) == 1:
        return number(1000 * values[0])
    if len(values) < PERCENTILES_FROM:
        return f"{number(1000 * found.p50)} ({span(1000 * min(values), 1000 * max(values))})"
    return (f"{number(1000 * found.p50)} / {number(1000 * found.p90)} / {number(1000 * found.p99)} "
            f"(sd {number(1000 * found.std)})")


def _order(name: str, cell: Row) -> tuple[Any, ...]:
    """Cells in the sweep tables' order: by their parameters (numbers numerically), tasks in suite order."""
    kind = find_kind(name)
    key: list[Any] = []
    for label in _labels(name):
        value = cell.get(label.key)
        order = None if kind is None else kind.orders.get(label.key)
        if order is not None:
            key.append(order.index(value) if value in order else len(order))
        key.append((value is None, value if isinstance(value, (int, float)) else str(value)))
    return tuple(key)


def what_fits(decisions: Sequence[DecisionRow], searches: Sequence[CapacitySearch] = ()) -> Table:
    """capacity.json's decision table, one line per KV dtype and slot count and one column per per-slot
    context: whether it fits and by how much. A reading ("starts": the pool the server allocates; "full":
    every slot at full length) is named only where the two differ.

    The largest pool is the searches' where one found less than the fit's memory figure at that KV dtype and
    slot count: one question, one answer (llama.cpp q8_0 at 1 slot was 1,048,576 in the searches and
    1,692,672 here), and where the engine's rule set it, it is said as the engine's cap beside memory's."""
    settings = list(dict.fromkeys((row.kv_dtype, row.concurrency) for row in decisions))
    contexts = sorted({row.context_per_slot for row in decisions if row.context_per_slot is not None})
    found: dict[tuple[str | None, int | None, int], list[DecisionRow]] = defaultdict(list)
    for row in decisions:
        found[(row.kv_dtype, row.concurrency, row.context_per_slot or 0)].append(row)
    lines = []
    for dtype, slots in settings:
        pools = sorted({int(pool[0]) for (d, c, _), rows in found.items() if (d, c) == (dtype, slots)
                        for row in rows if (pool := row.max_pool_tokens) and pool[0] is not None})
        largest = span(pools[0], pools[-1]) if len(pools) > 1 else number(pools[0]) if pools else "—"
        answer = next((item.answer_kv_tokens for item in searches if item.answer_kv_tokens is not None
                       and (item.setting.kv_dtype, item.setting.concurrency) == (dtype, slots)), None)
        if answer is not None and pools and answer < pools[0]:
            capped = any(item.bounded_by == "engine" and item.answer_kv_tokens == answer for item in searches)
            whose = "the engine's cap" if capped else "the search's answer"
            largest = f"{number(answer)}, {whose} (memory would allow {largest})"
        lines.append((dtype_words(dtype), number(slots), largest,
                      *(_fits_cell(found.get((dtype, slots, context), [])) for context in contexts)))
    return Table(("KV dtype", "slots", "largest pool, tokens", *(f"{number(c)} tokens per slot" for c in contexts)),
                 tuple(lines), "What fits: whether each setting fits in memory, with the spare memory at worst (the "
                 "shortfall at best where it does not fit); capacity.json's decision_table holds each interval.")


def _fits_cell(rows: Sequence[DecisionRow]) -> str:
    if not rows:
        return "—"
    shown = [(str(row.reading), _fit(row)) for row in rows]
    if len({text for _, text in shown}) == 1:
        return shown[0][1]
    return "; ".join(f"{reading}: {text}" for reading, text in shown)


def _fit(row: DecisionRow) -> str:
    low, high = (row.margin_gib_interval or [None, None])[:2]
    if row.fits is True and low is not None:
        return f"yes, {low:+.2f} GiB"
    if row.fits is False and high is not None:
        return f"no, {high:+.2f} GiB"
    return str(row.verdict or "—")
