"""Sweep plans: the cells each sweep kind measures, keyed by a hash of their parameters.

A cell is one point of a table (a prompt length, a task at a depth, a concurrency level, an offered
request rate, a prefix scenario). Its id is a hash of its parameters only, so a rerun finds the cells it
already finished and an A/B pairs the same cell across two profiles (parameters are what was asked, the
same on every engine). The plan is written to the run directory before anything is sent. What the engine does not
serve is decided here, from the engine adapter: a scenario or task that needs an API or a request field
the engine does not read is planned as skipped, with the reason; a measuring condition it does not read
(`reasoning_effort`) is left out of its requests and the cell's notes say so; a size its protocol refuses
(Responses: `max_output_tokens` below 16) is raised, and the notes say so.

The rate sweep's latency targets (sweeps.rate.slo) are not parameters of its cells: they judge the rows
(sweeps/tables.py), so changing them needs no rerun.

The tasks run at each task's own output length unless the profile pins one. With
`sweeps.tasks.speculation_ab` each task cell has a twin with `speculation: off`, measured on a second
server of the profile with speculative decoding off (spec_off.py), right after it: both sides of the A/B
in one run and one table. The twin alone carries the extra parameter, so a cell measured with the
profile's own speculation keeps its id, and pairs with the same cell of another run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from ninferkit.client import RESPONSES_MIN_OUTPUT_TOKENS, SEED_APIS
from ninferkit.engines.api_dialect import ApiDialect
from ninferkit.errors import ProfileError
from ninferkit.params.profile import Profile
from ninferkit.params.sweeps import MAX_COUNT
from ninferkit.runs import RunDir, utc_now, write_json_atomic
from ninferkit.sweeps.rate import poisson_arrivals

SWEEP_KINDS = ("context", "tasks", "concurrency", "rate", "prefix_reuse", "ab")
SPEC_OFF = "off"
"""The `speculation` parameter of a task cell measured with speculative decoding off (the A/B's other side)."""
SCENARIO_APIS = {"anthropic_cache_control": "messages", "responses_previous_response_id": "responses"}
SCENARIO_FIELDS = {"prompt_cache_breakpoint": "prompt_cache_breakpoint", "anthropic_cache_control": "cache_control",
                   "responses_previous_response_id": "previous_response_id"}
"""The request field each scenario measures: planned as skipped on an engine that does not read it."""
TOOLS_NOTE = ("with tools an engine may hold text back until generation ends (NInfer does, IF §4), so the "
              "client's TTFT and decode rate can be the whole request's; the server columns are the measure")


@dataclass(frozen=True)
class Cell:
    """One measured point: the sweep kind and its parameters (its id); `skip` says why it will not run,
    `request` holds the engine extensions every request of the cell carries, and `notes` what the cell
    sends differently from what was asked, and why."""

    sweep: str
    params: dict[str, Any]
    skip: str | None = None
    request: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    cell_id: str = field(init=False)

    def __post_init__(self) -> None:
        canonical = json.dumps({"sweep": self.sweep, **self.params}, sort_keys=True, separators=(",", ":"))
        object.__setattr__(self, "cell_id", hashlib.sha256(canonical.encode()).hexdigest()[:12])

    @property
    def label(self) -> str:
        shown = {k: v for k, v in self.params.items() if k in LABEL_KEYS}
        return f"{self.sweep} " + " ".join(f"{k}={v}" for k, v in shown.items())


LABEL_KEYS = ("target_prompt_tokens", "task", "context_depth", "speculation", "concurrency", "rate_rps", "scenario")


def parse_only(only: str | Iterable[str] | None) -> list[str]:
    """The sweep kinds to run: all enabled ones for None, else the named ones (validated)."""
    if only is None:
        return list(SWEEP_KINDS)
    names = [s.strip() for s in (only.split(",") if isinstance(only, str) else only) if s.strip()]
    unknown = [n for n in names if n not in SWEEP_KINDS]
    if unknown:
        raise ProfileError(f"only: unknown sweep kind(s) {', '.join(unknown)}; allowed: {', '.join(SWEEP_KINDS)}")
    return names


def build_plan(profile: Profile, adapter: ApiDialect, kinds: Iterable[str], explicit: bool,
               served: dict[str, Any] | None = None) -> list[Cell]:
    """The cells of the chosen kinds; a disabled kind runs only when named explicitly. `served` is what
    the running server said at the adapter's `request_extensions_path` (None before it runs).

    Raises ProfileError before anything is sent when a size does not fit the served context.
    """
    sweeps = profile.sweeps
    engine = _Engine(adapter, profile, served)
    common: dict[str, Any] = {"temperature": sweeps.temperature, "seed": sweeps.seed,
                              "reasoning_effort": sweeps.reasoning_effort}
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
            fits("sweeps.context.targets", target, sent_output_tokens(ctx.api, ctx.output_tokens))
            cells.append(engine.cell("context", target_prompt_tokens=target,
                                     output_tokens=ctx.output_tokens, api=ctx.api, pin_output=ctx.pin_output,
                                     repetitions=ctx.repetitions, warmup=ctx.warmup, **common))
    tasks = sweeps.tasks
    if wanted("tasks", tasks.enabled):
        from ninferkit.workloads import load_task

        sides = [{}, {"speculation": SPEC_OFF}] if tasks.speculation_ab else [{}]
        if tasks.speculation_ab and profile.serve.speculation()[0] is None:
            raise ProfileError("sweeps.tasks.speculation_ab = true: serve.spec sets no method, so there is no "
                               "speculative decoding to compare against; allowed: false, or a serve.spec.method")
        for depth in tasks.depths:
            for name in tasks.tasks:
                task = load_task(name)
                output = tasks.output_tokens or task.output_tokens
                fits("sweeps.tasks.depths", depth + 200, sent_output_tokens(tasks.api, output))  # 200: instruction
                effort = {"reasoning_effort": task.reasoning_effort} if task.reasoning_effort else {}
                for side in sides:
                    cells.append(engine.cell("tasks", needs="tools" if task.tools else None, task=name,
                                             context_depth=depth, output_tokens=output, api=tasks.api,
                                             pin_output=tasks.pin_output, repetitions=tasks.repetitions,
                                             warmup=tasks.warmup, **{**common, **effort, **side}))
    conc = sweeps.concurrency
    if wanted("concurrency", conc.enabled):
        fits("sweeps.concurrency.prompt_tokens", conc.prompt_tokens, sent_output_tokens(conc.api, conc.output_tokens))
        for level in conc.levels:
            if level < 1:
                raise ProfileError(f"sweeps.concurrency.levels: {level} is not a client count; allowed: >= 1")
            cells.append(engine.cell("concurrency", concurrency=level,
                                     requests_per_client=conc.requests_per_client, prompt_tokens=conc.prompt_tokens,
                                     output_tokens=conc.output_tokens, api=conc.api, pin_output=conc.pin_output,
                                     warmup=conc.warmup, **common))
    rate = sweeps.rate
    if wanted("rate", rate.enabled):
        fits("sweeps.rate.prompt_tokens", rate.prompt_tokens, sent_output_tokens(rate.api, rate.output_tokens))
        for offered in rate.rates:
            # drawn only up to one past the limit: 10,000 requests/s for a day would be 864 million
            count = len(poisson_arrivals(offered, rate.requests or MAX_COUNT + 1, rate.duration_s, rate.arrival_seed))
            if count > MAX_COUNT:
                raise ProfileError(f"sweeps.rate: {offered:g} requests/s for {rate.duration_s:g} s is more than "
                                   f"{MAX_COUNT} requests; allowed: at most {MAX_COUNT} per rate (a shorter "
                                   "duration_s)")
            cells.append(engine.cell("rate", rate_rps=offered, requests=rate.requests, duration_s=rate.duration_s,
                                     arrival_seed=rate.arrival_seed, prompt_tokens=rate.prompt_tokens,
                                     output_tokens=rate.output_tokens, api=rate.api, pin_output=rate.pin_output,
                                     warmup=rate.warmup, **common))
    prefix = sweeps.prefix_reuse
    if wanted("prefix_reuse", prefix.enabled):
        outputs = [sent_output_tokens(SCENARIO_APIS.get(s, "chat"), prefix.output_tokens) for s in prefix.scenarios]
        fits("sweeps.prefix_reuse.prompt_tokens", prefix.prompt_tokens + 32, 2 * max(outputs, default=0))
        for scenario in prefix.scenarios:
            cells.append(engine.cell("prefix_reuse", needs=SCENARIO_FIELDS.get(scenario), scenario=scenario,
                                     prompt_tokens=prefix.prompt_tokens, output_tokens=prefix.output_tokens,
                                     api=SCENARIO_APIS.get(scenario, "chat"), pin_output=prefix.pin_output,
                                     repetitions=prefix.repetitions, **common))
    return cells


def sent_output_tokens(api: str, asked: int) -> int:
    """The output length a cell sends: what was asked, raised to the Responses API's floor there."""
    return max(asked, RESPONSES_MIN_OUTPUT_TOKENS) if api == "responses" else asked


class _Engine:
    """What the profile's engine serves and reads, asked of its adapter once per plan."""

    def __init__(self, adapter: ApiDialect, profile: Profile, served: dict[str, Any] | None) -> None:
        self.kind = adapter.kind
        self.who = adapter.kind + (f" build {profile.engine.fork}" if profile.engine.fork else "")
        self.apis = adapter.served_apis(profile)
        self.reads = adapter.request_extensions(profile, served)
        self.source = f" (as its {adapter.request_extensions_path} says)" if adapter.request_extensions_path else ""

    def cell(self, sweep: str, needs: str | None = None, **params: Any) -> Cell:
        """A cell of `params` as this engine can run it (see the module docstring)."""
        api, notes, request = params["api"], [], {}
        sent = sent_output_tokens(api, params["output_tokens"])
        if sent != params["output_tokens"]:
            notes.append(f"output_tokens {params['output_tokens']} raised to {sent}: the Responses API refuses "
                         f"max_output_tokens below {RESPONSES_MIN_OUTPUT_TOKENS}")
            params["output_tokens"] = sent
        if params.get("seed") is not None and api not in SEED_APIS:
            notes.append(f"seed not sent: the {api} API has no seed field")
        effort = params.get("reasoning_effort")
        if effort is not None:
            if api == "chat" and "reasoning_effort" in self.reads:
                request["reasoning_effort"] = effort
            else:
                notes.append(f"reasoning_effort {effort!r} not sent: " + (
                    f"{self.who} does not read it" if api == "chat" else "it is sent on the chat API only"))
        if needs == "tools":
            notes.append(TOOLS_NOTE)
        return Cell(sweep, params, self._skip(api, needs), request, tuple(notes))

    def _skip(self, api: str, needs: str | None) -> str | None:
        if api not in self.apis:
            return f"engine {self.kind} does not serve the {api} API (it serves: {', '.join(sorted(self.apis))})"
        if needs == "tools" and api != "chat":
            return f"the agent task is sent with tools on the chat API only, not {api}"
        if needs is not None and needs not in self.reads:
            read = ", ".join(sorted(self.reads)) or "none of them"
            return (f"{self.who} does not read the request field {needs}{self.source}; of the fields ninferkit "
                    f"can measure it reads: {read}")
        return None


def write_plan(run_dir: RunDir, cells: list[Cell], profile_hash: str) -> None:
    """The plan, written before anything runs: a resume runs exactly the cells without a result."""
    write_json_atomic(run_dir.sweep_plan, {"written": utc_now(), "profile_hash": profile_hash,
                                           "cells": [asdict(cell) for cell in cells]})
