"""The variants in one post (issue 39), replayed from two real runs of the embedded default.

Data: tests/data/run_dirs/embedded-variants/ and embedded-variants-search/ (README there says how each was made:
real llama-server launches on this 2-core VM, shared with other jobs, so the speeds swing widely). The figures the
section prints are checked against medians computed here from requests.jsonl's raw lines, not against numbers
written into the test.
"""

from __future__ import annotations

import csv
import json
import shutil
import statistics
from pathlib import Path

import pytest

from ninferkit.report.build import build_document, write_report
from ninferkit.report.data import RunData, load_run
from ninferkit.report.document import Section, Table
from ninferkit.report.field_tables import concurrency_blocks, launch_of, launch_spans
from ninferkit.report.fmt import number
from ninferkit.report.objective import TITLE as OBJECTIVE
from ninferkit.report.variants import TITLE
from tests.conftest import DATA

AB = DATA / "run_dirs" / "embedded-variants"
SEARCH = DATA / "run_dirs" / "embedded-variants-search"


def _section(path: Path) -> Section:
    document = build_document(load_run(path), {})
    return next(section for section in document.sections if section.title == TITLE)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "requests.jsonl").read_text().splitlines()]


def _medians(path: Path, variant: str, concurrency: int) -> tuple[str, ...]:
    """prefill / decode / TTFT medians and the acceptance of one launch's cell, from requests.jsonl's lines."""
    own = [row for row in _lines(path) if row["status"] == "ok" and not row.get("warmup")
           and row["sweep"] == "concurrency" and row["cell"].get("variant", "base") == variant
           and row["cell"]["concurrency"] == concurrency]
    shown = tuple(number(statistics.median(row[metric] for row in own if row.get(metric) is not None))
                  for metric in ("prefill_tok_s_server", "decode_tok_s_server", "ttft_client_s"))
    accepted = [row["acceptance_server"] for row in own if row.get("acceptance_server") is not None]
    return (*shown, f"{100 * statistics.median(accepted):.0f}%" if accepted else "—")


def _aggregate(path: Path, variant: str, concurrency: int) -> str:
    return number(_raw_aggregate(path, variant, concurrency))


def _raw_aggregate(path: Path, variant: str, concurrency: int) -> float:
    """The cell's aggregate output as the sweep table holds it (all output over the cell's wall)."""
    with (path / "tables" / "concurrency.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        if row["variant"] == variant and row["concurrency"] == str(concurrency):
            return float(row["aggregate_output_tok_s_client"])
    raise AssertionError(f"no {variant} cell at {concurrency}")


def test_the_launches_and_their_cells_side_by_side() -> None:
    section = _section(AB)
    tables = [block for block in section.blocks if isinstance(block, Table)]
    launches, concurrency = tables[0], tables[1]
    assert [row[0] for row in launches.rows] == ["base", "ub32", "spec-off"]
    assert launches.rows[1][1] == 'serve.extra_args = ["--ubatch-size", "32"] (a smaller micro-batch)'
    assert all(row[4] == "8,192" and row[-1] == "done" for row in launches.rows)  # each launch's own startup books
    # Seed 004 §四's layout: one row per cell and launch; llama-server prints no throughput line, so no best window.
    assert concurrency.columns == ("cell", "launch", "prefill tok/s (server)", "decode tok/s (server, per request)",
                                   "TTFT, s (client)", "acceptance (server)", "aggregate output tok/s (client)",
                                   "against base")
    assert [(row[0].split(",")[0], row[1]) for row in concurrency.rows] == [
        (f"concurrency={level}", name) for level in (1, 2) for name in ("base", "ub32", "spec-off")]
    for row in concurrency.rows:
        level, name = int(row[0].split(",")[0].removeprefix("concurrency=")), row[1]
        assert row[2:6] == _medians(AB, name, level)
        assert row[6] == _aggregate(AB, name, level)
        if name == "base":
            assert row[7] == "—"
        else:  # every move is judged against the repeats (sweeps.repeats = 2)
            assert row[7].count("the interval of the repeats") == 3


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


def _slots_table(run: RunData) -> Table:
    return next(block for block in concurrency_blocks(run) if isinstance(block, Table) and "server slots" in
                block.columns)


def test_slots_against_lanes_reads_every_launch_with_its_own_slots() -> None:
    """Seed 000 §2.4(c): a cell measured on a variant's launch reaches the table, named by its launch, with the
    slots that launch ran (the search's slots-1 ran one slot, the base and slots-2 two)."""
    table = _slots_table(load_run(SEARCH))
    assert table.columns[:3] == ("launch", "server slots", "client lanes")
    assert [row[:3] for row in table.rows] == [("base", "2", "4"), ("slots-2", "2", "4"), ("slots-1", "1", "4")]
    for row in table.rows:
        assert row[5] == _aggregate(SEARCH, row[0], 4)


def test_the_speed_up_is_against_one_client_on_the_same_launch_else_the_one_named() -> None:
    run = load_run(AB)
    table = _slots_table(run)
    for row in table.rows:
        name, lanes = row[0], int(row[2])
        ratio = _raw_aggregate(AB, name, lanes) / _raw_aggregate(AB, name, 1)
        assert row[6] == f"{ratio:.2f}x"
    # a launch that measured no one-client cell is held against another launch's, and the row says whose
    frame = run.variant_tables["concurrency"]
    run.variant_tables["concurrency"] = frame[~((frame["variant"] == "ub32") & (frame["concurrency"] == 1))]
    ub32 = next(row for row in _slots_table(run).rows if row[0] == "ub32")
    assert ub32[6] == f"{_raw_aggregate(AB, 'ub32', 2) / _raw_aggregate(AB, 'base', 1):.2f}x (against base)"


def test_an_engine_line_belongs_to_the_launch_whose_cell_was_running() -> None:
    """The batching table names each window's launch by the cell running when the engine printed it: every
    request's first token, an instant inside its own cell, falls in a span of its own launch and no other's (the
    launches ran one after another)."""
    run = load_run(AB)
    spans = launch_spans(run)
    assert {name for _, _, name in spans} == {"base", "ub32", "spec-off"}
    for row in [*run.requests, *run.variant_requests]:
        assert row.t_first_token is not None
        assert launch_of(spans, float(row.t_first_token)) == (row.cell or {}).get("variant", "base")
    assert launch_of(spans, min(start for start, _, _ in spans) - 1.0) is None  # before the first cell: no launch's
