"""The headline numbers of a run, each recomputed from the raw rows it summarises.

One function, :func:`headline`, computes every number of the write-up's headline table, so a test
can recompute the same values from requests.jsonl (and capacity.json and the server log for memory) and
check the published table against them. Decode, prefill and TTFT come from the context sweep (one
request at a time, cache defeated), one row each per prompt length: a range over 1K and 64K prompts
would say nothing about either. Concurrency comes from the concurrency sweep; the rate rows (only when
the rate sweep ran) from the rate sweep; memory from the server's startup ledger (`memory`: weights,
the KV pool and its bytes) and the capacity fit.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ninferkit.measure.latency import Targets, distribution, goodput, wall_s
from ninferkit.report.data import RunData, load_run
from ninferkit.report.memory import kv_pool
from ninferkit.rundir.records import CapacityRecord, RequestRow
from ninferkit.sweeps.kinds import kinds
from ninferkit.sweeps.rate import kept_up
from ninferkit.units import GIB


@dataclass(frozen=True)
class HeadlineRow:
    """One headline metric: the best value, the range it came from, and where and how it was measured."""

    metric: str
    unit: str
    best: float | int | None
    low: float | int | None
    high: float | int | None
    where: str
    source: str
    samples: int = 0
    prompt_tokens: int | None = None
    """The context sweep's prompt length the row is about (None: a row about the whole run)."""
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    std: float | None = None


@dataclass(frozen=True)
class ConcurrencyGroup:
    """The measured requests of one concurrency cell: N closed-loop clients running together."""

    concurrency: int
    cell_id: str
    requests: int
    output_tokens: int
    wall_s: float

    @property
    def aggregate_output_tok_s_client(self) -> float:
        """Output tokens of the whole cell over its wall time, first send to last byte."""
        return self.output_tokens / self.wall_s


def label_keys() -> list[str]:
    """The cell parameters that name a cell for a reader (each kind's, then the API); the rest (seed,
    repetitions, ...) are the same within a sweep and stay in requests.jsonl."""
    return list(dict.fromkeys([*(label.key for kind in kinds() for label in kind.labels),
                               "api"]))


def cell_label(row: RequestRow) -> str:
    """A short human label for a request's cell, e.g. 'target_prompt_tokens=512, api=chat'."""
    return params_label(row.cell or {}) or str(row.cell_id or "?")


def params_label(cell: Mapping[str, Any]) -> str:
    """A cell's parameters in short: the naming ones (label_keys) where it has any, else all of them."""
    keys = [key for key in label_keys() if key in cell] or sorted(cell)
    return ", ".join(f"{key}={cell[key]}" for key in keys)


def concurrency_groups(run: RunData) -> list[ConcurrencyGroup]:
    """One group per concurrency cell (its ok, non-warmup rows); its wall time spans all its requests."""
    groups: dict[str, list[RequestRow]] = defaultdict(list)
    for row in run.measured("concurrency"):
        groups[str(row.cell_id)].append(row)
    out = []
    for cell_id, rows in sorted(groups.items()):
        if any(row.t_send is None or row.t_done is None or row.completion_tokens is None for row in rows):
            continue
        wall = wall_s(rows)
        concurrency = int((rows[0].cell or {}).get("concurrency") or 1)
        if wall:
            out.append(ConcurrencyGroup(concurrency, cell_id, len(rows),
                                        sum(row.completion_tokens or 0 for row in rows), wall))
    return sorted(out, key=lambda g: (g.concurrency, g.cell_id))


def headline(run: RunData) -> list[HeadlineRow]:
    """Every number of the headline table, in table order: per prompt length of the context sweep its
    decode, prefill and TTFT rows, then concurrency, the rate sweep's rows where it ran, and memory.

    Rows without data keep their place with ``best=None`` and a `where` saying which step produced
    nothing (a run without a context sweep has one decode, prefill and TTFT row, of no prompt length).
    Example: ``[(r.prompt_tokens, r.metric, r.best) for r in headline(load_run("runs/x"))]``.
    """
    by_length: dict[int | None, list[RequestRow]] = defaultdict(list)
    for row in run.measured("context"):
        by_length[(row.cell or {}).get("target_prompt_tokens")].append(row)
    rows: list[HeadlineRow] = []
    for length in sorted(by_length, key=lambda n: (n is None, n or 0)) or [None]:
        group = by_length.get(length, [])
        rows += [_extreme("Decode", "tok/s", group, ("decode_tok_s_server", "decode_tok_s_client"), max, length),
                 _extreme("Prefill", "tok/s", group, ("prefill_tok_s_server",), max, length),
                 _extreme("TTFT", "s", group, ("ttft_client_s",), min, length)]
    return [*rows, _concurrency(run), *_rate(run), *_memory(run)]


def _extreme(label: str, unit: str, rows: Sequence[RequestRow], names: Sequence[str],
             pick: Callable[..., Any], prompt_tokens: int | None) -> HeadlineRow:
    """Best, range and distribution of the first field in `names` (number fields of RequestRow) that the rows
    carry: the server's own figure when the engine reports one, else the client's (an engine without
    per-request accounting)."""
    name = next((n for n in names if any(getattr(row, n) is not None for row in rows)), names[0])
    metric = f"{label} ({'server' if name.endswith('_server') else 'client'})"
    values = [(value, row) for row in rows if (value := getattr(row, name)) is not None]
    source = f"requests.jsonl, context sweep, {name}"
    if not values:
        return HeadlineRow(metric, unit, None, None, None, "no data: the context sweep recorded no value", source,
                           prompt_tokens=prompt_tokens)
    best_value, best_row = pick(values, key=lambda item: item[0])
    numbers = [value for value, _ in values]
    spread = distribution(numbers)
    where = f"{cell_label(best_row)} ({best_row.prompt_tokens} prompt tokens)"
    return HeadlineRow(metric, unit, best_value, min(numbers), max(numbers), where, source, len(values),
                       prompt_tokens, spread.p50, spread.p90, spread.p99, spread.std)


def _concurrency(run: RunData) -> HeadlineRow:
    groups = concurrency_groups(run)
    metric, unit = "Concurrency: aggregate output (client)", "tok/s"
    source = "requests.jsonl, concurrency sweep, per cell: sum(completion_tokens) / (last t_done - first t_send)"
    if not groups:
        return HeadlineRow(metric, unit, None, None, None, "no data: the concurrency sweep recorded no cell",
                           source)
    rates = [group.aggregate_output_tok_s_client for group in groups]
    best = max(groups, key=lambda g: g.aggregate_output_tok_s_client)
    return HeadlineRow(metric, unit, best.aggregate_output_tok_s_client, min(rates), max(rates),
                       f"concurrency {best.concurrency}", source, len(groups))


def _rate(run: RunData) -> list[HeadlineRow]:
    """The rate sweep's answers (nothing when it did not run): the highest offered rate the server kept up
    with, and the best goodput under the profile's latency targets."""
    cells = run.cell_rows("rate")
    if not cells:
        return []
    offered = {cell_id: float((rows[0].cell or {}).get("rate_rps") or 0) for cell_id, rows in cells.items()}
    kept = [cell_id for cell_id, rows in cells.items() if kept_up(rows)[0]]
    source = ("requests.jsonl, rate sweep, per cell: slope of (t_done - scheduled send) over scheduled send, "
              "and no failed request")
    best_kept = max(kept, key=lambda cell_id: offered[cell_id], default=None)
    rows = [HeadlineRow("Rate: highest offered rate kept up with", "requests/s",
                        offered[best_kept] if best_kept else None, None, None,
                        f"of {', '.join(f'{offered[c]:g}' for c in sorted(cells, key=offered.__getitem__))} "
                        "requests/s offered" if best_kept else "the server kept up with none of the rates offered",
                        source, len(cells))]
    targets = rate_targets(run)
    metric, unit = "Rate: goodput (client)", "requests/s"
    source = f"requests.jsonl, rate sweep, per cell: requests meeting {targets.describe()} / wall time"
    if not targets.any:
        return [*rows, HeadlineRow(metric, unit, None, None, None, "no latency target set (sweeps.rate.slo)", source)]
    found = {cell_id: goodput(rows, targets)["goodput_rps"] for cell_id, rows in cells.items()}
    measured = {cell_id: value for cell_id, value in found.items() if value is not None}
    best = max(measured, key=lambda cell_id: measured[cell_id], default=None)
    if best is None:
        return [*rows, HeadlineRow(metric, unit, None, None, None, "no data: no rate cell has a wall time", source)]
    return [*rows, HeadlineRow(metric, unit, measured[best], min(measured.values()), max(measured.values()),
                               f"{offered[best]:g} requests/s offered", source, len(measured))]


def rate_targets(run: RunData) -> Targets:
    """The latency targets of the profile the run was made with (none set when the profile predates them)."""
    slo = ((run.profile.get("sweeps") or {}).get("rate") or {}).get("slo") or {}
    return Targets(**{name: slo.get(name) for name in ("ttft_s", "tpot_s", "itl_s")})


def _memory(run: RunData) -> list[HeadlineRow]:
    weights = run.ledger.get("weights_bytes")
    rows = [HeadlineRow(
        "Memory: weights (server ledger)", "GiB", weights / GIB if weights is not None else None, None, None,
        "startup log" if weights is not None else "no data: the startup log states no weights size",
        f"{run.ledger_source} weights_bytes", 1 if weights is not None else 0)]
    pool = kv_pool(run)
    tokens = None if pool is None else pool.tokens
    no_pool = "no data: the startup log states no KV pool"
    rows.append(HeadlineRow(
        "Memory: KV pool at startup (server ledger)", "tokens", tokens, None, None,
        no_pool if pool is None or tokens is None else pool.pages or "startup log",
        f"{run.ledger_source} kv_tokens" + (", kv_pages" if pool is not None and pool.pages else ""),
        0 if tokens is None else 1))
    kv_bytes = None if pool is None else pool.bytes
    rows.append(HeadlineRow(
        "Memory: KV cache at startup (server ledger)", "GiB", kv_bytes / GIB if kv_bytes is not None else None,
        None, None, no_pool if pool is None else pool.how,
        f"{run.ledger_source} kv_cache_bytes" if pool is None else pool.source, 0 if kv_bytes is None else 1))
    capacity = run.capacity or CapacityRecord()
    why_none = ("no data: no capacity.json (04_capacity_fit)" if run.capacity is None
                else f"not pinned: {capacity.max_kv_tokens_note or _unpinned(capacity)}")
    max_kv = capacity.max_kv_tokens
    free = capacity.free_after_weights_bytes or [None, None]
    low = free[0] / GIB if free[0] is not None else None
    high = free[1] / GIB if free[1] is not None else None
    interval = capacity.max_kv_tokens_interval or [None, None]
    capped = capacity.max_kv_tokens_bounded_by == "engine"  # the engine's rule set it: said as a cap, not memory's
    rows.append(HeadlineRow(
        "Memory: largest KV pool, the engine's cap (capacity fit)" if capped
        else "Memory: largest KV pool (capacity fit)", "tokens", max_kv, interval[0], interval[1],
        (capacity.max_kv_tokens_note or "capacity fit") if max_kv is not None else why_none,
        "capacity.json max_kv_tokens", 1 if max_kv is not None else 0))
    rows.append(HeadlineRow(
        "Memory: free after weights (capacity fit)", "GiB", high, low, high,
        "interval of the fit" if high is not None
        else why_none if run.capacity is None else "not pinned: no startup log states the free memory",
        "capacity.json free_after_weights_bytes", 1 if high is not None else 0))
    return rows


def _unpinned(capacity: CapacityRecord) -> str:
    """Why capacity.json holds no largest pool: the terms its data left open, else that it observed nothing."""
    terms = capacity.terms_unpinned or []
    if terms:
        return "the fit left open " + "; ".join(str(term) for term in terms)
    return "capacity.json holds no observation to fit (capacity.fit_launches and capacity.search were off)"


def headline_table(run_dir: str | Path) -> pd.DataFrame:
    """The headline rows of a run directory as a DataFrame (numbers unformatted), for notebooks."""
    return pd.DataFrame([asdict(row) for row in headline(load_run(run_dir))])
