"""Variants: named changes to the serve options, each launched in turn on the run's artifact (issue 39).

The field reports' most quoted tables compare server settings (seed 003's prefill chunk 512 -> 3584 and 300 W
vs 350 W, seed 004's MTP 3/4/5, seed 000 §2.2's A/B of two launches). A variant is one such setting: its
`set` holds the profile fields it changes, written as `-p` overrides are (`serve.prefill_chunk: 1024`,
`serve.extra_args: [--batch-size, "64"]`, `gpu.power_limit_w: 300`), and the sweeps step launches the profile
with them, runs the chosen sweep kinds against it and stops it. What the changed profile is, and whether it can
start, is decided with the whole profile (rundir/identity.py: `variant_profile`; steps/preflight.py), since a
field's meaning is its engine's.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, field_validator

from ninferkit.params.base import Section

BASE = "base"
"""The name the profile's own serving goes by beside its variants (a variant may not take it)."""
SETTABLE = ("serve.", "gpu.power_limit_w")
"""What a variant may change: a serve option (the engine's own included) or the GPU's power limit. The engine,
its build and the artifact are what every variant shares: another model or build is another profile."""


class Variant(Section):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,39}$",
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
        bad = [key for key in value if not (key.startswith(SETTABLE[0]) and len(key) > len(SETTABLE[0]))
               and key != SETTABLE[1]]
        if bad:
            raise ValueError(f"{', '.join(bad)}: a variant changes serve.* fields or gpu.power_limit_w only (the "
                             "engine, build and artifact are every variant's)")
        return value

    def overrides(self) -> list[str]:
        """The changes as `-p` overrides (the value as JSON, which the override reads as YAML)."""
        return [f"{key}={json.dumps(value)}" for key, value in self.set.items()]


def unique_names(variants: list[Variant]) -> list[Variant]:
    """Refuses two variants of one name (their rows and folders would mix)."""
    names = [variant.name for variant in variants]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"variant name(s) {', '.join(twice)} given twice; each variant names its own launch")
    return variants
