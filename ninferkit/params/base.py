"""The base every profile section builds on: unknown keys are errors, values are immutable."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A profile section: a typo in a key fails validation instead of being silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)
