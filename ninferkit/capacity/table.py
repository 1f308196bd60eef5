"""The decision table: for each concurrency x per-slot context (x KV dtype), does it fit, by how much?

Two readings, because a shared pool (NInfer, vLLM) may be smaller than C x S (capacity-model.md §5.4):
  "starts": the smallest legal pool, max(ceil(S/P), C) pages: the server starts, one request can
            reach S, and the slots share what is left;
  "full":   C x ceil(S/P) pages: every slot can hold a full-length request at once.
margin = room - need, an interval, with room the free memory after weights less what the server takes
at first use where launches reported it (`CapacityFit.room`); "borderline" when it straddles 0. Each row
also says it in tokens: the pool memory alone would allow at the cell, less the reading's pool (leftover,
whole pages), or the pages the pool would have to lose (shortfall), beside the same in GiB. Where the engine
has `auto`, the row also says what `auto` would choose (its headroom kept visible). For a per-slot
pool (llama.cpp `-np`) both readings are the same pool.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ninferkit.capacity.fit import CapacityFit, FamilyFit
from ninferkit.capacity.interval import Interval
from ninferkit.capacity.limits import engine_max_pool, memory_amount
from ninferkit.engines.pool import PoolRule
from ninferkit.units import GIB


@dataclass(frozen=True)
class Cell:
    kv_dtype: str | None
    concurrency: int
    context_per_slot: int


def verdict(margin: Interval) -> tuple[bool | None, str]:
    """(fits, words): fits is None when the margin's interval straddles 0 or is open."""
    low, high = margin.low, margin.high
    if low is not None and low >= 0:
        return True, f"fits (at least +{_gib(low)} GiB spare)"
    if high is not None and high < 0:
        return False, f"short by at least {_gib(-high)} GiB"
    if low is None and high is None:
        return None, "not pinned by the data"
    return None, f"borderline ({_gib(low)} .. {_gib(high)} GiB)"


def _gib(value: Fraction | None) -> str:
    return "?" if value is None else f"{float(value) / GIB:.2f}"


def _center_gib(value: Interval) -> float | None:
    if value.low is None or value.high is None:
        return None
    return round(float((value.low + value.high) / 2) / GIB, 2)


def decision_table(result: CapacityFit, rule: PoolRule, cells: list[Cell], reference_family: tuple[Any, ...],
                   room: Interval | None, available: Interval | None) -> list[dict[str, Any]]:
    """One row per cell and reading (starts, full), plus the auto outcome on the starts row.

    `reference_family` is the family of the profile's setting; a cell with another KV dtype uses
    that dtype's family (same speculation, chunk and flags) and is "not observed" when there is none.
    Margins and the largest pool use `room`; `auto` uses `available`, as the engine sizes it from that.
    """
    rows: list[dict[str, Any]] = []
    for cell in cells:
        family_key = (cell.kv_dtype, *reference_family[1:])
        fam = result.family_for(family_key)
        low_pool, high_pool = rule.pool_range(cell.concurrency, cell.context_per_slot)
        for reading, tokens in (("starts", low_pool), ("full", high_pool)):
            row: dict[str, Any] = {"kv_dtype": cell.kv_dtype, "concurrency": cell.concurrency,
                                   "context_per_slot": cell.context_per_slot, "reading": reading,
                                   "pool_tokens": tokens}
            rows.append(row)
            if fam is None or not fam.consistent:
                row.update(fits=None, margin_gib=None, margin_gib_interval=[None, None],
                           verdict="not observed: no launch with this KV dtype and flags" if fam is None
                           else "observations contradict each other")
                continue
            need = fam.runtime(cell.concurrency, cell.context_per_slot, tokens)
            row["need_bytes"] = need.as_bytes()
            if room is None or available is None:
                row.update(fits=None, margin_gib=None, margin_gib_interval=[None, None],
                           verdict="free memory after weights unknown (no observation reports it; type "
                                   "capacity.known.free_after_weights)")
                continue
            margin = room - need
            fits, words = verdict(margin)
            row.update(fits=fits, margin_gib=_center_gib(margin), margin_gib_interval=margin.as_gib(),
                       margin_bytes=margin.as_bytes(), verdict=words)
            row.update(leftover(fam, rule, cell, tokens, room, margin))
            if reading == "starts":
                pool = fam.max_pool(cell.concurrency, cell.context_per_slot, room, rule)
                row["max_pool_tokens"] = [None if v is None else int(v) for v in (pool.low, pool.high)]
                if pool.low is not None and fits:
                    full = min(cell.concurrency, int(pool.low) // cell.context_per_slot)
                    row["full_length_requests"] = full
                    row["verdict"] += f"; pool up to {int(pool.low):,} tokens = {full} full-length request(s)"
                    row["verdict"] += _engine_limit(fam, rule, cell, int(pool.low), room)
                if rule.auto_headroom_bytes is not None:
                    row["auto"] = auto_outcome(fam, rule, cell, available)
    return rows


def leftover(fam: FamilyFit, rule: PoolRule, cell: Cell, tokens: int, room: Interval,
             margin: Interval) -> dict[str, Any]:
    """The margin in tokens as well as GiB: leftover_tokens (the pool memory would allow at this cell less
    `tokens`, whole pages) and leftover_gib where it fits for sure, shortfall_gib and shortfall_tokens (the
    pages the pool would have to lose) where it cannot; both, as [sure, possible], where it is borderline.

    A borderline row is sure of neither, so each side's sure amount is 0, never the other side's bound negated
    (that printed "short by -116.69–? GiB" for a row whose margin was at most +116.69 GiB)."""
    memory = fam.memory_pool(cell.concurrency, cell.context_per_slot, room, rule)
    spare = [None if v is None else int(v) - tokens for v in (memory.low, memory.high)]
    out: dict[str, Any] = {"memory_pool_tokens": [None if v is None else int(v) for v in (memory.low, memory.high)]}
    fits = margin.low is not None and margin.low >= 0
    short = margin.high is not None and margin.high < 0
    if not short:
        out.update(leftover_tokens=spare if fits else [0, spare[1]],
                   leftover_gib=margin.as_gib() if fits else [0.0, margin.as_gib()[1]])
    if not fits:
        lost = [None if v is None else -v for v in reversed(spare)]
        out.update(shortfall_tokens=lost if short else [0, lost[1]],
                   shortfall_gib=(-margin).as_gib() if short else [0.0, (-margin).as_gib()[1]])
    return out


def _engine_limit(fam: FamilyFit, rule: PoolRule, cell: Cell, pool: int, room: Interval) -> str:
    """", the engine's limit (memory would allow ...)" where the engine's rule, not memory, caps the pool."""
    top = engine_max_pool(rule, cell.concurrency, cell.context_per_slot)
    if top is None or pool < top:
        return ""
    amount = memory_amount(fam.memory_pool(cell.concurrency, cell.context_per_slot, room, rule), top)
    return ", the engine's limit (pool ≤ max_context × max_concurrency" + (
        f"; memory would allow {amount})" if amount else ")")


def auto_outcome(fam: FamilyFit, rule: PoolRule, cell: Cell, available: Interval) -> dict[str, Any]:
    """What `--kv-capacity auto` would do: M = min(M_max, M_min + floor((A - R - B_min) / B_step)).

    Returns the pool as [sure, possible] tokens (engine_limit: it is C x L, the engine's cap, not memory's
    answer), or the shortfall when A - R < B_min.
    """
    headroom = rule.auto_headroom_bytes or 0
    low_pool, high_pool = rule.pool_range(cell.concurrency, cell.context_per_slot)
    minimum = fam.runtime(cell.concurrency, cell.context_per_slot, low_pool)
    step = fam.parameter("bytes_per_token").scale(rule.page_tokens)  # B_step: the pool's slope, not F's
    room = available - minimum - headroom
    out: dict[str, Any] = {"headroom_gib": round(headroom / GIB, 2), "minimum_runtime_bytes": minimum.as_bytes()}
    if room.high is not None and room.high < 0:
        out.update(starts=False, shortfall_gib=(-room).as_gib(),
                   verdict=f"auto refuses: short by {_gib(-room.high)} GiB "
                   f"(it keeps {headroom / GIB:.2f} GiB headroom)")
        return out

    def pool(spare: Fraction | None, per_page: Fraction | None) -> int | None:
        if spare is None or per_page is None or per_page <= 0:
            return None
        pages = max(0, math.floor(spare / per_page))
        return min(high_pool, low_pool + pages * rule.page_tokens)

    sure = pool(room.low, step.high)
    possible = pool(room.high, step.low)
    starts = None if room.low is None or room.low < 0 else True
    out.update(starts=starts, kv_tokens=[sure, possible], engine_limit=sure == high_pool)
    if sure is not None and starts:
        full = min(cell.concurrency, sure // cell.context_per_slot)
        out["verdict"] = (f"auto starts with {sure:,} tokens (= {full} full-length request(s)), "
                          f"keeping {headroom / GIB:.2f} GiB free")
    else:
        out["verdict"] = "auto: borderline" if starts is None else "auto starts"
    return out


def auto_by_context(fam: FamilyFit, rule: PoolRule, cell: Cell, available: Interval) -> dict[str, Any] | None:
    """`auto` across max_context at the cell's slots, up to the largest the engine takes (None: none known).

    Why: auto's pool, M = min(C x L, M_min + floor((A - R - B_min) / B_step)) pages with M_min = max(L, C), is
    the same at every max_context between the slots' cap and the pool itself, and refuses only once the smallest
    legal pool (one full-length request) no longer fits beside the headroom. A figure quoted for auto is so a
    figure at the max_context it was launched with: seed 000 §2.5's "auto refuses" and 328,960 hold at its
    native 262,144, not at its deployment's 131,072, where §1.5's own "~237K" is auto's answer.
    Returns starts_up_to_context (the largest max_context, whole pages, up to which auto starts for sure; None:
    not even at one page), refuses_from_context (the smallest at which it refuses for sure; None: not even at the
    engine's largest), undecided (the data leaves max_contexts between the two, or above the first) and
    at_max_context (auto_outcome there).
    """
    top = rule.max_context
    if top is None or rule.auto_headroom_bytes is None:
        return None

    def spare(pages: int) -> Interval:
        context = pages * rule.page_tokens
        low_pool = rule.pool_range(cell.concurrency, context)[0]
        return available - fam.runtime(cell.concurrency, context, low_pool) - (rule.auto_headroom_bytes or 0)

    def refuses(pages: int) -> bool:
        high = spare(pages).high
        return high is not None and high < 0

    def starts(pages: int) -> bool:
        low = spare(pages).low
        return low is not None and low >= 0

    last = rule.pages(top)
    first_refusal = _first(refuses, last)
    first_unsure = _first(lambda pages: not starts(pages), last)
    at_top = auto_outcome(fam, rule, Cell(cell.kv_dtype, cell.concurrency, top), available)
    sure_pages = last if first_unsure is None else first_unsure - 1
    refusal_pages = last + 1 if first_refusal is None else first_refusal
    return {"max_context": top, "starts_up_to_context": min(top, sure_pages * rule.page_tokens) or None,
            "refuses_from_context": None if first_refusal is None else first_refusal * rule.page_tokens,
            "undecided": refusal_pages - sure_pages > 1, "at_max_context": at_top}


def _first(holds: Callable[[int], bool], last: int) -> int | None:
    """The smallest page count in [1, last] at which `holds` (true from some count on) holds; None: not at last."""
    if not holds(last):
        return None
    low, high = 1, last
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if holds(middle) else (middle + 1, high)
    return low


def cells_from(concurrencies: list[int], contexts: list[int], kv_dtypes: list[str | None]) -> list[Cell]:
    return [Cell(dtype, c, s) for dtype in kv_dtypes for c in concurrencies for s in contexts]

