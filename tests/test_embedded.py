"""The build helper that runs cmake: its output pipe is closed, so no ResourceWarning escapes.

A fresh clone builds llama-server inside the first live test; pytest turns warnings into errors
(pyproject filterwarnings), so an unclosed pipe there failed the test that happened to build.
"""

from __future__ import annotations

import gc
import warnings
from pathlib import Path

import pytest

from ninferkit.embedded import _run_logged
from ninferkit.errors import NinferkitError


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
