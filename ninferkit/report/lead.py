"""What the post leads with: its title and its at-a-glance table, as the field reports lead.

Every report's title carries the model, the GPU, the conditions and its best figures (000: "Tesla V100-32G 跑
Qwen3.8-27B nvfp4：200W 下 decode 93.9 tok/s、prefill 1019 tok/s（NInfer SM70 / CUDA 12.8）"), and its first
table is one line per figure with the best value, the conditions it was measured under and the range (000's
成绩速览: 指标 | 最好 | 区间), at the reports' precision: rates to 0.1 tok/s (1,019.0), times to 0.01 s (250.27 s).
The title names the model as a reader searches for it, by what was loaded (the artifact's own name for itself,
else its repository or file: `model_name`), not the id it was served under ("embedded"), and
the power limit only where the run's probe read one (never the profile's wish); the figures come from the request
rows and the startup ledger, as the headline table's do (report/headline.py).
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
from pathlib import PurePosixPath
from typing import Any

from ninferkit.report.data import RunData
from ninferkit.report.field_tables import queued_s
from ninferkit.report.fmt import gib, number, seconds
from ninferkit.report.headline import concurrency_groups
from ninferkit.report.memory import kv_pool
from ninferkit.rundir.records import GpuInfo, RequestRow
from ninferkit.sweeps.kinds.columns import RATE_DECIMALS

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
    return (Lead(f"decode{side}", f"{_rate(best)} tok/s ({', '.join(conditions)})",
                 f"{_rate(low)}–{_rate(best)} tok/s ({swept})" if _rate(low) != _rate(best) else "one value"),
            f"decode {title_rate(best)} tok/s")


def _rate(value: float) -> str:
    """A rate in the at-a-glance table, to 0.1 tok/s as the reports' tables print it (1,019.0 tok/s)."""
    return number(float(value), RATE_DECIMALS)


def title_rate(value: float) -> str:
    """A rate in the title as the reports title theirs: to 0.1 tok/s below 1,000 (93.9), whole above (1,019)."""
    return number(float(value), RATE_DECIMALS if value < 1000 else 0)


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
        short, long = (number(time * 1000, 1) for time in flat)
        return Lead("prefill", "not measured: the prompt time is a fixed overhead at these lengths",
                    f"{short} ms at {_tokens(lengths[0])} tokens, {long} ms at {_tokens(lengths[-1])}: tokens over "
                    "that time is no prefill rate; longer prompts measure one"), None
    best, row = max(values, key=lambda item: item[0])
    low = min(value for value, _ in values)
    return (Lead("prefill", f"{_rate(best)} tok/s ({_tokens(row.prompt_tokens)}-token prompt)",
                 f"{_rate(low)}–{_rate(best)} tok/s" + (f" ({_tokens(lengths[0])} to {_tokens(lengths[-1])} "
                                                       "prompts)" if len(lengths) > 1 else "")),
            f"prefill {title_rate(best)} tok/s")


def _ttft(rows: Sequence[RequestRow], reused: Sequence[RequestRow]) -> Lead | None:
    """The context sweep's TTFT by prompt length (the range); the best is the lowest median of those and of the
    prefix-reuse scenarios whose requests the cache served (seed 000's 0.13 s is an identical resend, 100% hit)."""
    groups = {length: [float(r.ttft_client_s) for r in group if r.ttft_client_s is not None]
              for length, group in _by_length(rows).items()}
    medians = {length: statistics.median(values) for length, values in groups.items() if values}
    if not medians:
        return None
    best = min(medians, key=medians.__getitem__)
    steps = " → ".join(f"{seconds(value, unit=True)} @{_tokens(length)}" for length, value in medians.items())
    shown = f"{seconds(medians[best], unit=True)} ({_tokens(best)}-token prompt)"
    hit = _best_hit(reused)
    if hit is not None and hit[0] < medians[best]:
        shown = f"{seconds(hit[0], unit=True)} ({hit[1]})"
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
        queued = [waited for r in rows if (waited := queued_s(r)[0]) is not None]
        ttft = [float(r.ttft_client_s) for r in rows if r.ttft_client_s is not None]
        last = "the second" if best.requests == 2 else "the last"
        wait = (f"{last} waited {seconds(max(queued), unit=True)} in the engine's queue" if queued
                else f"first tokens after {seconds(min(ttft))}–{seconds(max(ttft), unit=True)} (client)" if ttft
                else "")
        return Lead("concurrency", f"{best.concurrency} requests of {_tokens(prompt)} prompt tokens each, served "
                    "together", wait or "one round")
    rates = [g.aggregate_output_tok_s_client for g in groups]
    return Lead("concurrency (aggregate output, client)",
                f"{_rate(best.aggregate_output_tok_s_client)} tok/s at {best.concurrency} clients",
                f"{_rate(min(rates))}–{_rate(max(rates))} tok/s over {len(groups)} levels")


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


def artifact_named(container: dict[str, Any] | None) -> str | None:
    """The model as its artifact names itself: a NInfer container's identity (model_id, or v3's metadata name) with
    its weights id ("qwen3.6-27b groupwise-int"), as report 000 titles "Qwen3.8-27B nvfp4"; None without one."""
    identity = (container or {}).get("identity") or {}
    model = identity.get("model_id") or identity.get("name")
    if not model:
        return None
    weights = identity.get("weights_id")
    return f"{model} {weights}" if weights else str(model)


def model_name(run: RunData) -> str:
    """The model as a reader searches for it, one rule for every post: the name the artifact gives itself (its
    container's identity, the same whichever repository, folder or file name it came from: the three live runs of
    one model were titled "q36_27b_random", a file stem, and "qwen3.6-27b-random", a repository's name), else the
    repository's name, else the file without its extension, else what the generated model is, else the id the
    server answered with or the profile served it as (a server ninferkit did not start). The served id is an
    alias the profile picks ("embedded")."""
    named = artifact_named(run.artifact.container if run.artifact else None)
    if named:
        return named
    artifact = run.profile.get("artifact") or {}
    if artifact.get("repo"):
        return PurePosixPath(str(artifact["repo"])).name
    if artifact.get("filename"):
        name = PurePosixPath(str(artifact["filename"])).name
        return name.rsplit(".", 1)[0] if name.endswith((".gguf", ".ninfer", ".safetensors", ".bin")) else name
    made = artifact.get("generate") or {}
    if made:
        shape = ", ".join(f"{made[key]} {word}" for key, word in (("layers", "layers"), ("hidden", "hidden"))
                          if made.get(key))
        return f"a generated {made.get('architecture') or 'model'} ({shape}{', ' if shape else ''}" \
               f"{made.get('dtype') or 'dtype unknown'}, random weights)"
    served = (run.server.model_id if run.server else None) or (run.profile.get("serve") or {}).get("model_id")
    return str(served) if served else "an unnamed model"


def _served_on(run: RunData) -> list[GpuInfo]:
    """The probed GPUs the run serves on (serve.gpu_devices, else the first gpu.count)."""
    gpus = run.probe_gpus
    devices = (run.profile.get("serve") or {}).get("gpu_devices")
    count = int((run.profile.get("gpu") or {}).get("count") or 1)
    return [gpu for gpu in gpus if gpu.index in devices] if devices else gpus[:count]


def power_limit_w(run: RunData) -> float | None:
    """The power limit the run's GPUs were held to, as the setup step's probe read it (NVML's enforced limit) on
    the GPUs it serves on; None where it read none, or the cards read different limits (the environment lists
    each)."""
    limits = {None if gpu.power_limit_w is None else float(gpu.power_limit_w) for gpu in _served_on(run)}
    return limits.pop() if len(limits) == 1 else None


def title_power_limit_w(run: RunData) -> float | None:
    """The limit the title names: only one other than the cards' default, as the reports title theirs (000 leads
    with "200W 下", a V100 held under its 250 W default; 004 names no power, its cards at their default). Where the
    probe read no default (probes before ninferkit read it) the limit stays: a lowered limit left out would pass
    its figures off as the card's."""
    watts = power_limit_w(run)
    defaults = {None if gpu.power_limit_default_w is None else float(gpu.power_limit_default_w)
                for gpu in _served_on(run)}
    default = defaults.pop() if len(defaults) == 1 else None
    return None if watts is None or (default is not None and abs(default - watts) < 1) else watts


def hardware(run: RunData) -> str:
    """The GPU the run served on ("NVIDIA H200", "2 × Tesla V100-SXM2-32GB"), or "CPU"."""
    names = sorted({str(gpu.name) for gpu in run.probe_gpus})
    if not names:
        return "CPU"
    count = int((run.profile.get("gpu") or {}).get("count") or 1)
    return f"{count} × {names[0]}" if count > 1 and len(names) == 1 else ", ".join(names)


def engine_words(run: RunData) -> str:
    """The engine and the settings the figures depend on, as 000 closes its title ("NInfer SM70 / CUDA 12.8"):
    the engine with its fork or version, the GPU architecture it was built for and its CUDA runtime, then
    speculation, the KV cache's type, eager mode and tensor parallelism where the profile sets them.

    Example: "NInfer hamawang/ninfer-v100-20260916 / sm_70 / CUDA 12.8.0; speculation mtp, 3 draft tokens; KV int8".
    """
    engine: dict[str, Any] = run.profile.get("engine") or {}
    build: dict[str, Any] = engine.get("build") or {}
    serve: dict[str, Any] = run.profile.get("serve") or {}
    kind = engine.get("kind") or (run.server.engine if run.server else None)
    source = str(build.get("source") or "")
    pinned = source.rsplit("==", 1)[-1] if source.startswith("pypi:") and "==" in source else None
    which = engine.get("version") or engine.get("fork") or pinned
    name = run.adapter.name if run.adapter else str(kind or "unknown engine")
    built = [f"sm_{build['cuda_arch']}" if build.get("cuda_arch") else "",
             f"CUDA {engine['cuda_runtime']}" if engine.get("cuda_runtime") else ""]
    parts = [" / ".join(part for part in (" ".join(str(p) for p in (name, which) if p), *built) if part)]
    spec = serve.get("spec") or {}
    drafts = spec.get("draft_tokens") or spec.get("num_speculative_tokens")
    if spec.get("method"):
        parts.append(f"speculation {spec['method']}" + (f", {drafts} draft tokens" if drafts else ""))
    if (serve.get("kv") or {}).get("dtype"):
        parts.append(f"KV {serve['kv']['dtype']}")
    if serve.get("enforce_eager"):
        parts.append("eager, no CUDA graphs")
    if int(serve.get("tensor_parallel") or 1) > 1:
        parts.append(f"tensor parallel {serve['tensor_parallel']}")
    return "; ".join(parts)


def post_title(run: RunData) -> str:
    """The post's title as the reports title theirs: the model on the GPU at its power limit (where it is not the
    card's default: title_power_limit_w), the best figures, then the engine and its settings; `report.title` where
    the profile sets one."""
    if run.settings.title:
        return str(run.settings.title)
    found = lead_figures(run)
    figures = f": {', '.join(found.title_figures)}" if found.title_figures else ""
    if run.server and run.server.external:  # its settings are its owner's: the profile's are not facts about it
        engine = " ".join(str(part) for part in (run.adapter.name if run.adapter else run.server.engine,
                                                 run.server.engine_version) if part)
        where = f"on {hardware(run)}" if run.probe_gpus else f"at {run.server.url}"
        return f"{found.model} {where} (a server ninferkit did not start){figures} ({engine or 'engine unknown'})"
    watts = title_power_limit_w(run)
    power = f" at {watts:g} W" if watts is not None else ""
    return f"{found.model} on {hardware(run)}{power}{figures} ({engine_words(run)})"


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
