"""The headless runner: notebooks under papermill against the live embedded server, and teardown."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from ninferkit import progress
from ninferkit.errors import StepFailed
from ninferkit.steps.runner import NOTEBOOKS_DIR, STEPS, PrintedLines, run_runbook
from tests.conftest import LOCAL_CPU, REPO, free_port


def notebooks_with(tmp_path: Path, sweeps_source: str | None) -> Path:
    """The real setup and launch notebooks, plus (optionally) a stand-in sweeps notebook."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    for step in ("setup", "launch"):
        shutil.copy(NOTEBOOKS_DIR / STEPS[step], folder)
    if sweeps_source is not None:
        notebook = nbformat.read(NOTEBOOKS_DIR / STEPS["setup"], as_version=4)
        notebook.cells = notebook.cells[:3] + [nbformat.v4.new_code_cell(sweeps_source, id="stand-in")]
        nbformat.write(notebook, folder / STEPS["sweeps"])
    return folder


def test_a_setup_error_stops_the_runner_before_the_launch(tmp_path: Path) -> None:
    """disk_low is an error on any machine for an artifact of 2**60 bytes: the setup step fails with the
    finding and its fix, and the launch step never runs (no server.json)."""
    run_dir = tmp_path / "run"
    with pytest.raises(StepFailed) as err:
        run_runbook(LOCAL_CPU, run_dir, ["setup", "launch"],
                    [f"serve.port={free_port()}", "artifact.size_bytes=1152921504606846976"],
                    notebooks_dir=notebooks_with(tmp_path, None), say=lambda line: None)
    assert err.value.step == "setup"
    assert "disk_low" in err.value.reason and "free disk space" in err.value.reason
    assert (run_dir / "probe.json").exists() and not (run_dir / "server.json").exists()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["planned_steps"] == ["setup", "launch"]
    assert manifest["steps"]["setup"]["status"] == "failed" and "launch" not in manifest["steps"]


def test_cli_rejects_a_bad_override_before_any_side_effect(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "ninferkit", "run", str(LOCAL_CPU), "--run-dir", str(tmp_path / "r"),
                           "-p", "serve.max_concurency=2"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2
    assert "did you mean 'max_concurrency'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "r").exists()


def test_an_ab_without_its_baseline_on_this_machine_is_refused_before_any_side_effect(tmp_path: Path) -> None:
    """A second profile with sweeps.ab (seed 000 §2.2's groupwise-int side) whose baseline run is not here: refused
    with the field named and exit 2 before the run directory exists (before the download and the launch); the
    sweep step used to be the first to look."""
    missing = tmp_path / "nvfp4-run"
    done = subprocess.run([sys.executable, "-m", "ninferkit", "run", str(LOCAL_CPU), "--run-dir", str(tmp_path / "r"),
                           "-p", "sweeps.ab.enabled=true", "-p", f"sweeps.ab.baseline_run_dir={missing}"],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2, done.stderr
    assert f"sweeps.ab.baseline_run_dir = '{missing}': no requests.jsonl there" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "r").exists()


def _stand_in_setup(tmp_path: Path, source: str) -> Path:
    """A notebooks folder whose setup step is the real parameters cell and one stand-in cell (no server)."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    notebook = nbformat.read(NOTEBOOKS_DIR / STEPS["setup"], as_version=4)
    parameters = [cell for cell in notebook.cells if "parameters" in cell.metadata.get("tags", [])]
    notebook.cells = parameters + [nbformat.v4.new_code_cell(source, id="stand-in")]
    nbformat.write(notebook, folder / STEPS["setup"])
    return folder


def test_what_a_step_prints_reaches_the_terminal_while_it_runs(tmp_path: Path) -> None:
    """The stand-in step waits until the runner has passed on two of its progress lines, so it can only end
    if they arrive while it runs; its kernel was told to show progress as lines. The executed notebook
    keeps the lines, and no other file of the run stores them."""
    release = tmp_path / "release"
    source = (f"import pathlib, time\nimport ninferkit.progress as p\np.LINE_INTERVAL_S = 0.05\n"
              f"print('kernel progress mode:', p.mode())\n"
              f"with p.track('stand-in work'):\n"
              f"    deadline = time.monotonic() + 120\n"
              f"    while not pathlib.Path({str(release)!r}).exists():\n"
              f"        assert time.monotonic() < deadline, 'no line reached the runner while the step ran'\n"
              f"        time.sleep(0.01)\n"
              f"print('a last line without its newline', end='')")
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        if sum("stand-in work" in seen for seen in lines) >= 2:
            release.touch()

    run_dir = tmp_path / "run"
    result = run_runbook(LOCAL_CPU, run_dir, ["setup"], notebooks_dir=_stand_in_setup(tmp_path, source), say=say)
    assert [s.status for s in result.steps] == ["ok"]
    step = lines[lines.index("[1/1] setup     running 00_setup.ipynb") + 1:]
    assert "  setup | kernel progress mode: lines" in step
    assert step[0].startswith("  setup | stand-in work: ") or step[1].startswith("  setup | stand-in work: ")
    assert "  setup | a last line without its newline" in step
    assert step[-1].startswith("[1/1] setup     ok")
    holders = [path.relative_to(run_dir).as_posix() for path in run_dir.rglob("*")
               if path.is_file() and b"stand-in work: " in path.read_bytes()]
    assert holders == ["notebooks/00_setup.ipynb"]


def test_a_quiet_run_tells_its_kernels_to_show_no_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(progress.MODE_VARIABLE, "off")
    lines: list[str] = []
    run_runbook(LOCAL_CPU, tmp_path / "run", ["setup"], say=lines.append,
                notebooks_dir=_stand_in_setup(tmp_path, "import ninferkit.progress as p\nprint(p.mode())"))
    assert "  setup | off" in lines


def test_printed_text_becomes_lines_as_they_end() -> None:
    lines: list[str] = []
    stream = PrintedLines(lines.append)
    stream.write("cell 1/4")
    assert lines == []  # half a line waits for its end
    stream.write(" done\nsha256 m: 10%\rsha256 m: 90%\r\n\n  \nlast")
    assert lines == ["cell 1/4 done", "sha256 m: 90%"]  # a rewritten line as its last state; no blank lines
    stream.close()
    assert lines[-1] == "last"
