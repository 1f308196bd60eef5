"""The server's memory books as the write-up states them: weights, the KV pool, and the pool's bytes.

Engines print their KV pool differently: llama.cpp and vLLM print its bytes; NInfer prints tokens and
pages (`KV capacity … resolved=131072 tokens pages=2048/2048`), so its bytes are pages x page tokens x
the bytes per token of the model's KV layout, which the capacity step recorded in capacity.json
(seed 000 §2.5: 35,904 B/token for int8 KV with MTP on the 27B), or, where the capacity step did not run,
the engine's own KV layout of the model the profile names (NInfer target, GGUF metadata, vLLM config.json).
Where no layout is known the pool is still shown, in tokens and pages, with the reason it has no byte size.

`capacity_blocks` is the report's capacity table (seed 000 §2.5) for the write-up: weights, free after
weights, `auto`, the largest pool, each lane's share, the what-if rows and the whole decision table, one
set per answer where typed terms and logs conflict, and what would fill it in where the run has no data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ninferkit.capacity.summary import SUMMARY_COLUMNS, TABLE_COLUMNS, summary_rows, table_rows
from ninferkit.errors import NinferkitError
from ninferkit.report.data import RunData
from ninferkit.report.document import EMPTY, Bullets, Note, Paragraph, Table

LAYOUT_SOURCES = ("architecture", "KV payload lines")
"""capacity.json's bytes_per_token_source values that mean the KV cache's own bytes per token (a fitted slope
is only a bound, and an "architecture (… compute buffer)" one includes more than the cache)."""


@dataclass(frozen=True)
class KVPool:
    """The pool the launch step's server allocated, and its bytes where they are known."""

    tokens: int | None
    pages: str | None
    """"2,048 of 2,048 pages of 64 tokens" where the engine counts pages, else None."""
    bytes: int | None
    how: str
    """How the bytes were had (printed, or pages x layout), or why there are none."""
    source: str


def kv_pool(run: RunData) -> KVPool | None:
    """The KV pool of the launch step's ledger (None: the ledger states no pool)."""
    ledger, where = run.ledger, run.ledger_source
    tokens, printed, pages = ledger.get("kv_tokens"), ledger.get("kv_cache_bytes"), ledger.get("kv_pages")
    page_tokens = _page_tokens(run)
    pages_text = None
    if pages is not None and page_tokens is not None:
        of = f" of {ledger['kv_max_pages']:,}" if ledger.get("kv_max_pages") is not None else ""
        pages_text = f"{pages:,}{of} pages of {page_tokens} tokens"
    if printed is not None:
        return KVPool(tokens, pages_text, int(printed), "startup log", f"{where} kv_cache_bytes")
    if tokens is None:
        return None
    per_token, why = layout_bytes_per_token(run)
    if per_token is None:
        return KVPool(tokens, pages_text, None, why, f"{where} kv_tokens; capacity.json bytes_per_token")
    if pages is not None and page_tokens is not None:
        cells, words, read = pages * page_tokens, f"{pages:,} pages x {page_tokens} tokens", "kv_pages"
    else:
        cells, words, read = int(tokens), f"{tokens:,} tokens", "kv_tokens"
    return KVPool(tokens, pages_text, cells * per_token, f"{words} x {per_token:,} B/token ({why})",
                  f"{where} {read} x capacity.json bytes_per_token")


def layout_bytes_per_token(run: RunData) -> tuple[int | None, str]:
    """(the KV cache's bytes per token, where from) of the run's model at its profile's KV dtype, from
    capacity.json; (None, why not) when the capacity step did not know the layout."""
    capacity = run.capacity
    if capacity is not None:
        value, source = capacity.bytes_per_token, capacity.bytes_per_token_source
        if isinstance(value, int) and source in LAYOUT_SOURCES:
            return value, str(capacity.architecture or source)
    layout, why = _architecture(run)
    if layout is not None:
        return layout
    if capacity is None:
        return None, f"no bytes: no capacity.json (04_capacity_fit), and {why}"
    value = capacity.bytes_per_token
    fitted = "" if value is None else f"; the capacity fit bounds bytes per pool token only to {_bytes(value)}"
    unset = " capacity.model is null, so" if (run.profile.get("capacity") or {}).get("model", "") is None else ""
    return None, f"no bytes:{unset} the model's KV layout is unknown{fitted}"


def _architecture(run: RunData) -> tuple[tuple[int, str] | None, str]:
    """The KV cache's bytes per token from the engine's layout of the run's model (the capacity step's own
    source), or why there is none."""
    if run.adapter is None:
        return None, "the engine is not one this ninferkit knows"
    profile = run.todays_profile
    if profile is None:
        return None, "a field of the recorded profile cannot be read today, so its model's KV layout is not read"
    recorded = run.artifact.path if run.artifact is not None else None
    path = Path(recorded) if recorded and Path(recorded).exists() else None
    dtype = profile.serve.kv.dtype or run.adapter.capacity_pool.default_kv_dtype
    try:
        layout = run.adapter.kv_layout(profile, path, dtype)
    except (NinferkitError, OSError) as exc:
        return None, f"the model's KV layout could not be read ({exc})"
    if layout is None:
        return None, "the model's KV layout is unknown (capacity.model, or the model file, names none)"
    return (layout.bytes_per_token, f"{layout.detail}; from the architecture, the capacity step did not run"), ""


def capacity_blocks(run: RunData) -> list[Any]:
    """The report's capacity table for the write-up (seed 000 §2.5), per answer, with the decision table."""
    capacity = run.capacity
    if capacity is None or not capacity.answers:
        return [Note("No capacity answer: run the capacity step (04_capacity_fit) on this run's startup log, "
                          "or type the known terms in the profile's capacity.known (fixed, bytes_per_token, "
                          "free_after_weights, from a report or a datasheet).")]
    blocks: list[Any] = []
    if capacity.conflicts:
        blocks.append(Paragraph("The typed terms and the logs disagree, so each is answered on its own:"))
        blocks.append(Bullets(tuple(str(text) for text in capacity.conflicts)))
    for answer in capacity.answers:
        blocks.append(Table(SUMMARY_COLUMNS, tuple(row for row in summary_rows(answer) if row[-1] not in EMPTY),
                            f"Capacity from the {answer.basis} ({answer.source}): a figure from typed terms is "
                            "shown as printed and within the range its printed digits allow."))
        if answer.decision_table:
            blocks.append(Table(TABLE_COLUMNS, tuple(table_rows(answer.decision_table)),
                                f"Decision table from the {answer.basis}: each setting and reading, with the leftover "
                                "(tokens and GiB) or the shortfall (GiB and tokens), and what auto would do."))
    return blocks


def _bytes(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join("?" if v is None else f"{v:,}" for v in value) + "] B"
    return f"{value:,} B"


def _page_tokens(run: RunData) -> int | None:
    return None if run.adapter is None else run.adapter.capacity_pool.page_tokens
