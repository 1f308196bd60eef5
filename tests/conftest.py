"""What both kinds of test share: the repository's paths and a free loopback port.

tests/unit needs nothing but the checkout and runs in seconds to minutes; tests/live starts the embedded
llama-server (built or found on first use) or reaches a package index, and every test there carries the
`live` marker, so `-m "not live"` (or `pytest tests/unit`) is the quick run."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ninferkit.report import Report

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
LIVE = REPO / "tests" / "live"
LOCAL_CPU = REPO / "params" / "local-cpu.yaml"
GENERATED_CPU = REPO / "tests" / "data" / "profiles" / "generated-cpu.yaml"
"""The embedded default before issue 18 (a generated 4-layer model): for tests whose arithmetic needs its shape."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The folder decides: everything under tests/live is `live`."""
    for item in items:
        if LIVE in item.path.parents:
            item.add_marker(pytest.mark.live)


def assert_regenerates(example: Path, run: Path, how: str) -> None:
    """A published example's write-up (post and appendix) is what the report code makes of its raw files now
    (`run`: a copy of them, reported again), below its first lines (the title and when it was made); `how` says
    what to run and commit when it is not."""
    for stem in ("index", "appendix"):
        committed = (example / "report" / f"{stem}.md").read_text()
        made = (run / "report" / f"{stem}.md").read_text()
        assert committed.split("\n", 3)[3] == made.split("\n", 3)[3], (
            f"the committed {stem}.md differs from what the report code makes of the same raw files now: {how}")


def whole(report: Report) -> str:
    """A write-up's post (index.md) and its appendix (appendix.md) as one text: each heading is in one or the
    other, and a test of what the write-up says reads both."""
    return report.markdown.read_text() + "\n" + report.appendix["markdown"].read_text()
