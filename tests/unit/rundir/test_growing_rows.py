"""GrowingRows: a JSONL run file read once over a step that appends to it reads, at every call, what `read_rows`
reads of the whole file then (issue 36 item 5), through appends, a torn last line that the next append cuts, and
a whole last line without its newline; and the step's file is opened once."""

from __future__ import annotations

from pathlib import Path

import pytest

from ninferkit.errors import BadInput
from ninferkit.rundir.records import CellEntry
from ninferkit.rundir.runs import GrowingRows, append_jsonl, read_rows


def entry(cell_id: str) -> dict[str, str]:
    return {"cell_id": cell_id, "sweep": "context", "status": "done", "attempt": "a1"}


def ids(rows: list[CellEntry]) -> list[str]:
    return [row.cell_id for row in rows]


def test_each_call_reads_the_file_as_it_stands(tmp_path: Path) -> None:
    path = tmp_path / "cells.jsonl"
    with GrowingRows(path, CellEntry) as ledger:
        assert ledger.rows() == []  # not written yet
        append_jsonl(path, entry("a"))
        assert ids(ledger.rows()) == ["a"]
        with path.open("ab") as handle:
            handle.write(b'{"cell_id": "b", "sw')  # a kill -9 in the middle of a row
        assert ids(ledger.rows()) == ids(read_rows(path, CellEntry)) == ["a"]
        append_jsonl(path, entry("c"))  # cuts the torn line
        assert ids(ledger.rows()) == ids(read_rows(path, CellEntry)) == ["a", "c"]
        with path.open("ab") as handle:
            handle.write(b'{"cell_id": "d", "sweep": "context", "status": "done", "attempt": "a1"}')  # no newline
        assert ids(ledger.rows()) == ids(read_rows(path, CellEntry)) == ["a", "c", "d"]
        append_jsonl(path, entry("e"))  # ends the whole line with its newline first
        assert ids(ledger.rows()) == ids(read_rows(path, CellEntry)) == ["a", "c", "d", "e"]
        assert ledger.rows() == read_rows(path, CellEntry)


def test_opened_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cells.jsonl"
    append_jsonl(path, entry("a"))
    opened = []
    real_open = Path.open
    monkeypatch.setattr(Path, "open", lambda self, *a, **k: opened.append(self) or real_open(self, *a, **k))
    with GrowingRows(path, CellEntry) as ledger:
        for name in "bcd":
            ledger.rows()
            append_jsonl(path, entry(name))
        assert ids(ledger.rows()) == ["a", "b", "c", "d"]
    assert opened == [path]


def test_a_damaged_line_names_its_number(tmp_path: Path) -> None:
    path = tmp_path / "cells.jsonl"
    append_jsonl(path, entry("a"))
    append_jsonl(path, {"cell_id": "b", "sweep": 7, "status": "done", "attempt": "a1"})
    with GrowingRows(path, CellEntry) as ledger, pytest.raises(BadInput, match="line 2: sweep is 7"):
        ledger.rows()
