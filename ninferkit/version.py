"""ninferkit's version, one place: the packaging reads it, results record it, the write-up prints it. A leaf,
so the run files (runs.py) and the write-up take it without importing the package's __init__ (which names
the steps above them)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

__version__ = "0.1.0"

PACKAGE = Path(__file__).resolve().parent
"""The code whose state is recorded: this package's folder in its checkout."""


def git_state(package: Path = PACKAGE) -> dict[str, Any]:
    """The commit of the checkout that holds `package` and whether the code in `package` differs from it
    ("dirty"). Only the package counts: rendering one published example rewrites tracked files under
    docs/examples/, and a whole-tree status made every later example record "dirty": true for code that was
    the commit's. The two git commands run at once (`--version` waits for the slower, not for both in turn)."""
    commands = (["rev-parse", "HEAD"], ["status", "--porcelain", "--", "."])
    try:
        running = [subprocess.Popen(["git", "-C", str(package), *args], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
                   for args in commands]
    except OSError:
        return {"commit": None, "dirty": None}
    answers: list[str | None] = []
    for process in running:
        try:
            out, _ = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            out = None
        answers.append(out.strip() if out is not None and process.returncode == 0 else None)
    commit, status = answers
    return {"commit": commit, "dirty": bool(status) if status is not None else None}
