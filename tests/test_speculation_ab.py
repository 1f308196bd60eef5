"""Speculative decoding with and without, task by task, in one run (sweeps.tasks.speculation_ab).

The plan puts a `speculation: off` twin after every task cell; the sweep measures it on a second server of
the profile with serve.spec reset; the tasks table names each side's speculation; the write-up pairs them.
The write-up tests replay tests/data/run_dirs/embedded-spec-ab/ (a real `ninferkit run params/local-cpu.yaml`
of SmolLM2-135M-Instruct, its README says how it was made); the live test runs both servers here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from ninferkit import server, steps
from ninferkit.engines import get_adapter
from ninferkit.errors import ProfileError, StepFailed
from ninferkit.params import load_profile
from ninferkit.report import write_report
from ninferkit.report.speculation import task_speculation
from ninferkit.runner import NOTEBOOKS_DIR, STEPS, run_runbook
from ninferkit.runs import open_run, read_jsonl
from ninferkit.server import _group_alive
from ninferkit.sweeps import sweeps_step
from ninferkit.sweeps.plan import build_plan
from ninferkit.sweeps.spec_off import spec_off_dir
from ninferkit.workloads import TASK_NAMES, load_task
from tests.conftest import LOCAL_CPU, free_port

ADAPTER = get_adapter("llama_server")
RECORDED = Path(__file__).parent / "data" / "run_dirs" / "embedded-spec-ab"


def _tasks_plan(*overrides: str) -> list:
    return build_plan(load_profile(LOCAL_CPU, list(overrides)).profile, ADAPTER, ["tasks"], explicit=False)


def test_every_task_says_whether_its_answer_is_repetitive_or_creative() -> None:
    characters = {name: load_task(name).character for name in TASK_NAMES}
    assert set(characters.values()) == {"repetitive", "creative"}
    assert {name for name, kind in characters.items() if kind == "repetitive"} == {
        "coding", "json_extraction", "bug_root_cause"}


def test_each_task_cell_has_a_speculation_off_twin_right_after_it() -> None:
    cells = _tasks_plan()
    names = [c.params["task"] for c in cells]
    assert names == [name for name in TASK_NAMES for _ in range(2)]
    assert [c.params.get("speculation") for c in cells] == [None, "off"] * len(TASK_NAMES)
    assert all(c.params["output_tokens"] == load_task(c.params["task"]).output_tokens for c in cells)  # natural
    assert all(not c.params["pin_output"] for c in cells)
    assert "speculation=off" in cells[1].label
    # the side run with the profile's speculation keeps the id it has without the A/B (pairs across runs)
    alone = _tasks_plan("sweeps.tasks.speculation_ab=false")
    assert [c.cell_id for c in alone] == [c.cell_id for c in cells[::2]]


def test_an_ab_without_speculation_to_compare_is_refused_before_anything_runs() -> None:
    with pytest.raises(ProfileError, match="sweeps.tasks.speculation_ab = true: serve.spec sets no method"):
        _tasks_plan("serve.spec={}")


def test_the_recorded_run_pairs_each_task_with_its_twin() -> None:
    tasks = pd.read_csv(RECORDED / "tables" / "tasks.csv")
    found = task_speculation(tasks, "ngram-mod")
    measured = {item.task for item in found}
    assert measured == {name for name in TASK_NAMES if name != "agent"}  # the agent task needs tools: skipped
    for item in found:
        assert item.method == "ngram-mod" and item.decode_with and item.decode_without
        if item.drafted is not None:
            assert item.accepted is not None and 0 <= item.accepted <= item.drafted
    rows = list(read_jsonl(RECORDED / "requests.jsonl"))
    off = [r for r in rows if r["sweep"] == "tasks" and r["cell"].get("speculation") == "off"]
    assert off and all(r.get("drafted_tokens_server") is None for r in off)  # no speculation, no drafts


def test_the_write_up_states_acceptance_and_gain_per_task(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    shutil.copytree(RECORDED, folder)
    text = write_report(folder, ["markdown"]).markdown.read_text()
    section = text.split("## Speculative decoding, task by task\n", 1)[1].split("\n## ", 1)[0]
    tasks = pd.read_csv(RECORDED / "tables" / "tasks.csv")
    for item in task_speculation(tasks, "ngram-mod"):
        line = next(line for line in section.splitlines() if line.startswith(f"| {item.task} |"))
        assert f"| {item.character} |" in line and f"×{item.ratio:.2f}" in line and f"| {item.verdict} |" in line
    assert "Of the 3 tasks expected to be repetitive" in section
    assert "gained:" in section and "lost:" in section
    against = [item.task for item in task_speculation(tasks, "ngram-mod")
               if item.character == "creative" and item.verdict == "gained"]
    assert against  # in this run the 135M model looped on creative tasks, and the write-up says so
    said = section.split("a creative task gains only where its answer repeated itself: ", 1)[1]
    assert all(f"{task} (" in said for task in against)
    assert "Not measured: agent (skipped:" in section


def test_both_sides_live(tmp_path: Path, llama_server: Path) -> None:
    """A short A/B on the embedded default: drafts happen with speculation, none without."""
    overrides = [f"serve.port={free_port()}", "sweeps.tasks.tasks=[bug_root_cause]", "sweeps.tasks.depths=[0]",
                 "sweeps.tasks.output_tokens=96", "sweeps.tasks.pin_output=true",
                 "serve.spec.options={n-match: 8, n-min: 4, n-max: 16}"]  # short drafts: 96 tokens see some
    run = open_run(LOCAL_CPU, tmp_path / "run", overrides)
    steps.launch(run, progress=False)
    try:
        table = sweeps_step(run, only="tasks", progress=False)["tasks"]
    finally:
        server.stop(run.dir)
    assert list(table["speculation"]) == ["ngram-mod", "off"] and set(table["status"]) == {"done"}
    assert (table["completion_tokens_median"] == 96).all() and set(table["finish_reason"]) == {"length"}
    on, off = table.iloc[0], table.iloc[1]
    assert on["drafted_tokens_server_median"] > 0 and 0 <= on["accepted_tokens_server_median"] <= \
        on["drafted_tokens_server_median"]
    assert pd.isna(off["drafted_tokens_server_median"])
    other = json.loads((run.dir.path / "sweeps" / "speculation-off" / "server.json").read_text())
    assert other["state"] == "stopped" and "--spec-type" not in other["argv"]
    record = json.loads(run.dir.server.read_text())
    assert "--spec-type" in record["argv"]
    # a real model: asked to say hello, it does (the write-up's example of its text; random weights could not)
    chat = next(check for check in record["checks"] if check["name"] == "chat")
    assert "hello" in chat["detail"]["reply"].lower()


def test_the_runner_stops_the_second_server_when_the_sweep_step_dies(tmp_path: Path, llama_server: Path) -> None:
    """The second server outlives a kernel that dies (its own process group, like the run's server): a stand-in
    sweeps notebook starts it as the A/B does and kills its kernel, so no `finally` of the step runs; the
    runner's teardown stops it."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    for step in ("setup", "launch"):
        shutil.copy(NOTEBOOKS_DIR / STEPS[step], folder)
    stand_in = nbformat.read(NOTEBOOKS_DIR / STEPS["setup"], as_version=4)  # its first cells open the run
    stand_in.cells = stand_in.cells[:3] + [nbformat.v4.new_code_cell(
        "import os\nfrom ninferkit import steps\nfrom ninferkit.sweeps.spec_off import spec_off_dir\n"
        f"other = ninferkit.open_run(profile, spec_off_dir(run.dir.path), ['serve.spec={{}}', "
        f"'serve.port={free_port()}'])\nsteps.launch(other, progress=False)\nos._exit(1)", id="stand-in")]
    nbformat.write(stand_in, folder / STEPS["sweeps"])
    with pytest.raises(StepFailed):
        run_runbook(LOCAL_CPU, tmp_path / "run", ["setup", "launch", "sweeps"], [f"serve.port={free_port()}"],
                    notebooks_dir=folder, say=lambda line: None)
    other = json.loads((spec_off_dir(tmp_path / "run") / "server.json").read_text())
    assert other["state"] == "stopped" and not _group_alive(other["pgid"])
