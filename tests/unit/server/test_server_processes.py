"""How the server's lifecycle sees processes (psutil): a group's members, zombies left out, and whether one of
them holds the listening socket of a port. Real processes in their own session, real sockets on loopback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from ninferkit.server import process as server

LISTENER = """
import socket, subprocess, sys
family = socket.AF_INET6 if sys.argv[1] == "6" else socket.AF_INET
listener = socket.socket(family)
listener.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
listener.listen()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(listener.getsockname()[1], child.pid, flush=True)
sys.stdin.read()
"""
"""A group leader that listens on a free port and starts a child in its own group; prints both."""


@pytest.fixture(params=["4", "6"])
def group(request: pytest.FixtureRequest) -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    if request.param == "6" and not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    with subprocess.Popen([sys.executable, "-c", LISTENER, request.param], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True, start_new_session=True) as leader:
        assert leader.stdout is not None
        port, child = (int(word) for word in leader.stdout.readline().split())
        try:
            yield leader, port, child
        finally:
            os.killpg(leader.pid, signal.SIGKILL)  # the group, zombies included, is gone once reaped


def test_a_group_lists_its_members_and_who_listens(group: tuple[subprocess.Popen[str], int, int]) -> None:
    leader, port, child = group
    assert sorted(server._group_pids(leader.pid)) == sorted([leader.pid, child])
    assert server._listens(leader.pid, port)
    with socket.create_server(("127.0.0.1", 0)) as ours:  # a port someone else (this test) listens on
        assert not server._listens(leader.pid, ours.getsockname()[1])
    assert os.getpid() not in server._group_pids(leader.pid)


def test_zombies_are_not_live_members(group: tuple[subprocess.Popen[str], int, int]) -> None:
    leader, _, child = group
    os.kill(child, signal.SIGKILL)  # its parent, the leader, never waits for it: it stays a zombie
    _until_zombie(child)
    assert server._group_pids(leader.pid) == [leader.pid]
    os.kill(leader.pid, signal.SIGKILL)  # ours to reap: a zombie until leader.wait()
    _until_zombie(leader.pid)
    assert not server._group_alive(leader.pid)


def _until_zombie(pid: int) -> None:
    deadline = time.monotonic() + 10
    while psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"process {pid} did not become a zombie"
        time.sleep(0.02)
