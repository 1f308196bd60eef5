"""05_writeup.ipynb: thin (one library call per cell), committed clean, and runs headless under papermill."""

from __future__ import annotations

import json
from pathlib import Path

import papermill as pm

from tests.unit.test_report import REPO, RUN_A, copy_run

NOTEBOOK = REPO / "notebooks" / "05_writeup.ipynb"


def test_notebook_runs_headless_and_writes_the_write_up(tmp_path: Path) -> None:
    run_dir = copy_run(RUN_A, tmp_path)
    output = tmp_path / "05_writeup.ipynb"
    pm.execute_notebook(str(NOTEBOOK), str(output), kernel_name="python3", progress_bar=False,
                        cwd=str(NOTEBOOK.parent), parameters={"profile": str(REPO / "params" / "local-cpu.yaml"),
                                                               "run_dir": str(run_dir), "overrides": []})
    report = run_dir / "report"
    assert (report / "index.md").exists() and (report / "index.html").exists()
    assert len(list((report / "figures").glob("*.png"))) == 4
    executed = json.loads(output.read_text())
    shown = [output for cell in executed["cells"] if cell["cell_type"] == "code" for output in cell["outputs"]]
    markdown = "".join("".join(o["data"]["text/markdown"]) for o in shown if "text/markdown" in o.get("data", {}))
    assert "## Headline" in markdown and markdown.count("data:image/png;base64,") == 4
