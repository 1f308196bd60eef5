"""Progress: a bar on a terminal, plain lines at a steady pace elsewhere (a stall included), nothing with --quiet.

The ticker runs on its own clock; the tests shorten its interval and wait for the lines it prints (a
condition with a deadline, never a sleep that a timing must fit into).
"""

from __future__ import annotations

import ast
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ninferkit import progress
from ninferkit.errors import BadInput
from tests.conftest import REPO


@pytest.fixture
def fast_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(progress.MODE_VARIABLE, "lines")
    monkeypatch.setattr(progress, "LINE_INTERVAL_S", 0.05)


def _wait_for(condition: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)


def test_the_mode_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(progress.MODE_VARIABLE, raising=False)
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    assert progress.mode() == "lines"  # pytest's stderr is no terminal: no bar, whose frames a log cannot read
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert progress.mode() == "lines"
    monkeypatch.setenv(progress.MODE_VARIABLE, "bar")
    assert progress.mode() == "bar"
    monkeypatch.setenv(progress.MODE_VARIABLE, "off")
    assert progress.mode() == "off"
    monkeypatch.setenv(progress.MODE_VARIABLE, "loud")
    with pytest.raises(BadInput, match="NINFERKIT_PROGRESS='loud': allowed bar, lines, off"):
        progress.mode()


def test_a_stalled_piece_of_work_still_says_so_at_its_pace(fast_lines: None, capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    with progress.track("llama.cpp build", 100, "%") as shown:
        shown.advance_to(45)
        shown.note("[ 45%] Building CXX object src/CMakeFiles/llama.dir/llama-model.cpp.o")
        _wait_for(lambda: shown.ticks >= 3)  # nothing moves, and lines come all the same
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "llama.cpp build: 0%, 0 s"
    assert all(line.startswith("llama.cpp build: 45%, ") for line in lines[1:])
    assert "llama-model.cpp.o" in lines[1] and lines[-1].endswith("(done)")
    assert len(lines) >= 5 and not any("\r" in line for line in lines)


def test_a_download_line_has_bytes_total_and_rate(fast_lines: None, capsys: pytest.CaptureFixture[str]) -> None:
    with progress.track("downloading model.gguf", 8 * 2**20, byte_counts=True) as shown:
        shown.update(2 * 2**20)
        _wait_for(lambda: shown.ticks >= 1)
    line = capsys.readouterr().err.splitlines()[1]
    assert line.startswith("downloading model.gguf: 2.0 MiB of 8.0 MiB (25%) at "), line
    assert " MiB/s, " in line


def test_short_work_says_one_line_and_quiet_work_none(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(progress.MODE_VARIABLE, "lines")
    with progress.track("sweeps", 3, "cells") as shown:
        shown.update()
    assert capsys.readouterr().err == "sweeps: 0 of 3 cells (0%), 0 s\n"  # no tick came: no closing line either
    with progress.track("sweeps", 3, "cells", enabled=False) as shown:
        shown.update()
        shown.event("cell x failed")
    with progress.forced("off"), progress.track("sweeps", 3, "cells") as shown:
        shown.event("cell x failed")
    assert capsys.readouterr() == ("", "")


def test_a_bar_draws_frames_and_lines_do_not(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                                            ) -> None:
    monkeypatch.setenv(progress.MODE_VARIABLE, "bar")
    with progress.track("sweeps", 3, "cells") as shown:
        shown.update(3)
    assert "\r" in capsys.readouterr().err  # tqdm's frames: right on a terminal, unreadable in a log


def test_forced_restores_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(progress.MODE_VARIABLE, raising=False)
    with progress.forced("off"):
        assert progress.mode() == "off"
    assert progress.MODE_VARIABLE not in os.environ


def test_tqdm_is_used_only_through_the_progress_module() -> None:
    """One place decides bar or lines: a module importing tqdm itself would draw frames into a pipe again."""
    importers = []
    for path in sorted((REPO / "ninferkit").rglob("*.py")):
        tree = ast.parse(path.read_text())
        names = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
        names += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        if any(name.split(".")[0] == "tqdm" for name in names):
            importers.append(path.relative_to(REPO).as_posix())
    assert importers == ["ninferkit/progress.py"]


def kernel_outputs(tmp_path: Path) -> list[Any]:
    """The outputs of a cell that tracks three cells of work, in a kernel papermill starts with this
    process's environment."""
    import nbformat
    import papermill as pm

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(
        "import ninferkit.progress as p\nprint(p.mode())\nwith p.track('sweeps', 3, 'cells') as shown:\n"
        "    shown.update(3)", id="bar")]
    nbformat.write(notebook, tmp_path / "in.ipynb")
    pm.execute_notebook(str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb"), kernel_name="python3",
                        progress_bar=False, cwd=str(REPO))
    return list(nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[0].outputs)


def test_a_kernel_a_front_end_started_draws_a_widget_bar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel as JupyterLab starts it: no NINFERKIT_PROGRESS, and JPY_SESSION_NAME set, as jupyter_server
    sets it for a session's kernel (the signal progress._front_end_session reads): tqdm's notebook widget."""
    monkeypatch.delenv(progress.MODE_VARIABLE, raising=False)
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "in.ipynb"))
    outputs = kernel_outputs(tmp_path)
    assert [o.get("text") for o in outputs if o.output_type == "stream"] == ["bar\n"]
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)


def test_papermill_by_hand_shows_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel papermill executes with nothing set (papermill run by hand, not the runner): lines in the
    cell's printed output, which --log-output passes on, and no widget."""
    monkeypatch.delenv(progress.MODE_VARIABLE, raising=False)
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    outputs = kernel_outputs(tmp_path)
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert printed.startswith("lines\nsweeps: 0 of 3 cells (0%), 0 s\n")
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)


def test_a_download_over_http_ends_on_its_bytes_total_and_rate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """artifact.fetch.download against the loopback file server (tests/range_server.py), progress as lines."""
    from ninferkit.artifact.fetch import download
    from tests.range_server import RangeServer

    monkeypatch.setenv(progress.MODE_VARIABLE, "lines")
    monkeypatch.setattr(progress, "LINE_INTERVAL_S", 0.0001)  # a tick before the end: the last line states it
    (tmp_path / "served").mkdir()
    blob = (tmp_path / "served" / "model.gguf")
    blob.write_bytes(os.urandom(3 * 2**20))
    with RangeServer(tmp_path / "served") as server:
        download(f"{server.url}/model.gguf", tmp_path / "model.gguf", blob.stat().st_size)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "downloading model.gguf: 0.0 MiB of 3.0 MiB (0%), 0 s"
    assert lines[-1].startswith("downloading model.gguf: 3.0 MiB of 3.0 MiB (100%) at "), lines[-1]
    assert lines[-1].endswith("(done)") and " MiB/s, " in lines[-1]


def test_a_closed_bar_says_how_the_work_ended_not_its_last_note(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A bar (a widget in JupyterLab) stays on the page: its last frame keeps no raw server log line (issue 44)."""
    monkeypatch.setenv(progress.MODE_VARIABLE, "bar")
    raw = "srv  update_slots: all slots are idle"
    with progress.track("waiting for http://127.0.0.1:8080/health") as shown:
        shown.note(raw)
    last = capsys.readouterr().err.rstrip("\n").split("\r")[-1]
    assert raw not in last and last.rstrip().endswith("done"), last
    with pytest.raises(RuntimeError), progress.track("waiting") as shown:
        shown.note(raw)
        raise RuntimeError("the server exited")
    last = capsys.readouterr().err.rstrip("\n").split("\r")[-1]
    assert raw not in last and last.rstrip().endswith("stopped"), last
