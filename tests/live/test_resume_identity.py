"""Issue 37 against the live embedded llama-server: a finished run resumed on a new port sends nothing, one new
context target sends that cell, `sweeps.repeats` 1 -> 2 sends one repeat of each cell, and two runs of one
profile on different ports merge as one serving."""

from __future__ import annotations

from pathlib import Path

from ninferkit import steps
from ninferkit.report.merge import merge
from ninferkit.rundir.runs import Run, open_run, read_jsonl
from ninferkit.server import process as server
from ninferkit.steps.sweeps import sweeps
from tests.conftest import LOCAL_CPU, free_port

TINY = ["sweeps.context.output_tokens=8", "sweeps.context.repetitions=1", "sweeps.context.warmup=0",
        "sweeps.telemetry=false"]


def swept(path: Path, *overrides: str) -> Run:
    """Open the run (a rerun when `path` holds one), launch its server, sweep the context kind, stop it."""
    run = open_run(LOCAL_CPU, path, [f"serve.port={free_port()}", *TINY, *overrides])
    steps.launch(run, progress=False)
    try:
        sweeps(run, only="context", progress=False)
    finally:
        server.stop(run.dir)
    return run


def test_a_rerun_sends_only_new_cells_and_repeats_and_a_new_port_sends_nothing(tmp_path: Path,
                                                                               llama_server: Path) -> None:
    two = "sweeps.context.targets=[64, 128]"
    run = swept(tmp_path / "a", two)
    ledger = run.dir.sweep_cells
    assert len(list(read_jsonl(ledger))) == 2

    run = swept(tmp_path / "a", two)  # another free port: the same serving
    step = run.dir.read_manifest().steps["sweeps"].model_extra or {}
    assert (len(list(read_jsonl(ledger))), step["cells_kept"], step["cells_sent"]) == (2, 2, 0)

    three = "sweeps.context.targets=[64, 128, 192]"
    run = swept(tmp_path / "a", three)
    step = run.dir.read_manifest().steps["sweeps"].model_extra or {}
    assert len(list(read_jsonl(ledger))) == 3 and step["resend_reasons"] == {"new cell": 1}
    assert "context target_prompt_tokens=192 (new cell)" in step["resume_summary"]

    run = swept(tmp_path / "a", three, "sweeps.repeats=2")
    step = run.dir.read_manifest().steps["sweeps"].model_extra or {}
    assert len(list(read_jsonl(ledger))) == 6 and step["resend_reasons"] == {"new repeat 2": 3}

    other = swept(tmp_path / "b", two)
    merged = merge([run.dir.path, other.dir.path], tmp_path / "merged")
    assert len(merged.servings) == 1
    assert merged.cells["hosts"].str.startswith("all: ").sum() == 2  # 64 and 128 tokens, pooled over both runs
