"""`sweeps.concurrency.cached` in the plan (the live side: tests/live/test_concurrency_cached.py), and the A/B's label
of a cell measured under a variant (seed 000 §2.2's cached and sustained rows are a variant in both profiles)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ninferkit.engines import get_adapter
from ninferkit.errors import ProfileError
from ninferkit.rundir.runs import RunDir, open_run
from ninferkit.sweeps.plan import build_plan
from ninferkit.sweeps.tables import ab_table
from tests.conftest import DATA, LOCAL_CPU


def _cells(folder: Path, *overrides: str) -> list[dict]:
    run = open_run(LOCAL_CPU, folder, ["sweeps.concurrency.levels=[2]", *overrides])
    return [cell.params.as_dict() | {"cell_id": cell.cell_id}
            for cell in build_plan(run.profile, get_adapter(run.profile.engine.kind), ["concurrency"], explicit=True)]


def test_a_cached_cell_is_its_own_and_a_cold_one_keeps_its_id(tmp_path: Path) -> None:
    [cold] = _cells(tmp_path / "cold")
    [cached] = _cells(tmp_path / "cached", "sweeps.concurrency.cached=true")
    assert "cached" not in cold  # a cell of cold prompts records no `cached`: the ids of every earlier run stand
    assert cached["cached"] is True and cached["cell_id"] != cold["cell_id"]
    assert {key: value for key, value in cached.items() if key not in ("cached", "cell_id")} == \
        {key: value for key, value in cold.items() if key != "cell_id"}


def test_a_cached_cell_without_a_warm_up_is_refused_before_it_runs(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"sweeps.concurrency.cached: true needs a warm-up .*warmup is 0\)"):
        _cells(tmp_path / "refused", "sweeps.concurrency.cached=true", "sweeps.concurrency.warmup=0")


def test_the_ab_names_the_variant_a_pair_was_measured_under() -> None:
    """embedded-variants (a real run with variants ub32 and spec-off) paired with itself: its variants' cells pair
    with the same variant's, and each label says which, so no two rows read alike."""
    run = RunDir(DATA / "run_dirs" / "embedded-variants")
    frame = ab_table(run, run)
    labels = list(frame["cell"])
    assert len(labels) == 6 and len(set(labels)) == 6
    assert sum("variant=ub32" in label for label in labels) == sum("variant=spec-off" in label for label in labels) == 2
    assert sum("variant=" not in label for label in labels) == 2  # the base's cells name none
