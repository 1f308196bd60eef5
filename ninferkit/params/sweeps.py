"""The `sweeps:` section of a profile: which measurements 03_sweeps runs, and how big."""

from __future__ import annotations

from pydantic import Field

from ninferkit.params.base import Section


class ContextSweep(Section):
    enabled: bool = True
    targets: list[int] = Field(default_factory=lambda: [512, 1024, 2048], description="prompt tokens")
    output_tokens: int = Field(64, ge=1)
    repetitions: int = Field(2, ge=1)
    warmup: int = Field(1, ge=0)


class SweepsSection(Section):
    context: ContextSweep = ContextSweep()
