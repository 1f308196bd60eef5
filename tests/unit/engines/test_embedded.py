"""The llama.cpp build: its output pipe is closed, its progress and lock speak, and it names its build.

A fresh clone builds llama-server inside the first live test; pytest turns warnings into errors
(pyproject filterwarnings), so an unclosed pipe there failed the test that happened to build.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

from ninferkit import progress
from ninferkit.engines.llama_server.embedded import (
    BUILD_RECORD,
    LLAMA_CPP_BUILD_NUMBER,
    LLAMA_CPP_COMMIT,
    _check_build_tools,
    _locked,
    _run_logged,
    configure_options,
    configured_with,
)
from ninferkit.errors import NinferkitError, ToolMissing
from ninferkit.params.profile import BuildSection


def test_a_logged_command_leaves_no_open_pipe(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with log.open("a") as handle:
            _run_logged(["sh", "-c", "echo '[ 50%] half'; echo '[100%] done'"], handle, log, "build")
        gc.collect()
    assert "[100%] done" in log.read_text()


def test_a_failed_command_names_its_log(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    with log.open("a") as handle, pytest.raises(NinferkitError, match="build failed \\(exit 3\\)"):
        _run_logged(["sh", "-c", "echo boom; exit 3"], handle, log, "build")


def test_a_wait_for_the_build_lock_names_the_process_that_holds_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Another process holds the lock (as a build in another notebook or test does for minutes): the waiting
    one says whose PID it waits for, and takes the lock, writing its own PID, once that process lets go."""
    monkeypatch.setenv(progress.MODE_VARIABLE, "lines")
    lock = tmp_path / ".build.lock"
    code = ("import sys; from pathlib import Path; from ninferkit.engines.llama_server.embedded import _locked\n"
            f"with _locked(Path({str(lock)!r}), 'llama.cpp build'):\n"
            "    print('held', flush=True); sys.stdin.readline()")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline() == "held\n"
        acquired = threading.Event()

        def wait_for_the_lock() -> None:
            with _locked(lock, "llama.cpp build"):
                acquired.set()
                assert lock.read_text() == f"{os.getpid()}\n"

        waiter = threading.Thread(target=wait_for_the_lock)
        waiter.start()
        said = ""
        deadline = time.monotonic() + 60
        while "held by PID" not in said:
            assert time.monotonic() < deadline and not acquired.is_set(), said
            said += capsys.readouterr().err
            time.sleep(0.01)
        assert said.startswith(f"waiting for the llama.cpp build lock held by PID {holder.pid} ({lock}): 0 s")
        holder.stdin.write("\n")
        holder.stdin.flush()
        waiter.join(timeout=60)
        assert acquired.is_set()
    finally:
        holder.kill()
        holder.wait()
        holder.stdin.close()
        holder.stdout.close()


def test_build_progress_follows_the_percent_and_the_file_at_hand(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    shown = progress.track("llama.cpp build", 100, "%", enabled=False)
    with log.open("a") as handle:
        _run_logged(["sh", "-c", "echo '[ 45%] Building CXX object src/llama-model.cpp.o'; echo 'ld: linking'"],
                    handle, log, "build", shown)
    assert shown.count == 45 and shown.item == "ld: linking"


def test_a_build_folder_records_its_options_and_a_stale_one_is_told_apart(tmp_path: Path) -> None:
    """A folder an older ninferkit built (no record, or other options) is not taken as current: the next
    build_llama_cpp configures it again in place."""
    options = configure_options(BuildSection())
    assert f"-DLLAMA_BUILD_NUMBER={LLAMA_CPP_BUILD_NUMBER}" in options and LLAMA_CPP_BUILD_NUMBER == 11434
    assert f"-DLLAMA_BUILD_COMMIT={LLAMA_CPP_COMMIT}" in options
    assert configured_with(tmp_path) is None
    (tmp_path / BUILD_RECORD).write_text(json.dumps({"configure": options[:-2]}))
    assert configured_with(tmp_path) != options
    (tmp_path / BUILD_RECORD).write_text("{torn")
    assert configured_with(tmp_path) is None


def _tools_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, names: dict[str, str]) -> None:
    """PATH = one folder holding links named `names` keys to the real programs named by their values."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, real in names.items():
        found = shutil.which(real)
        assert found, f"this test needs {real} on PATH"
        (folder / name).symlink_to(found)
    monkeypatch.setenv("PATH", str(folder))
    for variable in ("CC", "CXX", "CMAKE_GENERATOR"):
        monkeypatch.delenv(variable, raising=False)


def test_the_build_check_names_a_missing_make(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make = shutil.which("make")
    assert make, "this test needs make on PATH"
    _tools_only(tmp_path, monkeypatch, {"cmake": "cmake", "cc": "cc", "c++": "c++"})
    with pytest.raises(ToolMissing, match=r"needs make \(cmake's Unix Makefiles generator runs it\)\.") as raised:
        _check_build_tools(BuildSection())
    assert "conda env create -f environment.yml" in str(raised.value)
    (tmp_path / "bin" / "make").symlink_to(make)
    _check_build_tools(BuildSection())  # with make: nothing missing


def test_the_build_check_takes_the_compilers_from_cc_and_cxx_as_conda_sets_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """conda-forge's `compilers` installs x86_64-conda-linux-gnu-cc/-c++ and sets CC/CXX, with no cc or c++."""
    _tools_only(tmp_path, monkeypatch, {"cmake": "cmake", "make": "make", "x86_64-conda-linux-gnu-cc": "cc",
                                        "x86_64-conda-linux-gnu-c++": "c++"})
    monkeypatch.setenv("CC", "x86_64-conda-linux-gnu-cc")
    monkeypatch.setenv("CXX", "x86_64-conda-linux-gnu-c++ -std=c++17")
    _check_build_tools(BuildSection())
    monkeypatch.delenv("CXX")
    with pytest.raises(ToolMissing, match=r"needs a C\+\+ compiler as c\+\+ \(gcc/g\+\+ provide one; or set \$CXX\)"):
        _check_build_tools(BuildSection())
    monkeypatch.setenv("CMAKE_GENERATOR", "Ninja")
    monkeypatch.setenv("CXX", "x86_64-conda-linux-gnu-c++")
    with pytest.raises(ToolMissing, match=r"needs ninja \(cmake's Ninja generator runs it\)\."):
        _check_build_tools(BuildSection())
