"""The runbook's steps are declared once (each module's STEP, ninferkit.steps.catalog); what lists them agrees."""

from __future__ import annotations

import json
import re
from pathlib import Path

import ninferkit
from ninferkit.fleet.spec import FleetFile
from ninferkit.report import write_report
from ninferkit.report.data import load_run, ordered_steps
from ninferkit.rundir.records import Manifest
from ninferkit.rundir.runs import RunDir, read_json, write_json_atomic
from ninferkit.steps import notebook_run
from ninferkit.steps.catalog import runbook, runbook_steps, steps, url_steps
from ninferkit.steps.runner import NOTEBOOKS_DIR, STEPS
from tests.conftest import LOCAL_CPU
from tests.unit.report.test_report import copy_run


def test_every_notebook_is_one_step_and_calls_it() -> None:
    declared = {step.notebook: step for step in steps() if step.notebook}
    assert sorted(declared) == sorted(path.name for path in NOTEBOOKS_DIR.glob("*.ipynb"))
    for notebook, step in declared.items():
        cells = json.loads((NOTEBOOKS_DIR / notebook).read_text())["cells"]
        source = "".join("".join(cell["source"]) for cell in cells)
        assert f"ninferkit.steps.{step.name}(run" in source, notebook
        assert callable(getattr(ninferkit.steps, step.name))


def test_the_runner_the_fleet_and_the_write_up_list_the_catalog() -> None:
    in_notebook_order = [step.name for step in sorted(steps(), key=lambda step: step.notebook or "")
                         if step.notebook and step.runbook]
    assert list(STEPS) == runbook_steps() == in_notebook_order
    assert runbook_steps()[:3] == ["setup", "verify", "launch"] and "deploy" not in runbook_steps()
    assert set(url_steps()) <= set(runbook_steps()) and not {"setup", "verify", "launch"} & set(url_steps())
    factory = FleetFile.model_fields["steps"].default_factory
    assert factory is not None and factory() == runbook_steps()  # type: ignore[call-arg]


def test_a_notebook_records_the_catalogs_runbook_for_the_write_up(tmp_path: Path) -> None:
    """The write-up sits below the steps: it reads their order and labels from the manifest, which every
    notebook's first call (notebook_run) writes from the catalog."""
    run = notebook_run(str(LOCAL_CPU), str(tmp_path / "run"), [], step="setup")
    recorded = Manifest.model_validate(read_json(run.dir.manifest)).runbook
    assert recorded == runbook()
    assert [(step.name, step.label) for step in recorded] == [(step.name, step.label) for step in steps()]
    assert recorded[0].label == "setup (00_setup)" and recorded[-1].name == "deploy"


def test_the_write_up_orders_and_names_steps_as_the_runs_runbook_says(tmp_path: Path) -> None:
    """A step the write-up has never heard of ('tune', between launch and sweeps) takes its place and its label
    from the manifest alone; a manifest from before runbooks were recorded keeps the runbook of that time."""
    run_dir = RunDir(copy_run("launch-only", tmp_path))
    before = load_run(run_dir.path)
    assert [name for name, _ in ordered_steps(before.manifest)] == ["setup", "launch"]  # the file has launch first
    assert before.missing["requests.jsonl"] == "sweeps (03_sweeps)"
    fields = read_json(run_dir.manifest)
    fields["steps"] = {"sweeps": {"status": "ok"}, "tune": {"status": "ok"}, "launch": {"status": "ok"},
                       "other": {"status": "ok"}}
    fields["runbook"] = [{"name": name, "label": label} for name, label in (
        ("launch", "launch (02_launch)"), ("tune", "tune (02b_tune)"), ("sweeps", "sweeps (03_measure)"))]
    write_json_atomic(run_dir.manifest, fields)
    after = load_run(run_dir.path)
    assert [name for name, _ in ordered_steps(after.manifest)] == ["launch", "tune", "sweeps", "other"]
    assert after.missing["requests.jsonl"] == "sweeps (03_measure)"
    assert after.missing["capacity.json"] == "capacity"  # a step the runbook does not name keeps its name
    text = write_report(run_dir.path).appendix["markdown"].read_text()  # the steps: raw detail, in the appendix
    assert re.search(r"\| launch \|.*\n\| tune \|.*\n\| sweeps \|.*\n\| other \|", text)
    assert "`requests.jsonl` — written by sweeps (03_measure)" in text
