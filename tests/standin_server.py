"""The stand-in streaming server in C (benchmarks/standin_sse.c) for tests: built with the system cc, serving on a
free loopback port, llama-server's chat chunks paced one every 5 ms (or flooded), each carrying the CLOCK_MONOTONIC
instant it was sent, so a client's stamps can be held against the truth."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ninferkit.measure.client import RequestResult
from tests.conftest import REPO


@contextmanager
def standin(workdir: Path, mode: str = "paced") -> Iterator[str]:
    """The stand-in built in `workdir` and serving in `mode`: its base URL; stopped on the way out. Skips the test
    where there is no C compiler."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the stand-in server")
    binary = workdir / "standin_sse"
    subprocess.run(["cc", "-O2", "-pthread", "-o", str(binary), str(REPO / "benchmarks" / "standin_sse.c")],
                   check=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([str(binary), str(port), mode], stdout=subprocess.PIPE)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == b"listening"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)
        if server.stdout is not None:
            server.stdout.close()


def sent_at(result: RequestResult) -> list[float]:
    """The stand-in's send instants, from the text it streamed ("<ns>;" per token), in seconds."""
    return [int(part) / 1e9 for part in result.reply.text.split(";") if part]
