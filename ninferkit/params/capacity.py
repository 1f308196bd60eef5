"""The `capacity:` section of a profile: the what-if grid 04_capacity_fit answers."""

from __future__ import annotations

from pydantic import Field

from ninferkit.params.base import Section


class CapacitySection(Section):
    concurrencies: list[int] = Field(default_factory=lambda: [1, 2])
    contexts: list[int] = Field(default_factory=lambda: [4096, 8192], description="per-slot tokens")
    kv_dtypes: list[str] = Field(default_factory=list)
