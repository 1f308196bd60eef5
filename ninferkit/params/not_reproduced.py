"""What a field report did that its profile cannot reproduce, and why: said where a reader looks.

A seed profile follows its report table by table, but some of a report's tables have no run that could make them
(report 001's decode "with dflash2": no vLLM has that backend; report 004's Swift-1.5 row: nothing pins that
artifact). Kept in YAML comments, the gap reached only someone reading the file; as a field it is validated, the dry
run prints it with the plan (steps/dry_run.py) and the post says it in one short section (report/not_reproduced.py),
so neither the person about to spend the GPU hour nor the reader of the post takes a missing table for an oversight.
"""

from __future__ import annotations

from pydantic import Field

from ninferkit.params.base import Section, given_twice


class NotReproduced(Section):
    item: str = Field(min_length=1, max_length=200, description="the report's table or figure, as the report "
                      "names it: its section and gist (\"seed 001 §6.2: decode with dflash2\")")
    why: str = Field(min_length=1, max_length=1000, description="why no run of this profile makes it, and what "
                     "would (a pin, an engine version, a second profile)")


def unique_items(value: list[NotReproduced]) -> list[NotReproduced]:
    """One entry per item: a second would say the same table twice."""
    twice = given_twice([entry.item for entry in value])
    if twice:
        raise ValueError(f"each item once; given more than once: {twice}")
    return value
