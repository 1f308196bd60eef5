"""`ninferkit run` and `ninferkit sweep` end with their answer: the write-up's headline numbers, then the paths.

The recorded run is tests/data/run_dirs/embedded-spec-ab (the embedded default run headless on 2 cores, see
its README); the sweep test measures the live embedded llama-server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ninferkit.report import headline, load_run
from ninferkit.report.fmt import number
from tests.conftest import LOCAL_CPU, REPO, free_port


def _expected(run_dir: Path) -> list[dict[str, Any]]:
    """The headline rows as JSON carries them, computed here from the run's files."""
    rows: list[dict[str, Any]] = json.loads(json.dumps([asdict(row) for row in headline(load_run(run_dir))],
                                                       default=str))
    return rows


def test_sweep_ends_with_its_cells_the_headline_and_the_paths(tmp_path: Path, llama_server: Path) -> None:
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "ninferkit", "sweep", str(LOCAL_CPU), "--run-dir", str(run_dir),
                           "--only", "context", "-p", "sweeps.context.targets=[128]", "-p",
                           "sweeps.context.repetitions=2", "-p", f"serve.port={free_port()}"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    decode = next(row for row in _expected(run_dir) if row["metric"].startswith("Decode"))
    assert decode["best"] is not None
    table = next(i for i, line in enumerate(out) if line.startswith("headline (the write-up's numbers"))
    assert any(line.startswith(decode["metric"]) and f"  {number(decode['best'])}  " in line for line in out[table:]), \
        done.stdout
    assert out[-2:] == [f"tables: {run_dir / 'tables'}", f"run directory: {run_dir}"]
    assert out[0].startswith("launched the server of")  # none was running: the command started one, and stopped it
    # every request the server served (llama-server logs each one's release) is counted in the answer, the
    # launch's acceptance check included
    served = (run_dir / "logs" / "server.log").read_text().count("stop processing")
    sent = next(line for line in out if line.startswith("requests sent to the server: "))
    assert served == 3 and sent.startswith("requests sent to the server: 3 (2 measured, 1 acceptance check")
    cells = next(i for i, line in enumerate(out) if line.split() == ["table", "cells", "done", "failed", "skipped"])
    assert out[cells + 2].split() == ["context", "1", "1", "0", "0"]
    latency = next(i for i, line in enumerate(out) if line.startswith("latency per cell in ms"))
    cell = next(i for i in range(latency, table) if out[i].startswith("context target_prompt_tokens=128, api=chat: 2 "))
    head = next(i for i in range(cell, table) if out[i].startswith("  ms "))  # under the title, wrapped or not
    assert [out[i].split()[0] for i in range(head + 2, head + 6)] == ["TTFT", "TPOT", "ITL", "e2e"]
    assert all(len(line) <= 100 for line in out if not line.startswith(("tables: ", "run directory: ")))
    assert "sweeps: 0 of 1 cells" in done.stderr  # its progress, as lines: stderr is a pipe here
    assert "\r" not in done.stderr + done.stdout and "\x1b" not in done.stdout
