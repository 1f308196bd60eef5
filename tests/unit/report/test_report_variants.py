"""The variants in one post (issue 39), replayed from two real runs of the embedded default.

Data: tests/data/run_dirs/embedded-variants/ and embedded-variants-search/ (README there says how each was made:
real llama-server launches on this 2-core VM, shared with other jobs, so the speeds swing widely). The figures the
section prints are checked against medians computed here from requests.jsonl's raw lines, not against numbers
written into the test.
"""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest

from ninferkit.report.build import build_document, write_report
from ninferkit.report.data import load_run
from ninferkit.report.document import Section, Table
from ninferkit.report.fmt import number
from ninferkit.report.objective import TITLE as OBJECTIVE
from ninferkit.report.variants import TITLE
from tests.conftest import DATA

AB = DATA / "run_dirs" / "embedded-variants"
SEARCH = DATA / "run_dirs" / "embedded-variants-search"


def _section(path: Path) -> Section:
    document = build_document(load_run(path), {})
    return next(section for section in document.sections if section.title == TITLE)


def _medians(path: Path, variant: str, concurrency: int) -> str:
    """prefill / decode / TTFT medians of one launch's cell, from requests.jsonl's lines."""
    rows = [json.loads(line) for line in (path / "requests.jsonl").read_text().splitlines()]
    own = [row for row in rows if row["status"] == "ok" and not row.get("warmup") and row["sweep"] == "concurrency"
           and row["cell"].get("variant", "base") == variant and row["cell"]["concurrency"] == concurrency]
    return " / ".join(number(statistics.median(row[metric] for row in own if row.get(metric) is not None))
                      for metric in ("prefill_tok_s_server", "decode_tok_s_server", "ttft_client_s"))


def test_the_launches_and_their_cells_side_by_side() -> None:
    section = _section(AB)
    tables = [block for block in section.blocks if isinstance(block, Table)]
    launches, concurrency = tables[0], tables[1]
    assert [row[0] for row in launches.rows] == ["base", "ub32", "spec-off"]
    assert launches.rows[1][1] == 'serve.extra_args = ["--ubatch-size", "32"] (a smaller micro-batch)'
    assert all(row[4] == "8,192" and row[-1] == "done" for row in launches.rows)  # each launch's own startup books
    assert concurrency.columns[1:4] == tuple(f"{name}: prefill / decode tok/s / TTFT s"
                                             for name in ("base", "ub32", "spec-off"))
    for row in concurrency.rows:
        level = int(row[0].split(",")[0].removeprefix("concurrency="))
        assert row[1:4] == tuple(_medians(AB, name, level) for name in ("base", "ub32", "spec-off"))
        for name in ("ub32", "spec-off"):  # every move is judged against the repeats (sweeps.repeats = 2)
            moves = next(part for part in row[4].split(" | ") if part.startswith(f"{name}: "))
            assert moves.count("the interval of the repeats") == 3


def test_the_other_sections_read_the_base_alone() -> None:
    run = load_run(AB)
    assert run.requests and all("variant" not in (row.cell or {}) for row in run.requests)
    assert {row.cell["variant"] for row in run.variant_requests if row.cell} == {"ub32", "spec-off"}
    assert "variant" not in run.tables["concurrency"] and len(run.tables["concurrency"]) == 2
    assert list(run.variant_tables["concurrency"]["variant"]) == ["base"] * 2 + ["ub32"] * 2 + ["spec-off"] * 2


def test_a_run_without_variants_has_no_such_section() -> None:
    document = build_document(load_run(DATA / "run_dirs" / "embedded-spec-ab"), {})
    assert TITLE not in [section.title for section in document.sections]


@pytest.mark.parametrize("run", [AB, SEARCH, DATA / "run_dirs" / "embedded-objective-goodput",
                                 DATA / "run_dirs" / "embedded-objective-context"])
def test_the_post_renders(run: Path, tmp_path: Path) -> None:
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    text = write_report(copy, ["markdown"]).markdown.read_text()
    assert f"## {TITLE}" in text
    assert (f"## {OBJECTIVE}" in text) == (run != AB)  # every run here but the first has an objective
