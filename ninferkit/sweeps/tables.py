"""The sweep tables, shaped like the field reports' tables, computed only from files in the run dir.

Each table has one row per cell: the cell's parameters, then each metric as median with min and
max over the repetitions (warm-up excluded), the latency distributions (p50, p90, p99 and standard
deviation of TTFT, TPOT, ITL and end-to-end latency, as ninferkit/measure/latency.py defines them) and the
requests finished per second, then the cell's status (with the reason, the diagnosis of
a failure, the plan's notes on what was sent differently from what was asked, and the client's word where it
cannot vouch for the cell's timing: measure/client_clock.py), the
`reasoning_effort` its requests carried, the engine's own decode windows during the cell (peak and
mean of its throughput lines that only decoded: seed 004's "5 秒峰值" beside "平均 decode", seed 000
§2.4(b)'s "引擎 5 s 窗口口径"), then the GPU conditions during the cell (median and max power and SM clock,
throttled or not)
when telemetry has GPU samples. Only the attempt that finished a cell counts; a failed cell shows what
its last attempt finished. The tasks table names the speculative decoding each cell ran with (the
profile's method, or `off` for the other side of the speculation A/B, plan.py) and how its requests
ended (`finish_reason`: `stop` where the model ended at its own length, `length` at max_tokens). The
rate table adds goodput under the profile's latency targets (`sweeps.rate.slo`, read when the table is
built, so new targets need no rerun), the most requests in flight at once, how late the client sent
(schedule lag) and whether the server kept up with the offered rate (sweeps/rate.py).

A cell run more than once (`sweeps.repeats`) is one row over all its repeats: the columns pool their
requests, except the headline metrics (REPEATED), whose `_median` is then the median of the repeats' medians,
with `_ci_low`/`_ci_high` its seeded bootstrap interval (ninferkit/measure/confidence.py), `repeats` how many repeats
the ledger has and `ci_method` the method and level in words. A row of one repeat has none of these columns.
Where the profile has variants (issue 39) every row names its `variant` (`base` for the profile's own serving),
the base's rows first, then each variant's in the profile's order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ninferkit.measure.confidence import median_interval
from ninferkit.measure.latency import METRICS, Targets, distribution, requests_per_s, samples, wall_s
from ninferkit.measure.telemetry import LOG_POLL_S, engine_rates, window_summary
from ninferkit.params.profile import Profile
from ninferkit.params.variants import BASE
from ninferkit.rundir.records import CellEntry, RequestRow, TelemetrySample
from ninferkit.rundir.runs import Run, RunDir, write_bytes_atomic, write_text_atomic
from ninferkit.rundir.servings import VARIANT, RunServings, launch_name, run_servings
from ninferkit.sweeps.cell import first_repeat_id, repeat_of
from ninferkit.sweeps.counting import Counted, count_rows
from ninferkit.sweeps.kinds import AnyKind, find_kind, get_kind
from ninferkit.sweeps.kinds import kinds as all_kinds
from ninferkit.sweeps.metrics import cached_share, cell_span, drafts, numbers, sent_values, tokens_per_round
from ninferkit.sweeps.truth import decode_gap_summary, rows_with_server_truth

NO_TARGETS = Targets()
SPREAD = ("prefill_tok_s_server", "ttft_client_s", "decode_tok_s_server", "e2e_client_s")
"""The metrics a table states with their range: its median, fastest and slowest request (end to end: report 001 §6.4's
per-request latency as concurrency grows, whose p99 over a cell of two requests would say nothing)."""
MEDIAN = ("prompt_tokens", "prompt_content_tokens", "cached_tokens", "completion_tokens", "reasoning_tokens",
          "prompt_s_server", "decode_tok_s_client", "acceptance_server", "queue_s_server", "drafted_tokens_server",
          "accepted_tokens_server", "ttft_answer_client_s", "reasoning_events")
COUNTS = tuple(name for name in MEDIAN if name.endswith(("_tokens", "_tokens_server", "_events")))
"""The counts among them, stated with their range too: a median of two counts can fall between them (15.5 hit
tokens), and the write-up then shows the counts it lies between (report/fmt.py counts)."""
REPEATED = ("prefill_tok_s_server", "ttft_client_s", "decode_tok_s_server", "decode_tok_s_client")
"""The metrics a cell of several repeats states as the median of its repeats with an interval."""


def latest_outcomes(run_dir: RunDir, servings: RunServings | None = None,
                    read: Sequence[CellEntry] | None = None) -> dict[str, CellEntry]:
    """cell_id -> its last ledger entry; with `servings`, its last entry measured under the serving the cell has
    now (rundir/servings.py: a new port is the same serving, a new KV dtype is not). `read`: the ledger as the
    caller has read it; None reads it here."""
    return {entry.cell_id: entry for entry in (run_dir.read_cells() if read is None else read)
            if servings is None or servings.is_current(entry.as_dict())}


def measured_ok(rows: Iterable[RequestRow]) -> dict[tuple[str, str], int]:
    """(cell_id, attempt) -> how many of its measured requests (not warm-ups, not cache seeds) succeeded."""
    counts: dict[tuple[str, str], int] = {}
    for row in rows:
        if row.status == "ok" and not row.warmup and row.prefix_role != "seed" and row.cell_id and row.attempt:
            counts[(row.cell_id, row.attempt)] = counts.get((row.cell_id, row.attempt), 0) + 1
    return counts


def demote_unmeasured(outcomes: Mapping[str, CellEntry], ok: Mapping[tuple[str, str], int]) -> dict[str, CellEntry]:
    """The outcomes with every `done` whose attempt has no measured request that succeeded made `failed`: a ledger
    written before rows refused as impossible were tallied as errored said done for a cell that measured nothing
    (issue 37). Its `requests_ok` is not trusted: it came from that tally."""
    return {cell_id: entry if entry.status != "done" or ok.get((cell_id, entry.attempt)) else entry.model_copy(
        update={"status": "failed", "reason": "recorded done, but none of its measured requests succeeded (each "
                "was errored, incomplete or refused as impossible); a rerun measures it again"})
        for cell_id, entry in outcomes.items()}


def counted_rows(run_dir: RunDir, outcomes: Mapping[str, CellEntry],
                 read: Sequence[RequestRow] | None = None) -> list[RequestRow]:
    """Rows of the attempt each cell's outcome names, with the engine's own record laid over them: this run's
    own rows only, each request once (sweeps/counting.py). `read`: requests.jsonl as the caller has read it."""
    return counted(run_dir, rows_with_server_truth(run_dir, read), outcomes).rows


def counted(run_dir: RunDir, rows: Iterable[RequestRow], outcomes: Mapping[str, CellEntry]) -> Counted:
    """The rows the tables count, and how many others were left out: of each cell, only the attempt its last
    ledger entry names (the sweeps step appends one entry per finished cell; a rerun after a failure or with a
    changed profile adds an attempt), and only rows naming this run and a profile hash it has had, each request
    once."""
    return count_rows(rows, outcomes, run_dir.run_id(), run_dir.profile_hashes())


def build_tables(run: Run, kinds: Iterable[str] | None = None, ledger: Sequence[CellEntry] | None = None,
                 read: Sequence[RequestRow] | None = None) -> dict[str, pd.DataFrame]:
    """Every sweep table of the run (the kinds asked for), from requests.jsonl, the ledger and telemetry;
    `ledger` and `read`: those two as the caller has read them (None reads them here)."""
    return tables_of(run.dir, run.profile, latest_outcomes(run.dir, run_servings(run.dir), ledger), kinds, read)


def tables_of(run_dir: RunDir, profile: Profile, outcomes: Mapping[str, CellEntry],
              kinds: Iterable[str] | None = None, read: Sequence[RequestRow] | None = None) -> dict[str, pd.DataFrame]:
    """The tables of these ledger outcomes (a done cell that measured nothing shown failed): what the sweeps
    step saves and what `ninferkit report` re-derives from the raw files. `read`: requests.jsonl as the caller
    has read it; None reads it here."""
    rows = counted_rows(run_dir, outcomes, read)
    outcomes = demote_unmeasured(outcomes, measured_ok(rows))
    telemetry = run_dir.read_telemetry() if run_dir.telemetry.exists() else None
    targets = Targets(**profile.sweeps.rate.slo.model_dump())
    asked = [kind.name for kind in all_kinds()] if kinds is None else list(kinds)
    return {name: sweep_table(name, rows, outcomes, telemetry, profile.serve.speculation()[0], targets)
            for name in asked if find_kind(name) is not None}


def sweep_table(name: str, rows: Sequence[RequestRow], outcomes: Mapping[str, CellEntry],
                telemetry: list[TelemetrySample] | None, speculation: str | None = None,
                targets: Targets = NO_TARGETS) -> pd.DataFrame:
    """One table; `rows` the counted rows (`counted_rows`), `telemetry` telemetry.jsonl's samples, None when
    the run has none; `speculation` the profile's speculative decoding method, which a task cell without a
    `speculation` of its own ran with; `targets` the latency targets of the rate sweep's goodput.

    Column statistics (median, min, max) come from one frame of all the rows, so a column's type is the
    run's, not one cell's; the latency distributions and verdicts read the rows' records."""
    kind = get_kind(name)
    records = []
    frame = _frame(rows)
    engine_lines = [r for r in telemetry or () if r.source == "engine_log"]
    cells = _repeats(name, outcomes)
    variants = list(dict.fromkeys([BASE, *(str(o.cell[VARIANT]) for each in cells for _, o in each
                                           if o.cell and o.cell.get(VARIANT))]))
    for repeats in cells:
        each = []
        for cell_id, outcome in repeats:
            cell_rows = frame[frame["cell_id"] == cell_id] if len(frame) else frame
            measured = _measured(kind, cell_rows)
            record: dict[str, Any] = {VARIANT: launch_name(outcome.cell)} if len(variants) > 1 else {}
            record.update(kind.key_columns(outcome.cell, speculation))
            record.update(_cell_metrics(kind, measured, rows, targets))
            diagnosis = outcome.diagnosis or {}
            record.update(status=outcome.status, reason=outcome.reason,
                          diagnosis=f"{diagnosis['code']}: {diagnosis['fix']}" if diagnosis.get("fix") else None,
                          notes="; ".join([*outcome.notes, *filter(None, [outcome.client_unsure])]) or None,
                          reasoning_effort=sent_values(measured, "reasoning_effort"), cell_id=cell_id,
                          serving_id=outcome.serving_id)
            record.update(kind.outcome_columns(measured))
            record.update(_engine_decode(cell_rows, engine_lines, telemetry is not None))
            record.update(_telemetry(cell_rows, telemetry or []))
            record.update(kind.condition_columns(cell_rows, telemetry or []) if len(cell_rows) else {})
            each.append(record)
        records.append(each[0] if len(each) == 1 else _over_repeats(each, [repeat_of(o.cell) for _, o in repeats]))
    table = pd.DataFrame(records)
    if len(table):
        table = table.sort_values(list(kind.table_keys[:kind.sorted_by]), key=kind.sort_key).reset_index(drop=True)
    if VARIANT in table:  # the base's rows, then each variant's in the profile's order, as the report lays them
        table = table.sort_values(VARIANT, key=lambda column: column.map(variants.index),
                                  kind="stable").reset_index(drop=True)
    return table


def table_cells(name: str, outcomes: Mapping[str, CellEntry]) -> int:
    """How many rows the table of sweep `name` has for these ledger entries (a cell's repeats are one row)."""
    return len(_repeats(name, outcomes))


def _repeats(name: str, outcomes: Mapping[str, CellEntry]) -> list[list[tuple[str, CellEntry]]]:
    """The table's cells, each as its repeats' (cell_id, outcome) in repeat order."""
    cells: dict[str, list[tuple[int, str, CellEntry]]] = {}
    for cell_id, outcome in outcomes.items():
        if outcome.sweep == name:
            first = first_repeat_id(outcome.sweep, outcome.cell, cell_id)
            cells.setdefault(first, []).append((repeat_of(outcome.cell), cell_id, outcome))
    return [[(cell_id, outcome) for _, cell_id, outcome in sorted(found, key=lambda item: item[0])]
            for found in cells.values()]


SUMMED = ("n_ok", "n_errored", "engine_windows", "engine_windows_mixed", "accepted_tokens_server_sum",
          "drafted_tokens_server_sum")


def _over_repeats(each: list[dict[str, Any]], repeats: list[int]) -> dict[str, Any]:
    """One row for a cell of several repeats, from each repeat's row (each computed over its own requests and
    its own span, as a cell without repeats): counts summed, `_min` and `_max` over all the repeats, the
    headline metrics (REPEATED) as the median of the repeats' medians with its bootstrap interval, every other
    number the median of the repeats' values, a text or a yes/no the repeats agree on as it is (a text they
    differ on as each repeat's, named; a yes/no they differ on unknown);
    the status is failed when any repeat failed, and `cell_id` the first repeat's."""
    out: dict[str, Any] = {}
    for name in dict.fromkeys(key for record in each for key in record):
        values = [record.get(name) for record in each]
        found = [value for value in values if value is not None and not (isinstance(value, float) and pd.isna(value))]
        numeric = found and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in found)
        if name == "cell_id" or not found:
            out[name] = values[0] if name == "cell_id" else None
        elif name in SUMMED and numeric:
            out[name] = sum(found)
        elif len({str(v) for v in found}) == 1:
            out[name] = found[0]  # a parameter, or a value every repeat had: as it is, type kept
        elif numeric and name.endswith(("_min", "_max")):
            out[name] = min(found) if name.endswith("_min") else max(found)
        elif numeric:
            out[name] = float(pd.Series(found, dtype=float).median())
        elif all(isinstance(v, (bool, np.bool_)) for v in found):
            out[name] = None  # a yes/no the repeats disagree on (kept up, throttled) is no answer
        else:
            out[name] = "; ".join(f"repeat {r}: {v}" for r, v in zip(repeats, values, strict=True) if v is not None)
    statuses = [record["status"] for record in each]
    failed = [(r, record["reason"]) for r, record in zip(repeats, each, strict=True) if record["status"] == "failed"]
    out["status"] = "failed" if failed else statuses[0] if len(set(statuses)) == 1 else "/".join(sorted(set(statuses)))
    out["reason"] = "; ".join(f"repeat {r}: {reason}" for r, reason in failed) or None
    out["repeats"] = len(each)
    method = None
    for name in REPEATED:
        medians = [float(v) for record in each if (v := record.get(f"{name}_median")) is not None and not pd.isna(v)]
        interval = median_interval(medians)
        if interval is None:
            continue
        out.update({f"{name}_median": float(pd.Series(medians).median()), f"{name}_ci_low": interval.low,
                    f"{name}_ci_high": interval.high})
        method = interval.describe()
    out["ci_method"] = method
    return out


def _frame(rows: Sequence[RequestRow]) -> pd.DataFrame:
    """The rows as one frame, indexed by their position in `rows` (`_records` maps a slice back)."""
    return pd.DataFrame([row.as_dict() for row in rows])


def _records(frame: pd.DataFrame, rows: Sequence[RequestRow]) -> list[RequestRow]:
    """The records of a slice of `_frame(rows)`."""
    return [rows[position] for position in frame.index]


def _measured(kind: AnyKind, cell_rows: pd.DataFrame) -> pd.DataFrame:
    if not len(cell_rows):
        return cell_rows
    return kind.measured(cell_rows[~cell_rows["warmup"].astype(bool)])


def _cell_metrics(kind: AnyKind, measured: pd.DataFrame, rows: Sequence[RequestRow], targets: Targets
                  ) -> dict[str, Any]:
    ok = measured[measured["status"] == "ok"] if len(measured) else measured
    failed = int((measured["status"] != "ok").sum()) if len(measured) else 0
    out: dict[str, Any] = {"n_ok": len(ok), "n_errored": failed}
    for name in SPREAD:
        values = numbers(ok, name)
        out[f"{name}_median"] = values.median() if len(values) else None
        out[f"{name}_min"] = values.min() if len(values) else None
        out[f"{name}_max"] = values.max() if len(values) else None
    for name in MEDIAN:
        values = numbers(ok, name)
        out[f"{name}_median"] = values.median() if len(values) else None
        if name in COUNTS:
            out[f"{name}_min"] = float(values.min()) if len(values) else None
            out[f"{name}_max"] = float(values.max()) if len(values) else None
    finished, sent = _records(ok, rows), _records(measured, rows)
    for metric in METRICS:
        out.update(distribution(samples(finished, metric)).columns(metric))
    out["requests_per_s"] = requests_per_s(finished, sent)
    out["server_note"] = _server_note(ok)
    out["decode_gap_note"] = decode_gap_summary(finished)
    out["tokens_per_round_server_median"] = tokens_per_round(ok)
    out["accepted_tokens_server_sum"], out["drafted_tokens_server_sum"] = drafts(finished)
    out.update(kind.metrics(ok, finished, sent, measured, targets))
    return out


def _server_note(ok: pd.DataFrame) -> str | None:
    """Why server-side numbers are missing or qualified for some measured requests (the most common
    reason, with how many rows it concerns); None when every row has its server numbers plainly."""
    if "server_note" not in ok:
        return None
    notes = ok["server_note"].dropna()
    if not len(notes):
        return None
    counts = notes.value_counts()
    return f"{counts.iloc[0]} of {len(ok)} requests: {counts.index[0]}"


def _engine_decode(cell_rows: pd.DataFrame, engine_lines: list[TelemetrySample],
                   telemetry_found: bool) -> dict[str, Any]:
    """The engine's own decode rate during the cell, from its periodic throughput lines (telemetry rows
    of source engine_log): the peak window (seed 004's "5 秒峰值"), the mean over the windows that only
    decoded (committed decode tokens over their time: "平均 decode" in the same windows), the window length
    and how many windows counted. A window counts when it lies inside the cell, give or take the
    LOG_POLL_S a line waits before telemetry reads it, and the engine says no prefill ran in it: a window
    that mixed a long prefill with a short decode says how prefill starves decode (seed 000 §2.4(d)), not
    how fast a request decodes, and is counted in `engine_windows_mixed`. `engine_decode_note` says why
    the columns are empty (outputs too short to fill a window without prefill, among others)."""
    out: dict[str, Any] = {"decode_tok_s_engine_peak": None, "decode_tok_s_engine_mean": None,
                           "engine_window_s": None, "engine_windows": 0, "engine_windows_mixed": 0,
                           "engine_decode_note": None}
    if not len(cell_rows):
        out["engine_decode_note"] = "no request of this cell was recorded"
        return out
    if not telemetry_found:
        out["engine_decode_note"] = "the run has no telemetry.jsonl (sweeps.telemetry was off)"
        return out
    if not engine_lines:
        engine = sent_values(cell_rows, "engine")
        out["engine_decode_note"] = f"{engine} printed no throughput line while the sweeps ran"
        return out
    start, end = cell_span(cell_rows)
    inside = [r for r in engine_lines if r.interval_s and r.decode_tok_s is not None
              and r.t_mono - r.interval_s >= start - LOG_POLL_S and r.t_mono - LOG_POLL_S <= end]
    rates = engine_rates([r.as_dict() for r in inside], "decode", alone=True)  # the lines as the adapter parsed them
    lengths = [float(r.interval_s) for r in engine_lines if r.interval_s]
    window = float(pd.Series(lengths).median()) if lengths else None
    out["engine_windows_mixed"] = rates["mixed"]
    if not rates["windows"]:
        out["engine_window_s"] = window
        out["engine_decode_note"] = _no_decode_window(cell_rows, inside, rates["mixed"], window, end - start)
        return out
    decoding = [float(r.interval_s) for r in inside
                if r.interval_s and (r.decode_tok_s or 0) > 0 and r.prefill_tok_s == 0]
    out.update(decode_tok_s_engine_peak=rates["peak_tok_s"], decode_tok_s_engine_mean=rates["mean_tok_s"],
               engine_window_s=float(pd.Series(decoding).median()), engine_windows=rates["windows"])
    return out


def _no_decode_window(cell_rows: pd.DataFrame, inside: list[TelemetrySample], mixed: int, window: float | None,
                      span_s: float) -> str:
    """Why a cell has no engine window that only decoded: too short a cell, prefill only, or outputs too
    short to fill a window without prefill (the engine's decode time per request beside the window)."""
    length = f"{window:g} s " if window else ""
    if not inside:
        return f"no whole {length}engine window inside this cell ({span_s:.1f} s long)"
    if not mixed:
        return f"the engine decoded in none of the {len(inside)} whole windows inside this cell (prefill only)"
    decode_s = numbers(cell_rows, "decode_s_server")
    output = numbers(cell_rows, "completion_tokens")
    rate = numbers(cell_rows, "decode_tok_s_server")
    each = (f": each request decoded {output.median():,.0f} tokens in about {decode_s.median():.1f} s"
            + (f" ({rate.median():.1f} tok/s by the engine)" if len(rate) else "")
            if len(decode_s) and len(output) else "")
    return (f"no {length}engine window inside this cell decoded without a prefill running: the {mixed} that "
            f"decoded mixed it with prefill, so their decode rate is not a request's{each}; outputs this short "
            "end before a window of decode alone fills (a longer output_tokens would fill one)")


def _telemetry(cell_rows: pd.DataFrame, telemetry: list[TelemetrySample]) -> dict[str, Any]:
    if not len(cell_rows):
        return window_summary([], 0.0, 0.0)
    return window_summary(telemetry, *cell_span(cell_rows))


@dataclass(frozen=True)
class SweepTables:
    """What the sweeps step wrote under tables/: one frame per table, by name (context, tasks, ...)."""

    frames: dict[str, pd.DataFrame]

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self.frames[name]

    def cell_counts(self) -> pd.DataFrame:
        """One line per table: how many cells, and how many finished, failed or were skipped."""
        rows: list[dict[str, Any]] = []
        for name, table in self.frames.items():
            status = table["status"].value_counts().to_dict() if "status" in table else {}
            counts = {k: status.get(k, 0) for k in ("done", "failed", "skipped")}
            rows.append({"table": name, "cells": len(table), **counts})
        return pd.DataFrame(rows)


def save_tables(run_dir: RunDir, tables: Mapping[str, pd.DataFrame]) -> dict[str, Path]:
    """Each table as tables/<name>.csv and .parquet (for the write-up step); returns the CSV paths. A sweep
    that planned no cell (the rate sweep is off by default) has no table: an empty frame has no columns, and
    its CSV would be a file no reader can parse; one left by an earlier build is removed."""
    run_dir.tables.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, table in tables.items():
        if table.empty:
            for suffix in (".csv", ".parquet"):
                run_dir.table(name, suffix).unlink(missing_ok=True)
            continue
        write_text_atomic(run_dir.table(name), table.to_csv(index=False))  # a link planted there is replaced
        write_bytes_atomic(run_dir.table(name, ".parquet"), table.to_parquet(index=False))
        written[name] = run_dir.table(name)
    return written


def ab_table(baseline: RunDir, candidate: RunDir) -> pd.DataFrame:
    """The same plan on two profiles, paired by cell: medians side by side and candidate/baseline ratios.

    Only cells finished on both sides are paired; a cell's repeats (`sweeps.repeats`) are one cell, their
    requests pooled. Decode rates at different acceptance are not comparable (field reports): the acceptance of
    both sides is shown next to each pair. A cell of a kind that loads the server with several requests at once
    (concurrency) also has each side's batch as seed 000 §2.2 prints it ("批 wall 3.84 s / 188 tok / 48.9 tok/s"):
    the wall from the first send to the last byte, the output tokens of all its requests, and the two's quotient
    (`_batch`). Each side's accepted and drafted tokens are the engine's counts over the cell (`metrics.drafts`: seed
    000 §2.2's "MTP 接受率 464/523 vs 467/525").
    """
    sides = {}
    for label, run_dir in (("a", baseline), ("b", candidate)):
        outcomes = {cid: o for cid, o in latest_outcomes(run_dir).items() if o.status == "done"}
        repeats: dict[str, list[str]] = {}
        for cid, o in outcomes.items():
            repeats.setdefault(first_repeat_id(o.sweep, o.cell, cid), []).append(cid)
        counted_side = counted_rows(run_dir, outcomes)
        sides[label] = (outcomes, _frame(counted_side), repeats, counted_side)
    records = []
    for cell_id, ids in sides["a"][2].items():
        outcome = sides["a"][0][ids[0]]
        kind = find_kind(outcome.sweep)
        if cell_id not in sides["b"][2] or kind is None:
            continue
        record: dict[str, Any] = {"sweep": outcome.sweep, "cell": _cell_label(kind, outcome), "cell_id": cell_id}
        for label in ("a", "b"):
            rows = sides[label][1]
            measured = _measured(kind, rows[rows["cell_id"].isin(sides[label][2][cell_id])])
            ok = measured[measured["status"] == "ok"]
            for name in ("decode_tok_s_server", "prefill_tok_s_server", "ttft_client_s", "acceptance_server"):
                values = numbers(ok, name)
                record[f"{name}_{label}"] = values.median() if len(values) else None
            finished = _records(ok, sides[label][3])
            record[f"accepted_tokens_server_{label}"], record[f"drafted_tokens_server_{label}"] = drafts(finished)
            record[f"cached_share_{label}"] = cached_share(finished)
            if kind.loads_server:
                record.update({f"{name}_{label}": value for name, value in _batch(measured, sides[label][3]).items()})
        for name in ("decode_tok_s_server", "prefill_tok_s_server", "ttft_client_s",
                     *(("aggregate_output_tok_s_client",) if kind.loads_server else ())):
            a, b = record[f"{name}_a"], record[f"{name}_b"]
            record[f"{name}_ratio_b_over_a"] = b / a if a and b is not None else None
        records.append(record)
    return pd.DataFrame(records)


BATCH = ("wall_s", "output_tokens", "aggregate_output_tok_s_client")
"""A loaded cell's batch in the A/B: its wall (client: first send to last byte), all its output, and their quotient."""


def _batch(measured: pd.DataFrame, rows: Sequence[RequestRow]) -> dict[str, float | None]:
    """Each of BATCH over the cell's measured requests, per repeat (a repeat's requests are one batch; the wall
    across repeats would count the time between them), the median of the repeats."""
    values: dict[str, list[float]] = {name: [] for name in BATCH}
    for _, one in measured.groupby("cell_id"):
        ok = one[one["status"] == "ok"]
        wall = wall_s(_records(ok, rows))  # as the concurrency table takes its aggregate: over the requests served
        output = float(numbers(ok, "completion_tokens").sum()) if len(ok) else None
        for name, value in zip(BATCH, (wall, output, output / wall if output is not None and wall else None),
                               strict=True):
            if value is not None:
                values[name].append(value)
    return {name: float(np.median(found)) if found else None for name, found in values.items()}


def _cell_label(kind: AnyKind, outcome: CellEntry) -> str:
    """The cell's table keys, whether its prompt was a cached one (sweeps.concurrency.cached), and the variant it was
    measured under (a variant's cell pairs with the same variant's in the other run, and its label must not read as
    the base's)."""
    keys = {**kind.key_values(outcome.cell), "cached": outcome.cell.get("cached"), VARIANT: outcome.cell.get(VARIANT)}
    return " ".join(f"{k}={v}" for k, v in keys.items() if v is not None)
