"""One profile per run (issue 24, item 6): a notebook's parameters are checked against the profile its run's
manifest records; a change is refused naming each field, unless allowed, and then the manifest says which step
changed what. Real run directories, the real notebooks under papermill for the kernel's side."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import papermill as pm
import pytest

from ninferkit.errors import ProfileError
from ninferkit.report import section
from ninferkit.rundir.runs import RunDir, read_json
from ninferkit.steps import notebook_run, profile_table
from ninferkit.steps.notebook_errors import FULL_TRACEBACK_HINT
from tests.conftest import LOCAL_CPU, REPO
from tests.unit.report.test_report import RUN_A, copy_run


def _started(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    notebook_run(str(LOCAL_CPU), str(run_dir), ["serve.port=8091"], step="setup")  # as 00_setup opens it
    return run_dir


def test_an_empty_profile_is_the_runs_own(tmp_path: Path) -> None:
    run_dir = _started(tmp_path)
    run = notebook_run("", str(run_dir), [], step="sweeps")
    assert run.profile.serve.port == 8091 and run.loaded.overrides == ("serve.port=8091",)
    assert read_json(run_dir / "manifest.json").get("profile_changes", []) == []
    same = notebook_run(str(LOCAL_CPU), str(run_dir), ["serve.port=8091"], step="launch")  # as the runner passes it
    assert same.profile_hash == run.profile_hash


def test_a_changed_value_is_refused_naming_the_field_and_both_values(tmp_path: Path) -> None:
    run_dir = _started(tmp_path)
    before = (run_dir / "manifest.json").read_bytes()
    with pytest.raises(ProfileError) as raised:
        notebook_run("", str(run_dir), ["serve.port=8092", "sweeps.seed=7"], step="sweeps")
    message = str(raised.value)
    assert message.startswith("parameter overrides would change this run's profile (local-cpu, recorded in "
                              f"{run_dir / 'manifest.json'}): serve.port: the run's 8091, the new 8092; sweeps.seed: "
                              "the run's 0, the new 7. One run has one profile:")
    assert "allow_profile_change=True" in message
    assert (run_dir / "manifest.json").read_bytes() == before  # refused before anything was written
    with pytest.raises(ProfileError, match=r"^parameter overrides would change .*serve.port: the run's 8091, the "
                                           r"new 8088"):  # the run's own file, without the run's override
        notebook_run(str(LOCAL_CPU), str(run_dir), [], step="launch")


def test_another_profile_file_is_refused_as_the_parameter_profile(tmp_path: Path) -> None:
    run_dir = _started(tmp_path)
    other = REPO / "tests" / "data" / "profiles" / "generated-cpu.yaml"
    with pytest.raises(ProfileError, match=r"^parameter profile would change this run's profile \(local-cpu, .*"
                                           r"name: the run's \"local-cpu\", the new "):
        notebook_run(str(other), str(run_dir), [], step="launch")


def test_an_allowed_change_is_recorded_with_its_step_and_holds_for_the_steps_after(tmp_path: Path) -> None:
    run_dir = _started(tmp_path)
    run = notebook_run("", str(run_dir), ["serve.port=8092"], step="sweeps", allow_profile_change=True)
    assert run.profile.serve.port == 8092
    manifest = RunDir(run_dir).read_manifest()
    assert [(c.step, c.changed) for c in manifest.profile_changes] == [("sweeps", {"serve.port": [8091, 8092]})]
    assert manifest.profile_overrides == ["serve.port=8091", "serve.port=8092"]
    later = notebook_run("", str(run_dir), [], step="capacity")  # the run's profile is the changed one now
    assert later.profile.serve.port == 8092 and len(later.dir.read_manifest().profile_changes) == 1
    shown = profile_table(later).tables()[0]
    assert dict(shown.rows)["changed by a step"].startswith("sweeps at ")
    assert dict(shown.rows)["changed by a step"].endswith(": serve.port 8091 -> 8092")
    caveats = repr(section(run_dir, "Caveats"))  # the write-up says so too
    assert "A notebook changed the run's profile (allow_profile_change): sweeps at " in caveats


def test_the_recorded_values_open_the_run_where_its_profile_file_is_gone(tmp_path: Path) -> None:
    copied = tmp_path / "mine.yaml"
    shutil.copy(LOCAL_CPU, copied)
    run_dir = tmp_path / "run"
    notebook_run(str(copied), str(run_dir), [], step="setup")
    copied.unlink()
    assert notebook_run("", str(run_dir), [], step="writeup").profile.name == "local-cpu"


def test_an_empty_profile_on_a_new_run_directory_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"^parameter profile: empty, which means the run's own profile, but .* "
                                           r"records none yet; give a profile"):
        notebook_run("", str(tmp_path / "new"), [], step="launch")
    assert not (tmp_path / "new").exists()


def _executed_error(path: Path) -> nbformat.NotebookNode:
    executed = nbformat.read(path, as_version=4)
    return next(o for c in executed.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error")


def test_a_notebook_refuses_a_changed_parameter_with_the_short_error(tmp_path: Path) -> None:
    """05_writeup under papermill on a recorded run, with a port that is not the run's."""
    run_dir = copy_run(RUN_A, tmp_path)
    output = tmp_path / "out.ipynb"
    with pytest.raises(pm.PapermillExecutionError):
        pm.execute_notebook(str(REPO / "notebooks" / "05_writeup.ipynb"), str(output), kernel_name="python3",
                            progress_bar=False, parameters={"run_dir": str(run_dir), "overrides": ["serve.port=1"]})
    error = _executed_error(output)
    assert error.ename == "ProfileError" and error.traceback[-1] == FULL_TRACEBACK_HINT
    assert "serve.port: the run's 52619, the new 1" in error.evalue
    assert not (run_dir / "report").exists()
    assert "profile_changes" not in json.loads((run_dir / "manifest.json").read_text())
