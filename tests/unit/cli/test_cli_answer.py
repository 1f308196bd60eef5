"""`ninferkit run` and `ninferkit sweep` end with their answer: the write-up's headline numbers, then the paths.

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

from ninferkit.cli._answer import headline_text, print_answer
from ninferkit.report import headline, load_run
from ninferkit.report.fmt import number
from tests.conftest import LOCAL_CPU, REPO

RECORDED = REPO / "tests" / "data" / "run_dirs" / "embedded-spec-ab"


def _expected(run_dir: Path) -> list[dict[str, Any]]:
    """The headline rows as JSON carries them, computed here from the run's files."""
    rows: list[dict[str, Any]] = json.loads(json.dumps([asdict(row) for row in headline(load_run(run_dir))],
                                                       default=str))
    return rows


def test_the_text_answer_shows_each_measured_number_on_its_metric_line() -> None:
    rows = _expected(RECORDED)
    text = headline_text(rows)
    lines = text.splitlines()
    measured = [row for row in rows if row["best"] is not None]
    assert measured, "the recorded run measured something"
    for row in measured:  # each row's line: its metric, its best value, its where
        assert any(line.lstrip().startswith(row["metric"]) and f"  {number(row['best'])}  " in line
                   and line.endswith(row["where"]) for line in lines), row
    assert all("\r" not in line for line in lines)


def test_a_run_without_measurements_says_which_numbers_it_lacks() -> None:
    rows = _expected(REPO / "tests" / "data" / "run_dirs" / "launch-only")
    text = headline_text(rows)
    for row in rows:
        if row["best"] is None:
            assert f"  {row['metric']}: {row['where']}" in text.splitlines()


def test_json_carries_the_same_rows_and_the_paths(capsys: pytest.CaptureFixture[str]) -> None:
    print_answer(RECORDED, {"write_up": None, "run_directory": RECORDED}, True, steps=[])
    answer = json.loads(capsys.readouterr().out)
    assert answer["headline"] == _expected(RECORDED)
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
