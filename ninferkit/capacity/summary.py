"""The capacity answer in words: the report's table (seed 000 §2.5) and the decision table, as text rows.

Both `ninferkit capacity fit` and the write-up's capacity section print these rows from capacity.json's
records, so the two say the same thing. A figure from typed terms is shown as printed (the report's own
arithmetic) beside the range the printed digits allow; a figure from logs is the range the fit allows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ninferkit.rundir.records import Bounds, CapacityAnswer, DecisionRow
from ninferkit.units import GIB

SUMMARY_COLUMNS = ("figure", "value")
TABLE_COLUMNS = ("KV dtype", "slots", "tokens per slot", "reading", "pool, tokens", "fits", "margin, GiB",
                 "leftover / shortfall", "auto")


def tokens(value: Bounds | None) -> str:
    """[sure, possible] tokens as "267,328–267,904", one figure where they agree, "at least X" / "up to X" where
    one side is open (never "X–?"), "?" where both are."""
    if value is None:
        return "—"
    return _bounds([None if v is None else int(v) for v in value[:2]], lambda v: f"{int(v):,}")


def gib(value: Bounds | None, digits: int = 2) -> str:
    """A [low, high] GiB pair as "2.01", or "2.00–2.02" where the two differ at these digits, "at least X" /
    "up to X" where one side is open."""
    if value is None:
        return "—"
    return _bounds(list(value[:2]), lambda v: f"{float(v):.{digits}f}")


def _bounds(pair: list[Any], shown: Callable[[Any], str]) -> str:
    """An interval in words: one figure where its sides print the same, a range, or its one known side ("at most"
    for a negative bound: a shortfall's margin)."""
    low, high = (None if v is None else shown(v) for v in pair)
    if low is None or high is None:
        if low == high:
            return "?"
        return f"at least {low}" if high is None else f"{'at most' if pair[1] < 0 else 'up to'} {high}"
    return low if low == high else f"{low}–{high}"


def _amount(count: Bounds | None, size: Bounds | None) -> str:
    """Tokens with their GiB beside them: "at least 6,395,280 tokens (137.23 GiB)" where both are open on the same
    side (one "at least" for the pair), else each in its own words."""
    both = [pair[:2] if pair else [None, None] for pair in (count, size)]
    for side, words in ((1, "at least"), (0, "up to")):
        if all(pair[side] is None and pair[1 - side] is not None for pair in both):
            known = [[pair[1 - side]] * 2 for pair in both]
            return f"{words} {tokens(known[0])} tokens ({gib(known[1])} GiB)"
    return f"{tokens(count)} tokens ({gib(size)} GiB)"


def gib_of_bytes(value: Bounds | None, digits: int = 2) -> str:
    return "—" if value is None else gib([None if v is None else float(v) / GIB for v in value[:2]], digits)


def _both(printed: str | None, ranged: str) -> str:
    """The as-printed figure with the range beside it, where they differ."""
    if printed is None or printed == ranged:
        return ranged
    return f"{printed} as printed; {ranged} within the printed digits"


def auto_words(auto: dict[str, Any] | None) -> str:
    if not auto:
        return "—"
    if auto.get("starts") is False:
        short = auto.get("shortfall_gib")
        in_gb = None if short is None else [None if v is None else float(v) * GIB / 1e9 for v in short[:2]]
        return (f"refuses: short by {gib(short)} GiB ({gib(in_gb)} GB; keeps {auto.get('headroom_gib')} GiB "
                "free)")
    pool = auto.get("kv_tokens")
    if auto.get("starts") and pool and auto.get("engine_limit"):
        return (f"{tokens([pool[0], pool[0]])} tokens, the engine's limit (max_context × slots; keeps more than "
                f"{auto.get('headroom_gib')} GiB free)")
    if auto.get("starts") and pool:
        return f"{tokens(pool)} tokens (keeps {auto.get('headroom_gib')} GiB free)"
    return str(auto.get("verdict") or "—")


def auto_context_words(auto: dict[str, Any] | None) -> str | None:
    """Auto across max_context (capacity/table.py auto_by_context) in words; None where it was not answered."""
    across = (auto or {}).get("by_context")
    if not across:
        return None
    top, sure, first = across["max_context"], across.get("starts_up_to_context"), across.get("refuses_from_context")
    parts = [f"starts at every max_context up to {top:,}" if sure == top
             else f"starts up to max_context {sure:,}" if sure is not None else "starts at no max_context for sure"]
    if first is not None:
        parts.append(f"refuses from {first:,} up (the smallest pool, one full-length request, no longer fits beside "
                     "the headroom)")
    if across.get("undecided"):
        parts.append("between, the data does not say" if first is not None else "above, the data does not say")
    return f"{'; '.join(parts)}; at {top:,}, the largest the engine takes: {auto_words(across.get('at_max_context'))}"


def room_words(row: dict[str, Any] | DecisionRow) -> str:
    """Leftover in tokens and GiB where it fits, shortfall in GiB and tokens where it does not (both sides
    where the rounding leaves it undecided)."""
    data = row.as_dict() if isinstance(row, DecisionRow) else row
    if (data.get("margin_gib_interval") or [None, None])[:2] == [None, None]:
        return str(data.get("verdict") or "—")
    if data.get("leftover_tokens") is not None and data.get("shortfall_gib") is not None:
        return _either(data)
    parts = []
    if data.get("leftover_tokens") is not None:
        parts.append(f"leftover {_amount(data['leftover_tokens'], data.get('leftover_gib'))}")
    if data.get("shortfall_gib") is not None:
        parts.append(f"short by {gib(data['shortfall_gib'])} GiB ({tokens(data.get('shortfall_tokens'))} tokens)")
    return " or ".join(parts) or str(data.get("verdict") or "—")


def _either(data: dict[str, Any]) -> str:
    """A borderline row: sure of neither side, so each is "up to" its possible amount, and a side the data leaves
    open says so (not "?" after a sure amount that is 0)."""
    room, room_gib = (data.get("leftover_tokens") or [None, None])[1], (data.get("leftover_gib") or [None, None])[1]
    lost, lost_gib = (data.get("shortfall_tokens") or [None, None])[1], (data.get("shortfall_gib") or [None, None])[1]
    left = (f"leftover up to {int(room):,} tokens ({float(room_gib):.2f} GiB)" if room is not None
            and room_gib is not None else "leftover by an amount the data does not bound")
    short = (f"short by up to {float(lost_gib):.2f} GiB ({int(lost):,} tokens)" if lost is not None
             and lost_gib is not None else "short by an amount the data does not bound")
    return f"{left}, or {short}"


def summary_rows(answer: CapacityAnswer) -> list[tuple[str, str]]:
    """The report's table for one answer: weights, free after weights, auto, largest pool, per lane, what-ifs."""
    printed: dict[str, Any] = answer.model_extra.get("as_printed") or {} if answer.model_extra else {}
    setting = answer.model_extra.get("setting") or {} if answer.model_extra else {}
    slots, context = setting.get("concurrency"), setting.get("context_per_slot")
    at = f"{slots} slot{'s' if slots != 1 else ''} of {context:,} tokens" if slots and context else "the setting"
    rows = [("basis", f"{answer.basis} ({answer.source})"),
            ("weights, GiB", _both(gib_of_bytes(printed.get("weights_bytes"), 2) if printed.get("weights_bytes")
                                   else None, gib_of_bytes(answer.weights_bytes, 2)) if answer.weights_bytes
             else "— (no log printed it; type capacity.known.weights)"),
            ("free after weights, GiB", _both(None if not printed else gib_of_bytes(printed.get(
                "free_after_weights_bytes")), gib_of_bytes(answer.free_after_weights_bytes, 3)))]
    if answer.missing:
        return [*rows, ("missing", answer.missing)]
    rows += [("fixed part, GiB", _both(gib_of_bytes(printed["fixed_bytes"], 3) if printed.get("fixed_bytes") else None,
                                       gib_of_bytes(answer.fixed_bytes, 3))),
             ("bytes per pool token", tokens(answer.bytes_per_token)),
             (f"auto at {at}", _both(auto_words(printed["auto"]) if printed.get("auto") else None,
                                     auto_words(answer.auto))),
             *([(f"auto at {slots} slots, by max_context", _both(auto_context_words(printed.get("auto")) if printed
                                                                 else None, across))]
               if (across := auto_context_words(answer.auto)) else []),
             ("largest pool memory allows, tokens", _both(tokens(printed.get("memory_kv_tokens_interval"))
                                                          if printed else None,
                                                          tokens(answer.memory_kv_tokens_interval)))]
    if answer.engine_max_kv_tokens is not None:
        rows.append((f"engine's limit at {at}, tokens", f"{answer.engine_max_kv_tokens:,}"))
    rows.append((f"per lane at {slots} slots, tokens (engine's cap)",
                 _both(tokens(printed.get("per_slot_tokens")) if printed else None, tokens(answer.per_slot_tokens))))
    rows.append((f"per lane at {slots} slots, tokens (memory's share)",
                 _both(tokens(printed.get("memory_per_slot_tokens")) if printed else None,
                       tokens(answer.memory_per_slot_tokens))))
    printed_cases = printed.get("what_if") or [None] * len(answer.what_if)
    for case, as_printed in zip(answer.what_if, printed_cases, strict=True):
        label = f" ({case['label']})" if case.get("label") else ""
        less = f", fixed part less {gib_of_bytes(case['fixed_less_bytes'])} GiB" if case.get("fixed_less_bytes") else ""
        rows.append((f"what if {case['slots']} x {case['context_per_slot']:,}{label} (pool {case['pool_tokens']:,}"
                     f"{less})", _both(None if as_printed is None else room_words(as_printed), room_words(case))))
    return rows


def dtype_words(kv_dtype: str | None) -> str:
    """A decision row's KV dtype; none named is the engine's own default (vLLM's `auto`: the model's dtype)."""
    return kv_dtype or "engine default"


def table_rows(rows: list[DecisionRow]) -> list[tuple[str, ...]]:
    """The whole decision table, every reading, with `auto` on the rows that have it. A setting whose two readings
    say the same (one slot, or a per-slot pool: the pool that starts is the full one) is one row, "starts and full".
    A row with no margin (no observation, or observations that contradict each other) says so in words, with
    neither "fits" nor "borderline"."""
    out: list[tuple[str, ...]] = []
    for row in rows:
        known = any(v is not None for v in (row.margin_gib_interval or [None, None])[:2])
        fits = {True: "yes", False: "no", None: "borderline"}[row.fits] if known else "—"
        line = (dtype_words(row.kv_dtype), str(row.concurrency), f"{row.context_per_slot:,}", str(row.reading),
                f"{row.pool_tokens:,}", fits, gib(row.margin_gib_interval) if known else "—", room_words(row),
                auto_words(row.auto))
        last = out[-1] if out else None
        if last is not None and last[:3] == line[:3] and last[4:8] == line[4:8] and line[8] in ("—", last[8]):
            out[-1] = (*last[:3], f"{last[3]} and {line[3]}", *last[4:])
            continue
        out.append(line)
    return _unanswered_once(out)


def _unanswered_once(lines: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """A KV dtype whose every row has no margin and the same words (no launch with it, or observations that
    contradict each other) as one row naming its slots and contexts, not one row of the same words per setting."""
    out: list[tuple[str, ...]] = []
    for dtype in dict.fromkeys(line[0] for line in lines):
        own = [line for line in lines if line[0] == dtype]
        if len(own) > 1 and all(line[5:7] == ("—", "—") for line in own) and len({line[7] for line in own}) == 1:
            slots, contexts = ("; ".join(dict.fromkeys(line[i] for line in own)) for i in (1, 2))
            out.append((dtype, slots, contexts, "every reading", "—", "—", "—", own[0][7],
                        next((line[8] for line in own if line[8] != "—"), "—")))
        else:
            out += own
    return out
