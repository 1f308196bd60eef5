"""The write-up as data: sections of plain blocks that every renderer turns into its own format.

Building the content once and rendering it twice keeps the Markdown and the HTML saying the same
thing; a renderer only decides how a block looks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ninferkit.report.fmt import number


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Code:
    text: str


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""


@dataclass(frozen=True)
class Figure:
    """A PNG written under report/figures; `file` is relative to the report folder."""

    file: str
    caption: str
    path: Path


Block = Paragraph | Bullets | Code | Table | Figure


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)


@dataclass
class Document:
    title: str
    generated: str
    """The one line that differs between two renderings of the same run (it holds the time)."""
    sections: list[Section] = field(default_factory=list)


def table_from_frame(frame: pd.DataFrame, caption: str = "") -> Table:
    """A DataFrame as display strings, numbers through :func:`ninferkit.report.fmt.number`."""
    rows = tuple(tuple(_cell(value) for value in record) for record in frame.itertuples(index=False, name=None))
    return Table(tuple(str(column) for column in frame.columns), rows, caption)


def _cell(value: object) -> str:
    if isinstance(value, (float, int, bool)) or value is None:
        return number(value)
    if hasattr(value, "item"):  # numpy scalars
        return number(value.item())
    return str(value)
