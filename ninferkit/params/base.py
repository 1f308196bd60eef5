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


def given_twice(keys: list[str]) -> list[str]:
    """The keys of a list section given more than once, sorted: two entries of one key (a variant's name, a not
    reproduced item) would mix their rows or say the same thing twice, so each list refuses them by its own words."""
    return sorted({key for key in keys if keys.count(key) > 1})
