"""No colour codes in logs: a kernel forces colour on what it starts, and ninferkit's children are told not to.

Issue 24 item 4: ipykernel sets CLICOLOR_FORCE=1 and FORCE_COLOR=1 in every kernel, the llama.cpp build ran
inside one, and cmake coloured its pipe (274 lines with escape codes in a piped ./scripts/runbook log).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ninferkit import progress
from ninferkit.plain_output import child_env, plain
from ninferkit.steps.runner import run_runbook
from tests.conftest import LOCAL_CPU
from tests.unit.steps.test_runner import _stand_in_setup

ESC = "\x1b"


def test_a_cmake_build_in_a_kernel_reaches_the_log_without_escape_codes(tmp_path: Path) -> None:
    """A real cmake configure and build (the Makefile generator colours its lines whenever CLICOLOR_FORCE is
    set, pipe or not) through the llama.cpp build's own runner of commands, in a kernel papermill starts as
    the headless runner does. The cell first shows the premise: the kernel forces colour, and cmake run with
    the kernel's environment colours its pipe; then nothing the build wrote reaches the runner's lines or the
    build log with an escape code."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.13)\nproject(tiny C)\n"
                                            "add_executable(tiny main.c)\n")
    (project / "main.c").write_text("int main(void) { return 0; }\n")
    out, log = tmp_path / "build", tmp_path / "build" / "build.log"
    source = (
        "import os, subprocess\n"
        "import ninferkit.progress as p\n"
        "from ninferkit.engines.llama_server.embedded import _run_logged\n"
        "p.LINE_INTERVAL_S = 0.05\n"
        "print('kernel forces colour:', os.environ.get('CLICOLOR_FORCE'), os.environ.get('FORCE_COLOR'))\n"
        "echoed = subprocess.run(['cmake', '-E', 'cmake_echo_color', '--red', 'x'], capture_output=True).stdout\n"
        "print('cmake with the kernel environment colours:', b'\\x1b[' in echoed)\n"
        f"out, log = {str(out)!r}, pathlib.Path({str(log)!r})\n"
        "log.parent.mkdir(parents=True)\n"
        "with log.open('a') as handle:\n"
        f"    _run_logged(['cmake', '-S', {str(project)!r}, '-B', out], handle, log, 'configure')\n"
        "    with p.track('tiny build', total=100, unit='%') as shown:\n"
        "        _run_logged(['cmake', '--build', out], handle, log, 'build', shown)\n"
        "print('built:', shown.count, shown.item)\n"
    )
    lines: list[str] = []
    result = run_runbook(LOCAL_CPU, tmp_path / "run", ["setup"], say=lines.append,
                         notebooks_dir=_stand_in_setup(tmp_path, "import pathlib\n" + source))
    assert [s.status for s in result.steps] == ["ok"]
    assert "  setup | kernel forces colour: 1 1" in lines
    assert "  setup | cmake with the kernel environment colours: True" in lines  # the test can fail
    assert any(line.startswith("  setup | tiny build: 0%") for line in lines)
    assert "  setup | built: 100 Built target tiny" in lines
    built = log.read_text()
    assert "Building C object" in built and "Linking C executable tiny" in built
    assert ESC not in built
    assert [line for line in lines if ESC in line] == []


def test_a_child_is_told_not_to_colour_and_keeps_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLICOLOR_FORCE", "1")
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("CLICOLOR", "1")
    env = child_env({"LLAMA_API_KEY": "k"})
    assert "CLICOLOR_FORCE" not in env and "FORCE_COLOR" not in env
    assert env["NO_COLOR"] == "1" and env["CLICOLOR"] == "0" and env["LLAMA_API_KEY"] == "k"
    assert env["PATH"] == os.environ["PATH"]


def test_progress_text_is_stripped_of_control_sequences() -> None:
    """A program that ignores NO_COLOR still reaches a progress line without its codes: colours (cmake's
    Makefile lines as printed under CLICOLOR_FORCE), an erase-line, a title (OSC)."""
    coloured = "\x1b[32m\x1b[1mLinking CXX executable ../../bin/llama-server\x1b[0m\x1b[K\x1b]0;title\x07"
    assert plain(coloured) == "Linking CXX executable ../../bin/llama-server"
    assert plain("a\tb\r\n") == "a\tb\r\n"
    shown = progress.track("llama.cpp build", 100, "%", enabled=False)
    shown.note("[ 45%] " + coloured)
    assert shown.item == "[ 45%] Linking CXX executable ../../bin/llama-server"
