"""Which limit set a pool, the engine's own rule or memory, and what memory alone would allow.

An engine takes no pool beyond its rule whatever the memory: NInfer's shared pool holds at most
max_concurrency x ceil(max_context / 64) pages ("kv_capacity is outside the usable range for
max_context and max_concurrency", IF §7.3), and a llama.cpp slot serves no more than the model's
trained context. On an H200 with 119 GiB free the NInfer search answered 32,768 tokens for one slot
of 32,768 (tests/data/ninfer_live/g1-h200/capacity-search): the rule's answer, which read as if it
were memory's. An answer at the rule's limit says so, with the pool memory would allow and the
setting to raise to use it.
"""

from __future__ import annotations

from ninferkit.capacity.interval import Interval
from ninferkit.engines.pool import PoolRule, snap_down


def engine_max_pool(rule: PoolRule, concurrency: int, context: int, slot_context_cap: int | None = None) -> int | None:
    """The largest pool the engine's own rule takes at `concurrency` slots of `context` tokens: a shared
    pool's C x ceil(S / P) pages; a per-slot pool's cap on every slot (whole steps of C pages); None
    where only memory bounds it."""
    if rule.capped_by_slots:
        return rule.pool_range(concurrency, context)[1]
    if rule.shared_pool or slot_context_cap is None:
        return None
    return snap_down(slot_context_cap * concurrency, rule.page_tokens * concurrency)


def engine_limit_note(rule: PoolRule, concurrency: int, context: int, tokens: int, memory: Interval | None,
                      slot_context_cap: int | None = None) -> str:
    """Words for a pool the engine's rule set, e.g. "32,768 tokens: the engine's limit for 1 slot of
    32,768 (pool ≤ max_context × max_concurrency); memory is not the limit here: it would allow at least
    1,585,792 tokens; raise serve.max_context or serve.max_concurrency (up to 8) to use it".

    `memory` is the pool memory alone would allow ([sure, possible], `FamilyFit.memory_pool`); the
    sure side is quoted, as "~N" when the data bounds both sides (they differ by the rounding of the
    printed memory figures) and "at least N" when the possible side is open.
    """
    slots = f"{concurrency} slot{'s' if concurrency != 1 else ''}"
    if rule.capped_by_slots:
        head = (f"{tokens:,} tokens: the engine's limit for {slots} of {context:,} "
                "(pool ≤ max_context × max_concurrency)")
        at_most = rule.max_concurrency
        if at_most is not None and concurrency >= at_most:
            raise_what = "serve.max_context"
        else:
            raise_what = "serve.max_context or serve.max_concurrency" + (f" (up to {at_most})" if at_most else "")
    else:
        head = f"{tokens:,} tokens: the engine's limit for {slots} (at most {slot_context_cap:,} tokens per slot)"
        raise_what = "serve.max_concurrency"
    amount = memory_amount(memory, tokens)
    if amount is None:
        return f"{head}; memory is not the limit here (how much more it would allow is not pinned by the data)"
    return f"{head}; memory is not the limit here: it would allow {amount}; raise {raise_what} to use it"


def memory_amount(memory: Interval | None, above: int) -> str | None:
    """The pool memory alone would allow, in words, where its sure side is above `above`: "~N tokens" when
    the data bounds both sides, "at least N tokens" when the possible side is open; None otherwise."""
    if memory is None or memory.low is None or memory.low <= above:
        return None
    return f"{'~' if memory.high is not None else 'at least '}{int(memory.low):,} tokens"

