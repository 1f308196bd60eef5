"""One answer of the capacity step: what one basis (the logs, the typed terms, or both together) says.

An answer is the report's capacity table in figures (seed 000 §2.5): free after weights, what `auto` does,
the largest pool, each lane's share at the planned concurrency, the what-if rows (leftover in tokens and
GiB, or shortfall in GiB and tokens), and the whole decision table. The step makes one answer where its
sources agree and one per source where they conflict (capacity/known.py), so both are printed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ninferkit.capacity.fit import CapacityFit, FamilyFit
from ninferkit.capacity.interval import Interval
from ninferkit.capacity.known import typed
from ninferkit.capacity.limits import engine_max_pool
from ninferkit.capacity.observations import Setting
from ninferkit.capacity.table import Cell, auto_by_context, auto_outcome, decision_table, leftover, verdict
from ninferkit.engines.pool import PoolRule
from ninferkit.params.capacity import WhatIf

LOGGED, TYPED, BOTH = "logged observations", "typed terms", "typed terms and logged observations"


@dataclass(frozen=True)
class Basis:
    """What one answer rests on: a fit whose reference family is `family`, and the free memory it uses."""

    name: str
    source: str
    result: CapacityFit
    family: FamilyFit | None
    available: Interval | None
    room: Interval | None
    weights: Interval | None = None
    as_printed: Basis | None = None
    """The same with every typed figure at its printed value (typed terms only): the report's own arithmetic."""

    def with_family(self) -> CapacityFit:
        """The fit with this basis's family in the reference family's place (the decision table's input)."""
        if self.family is None:
            return self.result
        return replace(self.result, families={**self.result.families, self.family.family: self.family})


def answer(basis: Basis, setting: Setting, rule: PoolRule, cells: list[Cell], reference_family: tuple[Any, ...],
           what_ifs: list[WhatIf]) -> dict[str, Any]:
    """The answer's figures at the profile's setting, its what-if rows and its decision table."""
    fam, room, available = basis.family, basis.room, basis.available
    c, s = setting.concurrency, setting.context_per_slot
    out: dict[str, Any] = {"basis": basis.name, "source": basis.source,
                           "weights_bytes": None if basis.weights is None else basis.weights.as_bytes(),
                           "free_after_weights_bytes": None if available is None else available.as_bytes(),
                           "setting": {"concurrency": c, "context_per_slot": s}}
    table = decision_table(basis.with_family(), rule, cells, reference_family, room, available)
    out["decision_table"] = table
    if fam is None or not fam.consistent:
        out["missing"] = ("no formula: type the known terms in capacity.known (fixed, bytes_per_token, "
                          "free_after_weights) or run the capacity step (04_capacity_fit) on a startup log")
        return out
    b = fam.parameter("bytes_per_token")
    out["bytes_per_token"] = b.as_bytes()
    out["fixed_bytes"] = fam.fixed(c, s).as_bytes()
    if room is None or available is None:
        out["missing"] = ("free memory after weights unknown: type capacity.known.free_after_weights, or fit a "
                          "startup log that prints it")
        return out
    memory = fam.memory_pool(c, s, room, rule)
    legal = fam.max_pool(c, s, room, rule)
    out["memory_kv_tokens_interval"] = _ints(memory)
    out["max_kv_tokens_interval"] = _ints(legal)
    top = engine_max_pool(rule, c, s)
    out["engine_max_kv_tokens"] = top
    out["per_slot_tokens"] = [None if v is None else v // c for v in _ints(legal)]
    out["memory_per_slot_tokens"] = [None if v is None else v // c for v in _ints(memory)]
    if rule.auto_headroom_bytes is not None:
        out["auto"] = auto_outcome(fam, rule, Cell(setting.kv_dtype, c, s), available)
        out["auto"]["by_context"] = auto_by_context(fam, rule, Cell(setting.kv_dtype, c, s), available)
    out["what_if"] = [what_if(fam, rule, setting.kv_dtype, case, room) for case in what_ifs]
    if basis.as_printed is not None:
        printed = answer(basis.as_printed, setting, rule, [], reference_family, what_ifs)
        out["as_printed"] = {key: value for key, value in printed.items() if key not in ("decision_table", "basis")}
    return out


def what_if(fam: FamilyFit, rule: PoolRule, kv_dtype: str | None, case: WhatIf, room: Interval) -> dict[str, Any]:
    """`slots` requests of `context` tokens at once: the pool they need, and what is left or missing."""
    pool = case.slots * rule.resolve(case.context) if rule.shared_pool else rule.resolve(case.slots * case.context)
    less = typed(case.fixed_less) or Interval.exact(0)
    need = fam.runtime(case.slots, case.context, pool) - less
    margin = room - need
    fits, words = verdict(margin)
    row: dict[str, Any] = {"slots": case.slots, "context_per_slot": case.context, "pool_tokens": pool,
                           "label": case.label,
                           "fixed_less_bytes": None if case.fixed_less is None else less.as_bytes(),
                           "need_bytes": need.as_bytes(), "fits": fits, "verdict": words,
                           "margin_gib_interval": margin.as_gib()}
    # memory freed from the fixed part is room for the pool: the formula's own F against room + less
    row.update(leftover(fam, rule, Cell(kv_dtype, case.slots, case.context), pool, room + less, margin))
    return row


def _ints(value: Interval) -> list[int | None]:
    return [None if v is None else math.floor(v) for v in (value.low, value.high)]
