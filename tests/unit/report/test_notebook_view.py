"""A notebook's tables are the write-up's (issue 24, item 3): the same blocks, the same digits, on a recorded run
(tests/data/run_dirs/embedded-1, a real run of the embedded llama-server)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from ninferkit.errors import NinferkitError
from ninferkit.report import frame_table, section, sweep_table, write_report
from tests.unit.report.test_report import RUN_A, copy_run


def test_a_sweep_table_is_the_write_ups_not_the_whole_frame(tmp_path: Path) -> None:
    run_dir = copy_run(RUN_A, tmp_path)
    raw = pd.read_csv(run_dir / "tables" / "context.csv")
    shown = sweep_table("context", raw)
    table = shown.tables()[0]
    assert len(raw.columns) > 20  # a notebook's pandas shows 20 columns (display.max_columns), `...` for the rest
    assert len(table.columns) < 15
    assert any("p50" in column or "decode" in column.lower() for column in table.columns)
    published = write_report(run_dir, ["markdown"]).markdown.read_text()
    assert repr(shown) in published  # digit for digit the table the write-up publishes
    decimals = [len(found) for cell in (c for row in table.rows for c in row) for found in re.findall(r"\.(\d+)", cell)]
    assert decimals and max(decimals) <= 3  # the frame holds 6 and more


def test_capacity_shows_bytes_as_gib(tmp_path: Path) -> None:
    run_dir = copy_run(RUN_A, tmp_path)
    text = repr(section(run_dir, "Capacity"))
    assert " GiB" in text or " MiB" in text
    assert not re.search(r"\b\d{1,3}(,\d{3}){2,}\b bytes", text)  # no raw byte counts


def test_the_html_is_the_reports_own_and_escapes_what_it_shows() -> None:
    shown = frame_table(pd.DataFrame([{"message": "<script>x</script> " + "long " * 30, "value": 0.1234567}]))
    html = shown._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "long " * 30 in repr(shown)  # whole, where pandas cuts text at 50 characters
    assert "0.123" in html and "0.1234567" not in html


def test_an_unknown_section_names_the_ones_there_are(tmp_path: Path) -> None:
    with pytest.raises(NinferkitError, match=r"the write-up has no section 'Capacty'; its sections: 'Headline', "):
        section(copy_run(RUN_A, tmp_path), "Capacty")


NOTEBOOKS = Path(__file__).resolve().parents[3] / "notebooks"


@pytest.mark.parametrize("notebook", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda path: path.name)
def test_every_section_a_notebook_shows_is_one_the_write_up_has(tmp_path: Path, notebook: Path) -> None:
    """A notebook asks for a write-up section by its title (`ninferkit.report.section(run, "...")`): a renamed
    section (the per-cell latency moved to the appendix as "Appendix: latency") broke 03 in every run until a live
    test ran it. Each title asked is one the recorded run's write-up has."""
    asked = re.findall(r'report\.section\([^,]+, \\"([^"\\]+)\\"\)', notebook.read_text())
    run_dir = copy_run(RUN_A, tmp_path)
    for title in asked:
        assert section(run_dir, title).blocks, (notebook.name, title)
