"""The live embedded llama-server (built or found once), shared by the tests that send it requests."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ninferkit import steps
from ninferkit.engines.llama_server.embedded import llama_server_binary
from ninferkit.errors import ServerExited
from ninferkit.params.profile import BuildSection
from ninferkit.rundir.runs import Run, open_run, read_json
from ninferkit.server import process as server
from ninferkit.steps.sweeps import sweeps
from tests.conftest import LOCAL_CPU, free_port


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded llama-server binary (the first call may build it: minutes on 2 cores), and the embedded
    default's model in the cache, fetched and checked by the verify step as a user's first run does: tests
    launch without a verify step of their own, and on a fresh cache (a fresh clone's first `./scripts/test`)
    the first of them used to find no model."""
    binary = llama_server_binary(None, BuildSection())
    steps.verify(open_run(LOCAL_CPU, tmp_path_factory.mktemp("embedded-model")), progress=False)
    return binary


@pytest.fixture(scope="session")
def live_run(tmp_path_factory: pytest.TempPathFactory, llama_server: Path) -> Iterator[Run]:
    """A run of the embedded default with its server up; shared by tests that only send requests."""
    run = open_run(LOCAL_CPU, tmp_path_factory.mktemp("live-run"), [f"serve.port={free_port()}"])
    steps.launch(run, progress=False)
    yield run
    server.stop(run.dir)


def sweep_with_the_server_killed(run: Run, only: str, when: Callable[[], bool] | None = None) -> None:
    """Run the `only` sweep and kill the server's process group (SIGKILL) as soon as `when` says so (by default
    once the first cell's ledger line is written), as a crashed engine dies mid-sweep; the sweep must stop with
    ServerExited."""
    ledger = run.dir.sweep_cells
    now = when or ledger.exists

    def kill_after_the_first_cell() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not now():
            time.sleep(0.005)
        os.killpg(read_json(run.dir.server)["pgid"], signal.SIGKILL)

    killer = threading.Thread(target=kill_after_the_first_cell)
    killer.start()
    try:
        with pytest.raises(ServerExited):
            sweeps(run, only=only, progress=False)
    finally:
        killer.join()
        server.stop(run.dir)
