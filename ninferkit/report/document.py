"""The write-up as data: sections of plain blocks that every renderer turns into its own format.

Building the content once and rendering it twice keeps the Markdown and the HTML saying the same
thing; a renderer only decides how a block looks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from ninferkit.report.fmt import number


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Note(Paragraph):
    """A line for the run's author, not the reader: which plan would fill a table the run has no data for. The
    write-up gathers these into its appendix (:func:`gather_notes`); a notebook shows them where they arise."""


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
    appendix: bool = False
    """Raw detail a reader reaches in one click (appendix.md beside index.md), not the post a person publishes."""


@dataclass
class Document:
    title: str
    generated: str
    """The one line that differs between two renderings of the same run (it holds the time)."""
    sections: list[Section] = field(default_factory=list)
    stem: str = "index"
    """The file name each renderer writes, less its extension."""
    companions: tuple[tuple[str, str], ...] = ()
    """(title, stem) of the documents written beside this one, linked after its table of contents."""


APPENDIX = "appendix"


def post_and_appendix(document: Document) -> tuple[Document, Document | None]:
    """The post a person publishes (index) and its raw detail (appendix, None when there is none): the sections
    marked `appendix` move to a document of their own, each linked from the other."""
    kept = [section for section in document.sections if not section.appendix]
    moved = [section for section in document.sections if section.appendix]
    if not moved:
        return document, None
    post = replace(document, sections=kept, companions=(("Appendix: the raw detail", APPENDIX),))
    detail = replace(document, title=f"Appendix: {document.title}", sections=moved, stem=APPENDIX,
                     companions=(("The post", document.stem),))
    return post, detail


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


EMPTY = frozenset({"", "—", "— (—)", "— / —"})
"""What a cell shows when it has no value."""


def without_empty_columns(table: Table) -> Table | None:
    """The table less the columns no row has a value in (a column of "—" says nothing) and the rows with no value
    past their name (the caption names them: "no value for: agent"), None when no cell past the first column has
    a value; the first column names the rows and stays."""
    if not table.rows:
        return table
    keep = [0, *(i for i in range(1, len(table.columns)) if any(row[i] not in EMPTY for row in table.rows))]
    if len(keep) == 1 and len(table.columns) > 1:
        return None
    rows = [row for row in table.rows if any(row[i] not in EMPTY for i in keep[1:])]
    empty = [row[0] for row in table.rows if row not in rows]
    caption = table.caption + (f"{' ' if table.caption else ''}No value for: {', '.join(empty)}." if empty else "")
    return Table(tuple(table.columns[i] for i in keep), tuple(tuple(row[i] for i in keep) for row in rows), caption)


def gather_notes(sections: list[Section], title: str) -> list[Section]:
    """The sections without their notes to the author and without table columns that hold no value, a section left
    with nothing dropped, and the notes as one appendix section `title` at the end (each after the heading it came
    from), so the reader's text holds only data."""
    kept: list[Section] = []
    notes: list[str] = []
    for section in sections:
        own = [block.text for block in section.blocks if isinstance(block, Note)]
        notes += [f"{section.title}: {text}" for text in own]
        blocks = [shown for block in section.blocks if not isinstance(block, Note)
                  if (shown := without_empty_columns(block) if isinstance(block, Table) else block) is not None]
        if blocks:
            kept.append(Section(section.title, blocks, section.appendix))
    return [*kept, Section(title, [Bullets(tuple(notes))], appendix=True)] if notes else kept


def map_text(document: Document, change: Callable[[str], str]) -> Document:
    """The document with `change` applied to every text it shows (title, headings, cells, captions, code)."""
    def block(item: Block) -> Block:
        if isinstance(item, (Paragraph, Code)):
            return replace(item, text=change(item.text))
        if isinstance(item, Bullets):
            return Bullets(tuple(change(text) for text in item.items))
        if isinstance(item, Figure):
            return replace(item, caption=change(item.caption))
        return Table(tuple(change(text) for text in item.columns),
                     tuple(tuple(change(text) for text in row) for row in item.rows), change(item.caption))

    return replace(document, title=change(document.title), generated=change(document.generated),
                   sections=[Section(change(s.title), [block(b) for b in s.blocks], s.appendix)
                             for s in document.sections])


def texts(document: Document) -> list[str]:
    """Every text the document shows: what `map_text` visits."""
    found: list[str] = []

    def keep(text: str) -> str:
        found.append(text)
        return text

    map_text(document, keep)
    return found
