"""Mooncake-style request traces: read one (checked whole before anything is sent), write one from a run's
requests.jsonl, and generate the small one ninferkit ships.

A trace is JSONL, one request a line, sorted by time: `timestamp` (milliseconds from the trace's start),
`input_length` and `output_length` (tokens) and `hash_ids`, one id per block of `block_tokens` prompt tokens
(the last block may be partial), so that two requests whose leading ids agree share that prompt prefix
block by block (Mooncake's format; GuideLLM and AIPerf replay it; Mooncake's blocks are 512 tokens).

A run's rows do not say which prompts shared text, except where the sweep built them to: a session's turn
repeats its previous turn's prompt and reply (sessions rows). So `from_requests` gives a session's turns
their shared blocks and every other request blocks of its own, and says so (`TraceNotes`).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ninferkit.bounded import INPUT_FILE_BYTES, loads_json, read_text_file
from ninferkit.errors import BadInput, ProfileError
from ninferkit.rundir.records import RequestRow

FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
BLOCK_TOKENS = 512
"""Mooncake's block size, and ninferkit's default."""
MAX_LENGTH = 16_777_216
"""Beyond this a length is absurd (params/sweeps.py MAX_TOKENS)."""
MAX_GAP_MS = 3_600_000
"""The longest wait between two requests a trace may ask (an hour): a replay of 10^15 ms just waited (issue 40)."""
SHIPPED = "small.jsonl"
"""The trace ninferkit ships (ninferkit/data/traces/, written by `generate` with its defaults)."""
SHIPPED_BLOCK_TOKENS = 64
"""Its blocks: small, so its prompts (up to a few hundred tokens) replay in seconds on the embedded CPU server."""


@dataclass(frozen=True)
class TraceRequest:
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def shipped_trace() -> Path:
    return Path(str(resources.files("ninferkit").joinpath("data", "traces", SHIPPED)))


def read_trace(path: Path, block_tokens: int = BLOCK_TOKENS, max_context: int | None = None) -> list[TraceRequest]:
    """The trace's requests; ProfileError naming the file, line and field at the first bad line: not a JSON
    object, a field missing or not a whole number, times out of order or over MAX_GAP_MS apart, a length of 0
    or above MAX_LENGTH (or above the served context), `hash_ids` not one id per block."""
    try:
        text = read_text_file(path, INPUT_FILE_BYTES, "reading a trace")
    except BadInput as exc:  # a trace is named in a profile: its problem is the profile's
        raise ProfileError(f"trace {exc}") from None
    requests: list[TraceRequest] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            requests.append(_request(f"trace {path} line {number}", line, block_tokens, max_context,
                                     requests[-1].timestamp_ms if requests else None))
    if not requests:
        raise ProfileError(f"trace {path}: no request in it")
    return requests


def _request(where: str, line: str, block_tokens: int, max_context: int | None, before: float | None
             ) -> TraceRequest:
    try:
        data = loads_json(line)
    except ValueError as exc:
        raise ProfileError(f"{where}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: a {type(data).__name__}, not a JSON object with {', '.join(FIELDS)}")
    missing = [name for name in FIELDS if name not in data]
    if missing:
        raise ProfileError(f"{where}: missing {', '.join(missing)}; a line has {', '.join(FIELDS)}")
    stamp = data["timestamp"]
    if not _number(stamp) or stamp < 0:
        raise ProfileError(f"{where}: timestamp {stamp!r} is not milliseconds >= 0")
    if before is not None and stamp < before:
        raise ProfileError(f"{where}: timestamp {stamp} is before the previous line's {before}: a trace is "
                           "sorted by time")
    if before is not None and stamp - before > MAX_GAP_MS:
        raise ProfileError(f"{where}: timestamp {stamp} is {stamp - before:g} ms after the previous line's: a gap "
                           f"over {MAX_GAP_MS:,} ms (an hour) is no load to replay; close it or split the trace")
    lengths = {name: data[name] for name in ("input_length", "output_length")}
    for name, value in lengths.items():
        if not _whole(value) or not 1 <= value <= MAX_LENGTH:
            raise ProfileError(f"{where}: {name} {value!r} is not a token count from 1 to {MAX_LENGTH}")
    total = lengths["input_length"] + lengths["output_length"]
    if max_context is not None and total > max_context:
        raise ProfileError(f"{where}: input_length + output_length = {total} exceed serve.max_context = "
                           f"{max_context}")
    ids = data["hash_ids"]
    blocks = math.ceil(lengths["input_length"] / block_tokens)
    if not isinstance(ids, list) or not all(_whole(i) and i >= 0 for i in ids) or len(ids) != blocks:
        raise ProfileError(f"{where}: hash_ids must be {blocks} block ids (input_length "
                           f"{lengths['input_length']} in blocks of {block_tokens} tokens), not {str(ids)[:80]}")
    return TraceRequest(float(stamp), lengths["input_length"], lengths["output_length"], tuple(ids))


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def trace_lines(requests: Iterable[TraceRequest]) -> list[str]:
    return [json.dumps({"timestamp": round(r.timestamp_ms, 3) if r.timestamp_ms % 1 else int(r.timestamp_ms),
                        "input_length": r.input_length, "output_length": r.output_length,
                        "hash_ids": list(r.hash_ids)}) for r in requests]


@dataclass
class TraceNotes:
    """What a trace made from a run's rows could not say, in counts."""

    requests: int = 0
    left_out: int = 0
    """Rows without the server's prompt token count (a request that failed before its usage)."""
    shared: int = 0
    """Requests whose leading blocks are another's (a session's later turns)."""
    lines: list[str] = field(default_factory=list)


def from_requests(rows: Sequence[RequestRow], block_tokens: int = BLOCK_TOKENS) -> tuple[list[TraceRequest],
                                                                                        TraceNotes]:
    """The run's requests as a trace, in send order: when each was sent, its prompt tokens as the server
    counted them and its output (what it generated; what it asked, where it failed). A session's turn shares
    the full blocks of its previous turn's prompt and reply; every other request gets blocks of its own."""
    notes = TraceNotes()
    sent = sorted((r for r in rows if isinstance(r.t_send, (int, float))), key=lambda r: float(r.t_send or 0))
    if not sent:
        return [], notes
    start = float(sent[0].t_send or 0)
    next_id, requests = 0, []
    history: dict[tuple[Any, Any], tuple[int, tuple[int, ...]]] = {}
    for row in sent:
        output = row.completion_tokens if row.status == "ok" else row.max_tokens
        if row.prompt_tokens is None or not row.prompt_tokens or not output:
            notes.left_out += 1
            continue
        blocks = math.ceil(row.prompt_tokens / block_tokens)
        shared: tuple[int, ...] = ()
        if row.turn is not None and row.turn > 1 and (row.cell_id, row.session_index) in history:
            kept, ids = history[(row.cell_id, row.session_index)]
            shared = ids[:min(kept // block_tokens, blocks)]
            notes.shared += bool(shared)
        ids = shared + tuple(range(next_id, next_id + blocks - len(shared)))
        next_id += blocks - len(shared)
        if row.turn is not None:
            history[(row.cell_id, row.session_index)] = (row.prompt_tokens + (row.completion_tokens or 0), ids)
        requests.append(TraceRequest(round((float(row.t_send or 0) - start) * 1000, 3), row.prompt_tokens, output,
                                     ids))
    notes.requests = len(requests)
    notes.lines = [f"{notes.requests} requests in send order; {notes.shared} share their leading blocks with an "
                   "earlier turn of their session, every other request has blocks of its own (requests.jsonl does "
                   "not say which other prompts shared text)"]
    if notes.left_out:
        notes.lines.append(f"{notes.left_out} rows left out: no prompt token count (the request failed before "
                           "the server counted it)")
    return requests, notes


def generate(requests: int = 12, sessions: int = 3, seed: int = 0, rate_rps: float = 1.0,
             block_tokens: int = SHIPPED_BLOCK_TOKENS) -> list[TraceRequest]:
    """A small seeded trace: `sessions` conversations whose requests arrive on Poisson gaps at `rate_rps`,
    each request repeating its session's earlier full blocks and adding one or two (so later requests share
    prefixes block by block, as Mooncake's do; the last block is partial, and its own), with 8 to 32 output
    tokens. `python -m ninferkit.measure.traces > ninferkit/data/traces/small.jsonl` writes the shipped one."""
    draw = random.Random(seed)
    now, next_id = 0.0, 0
    prompts: dict[int, tuple[int, ...]] = {}
    out = []
    for _ in range(requests):
        session = draw.randrange(sessions)
        added = draw.randint(1, 2)
        ids = prompts.get(session, ()) + tuple(range(next_id, next_id + added))
        next_id += added
        prompts[session] = ids[:-1]  # the partial last block is not repeated: the next prompt goes on past it
        tail = draw.randint(block_tokens // 4, block_tokens)  # the last block is partial
        out.append(TraceRequest(round(now, 3), (len(ids) - 1) * block_tokens + tail, draw.randint(8, 32), ids))
        now += draw.expovariate(rate_rps) * 1000
    return out


if __name__ == "__main__":
    print("\n".join(trace_lines(generate())))
