"""`ninferkit merge` of runs with variants (issue 39): a variant's cells pool with the same variant's on another
host, never with the base's, and every merged row, cell and table row names its variant.

Data: tests/data/run_dirs/embedded-variants/ (base, `ub32`, `spec-off`: real llama-server launches of the embedded
default, README there), copied as a second host's run (tests/run_copies.py: fresh request ids, the recorded
measurements); and embedded-variants-search/ (base and `slots-N` variants), which has none of those variants.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ninferkit.report.merge import merge
from tests.conftest import DATA
from tests.run_copies import copy_as_another_run

AB = DATA / "run_dirs" / "embedded-variants"
SEARCH = DATA / "run_dirs" / "embedded-variants-search"


def as_host(source: Path, folder: Path, host: str) -> Path:
    copy = copy_as_another_run(source, folder / host, ignore=shutil.ignore_patterns("report", "notebooks"))
    (copy / "fleet-task.json").write_text(json.dumps({"schema_version": 1, "host": host, "fleet": "test"}))
    return copy


def test_a_variant_pools_with_its_namesake_on_another_host(tmp_path: Path) -> None:
    merged = merge([as_host(AB, tmp_path, "a"), as_host(AB, tmp_path, "b")], tmp_path / "out")
    union = merged.cells[merged.cells["hosts"] == "all: a, b"]
    assert sorted(set(union["variant"])) == ["base", "spec-off", "ub32"] and merged.apart.empty
    raw = [json.loads(line) for line in (AB / "requests.jsonl").read_text().splitlines()]
    for _, cell in union.iterrows():  # each pooled cell holds its own launch's rows from both hosts, no other's
        level = int(cell["cell"].split("concurrency=")[1].split()[0])
        own = [row for row in raw if row["status"] == "ok" and not row.get("warmup")
               and row["cell"].get("variant", "base") == cell["variant"] and row["cell"]["concurrency"] == level]
        assert cell["requests"] == 2 * len(own)
    rows = [json.loads(line) for line in (tmp_path / "out" / "requests.jsonl").read_text().splitlines()]
    assert all(row["variant"] == (row["cell"].get("variant") or "base") for row in rows)
    assert {row["variant"] for row in rows} == {"base", "ub32", "spec-off"}


def test_a_variant_no_other_run_has_is_apart_and_says_so(tmp_path: Path) -> None:
    merged = merge([as_host(AB, tmp_path, "a"), as_host(SEARCH, tmp_path, "b")], tmp_path / "out")
    ub32 = merged.apart[merged.apart["variant"] == "ub32"]
    assert len(ub32) == 2 and set(ub32["why"]) == {"no other run has variant ub32"}
    slots = {name for name in merged.apart["variant"] if name.startswith("slots-")}  # the variants the search launched
    apart = merged.apart
    assert slots and all(set(apart[apart["variant"] == name]["why"]) == {f"no other run has variant {name}"}
                         for name in slots)
