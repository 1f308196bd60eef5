"""`ninferkit run PROFILE --dry-run`: the plan a run would carry out, from the run's own checks, with nothing written
(the run folder is not made), downloaded or launched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ninferkit.engines import get_adapter
from ninferkit.params import load_profile
from ninferkit.sweeps.plan import build_plan, parse_only
from tests.conftest import LOCAL_CPU, REPO

TP2 = REPO / "params" / "ninfer-2xv100-sxm2-tp2.yaml"


def dry_run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ninferkit", "run", *args, "--dry-run"], cwd=folder,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_the_plan_names_each_launch_and_counts_the_cells_a_run_would_send(tmp_path: Path) -> None:
    done = dry_run(tmp_path, str(LOCAL_CPU))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    launched = subprocess.run([sys.executable, "-m", "ninferkit", "launch", str(LOCAL_CPU), "--dry-run"],
                              capture_output=True, text=True, check=True, cwd=REPO)
    assert f"launch (base): {launched.stdout.strip()}" in lines  # the command `launch --dry-run` prints
    profile = load_profile(LOCAL_CPU).profile
    cells = build_plan(profile, get_adapter(profile.engine.kind), parse_only(None), explicit=False)
    assert f"sweeps: {sum(1 for cell in cells if cell.skip is None)} cells in all" in lines
    context = sum(1 for cell in cells if cell.sweep == "context" and cell.skip is None)
    assert next(line for line in lines if line.startswith("sweeps on base: ")).startswith(
        f"sweeps on base: context {context}, ")
    assert lines[-1] == "nothing was written, downloaded or launched"
    assert list(tmp_path.iterdir()) == []  # no runs/ folder, no file


def test_each_variant_is_a_launch_of_its_own_and_the_plans_warnings_are_notes(tmp_path: Path) -> None:
    """Report 004's profile: the base MTP3 launch, MTP 4 and 5 at one request, 4 slots; its long context with the
    default pending timeout is warned of as a note, not a Python warning."""
    done = dry_run(tmp_path, str(TP2))
    assert done.returncode == 0, done.stderr
    launches = [line for line in done.stdout.splitlines() if line.startswith("launch (")]
    assert [line.split(":")[0] for line in launches] == ["launch (base)", "launch (mtp4", "launch (mtp5",
                                                         "launch (slots-4"]
    assert "--draft-tokens 5" in launches[2] and "--max-concurrency 4" in launches[3]
    assert "note: serve.pending_timeout_ms is 30000 ms" in done.stdout
    assert "UserWarning" not in done.stderr and "Traceback" not in done.stderr


def test_a_plan_that_cannot_finish_is_refused_as_the_run_refuses_it(tmp_path: Path) -> None:
    done = dry_run(tmp_path, str(LOCAL_CPU), "-p", "sweeps.context.targets=[100000]")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "100000" in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []
