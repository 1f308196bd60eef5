"""Sweep plans: the cells each sweep kind measures, keyed by a hash of their parameters.

A cell is one point of a table (a prompt length, a task at a depth, a concurrency level, a prefix
scenario). Its id is a hash of its parameters only, so a rerun finds the cells it already finished
and an A/B pairs the same cell across two profiles. The plan is written to the run directory before
anything is sent. Scenarios the engine cannot serve are planned as skipped, with the reason.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ninferkit.engines.base import EngineAdapter
from ninferkit.errors import ProfileError
from ninferkit.params.profile import Profile
from ninferkit.runs import RunDir, utc_now, write_json_atomic

SWEEP_KINDS = ("context", "tasks", "concurrency", "prefix_reuse", "ab")
SCENARIO_APIS = {"anthropic_cache_control": "messages", "responses_previous_response_id": "responses"}


@dataclass(frozen=True)
class Cell:
    """One measured point: the sweep kind and its parameters; `skip` says why it will not run."""

    sweep: str
    params: dict[str, Any]
    skip: str | None = None
    cell_id: str = field(init=False)

    def __post_init__(self) -> None:
        canonical = json.dumps({"sweep": self.sweep, **self.params}, sort_keys=True, separators=(",", ":"))
        object.__setattr__(self, "cell_id", hashlib.sha256(canonical.encode()).hexdigest()[:12])

    @property
    def label(self) -> str:
        shown = {k: v for k, v in self.params.items() if k in LABEL_KEYS}
        return f"{self.sweep} " + " ".join(f"{k}={v}" for k, v in shown.items())


LABEL_KEYS = ("target_prompt_tokens", "task", "context_depth", "concurrency", "scenario")


def parse_only(only: str | Iterable[str] | None) -> list[str]:
    """The sweep kinds to run: all enabled ones for None, else the named ones (validated)."""
    if only is None:
        return list(SWEEP_KINDS)
    names = [s.strip() for s in (only.split(",") if isinstance(only, str) else only) if s.strip()]
    unknown = [n for n in names if n not in SWEEP_KINDS]
    if unknown:
        raise ProfileError(f"only: unknown sweep kind(s) {', '.join(unknown)}; allowed: {', '.join(SWEEP_KINDS)}")
    return names


def build_plan(profile: Profile, adapter: EngineAdapter, kinds: Iterable[str], explicit: bool) -> list[Cell]:
    """The cells of the chosen kinds; a disabled kind runs only when named explicitly.

    Raises ProfileError before anything is sent when a size does not fit the served context.
    """
    sweeps = profile.sweeps
    common = {"temperature": sweeps.temperature, "seed": sweeps.seed}
    cells: list[Cell] = []
    kinds = list(kinds)
    max_context = profile.serve.max_context

    def fits(field_path: str, prompt: int, output: int) -> None:
        if prompt + output > max_context:
            raise ProfileError(f"{field_path}: {prompt} prompt + {output} output tokens exceed serve.max_context "
                               f"= {max_context}; allowed: prompt + output <= {max_context}")

    def wanted(kind: str, enabled: bool) -> bool:
        return kind in kinds and (enabled or explicit)

    ctx = sweeps.context
    if wanted("context", ctx.enabled):
        for target in ctx.targets:
            fits("sweeps.context.targets", target, ctx.output_tokens)
            cells.append(_cell(adapter, "context", target_prompt_tokens=target,
                               output_tokens=ctx.output_tokens, api=ctx.api, pin_output=ctx.pin_output,
                               repetitions=ctx.repetitions, warmup=ctx.warmup, **common))
    tasks = sweeps.tasks
    if wanted("tasks", tasks.enabled):
        from ninferkit.workloads import load_task

        for depth in tasks.depths:
            for name in tasks.tasks:
                output = tasks.output_tokens or load_task(name).output_tokens
                fits("sweeps.tasks.depths", depth + 200, output)  # 200: room for the instruction
                cells.append(_cell(adapter, "tasks", task=name, context_depth=depth,
                                   output_tokens=output, api=tasks.api, pin_output=tasks.pin_output,
                                   repetitions=tasks.repetitions, warmup=tasks.warmup, **common))
    conc = sweeps.concurrency
    if wanted("concurrency", conc.enabled):
        fits("sweeps.concurrency.prompt_tokens", conc.prompt_tokens, conc.output_tokens)
        for level in conc.levels:
            if level < 1:
                raise ProfileError(f"sweeps.concurrency.levels: {level} is not a client count; allowed: >= 1")
            cells.append(_cell(adapter, "concurrency", concurrency=level,
                               requests_per_client=conc.requests_per_client, prompt_tokens=conc.prompt_tokens,
                               output_tokens=conc.output_tokens, api=conc.api, pin_output=conc.pin_output,
                               warmup=conc.warmup, **common))
    prefix = sweeps.prefix_reuse
    if wanted("prefix_reuse", prefix.enabled):
        fits("sweeps.prefix_reuse.prompt_tokens", prefix.prompt_tokens + 32, 2 * prefix.output_tokens)
        for scenario in prefix.scenarios:
            api = SCENARIO_APIS.get(scenario, "chat")
            cells.append(_cell(adapter, "prefix_reuse", scenario=scenario, prompt_tokens=prefix.prompt_tokens,
                               output_tokens=prefix.output_tokens, api=api, pin_output=prefix.pin_output,
                               repetitions=prefix.repetitions, **common))
    return cells


def _cell(adapter: EngineAdapter, sweep: str, **params: Any) -> Cell:
    api = params["api"]
    skip = None
    if api not in adapter.apis:
        skip = (f"engine {adapter.kind} does not serve the {api} API "
                f"(it serves: {', '.join(sorted(adapter.apis))})")
    return Cell(sweep, params, skip)


def write_plan(run_dir: RunDir, cells: list[Cell], profile_hash: str) -> None:
    """The plan, written before anything runs: a resume runs exactly the cells without a result."""
    write_json_atomic(plan_path(run_dir), {"written": utc_now(), "profile_hash": profile_hash,
                                           "cells": [asdict(cell) for cell in cells]})


def plan_path(run_dir: RunDir) -> Path:
    return run_dir.path / "sweeps" / "plan.json"


def ledger_path(run_dir: RunDir) -> Path:
    return run_dir.path / "sweeps" / "cells.jsonl"
