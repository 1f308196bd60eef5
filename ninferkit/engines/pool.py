"""How an engine turns (concurrency, per-slot context) into a KV pool: page size, pool range, auto headroom.

Each engine adapter states its rule (`CapacityRules.capacity_pool`), so the fit, the table and the
search never branch on engine names; it lives beside the adapters because it is engine knowledge.
Sources: capacity-model.md §1.4 (NInfer paged pool, 64-token pages in [max(L, C), C x L] with
L = ceil(max_context / 64), so never below max_context; auto keeps 1 GiB; at most 8 slots), §2 (vLLM
blocks), §3 (llama.cpp: `-c` is the pool, split evenly over `-np` slots).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class PoolRule:
    """How an engine turns (concurrency C, per-slot context S) into a KV pool, in tokens."""

    page_tokens: int
    auto_headroom_bytes: int | None
    """Memory `auto` sizing leaves free; None when the engine has no automatic KV sizing."""
    shared_pool: bool
    """True: one pool shared by all slots (a slot may reach S; the pool may be smaller than C x S)."""
    default_kv_dtype: str
    max_concurrency: int | None = None
    """The most slots the engine takes whatever the memory (NInfer: 8); None: no such limit."""
    capped_by_slots: bool = False
    """The engine refuses a shared pool above C x S (NInfer: "kv_capacity is outside the usable range for
    max_context and max_concurrency"); False where only memory bounds it (vLLM's blocks)."""
    max_context: int | None = None
    """The largest per-request context the engine takes whatever the memory (NInfer: 262,144, the models' native
    context); None: none known. `auto` is answered across max_context up to it (capacity/table.py)."""

    def pages(self, tokens: int) -> int:
        return math.ceil(tokens / self.page_tokens)

    def resolve(self, tokens: int) -> int:
        """The pool an explicit request of `tokens` really gets (whole pages)."""
        return self.pages(tokens) * self.page_tokens

    def pool_range(self, concurrency: int, context: int) -> tuple[int, int]:
        """(smallest, largest) legal pool in tokens: NInfer pages in [max(L, C), C x L]."""
        per_slot = self.pages(context)
        if not self.shared_pool:
            tokens = self.resolve(concurrency * context)
            return tokens, tokens
        return max(per_slot, concurrency) * self.page_tokens, concurrency * per_slot * self.page_tokens

    def requested_pool(self, concurrency: int, context: int, kv_capacity: int | str | None) -> int:
        """The pool a launch with this setting asks for (auto: the smallest legal pool, its B_min point)."""
        if kv_capacity is None:
            low, high = self.pool_range(concurrency, context)
            return low if self.shared_pool else high
        if kv_capacity == "auto":
            return self.pool_range(concurrency, context)[0]
        return self.resolve(int(kv_capacity))


def snap_down(tokens: int, step: int) -> int:
    """`tokens` rounded down to whole steps, never below one step."""
    return max(step, tokens // step * step)
