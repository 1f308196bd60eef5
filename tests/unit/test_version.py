"""What a run and a derived file record of the ninferkit that made them: the commit, and whether the code differs.

Made on a real git checkout in tmp_path (git runs here): a package folder beside a docs/examples folder, as this
repository has. Rendering one published example rewrites tracked files under docs/examples/, and the whole-tree
status made every example rendered after it record "dirty": true for code that was the commit's.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from ninferkit.version import git_state


def _git(where: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(where), *args], check=True, capture_output=True, text=True).stdout.strip()


def _checkout(root: Path) -> Path:
    """A committed checkout with a package and an example; returns the package folder."""
    package, example = root / "ninferkit", root / "docs" / "examples" / "one"
    package.mkdir(parents=True)
    example.mkdir(parents=True)
    (package / "code.py").write_text("VALUE = 1\n")
    (example / "derived.json").write_text("{}\n")
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    return package


def test_a_changed_example_leaves_the_code_clean(tmp_path: Path) -> None:
    package = _checkout(tmp_path)
    (tmp_path / "docs" / "examples" / "one" / "derived.json").write_text('{"files": {}}\n')
    (tmp_path / "notes.txt").write_text("untracked, outside the package\n")
    assert _git(tmp_path, "status", "--porcelain")  # the tree is dirty
    assert git_state(package) == {"commit": _git(tmp_path, "rev-parse", "HEAD"), "dirty": False}


def test_a_changed_or_new_file_in_the_package_is_dirty(tmp_path: Path) -> None:
    package = _checkout(tmp_path)
    (package / "code.py").write_text("VALUE = 2\n")
    assert git_state(package)["dirty"] is True
    _git(tmp_path, "checkout", "--", "ninferkit")
    assert git_state(package)["dirty"] is False
    (package / "new.py").write_text("\n")
    assert git_state(package)["dirty"] is True


def test_outside_a_checkout_neither_is_known(tmp_path: Path) -> None:
    assert git_state(tmp_path) == {"commit": None, "dirty": None}

