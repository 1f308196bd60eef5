"""The base every profile section builds on: unknown keys are errors, values are immutable."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A profile section: a typo in a key fails validation instead of being silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def shaped(pattern: str, form: str) -> dict[str, Any]:
    """`Field` keywords for text of a fixed form: the regex pydantic checks and the same rule in words, which is
    what a bad value's error says (pydantic's own message quotes the regex, which a person should not have to
    read)."""
    return {"pattern": pattern, "json_schema_extra": {"form": form}}
