"""The live embedded llama-server (built or found once), shared by the tests that send it requests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ninferkit import server, steps
from ninferkit.embedded import llama_server_binary
from ninferkit.params.profile import BuildSection
from ninferkit.runs import Run, open_run
from tests.conftest import LOCAL_CPU, free_port


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
