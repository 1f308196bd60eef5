"""What the post leads with: its title and its at-a-glance table, as the field reports lead.

Every report's title carries the model, the GPU, the engine and its best figures with their conditions
(000: "200W 下 decode 93.9 tok/s、prefill 1019 tok/s"), and its first table is one line per figure with the
best value, the conditions it was measured under and the range (000's 成绩速览: 指标 | 最好 | 区间). The
figures come from the request rows and the startup ledger, as the headline table's do (report/headline.py).
As in 000, the best decode is the best of the context and tasks sweeps (its 93.9 tok/s is the coding task's), and
the best TTFT the lowest of the context sweep's and of the prefix-reuse scenarios the cache served (its 0.13 s is
an identical resend); each says which it was.

A prefill rate leads only where it measures prefill: when the engine's prompt time barely grows while the
prompt grows several-fold (vLLM's 17-20 ms from 256 to 8,000 tokens on a small model), the rate is the
prompt length over a fixed overhead, and the post says so instead of leading with it. A concurrency cell
whose clients each sent one request leads with what it showed (N long requests served, how long the last
one queued), not with an aggregate rate over two requests.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from ninferkit.report.data import RunData
from ninferkit.report.fmt import gib, number
from ninferkit.report.headline import concurrency_groups
from ninferkit.report.memory import kv_pool
from ninferkit.rundir.records import RequestRow

FIXED_OVERHEAD_GROWTH = 2.0
"""A prompt time that grows less than this while the prompt grows at least `PROMPT_GROWTH`-fold is a fixed
overhead, not a prefill rate."""
PROMPT_GROWTH = 4.0


@dataclass(frozen=True)
class Lead:
    """One line of the at-a-glance table: the figure, its best value with its conditions, and its range."""

    metric: str
    best: str
    spread: str


@dataclass(frozen=True)
class Figures:
    """The lead figures of a run; `title_figures` are the short ones the title carries."""

    model: str
    lines: tuple[Lead, ...]
    title_figures: tuple[str, ...]


def _by_length(rows: Sequence[RequestRow]) -> dict[int, list[RequestRow]]:
    found: dict[int, list[RequestRow]] = defaultdict(list)
    for row in rows:
        if row.prompt_tokens is not None:
            found[int(row.prompt_tokens)].append(row)
    return dict(sorted(found.items()))


def _tokens(value: int | None) -> str:
    """A prompt length as the reports write it: 7.9K, 124.6K, or the count below a thousand."""
    if value is None:
        return "—"
    return f"{value / 1000:.1f}K" if value >= 1000 else str(value)


def _decode(rows: Sequence[RequestRow]) -> tuple[Lead | None, str | None]:
    """The best decode over the context and tasks sweeps' requests (seed 000's 93.9 tok/s is its coding task's),
    its conditions naming the task where it was one; the range spans both sweeps."""
    name = "decode_tok_s_server" if any(r.decode_tok_s_server is not None for r in rows) else "decode_tok_s_client"
    values = [(float(value), row) for row in rows if (value := getattr(row, name)) is not None]
    if not values:
        return None, None
    best, row = max(values, key=lambda item: item[0])
    task = (row.cell or {}).get("task") if row.sweep == "tasks" else None
    conditions = [*([f"{task} task"] if task else []), f"{_tokens(row.prompt_tokens)}-token prompt",
                  f"{number(row.completion_tokens)} output tokens"]
    if row.acceptance_server is not None and (row.accepted_tokens_server or 0) > 0:
        conditions.append(f"draft acceptance {100 * float(row.acceptance_server):.0f}%")
    low = min(value for value, _ in values)
    side = "" if name.endswith("_server") else " (client)"
    swept = " and ".join(dict.fromkeys(f"{r.sweep} sweep" for _, r in values))
    return (Lead(f"decode{side}", f"{number(best)} tok/s ({', '.join(conditions)})",
                 f"{number(low)}–{number(best)} tok/s ({swept})" if number(low) != number(best) else "one value"),
            f"decode {number(best)} tok/s")


def prefill_is_overhead(rows: Sequence[RequestRow]) -> tuple[float, float] | None:
    """(shortest, longest prompt time in s) when the engine's prompt time stays flat while the prompt grows
    `PROMPT_GROWTH`-fold or more (the rate is a fixed overhead); None when prefill time grows with the prompt
    or there are not two lengths to tell."""
    measured = {length: [float(r.prompt_s_server) for r in group if r.prompt_s_server is not None]
                for length, group in _by_length(rows).items()}
    times = {length: statistics.median(values) for length, values in measured.items() if values}
    if len(times) < 2:
        return None
    short, long = min(times), max(times)
    if long / short >= PROMPT_GROWTH and times[long] < FIXED_OVERHEAD_GROWTH * times[short]:
        return times[short], times[long]
    return None


def _prefill(rows: Sequence[RequestRow]) -> tuple[Lead | None, str | None]:
    values = [(float(row.prefill_tok_s_server), row) for row in rows if row.prefill_tok_s_server is not None]
    if not values:
        return None, None
    lengths = sorted({int(row.prompt_tokens) for _, row in values if row.prompt_tokens is not None})
    flat = prefill_is_overhead(rows)
    if flat is not None:
        return Lead("prefill", "not measured: the prompt time is a fixed overhead at these lengths",
                    f"{number(flat[0] * 1000)} ms at {_tokens(lengths[0])} tokens, {number(flat[1] * 1000)} ms at "
                    f"{_tokens(lengths[-1])}: tokens over that time is no prefill rate; longer prompts measure "
                    "one"), None
    best, row = max(values, key=lambda item: item[0])
    low = min(value for value, _ in values)
    return (Lead("prefill", f"{number(best)} tok/s ({_tokens(row.prompt_tokens)}-token prompt)",
                 f"{number(low)}–{number(best)} tok/s" + (f" ({_tokens(lengths[0])} to {_tokens(lengths[-1])} "
                                                         "prompts)" if len(lengths) > 1 else "")),
            f"prefill {number(best)} tok/s")


def _ttft(rows: Sequence[RequestRow], reused: Sequence[RequestRow]) -> Lead | None:
    """The context sweep's TTFT by prompt length (the range); the best is the lowest median of those and of the
    prefix-reuse scenarios whose requests the cache served (seed 000's 0.13 s is an identical resend, 100% hit)."""
    groups = {length: [float(r.ttft_client_s) for r in group if r.ttft_client_s is not None]
              for length, group in _by_length(rows).items()}
    medians = {length: statistics.median(values) for length, values in groups.items() if values}
    if not medians:
        return None
    best = min(medians, key=medians.__getitem__)
    steps = " → ".join(f"{number(value)} s @{_tokens(length)}" for length, value in medians.items())
    shown = f"{number(medians[best])} s ({_tokens(best)}-token prompt)"
    hit = _best_hit(reused)
    if hit is not None and hit[0] < medians[best]:
        shown = f"{number(hit[0])} s ({hit[1]})"
    return Lead("TTFT (client)", shown, steps)


MOSTLY_CACHED = 0.5
"""A prefix-reuse scenario leads the TTFT only where the cache served at least this share of its prompts (the
median request's, by the engine's count, else the client's usage): a resend, not a new prompt that shared a few
tokens."""


def _best_hit(rows: Sequence[RequestRow]) -> tuple[float, str] | None:
    """The prefix-reuse scenario with the lowest median TTFT among those the cache served, with its conditions."""
    scenarios: dict[str, list[RequestRow]] = defaultdict(list)
    for row in rows:
        scenarios[str((row.cell or {}).get("scenario"))].append(row)
    found = []
    for scenario, group in scenarios.items():
        hits = [row.cached_tokens_server if row.cached_tokens_server is not None else row.cached_tokens
                for row in group]
        times = [float(row.ttft_client_s) for row in group if row.ttft_client_s is not None]
        shares = [min(1.0, (hit or 0) / row.prompt_tokens) for hit, row in zip(hits, group, strict=True)
                  if row.prompt_tokens]
        share = statistics.median(shares) if shares and all(hit is not None for hit in hits) else 0.0
        if times and share >= MOSTLY_CACHED:
            found.append((statistics.median(times), f"prefix reuse: {scenario}, {_tokens(group[0].prompt_tokens)}"
                                                     f"-token prompt, {100 * share:.0f}% of it from the cache"))
    return min(found, default=None)


def _concurrency(run: RunData) -> Lead | None:
    groups = concurrency_groups(run)
    if not groups:
        return None
    best = max(groups, key=lambda g: (g.concurrency, g.aggregate_output_tok_s_client))
    rows = [r for r in run.measured("concurrency") if str(r.cell_id) == best.cell_id]
    prompt = max((int(r.prompt_tokens) for r in rows if r.prompt_tokens is not None), default=None)
    if best.requests <= best.concurrency:  # one round: the cell shows that the lanes ran, not a rate
        queued = [float(r.queue_s_server) for r in rows if r.queue_s_server is not None]
        ttft = [float(r.ttft_client_s) for r in rows if r.ttft_client_s is not None]
        wait = (f"the last waited {number(max(queued))} s in the engine's queue" if queued
                else f"first tokens after {number(min(ttft))}–{number(max(ttft))} s (client)" if ttft else "")
        return Lead("concurrency", f"{best.concurrency} requests of {_tokens(prompt)} prompt tokens each, served "
                    "together", wait or "one round")
    rates = [g.aggregate_output_tok_s_client for g in groups]
    return Lead("concurrency (aggregate output, client)",
                f"{number(best.aggregate_output_tok_s_client)} tok/s at {best.concurrency} clients",
                f"{number(min(rates))}–{number(max(rates))} tok/s over {len(groups)} levels")


def _memory(run: RunData) -> Lead | None:
    weights = run.ledger.get("weights_bytes")
    pool = kv_pool(run)
    parts = ([f"weights {gib(weights)}"] if weights is not None else []) + (
        [f"KV pool {number(pool.tokens)} tokens"] if pool is not None and pool.tokens is not None else [])
    if not parts:
        return None
    free = run.ledger.get("free_after_startup_bytes")
    fitted = (run.capacity.free_after_weights_bytes or [None, None])[-1] if run.capacity else None
    left = (f"free after startup {gib(free)}" if free is not None
            else f"free after weights {gib(fitted)} (capacity fit)" if fitted is not None
            else "the server printed no free memory")
    return Lead("memory", " + ".join(parts), left)


def model_name(run: RunData) -> str:
    """The model as the reader knows it: the id the server answered with or the profile gave it, else the
    artifact's repository or file, else what the generated model is."""
    if run.server is not None and run.server.model_id:
        return str(run.server.model_id)
    artifact = run.profile.get("artifact") or {}
    named = (run.profile.get("serve") or {}).get("model_id") or artifact.get("repo") or artifact.get("filename")
    if named:
        return str(named)
    made = artifact.get("generate") or {}
    if made:
        shape = ", ".join(f"{made[key]} {word}" for key, word in (("layers", "layers"), ("hidden", "hidden"))
                          if made.get(key))
        return f"a generated {made.get('architecture') or 'model'} ({shape}{', ' if shape else ''}" \
               f"{made.get('dtype') or 'dtype unknown'})"
    return "an unnamed model"


def lead_figures(run: RunData) -> Figures:
    """The at-a-glance lines and the title's figures of a run.

    Example: ``[line.metric for line in lead_figures(load_run("runs/x")).lines]``.
    """
    context = run.measured("context")
    decode, decode_title = _decode([*context, *run.measured("tasks")])
    prefill, prefill_title = _prefill(context)
    lines = [line for line in (decode, prefill, _ttft(context, run.measured("prefix_reuse")), _concurrency(run),
                               _memory(run)) if line is not None]
    titled = tuple(text for text in (decode_title, prefill_title) if text)
    return Figures(model_name(run), tuple(lines), titled)
