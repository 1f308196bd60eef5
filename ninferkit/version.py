"""ninferkit's version, one place: the packaging reads it, results record it, the write-up prints it. A leaf,
so the run files (runs.py) and the write-up take it without importing the package's __init__ (which names
the steps above them)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

__version__ = "0.1.0"


def git_state(where: Path) -> dict[str, Any]:
    """The commit of the ninferkit checkout and whether it had uncommitted changes."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}
