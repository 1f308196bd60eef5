"""The runbook's steps are declared once (each module's STEP, ninferkit.steps.catalog); what lists them agrees."""

from __future__ import annotations

import json

import ninferkit
from ninferkit.fleet.spec import FleetFile
from ninferkit.report import data
from ninferkit.steps.catalog import get_step, runbook_steps, steps, url_steps
from ninferkit.steps.runner import NOTEBOOKS_DIR, STEPS


def test_every_notebook_is_one_step_and_calls_it() -> None:
    declared = {step.notebook: step for step in steps() if step.notebook}
    assert sorted(declared) == sorted(path.name for path in NOTEBOOKS_DIR.glob("*.ipynb"))
    for notebook, step in declared.items():
        cells = json.loads((NOTEBOOKS_DIR / notebook).read_text())["cells"]
        source = "".join("".join(cell["source"]) for cell in cells)
        assert f"ninferkit.steps.{step.name}(run" in source, notebook
        assert callable(getattr(ninferkit.steps, step.name))


def test_the_runner_the_fleet_and_the_write_up_list_the_catalog() -> None:
    assert list(STEPS) == runbook_steps() == ["setup", "verify", "launch", "sweeps", "capacity", "writeup"]
    assert url_steps() == ["sweeps", "capacity", "writeup"]
    factory = FleetFile.model_fields["steps"].default_factory
    assert factory is not None and factory() == runbook_steps()  # type: ignore[call-arg]
    # the write-up sits below the steps and cannot ask the catalog: its order and labels are checked here
    assert list(data.STEP_ORDER) == [step.name for step in steps() if step.runbook]
    assert (data.SETUP, data.VERIFY, data.LAUNCH, data.SWEEPS, data.CAPACITY) == tuple(
        get_step(name).label for name in ("setup", "verify", "launch", "sweeps", "capacity"))
