"""Variants: named changes to the serve options, each launched in turn on the run's artifact (issue 39).

The field reports' most quoted tables compare server settings (seed 003's prefill chunk 512 -> 3584 and 300 W
vs 350 W, seed 004's MTP 3/4/5, seed 000 §2.2's A/B of two launches). A variant is one such setting: its
`set` holds the profile fields it changes, written as `-p` overrides are (`serve.prefill_chunk: 1024`,
`serve.extra_args: [--batch-size, "64"]`, `gpu.power_limit_w: 300`, and its own cells: `sweeps.concurrency.levels:
[4]`), and the sweeps step launches the profile
with them, runs the chosen sweep kinds against it and stops it. What the changed profile is, and whether it can
start, is decided with the whole profile (rundir/identity.py: `variant_profile`; steps/preflight.py), since a
field's meaning is its engine's.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, field_validator, model_validator

from ninferkit.params.base import Section, given_twice, shaped
from ninferkit.params.sweeps import LatencyTargets

BASE = "base"
"""The name the profile's own serving goes by beside its variants (a variant may not take it)."""
SETTABLE = ("serve.", "sweeps.", "gpu.power_limit_w")
"""What a variant may change: a serve option (the engine's own included) or the GPU's power limit, and, beside one
of those, the cells it runs (`sweeps.*`: seed 004 measures 4 concurrent only with 4 slots). The engine, its build
and the artifact are what every variant shares: another model or build is another profile."""


class Variant(Section):
    name: str = Field(**shaped(r"^[a-z0-9][a-z0-9._-]{0,39}$",
                               "1-40 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"),
                      description="names the variant in every row, table and folder (variants/<name>/)")
    set: dict[str, Any] = Field(min_length=1, description="the profile fields it changes, by their dotted path "
                                "as -p writes them: serve.* or gpu.power_limit_w")
    kinds: list[str] | None = Field(None, min_length=1, description="the sweep kinds it runs; null: every kind the "
                                    "profile runs")
    why: str = Field("", description="what the variant asks, for the write-up")

    @field_validator("name")
    @classmethod
    def _not_base(cls, value: str) -> str:
        if value == BASE:
            raise ValueError(f"'{BASE}' names the profile's own serving; choose another name")
        return value

    @field_validator("set")
    @classmethod
    def _settable(cls, value: dict[str, Any]) -> dict[str, Any]:
        bad = [key for key in value if not any(key.startswith(prefix) and len(key) > len(prefix) if
                                               prefix.endswith(".") else key == prefix for prefix in SETTABLE)]
        if bad:
            raise ValueError(f"{', '.join(bad)}: a variant changes serve.* fields or gpu.power_limit_w (and its own "
                             "sweeps.* cells) only; the engine, build and artifact are every variant's")
        return value

    def overrides(self) -> list[str]:
        """The changes as `-p` overrides (the value as JSON, which the override reads as YAML)."""
        return [f"{key}={json.dumps(value)}" for key, value in self.set.items()]

    def launch_overrides(self) -> list[str]:
        """The overrides that make the run's profile this variant's: its changes, and no variants or objective of
        its own. One list for the profile its identity is computed from and the one its server is launched with."""
        return ["variants=[]", "objective=null", *self.overrides()]


def unique_names(variants: list[Variant]) -> list[Variant]:
    """Refuses two variants of one name (their rows and folders would mix)."""
    twice = given_twice([variant.name for variant in variants])
    if twice:
        raise ValueError(f"variant name(s) {', '.join(twice)} given twice; each variant names its own launch")
    return variants


GOODPUT = ("goodput_rps", "goodput_tok_s")
"""The objective's goodput figures (sweeps/objective.py): requests, or their output tokens, per second that met every
target of `objective.goodput`, over the wall time of everything sent at the cell (vLLM's `--goodput`)."""


class Objective(Section):
    """The best setting for a target (issue 39): which launch of the profile's (its own serving or a variant)
    meets every limit at one cell and, of those, maximizes a figure (goodput included: `maximize: goodput_rps`
    with the per-request targets in `goodput`); with `ordered`, the last variant in the profile's order that meets
    them, or with `maximize` the peak of a figure that rises then falls along that order; or, with `largest`, the
    largest value of a cell parameter (the context sweep's `target_prompt_tokens`) whose cell meets them, per
    launch. The figures are the rows' (a metric's median, `<metric>_p50|p90|p99`, or a goodput) at the cells of
    `sweep` whose parameters match `cell`."""

    sweep: str = Field(description="the sweep kind whose cells decide (e.g. concurrency)")
    cell: dict[str, Any] = Field(default_factory=dict, description="the cell parameters that decide, e.g. "
                                 "{concurrency: 4}; empty: every cell of the sweep")
    at_most: dict[str, float] = Field(default_factory=dict, description="limits a launch must keep, e.g. "
                                      "{ttft_client_s_p99: 2.0, tpot_client_s_p99: 0.05}")
    at_least: dict[str, float] = Field(default_factory=dict, description="floors a launch must keep, e.g. "
                                       "{decode_tok_s_server: 40}")
    maximize: str | None = Field(None, description="of the launches that meet the limits, the one with the highest "
                                 "median of this figure (e.g. decode_tok_s_server, or goodput_rps / goodput_tok_s)")
    goodput: LatencyTargets | None = Field(None, description="what a request must meet to count toward the goodput "
                                           "figures (goodput_rps, goodput_tok_s): TTFT, TPOT, every ITL gap, seconds")
    ordered: bool = Field(False, description="the variants are in the order of one option and a later one never "
                          "meets the limits where an earlier one failed (with maximize: and the figure rises to one "
                          "peak, then falls): the search launches only what decides the answer")
    largest: str | None = Field(None, description="a cell parameter of the sweep (target_prompt_tokens): each "
                                "launch's answer is the largest value of it whose cell meets the limits, and the best "
                                "launch the one whose answer is largest")

    @model_validator(mode="after")
    def _one_question(self) -> Objective:
        if not (self.at_most or self.at_least or self.maximize):
            raise ValueError("give limits (at_most, at_least) or a figure to maximize")
        if self.largest and (self.maximize or self.ordered):
            raise ValueError("largest asks for the largest cell that meets the limits; maximize and ordered for the "
                             "best launch: give one")
        if self.largest and self.largest in self.cell:
            raise ValueError(f"largest: {self.largest} is fixed by cell; leave it out of cell")
        asked = {*self.at_most, *self.at_least, *filter(None, [self.maximize])}
        if asked & set(GOODPUT) and (self.goodput is None or not self.goodput.model_dump(exclude_none=True)):
            raise ValueError(f"{', '.join(sorted(asked & set(GOODPUT)))} counts the requests that meet the targets of "
                             "objective.goodput (ttft_s, tpot_s, itl_s), and none is given")
        if self.goodput is not None and not asked & set(GOODPUT):
            raise ValueError(f"objective.goodput sets targets, and no figure asks for them; allowed: maximize "
                             f"{' or '.join(GOODPUT)}")
        return self
