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

from ninferkit import steps
from ninferkit.errors import StepFailed
from ninferkit.rundir.runs import RunDir, open_run
from ninferkit.server import process as server
from ninferkit.server.process import _group_alive
from ninferkit.steps.runner import NOTEBOOKS_DIR, STEPS, run_runbook
from ninferkit.steps.sweeps import sweeps
from tests.conftest import LOCAL_CPU, free_port


def test_both_sides_live(tmp_path: Path, llama_server: Path) -> None:
    """A short A/B on the embedded default: drafts happen with speculation, none without."""
    overrides = [f"serve.port={free_port()}", "sweeps.tasks.tasks=[bug_root_cause]", "sweeps.tasks.depths=[0]",
                 "sweeps.tasks.output_tokens=96", "sweeps.tasks.pin_output=true",
                 "serve.spec.options={n-match: 8, n-min: 4, n-max: 16}"]  # short drafts: 96 tokens see some
    run = open_run(LOCAL_CPU, tmp_path / "run", overrides)
    steps.launch(run, progress=False)
    try:
        table = sweeps(run, only="tasks", progress=False)["tasks"]
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
        "import os\nfrom ninferkit import steps\n"
        f"other = ninferkit.open_run(profile, run.dir.speculation_off, ['serve.spec={{}}', "
        f"'serve.port={free_port()}'])\nsteps.launch(other, progress=False)\nos._exit(1)", id="stand-in")]
    nbformat.write(stand_in, folder / STEPS["sweeps"])
    with pytest.raises(StepFailed):
        run_runbook(LOCAL_CPU, tmp_path / "run", ["setup", "launch", "sweeps"], [f"serve.port={free_port()}"],
                    notebooks_dir=folder, say=lambda line: None)
    other = json.loads((RunDir(tmp_path / "run").speculation_off.joinpath("server.json")).read_text())
    assert other["state"] == "stopped" and not _group_alive(other["pgid"])
