"""ninferkit's own errors in a notebook: the message with its fix, not a chained traceback (issue 24, item 2).

Before, a typo in the parameters cell showed pydantic's internals and four ninferkit frames (70 lines of
traceback) before the 3-line message the command line prints.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import papermill as pm
import pytest

from ninferkit.errors import ProfileError
from ninferkit.steps.notebook_errors import FULL_TRACEBACK_HINT, short_traceback
from ninferkit.steps.runner import NOTEBOOKS_DIR, STEPS
from tests.conftest import LOCAL_CPU

BAD_OVERRIDE = "serve.max_concurency=2"


def error_outputs(notebook: Path) -> list[nbformat.NotebookNode]:
    cells = nbformat.read(notebook, as_version=4).cells
    return [o for cell in cells if cell.cell_type == "code" for o in cell.outputs if o.output_type == "error"]


def test_a_bad_override_in_the_parameters_shows_the_short_message(tmp_path: Path) -> None:
    """The real setup notebook in a real kernel: the cell that opens the run fails with the CLI's message."""
    output = tmp_path / "out.ipynb"
    with pytest.raises(pm.PapermillExecutionError) as raised:
        pm.execute_notebook(str(NOTEBOOKS_DIR / STEPS["setup"]), str(output), kernel_name="python3",
                            progress_bar=False, cwd=str(NOTEBOOKS_DIR),
                            parameters={"profile": str(LOCAL_CPU), "run_dir": str(tmp_path / "run"),
                                        "overrides": [BAD_OVERRIDE]})
    assert raised.value.ename == "ProfileError"
    [shown] = error_outputs(output)
    text = "\n".join(shown.traceback)
    assert "did you mean 'max_concurrency'" in text and shown.traceback[-1] == FULL_TRACEBACK_HINT
    assert "Traceback" not in text and "pydantic" not in text and "\x1b" not in text
    assert len(shown.traceback) <= 6
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_the_full_chain_stays_reachable_with_tb(tmp_path: Path) -> None:
    """%tb in the next cell prints the whole chain, pydantic's validation error first; an error that is not
    ninferkit's (a bug, here a NameError) keeps IPython's own traceback."""
    setup = nbformat.read(NOTEBOOKS_DIR / STEPS["setup"], as_version=4)
    parameters = [cell for cell in setup.cells if "parameters" in cell.metadata.get("tags", [])]
    failing = nbformat.v4.new_code_cell("import ninferkit\nrun = ninferkit.steps.notebook_run(profile, run_dir, "
                                        "overrides, step='setup')", id="open",
                                        metadata={"tags": ["raises-exception"]})
    bug = nbformat.v4.new_code_cell("no_such_name", id="bug", metadata={"tags": ["raises-exception"]})
    setup.cells = [*parameters, failing, nbformat.v4.new_code_cell("%tb", id="tb"), bug]
    nbformat.write(setup, tmp_path / "in.ipynb")
    with pytest.raises(pm.PapermillExecutionError):  # the cells tagged raises-exception ran on; papermill says so
        pm.execute_notebook(str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb"), kernel_name="python3",
                            progress_bar=False, cwd=str(NOTEBOOKS_DIR),
                            parameters={"profile": str(LOCAL_CPU), "run_dir": str(tmp_path / "run"),
                                        "overrides": [BAD_OVERRIDE]})
    short, full, not_ours = error_outputs(tmp_path / "out.ipynb")
    assert short.ename == "ProfileError" and short.traceback[-1] == FULL_TRACEBACK_HINT
    chain = "\n".join(full.traceback)
    assert full.ename == "ProfileError" and "ValidationError" in chain and "Traceback" in chain
    assert len(full.traceback) > len(short.traceback)
    assert not_ours.ename == "NameError" and FULL_TRACEBACK_HINT not in not_ours.traceback


def test_the_short_form_is_the_class_and_the_message() -> None:
    error = ProfileError("serve.port: 99999 is above 65535\n  allowed: 1-65535")
    assert short_traceback(error) == ["ProfileError: serve.port: 99999 is above 65535", "  allowed: 1-65535",
                                      FULL_TRACEBACK_HINT]
