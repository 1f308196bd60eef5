"""Shared fixtures: the live embedded llama-server (built or found once) on a free loopback port."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from ninferkit import server, steps
from ninferkit.embedded import llama_server_binary
from ninferkit.params.profile import BuildSection
from ninferkit.runs import Run, open_run

REPO = Path(__file__).resolve().parent.parent
LOCAL_CPU = REPO / "params" / "local-cpu.yaml"
GENERATED_CPU = REPO / "tests" / "data" / "profiles" / "generated-cpu.yaml"
"""The embedded default before issue 18 (a generated 4-layer model): for tests whose arithmetic needs its shape."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def llama_server() -> Path:
    """The embedded llama-server binary (the first call may build it: minutes on 2 cores)."""
    return llama_server_binary(None, BuildSection())


@pytest.fixture(scope="session")
def live_run(tmp_path_factory: pytest.TempPathFactory, llama_server: Path) -> Iterator[Run]:
    """A run of the embedded default with its server up; shared by tests that only send requests."""
    run = open_run(LOCAL_CPU, tmp_path_factory.mktemp("live-run"), [f"serve.port={free_port()}"])
    steps.launch(run, progress=False)
    yield run
    server.stop(run.dir)
