"""`ninferkit run` and `ninferkit sweep` end with their answer: each cell's latency in the peers' terms, the
write-up's headline numbers, then the paths; as text that fits 100 columns and holds no control code.

The recorded run is tests/data/run_dirs/embedded-spec-ab (the embedded default run headless on 2 cores, see
its README); the sweep test measures the live embedded llama-server.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from ninferkit.cli._answer import headline_text, latency_rows, latency_text, print_answer, requests_sent, sent_text
from ninferkit.interop.source import run_source
from ninferkit.interop.summary import summary_row
from ninferkit.report import headline, load_run
from ninferkit.report.fmt import number
from tests.conftest import LOCAL_CPU, REPO

RECORDED = REPO / "tests" / "data" / "run_dirs" / "embedded-spec-ab"


def _expected(run_dir: Path) -> list[dict[str, Any]]:
    """The headline rows as JSON carries them, computed here from the run's files."""
    rows: list[dict[str, Any]] = json.loads(json.dumps([asdict(row) for row in headline(load_run(run_dir))],
                                                       default=str))
    return rows


def test_the_text_answer_shows_each_measured_number_with_its_metric_and_where() -> None:
    rows = _expected(RECORDED)
    text = headline_text(rows)
    lines = text.splitlines()
    measured = [row for row in rows if row["best"] is not None]
    assert measured, "the recorded run measured something"
    body = text.split("─\n", 1)[1].split("\n  ")[0]  # under the header's rule, above the lines of no data
    blocks = [block.splitlines() for block in body.split("\n\n")]  # a blank line between rows
    named = {" ".join(line.split("  ")[0].strip() for line in block if not line.startswith("  ")): block[0]
             for block in blocks}
    for row in measured:  # each row's first line: its metric, its best value; under it, its where (wrapped)
        name, first = next((name, line) for name, line in named.items()
                           if name.startswith(f"{row['metric']} at {row['where']}"))
        assert f"  {number(row['best'])}  " in first, row
        if row.get("p50") is not None:  # its spread on a line of its own under the where
            assert name.endswith(f"p50 {number(row['p50'])}, p90 {number(row['p90'])}, p99 {number(row['p99'])}, "
                                 f"std {number(row['std'])}"), name
    assert all(len(line) <= 100 and "\r" not in line and "\x1b" not in line for line in lines)


def test_a_run_without_measurements_says_which_numbers_it_lacks() -> None:
    rows = _expected(REPO / "tests" / "data" / "run_dirs" / "launch-only")
    text = headline_text(rows)
    for row in rows:
        if row["best"] is None:
            assert f"  {row['metric']}: {row['where']}" in text.replace("\n    ", " ").splitlines()


def test_json_carries_the_same_rows_and_the_paths(capsys: pytest.CaptureFixture[str]) -> None:
    print_answer(RECORDED, {"write_up": None, "run_directory": RECORDED}, True, latency=True, steps=[])
    answer = json.loads(capsys.readouterr().out)
    assert answer["headline"] == _expected(RECORDED)
    source = run_source(RECORDED)  # the latency rows are export --format summary's, cell by cell
    assert [{k: v for k, v in row.items() if k != "label"} for row in answer["latency"]] == json.loads(
        json.dumps([summary_row(source.run_id, cell) for cell in source.cells]))
    assert answer["write_up"] is None and answer["run_directory"] == str(RECORDED) and answer["steps"] == []


def test_run_ends_with_the_headline_as_json(tmp_path: Path) -> None:
    """The write-up step alone on a copy of the recorded run: stdout is one JSON object (the step lines go to
    stderr), its headline the one recomputed from the copy's rows, its write-up written."""
    run_dir = tmp_path / "run"
    shutil.copytree(RECORDED, run_dir)
    done = subprocess.run([sys.executable, "-m", "ninferkit", "run", str(LOCAL_CPU), "--run-dir", str(run_dir),
                           "--steps", "writeup", "--json"], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["headline"] == _expected(run_dir)
    assert Path(answer["write_up"]) == run_dir / "report" / "index.md" and Path(answer["write_up"]).exists()
    assert answer["steps"][0]["step"] == "writeup" and answer["steps"][0]["status"] == "ok"
    assert "[1/1] writeup   ok" in done.stderr


def test_the_latency_summary_gives_each_cell_in_the_peers_terms_and_units(monkeypatch: pytest.MonkeyPatch) -> None:
    """TTFT, TPOT, ITL and e2e in ms (mean, p50, p99) and the throughput of every cell, as the summary export has
    them; at most 100 columns and no colour even where a Jupyter kernel forces it (FORCE_COLOR)."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("COLUMNS", raising=False)
    cells = latency_rows(RECORDED)
    text = latency_text(cells)
    lines = text.splitlines()
    assert all(len(line) <= 100 and "\x1b" not in line and "\r" not in line for line in lines)
    assert len(cells) == len(run_source(RECORDED).cells) > 1
    heads = [i for i, line in enumerate(lines) if line.startswith("  ms ")]  # each cell's table: after its title
    assert len(heads) == len(cells)
    for cell, head in zip(cells, heads, strict=True):
        title = " ".join(line.strip() for line in lines[heads[heads.index(head) - 1] + 6 if head != heads[0] else 0:
                                                        head])
        assert title.endswith(f"{cell['label']}: {cell['requests']} requests, {number(cell['requests_per_s'])} "
                              f"req/s, {number(cell['output_tok_s'])} output tok/s"), title
        for offset, (short, name) in enumerate((("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "e2e"))):
            assert lines[head + 2 + offset].split() == [
                name, *(number(cell[f"{short}_{stat}_ms"]) for stat in ("mean", "median", "p99"))]


def test_each_cell_of_the_latency_summary_is_told_apart_by_its_launch_and_repeat() -> None:
    """A run with variants and sweeps.repeats (tests/data/run_dirs/embedded-variants: base, ub32 and spec-off, each
    at concurrency 1 and 2, twice) has twelve cells of four parameter sets: each label names its variant and its
    repeat, so no two read alike."""
    labels = [cell["label"] for cell in latency_rows(REPO / "tests" / "data" / "run_dirs" / "embedded-variants")]
    assert len(labels) == 12 and len(set(labels)) == 12, labels
    assert "concurrency concurrency=2, api=chat (spec-off, repeat 2)" in labels
    assert "concurrency concurrency=1, api=chat" in labels  # the base's first attempt names neither


def test_a_run_that_measured_nothing_says_so() -> None:
    assert latency_rows(REPO / "tests" / "data" / "run_dirs" / "launch-only") == []
    assert latency_text([]) == "latency per cell: none (no request was measured)"


def test_the_requests_sent_count_every_request_the_server_saw() -> None:
    """The rows of the recorded run by role, plus the acceptance check's one chat request where the command
    attached or launched: the count the server's own log gives (tests/live/test_url.py checks it live)."""
    rows = load_run(RECORDED).requests
    sent = requests_sent(rows, checked=True)
    warmups = sum(1 for row in rows if row.warmup)
    assert warmups > 0 and sent["warmup"] == warmups and sent["acceptance_check"] == 1
    assert sent["total"] == len(rows) + 1 == sent["measured"] + sent["warmup"] + sent["cache_seed"] + 1
    assert requests_sent(rows, checked=False)["total"] == len(rows)
    text = sent_text(sent)
    assert text.startswith(f"requests sent to the server: {len(rows) + 1} ({sent['measured']} measured")
    assert f"{warmups} warm-ups" in text and "1 acceptance check" in text.replace("\n  ", " ")
