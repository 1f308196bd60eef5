"""Streams spread over worker processes (measure/client_workers) against the stand-in streaming server in C
(benchmarks/standin_sse.c, built here with the system cc): paced, one chat chunk every 5 ms, each carrying the
CLOCK_MONOTONIC instant it was sent, so every stamp can be held against the truth."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ninferkit.engines import get_adapter
from ninferkit.host.cpu_idle import CpuIdle
from ninferkit.measure.client import RequestResult, RequestSpec, StreamingClient
from ninferkit.measure.client_clock import ClockWatch
from ninferkit.measure.client_workers import ClientCost, WorkerClient, client_cost, p99_wait_s, spread
from tests.conftest import REPO
from tests.standin_server import sent_at, standin

ADAPTER = get_adapter("llama_server")
SPEC = RequestSpec("chat", [{"role": "user", "content": "Write a haiku about a lighthouse."}], 24)


@pytest.fixture(scope="module")
def paced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with standin(tmp_path_factory.mktemp("standin")) as url:
        yield url


def test_rows_from_workers_mean_what_rows_from_one_process_mean(paced: str) -> None:
    async def both() -> tuple[list[RequestResult], list[RequestResult], ClockWatch]:
        async with StreamingClient(paced, ADAPTER, "embedded") as client:
            alone = await asyncio.gather(*(client.send(SPEC) for _ in range(6)))
        async with ClockWatch() as watch:
            async with WorkerClient(paced, ADAPTER, "embedded", workers=2, watch=watch) as spread_client:
                spread_rows = await asyncio.gather(*(spread_client.send(SPEC) for _ in range(6)))
        return alone, spread_rows, watch

    alone, spread_rows, watch = asyncio.run(both())
    assert [r.status for r in alone + spread_rows] == ["ok"] * 12
    assert {r.client_worker for r in alone} == {None} and {r.client_worker for r in spread_rows} == {0, 1}
    assert all(r.client_lag_max_s is not None for r in spread_rows)  # each worker's own loop, per request
    for ours, theirs in zip(alone, spread_rows, strict=True):
        mine, other = ours.row(), theirs.row()
        assert mine.keys() == other.keys()
        assert (mine["completion_tokens"], mine["text_events"], mine["finish_reason"]) == \
               (other["completion_tokens"], other["text_events"], other["finish_reason"]) == (24, 24, "length")
    for result in spread_rows:  # a worker's stamps are on the parent's clock: never before the server sent
        lags = [stamp - sent for stamp, sent in zip(result.text_event_times, sent_at(result), strict=True)]
        assert min(lags) >= 0
        assert result.t_send <= result.text_event_times[0] <= result.t_done  # type: ignore[operator]
    clock = watch.cell()
    assert clock.workers == 2 and clock.lag_max_s is not None and clock.cpu_share is not None
    assert clock.trouble == ()


def test_a_worker_that_dies_loses_only_its_requests_in_flight(paced: str) -> None:
    long = RequestSpec("chat", SPEC.messages, 400)  # 2 s at 5 ms a token: long enough to be killed mid-way

    async def cell() -> tuple[RequestResult, list[RequestResult], RequestResult, ClockWatch]:
        async with ClockWatch() as watch:
            async with WorkerClient(paced, ADAPTER, "embedded", workers=2, watch=watch) as client:
                before = await client.send(SPEC)
                flying = [asyncio.ensure_future(client.send(long)) for _ in range(4)]
                await asyncio.sleep(0.5)
                os.kill(client._workers[0].process.pid, signal.SIGKILL)
                in_flight = await asyncio.gather(*flying)
                after = await client.send(SPEC)
        return before, in_flight, after, watch

    before, in_flight, after, watch = asyncio.run(cell())
    assert before.status == "ok"
    lost = [r for r in in_flight if r.client_worker == 0]
    kept = [r for r in in_flight if r.client_worker == 1]
    assert len(lost) == len(kept) == 2
    assert all(r.status == "errored" and r.error is not None and "client worker 0 died (signal 9)" in r.error
               for r in lost)
    assert all(r.status == "ok" and r.completion_tokens == 400 for r in kept)
    assert after.status == "ok" and after.client_worker == 1  # the worker left takes what follows
    clock = watch.cell()
    assert clock.workers == 2 and len(clock.trouble) == 1 and "client worker 0 died" in clock.trouble[0]


def test_the_cost_of_an_event_is_measured_here() -> None:
    cost = client_cost()
    assert 0 < cost.event_s < 0.01 and "600 events" in cost.source
    assert client_cost() is cost  # once per process


def idle(*shares: float) -> Callable[[], CpuIdle]:
    return lambda: CpuIdle(dict(enumerate(shares)), "recorded shares")


def test_how_many_processes_follows_the_load_the_measured_cost_and_how_idle_the_cpus_are() -> None:
    cost = ClientCost(40e-6, "test")
    never: Callable[[], CpuIdle] = lambda: pytest.fail("the CPUs measured where one process does")  # noqa: E731
    assert spread(None, 0.005, cost, never).workers == 1  # no gap known yet: the cell's own process
    assert spread(5000, None, cost, never).workers == 1
    light = spread(1000, 0.005, cost, never)  # 0.04 of a core: one process, with no need to measure the CPUs
    assert light.workers == 1 and "one process on a core of its own waits" in light.why
    quiet = spread(64 / 0.005, 0.005, cost, idle(1.0, 1.0))  # 0.51 of a core: one waits past 5% of the gap
    assert quiet.workers == 2 and "2.00 cores idle (recorded shares)" in quiet.why
    assert p99_wait_s(cost.event_s, 0.51, 1.0) > 0.05 * 0.005 >= p99_wait_s(cost.event_s, 0.51 / 2, 1.0)
    # the same load on a machine other work keeps busy (issue 43: workers made its ITL worse there): one process
    loaded = spread(64 / 0.005, 0.005, cost, idle(0.04, 0.03))
    assert loaded.workers == 1 and "0.07 cores idle" in loaded.why and "cannot vouch" in loaded.why
    half = spread(64 / 0.005, 0.005, cost, idle(0.97, 0.35))  # one idle core: one process, whatever the count
    assert half.workers == 1 and "at most 1 process," in half.why
    heavy = spread(256 / 0.005, 0.005, cost, idle(0.98, 0.99, 0.97, 0.99))  # 2.05 cores over 4 idle ones
    assert heavy.workers == 4 and "saturate" not in heavy.why
    two = spread(256 / 0.005, 0.005, cost, idle(1.0, 1.0))  # more than 2 idle cores carry: the most there are
    assert two.workers == 2 and "at most 2 processes, which saturate" in two.why
    assert spread(64 / 0.005, 0.005, cost, lambda: None).workers == 1  # not measured: unknown, never idle
    assert p99_wait_s(cost.event_s, 0.5, 0.5) == math.inf  # a CPU idle only as long as the load needs: saturated


def test_a_worker_is_a_fresh_interpreter_on_the_parents_ninferkit(paced: str, tmp_path: Path) -> None:
    """Started from a script that has no `if __name__ == "__main__"` guard, in another folder (multiprocessing's
    spawn would run the script again in each worker), whose working folder holds another ninferkit (a checkout
    beside it: `python -m` would import that one first)."""
    (tmp_path / "ninferkit").mkdir()
    (tmp_path / "ninferkit" / "__init__.py").write_text('raise ImportError("the working folder\'s ninferkit")\n')
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "unguarded.py"
    script.write_text(
        "import asyncio, sys\n"
        "from ninferkit.engines import get_adapter\n"
        "from ninferkit.measure.client import RequestSpec\n"
        "from ninferkit.measure.client_workers import WorkerClient\n"
        "async def go():\n"
        "    async with WorkerClient(sys.argv[1], get_adapter('llama_server'), 'embedded', workers=2) as c:\n"
        "        r = await c.send(RequestSpec('chat', [{'role': 'user', 'content': 'hi'}], 4))\n"
        "    print(r.status, r.client_worker)\n"
        "asyncio.run(go())\n")
    done = subprocess.run([sys.executable, str(script), paced],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ok", "0"]
