"""A reader that stops early (`ninferkit schema | head -1`) ends the command quietly: no traceback, no error log."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO


def test_a_closed_pipe_ends_the_command_without_a_traceback() -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte: the first write meets EPIPE
    done = subprocess.run([sys.executable, "-m", "ninferkit", "schema"], cwd=REPO, stdout=write,
                          stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    os.close(write)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr
