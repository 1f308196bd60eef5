"""Every server.json and capacity.json this repository holds (recorded real runs under tests/data: the H200
sessions of vLLM and NInfer, the embedded llama-server's; the published examples under docs/examples) reads back
through its record and is written by `write_record` as it was: the record the steps build and write is the one
their readers take, and it keeps every field and value the file holds (issue 36 item 4)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ninferkit.rundir.records import CapacityRecord, RunFile, ServerRecord
from ninferkit.rundir.runs import write_record
from tests.conftest import REPO

RECORDS: dict[str, type[RunFile]] = {"server.json": ServerRecord, "capacity.json": CapacityRecord}
FILES = subprocess.run(["git", "ls-files", *(f"*{name}" for name in RECORDS)], cwd=REPO, capture_output=True,
                       text=True, check=True).stdout.split()


def record_of(name: str) -> type[RunFile]:
    """The record of a file by how its name ends (a recorded launch may be saved as 01.server.json)."""
    return next(record for ending, record in RECORDS.items() if name.endswith(ending))


def test_the_repository_holds_both_kinds() -> None:
    assert {record_of(name) for name in FILES} == set(RECORDS.values())


@pytest.mark.parametrize("name", FILES)
def test_written_as_read(name: str, tmp_path: Path) -> None:
    recorded = json.loads((REPO / name).read_text())
    written = write_record(tmp_path / Path(name).name, record_of(name).model_validate(recorded))
    assert json.loads(written.read_text()) == recorded
