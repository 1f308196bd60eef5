"""Streams spread over worker processes, when one process cannot stamp them all honestly (issue 43, item 2).

One process reads every stream of a cell on one event loop: each socket read costs it some CPU (`client_cost`),
and while it is busy with one read the others wait, so their stamps are late by the queue. Past a load its core
cannot carry with the loop still free, the lag is the client's, and the tables would publish it as the server's
inter-token time. So:

- `client_cost` MEASURES what one event costs this process: a loopback server in a thread sends llama-server's
  chat chunks one at a time, a few hundred microseconds apart (one socket read per event, the costly case), and
  the reading thread's own CPU time (`time.thread_time`) over the events it stamped is the cost, the real read
  path included (the selector, `sse_wire`'s framing and split, each event's parse). Once per process, ~0.2 s.
- `spread` turns that into a number of processes for a cell's expected load (events per second, and the gap
  between a stream's events): a process reading at CPU share rho queues a read behind the others; taken as an
  M/M/1 queue of reads, its p99 wait is cost * ln(100 rho) / (1 - rho), and on a CPU idle only part of the time
  each read costs as much more. The cell gets the fewest processes whose p99 wait stays within
  client_clock.VOUCH_SHARE of the gap on the CPUs' idle time as measured just then (host/cpu_idle), not their
  count: on a machine other work keeps busy, a second process gets no core of its own.
- `WorkerClient` is a StreamingClient over those processes: each worker runs one event loop with its own
  StreamingClient and ClockWatch; the parent sends it a request, the worker sends back the finished result with
  its own loop's lag over that request, and the row says which worker stamped it (`client_worker`). Clocks agree
  across processes: `time.monotonic()` is the machine's CLOCK_MONOTONIC.

A worker that dies loses only the requests it had in flight: every row it sent before is already the parent's
(and written by the sweep's Recorder as it came); those in flight come back as errored rows naming the death,
later requests go to the workers left, and the cell's watch says so (`ClockWatch.absorb`).
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from types import TracebackType

from ninferkit.engines import get_adapter
from ninferkit.engines.api_dialect import ApiDialect
from ninferkit.host.cpu_idle import CpuIdle
from ninferkit.measure.client import RequestResult, RequestSpec, StreamingClient
from ninferkit.measure.client_clock import CPU_SHARE_LIMIT, VOUCH_SHARE, CellClock, ClockWatch
from ninferkit.redaction import scrub

CALIBRATION_REQUESTS = 2
CALIBRATION_EVENTS = 300
"""Events per calibration request: enough that a request's own cost (its connection, its body) is a small share."""
CALIBRATION_GAP_S = 0.0002
"""The calibration server's pause between events, so each arrives in a socket read of its own."""
WORKER_START_S = 60.0
"""How long a worker may take to start (a fresh interpreter imports ninferkit) before the cell fails."""
_CHUNK = (b'{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"%d "}}],"created":1796036358,'
          b'"id":"chatcmpl-calibration","model":"calibration","system_fingerprint":"b0-unknown",'
          b'"object":"chat.completion.chunk"}')
"""A llama-server chat chunk (live capture of the embedded server's, the id and content changed)."""
_LAST = (b'{"choices":[],"usage":{"completion_tokens":%d,"prompt_tokens":9,"total_tokens":%d},'
         b'"timings":{"prompt_n":9,"prompt_ms":1.0,"predicted_n":%d,"predicted_ms":60.0}}')

_PACKAGE_ROOT = Path(__file__).resolve().parents[2]
"""The folder that holds this ninferkit package: a worker runs the parent's own code, not an installed copy."""


@dataclass(frozen=True)
class ClientCost:
    """What one event cost this process to read, in CPU seconds, and how it was found."""

    event_s: float
    source: str


@dataclass(frozen=True)
class Spread:
    """How many processes a cell's streams need (1: the cell's own), and why, in words for the cell's notes."""

    workers: int
    why: str


@functools.cache
def client_cost() -> ClientCost:
    """This process's CPU seconds per streamed event, measured once (module docstring); in a thread of its own,
    so a running event loop (a notebook's) is neither needed nor disturbed."""
    outcome: list[ClientCost | BaseException] = []

    def measure() -> None:
        try:
            outcome.append(asyncio.run(_calibrate()))
        except BaseException as exc:  # handed to the caller, whose traceback it then is
            outcome.append(exc)

    thread = threading.Thread(target=measure, name="ninferkit-client-cost")
    thread.start()
    thread.join()
    found = outcome[0]
    if isinstance(found, BaseException):
        raise found
    return found


async def _calibrate() -> ClientCost:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = threading.Thread(target=_calibration_server, args=(listener,), daemon=True)
    server.start()
    try:
        spec = RequestSpec("chat", [{"role": "user", "content": "calibration"}], CALIBRATION_EVENTS)
        async with StreamingClient(f"http://127.0.0.1:{port}", get_adapter("llama_server"), "calibration",
                                   timeout_s=30.0) as client:
            cpu0 = time.thread_time()
            results = [await client.send(spec) for _ in range(CALIBRATION_REQUESTS)]
            cpu = time.thread_time() - cpu0
    finally:
        listener.close()
    events = sum(len(result.text_event_times) for result in results)
    if not events or any(result.status != "ok" for result in results):
        raise RuntimeError(f"the client's calibration stream failed: {[r.error for r in results]}")
    return ClientCost(cpu / events, f"{events} events over loopback, one socket read each, "
                                   f"{cpu * 1000:.1f} ms of the reading thread's CPU")


def _calibration_server(listener: socket.socket) -> None:
    """Answers the calibration's requests on one kept-alive connection: each event its own chunk and send."""
    with listener:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(CALIBRATION_REQUESTS):
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            head, _, body = request.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            for index in range(CALIBRATION_EVENTS):
                conn.sendall(_event(_CHUNK % index))
                time.sleep(CALIBRATION_GAP_S)
            conn.sendall(_event(_LAST % (CALIBRATION_EVENTS, CALIBRATION_EVENTS + 9, CALIBRATION_EVENTS))
                         + _event(b"[DONE]") + b"0\r\n\r\n")


def _event(data: bytes) -> bytes:
    line = b"data: " + data + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(line), line)


def p99_wait_s(event_s: float, load: float, idle: float) -> float:
    """The p99 wait of a read in a process that carries `load` cores of reads costing `event_s` each, on a CPU idle
    `idle` of the time (it runs only then: each read takes event_s / idle), as an M/M/1 queue (module docstring);
    infinite where it would be busier than CPU_SHARE_LIMIT of what it gets (its reads queue without bound)."""
    rho = load / idle if idle > 0 else math.inf
    if rho >= CPU_SHARE_LIMIT:
        return math.inf
    return event_s / idle * max(0.0, math.log(100 * rho)) / (1 - rho) if rho > 0 else 0.0


def spread(events_per_s: float | None, gap_s: float | None, cost: ClientCost,
           idle: Callable[[], CpuIdle | None]) -> Spread:
    """How many processes read a cell whose streams are expected to bring `events_per_s` events a second, each
    `gap_s` apart; one (the cell's own) where the load is unknown (no earlier request to learn the gap from).

    Processes are weighed against what the CPUs can give now, not their count: `idle` measures each usable CPU's
    idle share (host/cpu_idle: /proc/stat over a window; asked only where one process on a core of its own would
    not do). There are at most as many processes as idle cores (the shares summed, to the nearest whole; at
    least one): a process beyond them gets no core of its own, it takes CPU from other work and waits its turn
    at every read (issue 43: workers made 64 streams' ITL worse on a loaded 2-core box, 2.0-2.4x the truth
    against 1.1-1.3x for one process). Among those, P processes on the P most idle CPUs each carry 1/P of the
    load on its CPU's idle time: the fewest whose p99 wait stays within VOUCH_SHARE of the gap, else the number
    with the least wait (the most, where every number saturates)."""
    if events_per_s is None or gap_s is None or gap_s <= 0:
        return Spread(1, "one client process: the gap between a stream's events is not known yet")
    load = events_per_s * cost.event_s
    budget = VOUCH_SHARE * gap_s
    said = (f"{events_per_s:,.0f} events/s expected at {cost.event_s * 1e6:.0f} us of client CPU each "
            f"(measured: {cost.source}) is {load:.2f} of a core, and a read may wait {budget * 1000:.2f} ms at p99 "
            f"({VOUCH_SHARE:.0%} of the {gap_s * 1000:.1f} ms gap)")
    alone = p99_wait_s(cost.event_s, load, 1.0)
    if alone <= budget:
        return Spread(1, f"one client process: {said}; one process on a core of its own waits "
                         f"{alone * 1000:.2f} ms")
    unsure = "the rows' own lag says which the client cannot vouch for"
    measured = idle()
    if measured is None:
        return Spread(1, f"one client process: {said}, more than one process on a core of its own, but how idle "
                         f"the CPUs are could not be read (/proc/stat): {unsure}")
    shares = measured.most_idle()
    cores = max(1, min(len(shares), round(sum(shares))))
    waits = [max(p99_wait_s(cost.event_s, load / count, share) for share in shares[:count])
             for count in range(1, cores + 1)]
    fits = [count for count, wait in enumerate(waits, 1) if wait <= budget]
    count = fits[0] if fits else max(range(1, cores + 1), key=lambda n: (-waits[n - 1], n))
    wait = waits[count - 1]
    where = f"{sum(shares):.2f} cores idle ({measured.source})"
    who = "one client process" if count == 1 else f"{count} client worker processes"
    if fits:
        return Spread(count, f"{who}: {said}; {where}: {count} on the most idle wait {wait * 1000:.2f} ms at p99")
    waited = "saturate" if math.isinf(wait) else f"wait {wait * 1000:.2f} ms at p99"
    most = f"at most {cores} process" + ("es" if cores > 1 else "")
    return Spread(count, f"{who}: {said}; {where}: {most}, which {waited}: {unsure}")


@dataclass
class _Worker:
    index: int
    process: subprocess.Popen[bytes]
    conn: Connection
    pending: dict[int, tuple[asyncio.Future[RequestResult], RequestSpec, float]]
    alive: bool = True


class WorkerClient:
    """StreamingClient's `send` over `workers` processes (module docstring); open it with `async with`, inside
    the cell's `ClockWatch` when there is one (`watch`: each worker's clock and any death are handed to it)."""

    def __init__(self, base_url: str, adapter: ApiDialect, model_id: str, *, workers: int,
                 headers: dict[str, str] | None = None, timeout_s: float = 600.0,
                 watch: ClockWatch | None = None) -> None:
        self.adapter, self.watch = adapter, watch
        self._config = (base_url, adapter.kind, model_id, dict(headers or {}), timeout_s)
        self._count = workers
        self._workers: list[_Worker] = []
        self._next_id = 0
        self._clocks: dict[int, CellClock] = {}
        self._deaths: dict[int, str] = {}

    async def __aenter__(self) -> WorkerClient:
        loop = asyncio.get_running_loop()
        # a fresh interpreter each (no fork of a process running an event loop and threads, and unlike
        # multiprocessing's spawn, no re-run of the caller's main module), on the parent's own ninferkit (-P:
        # not another checkout's that the working folder holds, which `-m` would put first); the config (the
        # key in the headers with it) goes over the socket, never in argv
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(_PACKAGE_ROOT),
                                                                        os.environ.get("PYTHONPATH")]))}
        for index in range(self._count):
            ours, theirs = socket.socketpair()
            with theirs:
                process = subprocess.Popen([sys.executable, "-P", "-m", "ninferkit.measure.client_workers",
                                            str(theirs.fileno())], pass_fds=[theirs.fileno()], env=env,
                                           stdin=subprocess.DEVNULL)
            conn = Connection(ours.detach())
            self._workers.append(_Worker(index, process, conn, {}))
            conn.send(self._config)
        try:
            for worker in self._workers:  # started together, waited for in turn: the slowest one's start-up
                ready = await asyncio.wait_for(asyncio.to_thread(worker.conn.recv), WORKER_START_S)
                if ready != "ready":
                    raise RuntimeError(f"client worker {worker.index} did not start: {ready}")
                loop.add_reader(worker.conn.fileno(), self._receive, worker)
        except BaseException:
            await self._stop(clocks=False)
            raise
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._stop(clocks=kind is None)  # a cell that broke off (cancelled, a stop rule) waits for no stream

    async def send(self, spec: RequestSpec) -> RequestResult:
        """Stream one request on the least busy live worker; its finished row, or an errored one where no worker
        is left or the worker died with it in flight."""
        live = [worker for worker in self._workers if worker.alive]
        if not live:
            return _lost(spec, time.monotonic(), None, "no client worker process is left: " + "; ".join(
                self._deaths.values()))
        worker = min(live, key=lambda w: len(w.pending))
        self._next_id += 1
        done: asyncio.Future[RequestResult] = asyncio.get_running_loop().create_future()
        worker.pending[self._next_id] = (done, spec, time.monotonic())
        try:
            worker.conn.send((self._next_id, spec))
        except OSError:
            self._died(worker)
        return await done

    def _receive(self, worker: _Worker) -> None:
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            self._died(worker)
            return
        if message[0] == "clock":
            self._clocks[worker.index] = message[1]
            return
        _, request_id, result = message
        entry = worker.pending.pop(request_id, None)
        if entry is not None and not entry[0].done():
            result.client_worker = worker.index
            entry[0].set_result(result)

    def _died(self, worker: _Worker) -> None:
        """The worker's pipe closed: a death, unless it had sent its clock with nothing in flight (it ended)."""
        if not worker.alive:
            return
        worker.alive = False
        asyncio.get_running_loop().remove_reader(worker.conn.fileno())
        if worker.index in self._clocks and not worker.pending:
            return
        try:
            code: int | None = worker.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        how = f"signal {-code}" if code is not None and code < 0 else f"exit status {code}"
        said = (f"client worker {worker.index} died ({how}) with {len(worker.pending)} requests in flight: "
                "those are errored rows, its rows before are kept")
        self._deaths[worker.index] = said
        for done, spec, sent in worker.pending.values():
            if not done.done():
                done.set_result(_lost(spec, sent, worker.index, said))
        worker.pending.clear()

    async def _stop(self, *, clocks: bool) -> None:
        """With `clocks`, ask each live worker to finish (its clock comes back; it has nothing in flight: every
        send has returned), then end every process, each worker's clock, or why there is none, handed to the
        watch; without, end them at once (their streams in flight are dropped, as a cancelled send's are)."""
        loop = asyncio.get_running_loop()
        for worker in self._workers:
            if worker.alive and not clocks:
                worker.process.kill()
            elif worker.alive:
                try:
                    worker.conn.send(None)
                except OSError:
                    self._died(worker)
        for worker in self._workers:
            if clocks and worker.alive:
                deadline = time.monotonic() + 10
                while worker.alive and worker.index not in self._clocks and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
            if worker.alive:
                loop.remove_reader(worker.conn.fileno())
                worker.alive = False
            try:
                await asyncio.to_thread(worker.process.wait, 10)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                await asyncio.to_thread(worker.process.wait)
            worker.conn.close()
            if clocks and self.watch is not None:
                self.watch.absorb(self._clocks.get(worker.index), self._deaths.get(worker.index))


def _lost(spec: RequestSpec, sent: float, worker: int | None, why: str) -> RequestResult:
    """The row of a request whose worker is gone: errored, sent when the parent handed it over."""
    return RequestResult(api=spec.api, status="errored", error=f"ClientWorkerDied: {why}", t_send=sent,
                         t_done=time.monotonic(), temperature=spec.temperature, max_tokens=spec.max_tokens,
                         client_worker=worker)


def _worker_main(fd: int) -> None:
    """A worker process (`python -m ninferkit.measure.client_workers FD`): one event loop, one StreamingClient,
    one ClockWatch, until the parent says stop or goes."""
    conn = Connection(fd)
    try:
        asyncio.run(_worker(conn))
    except KeyboardInterrupt:  # the parent's Ctrl-C reaches its whole process group: the parent reports it
        pass


async def _worker(conn: Connection) -> None:
    base_url, engine, model_id, headers, timeout_s = conn.recv()
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple[int, RequestSpec] | None] = asyncio.Queue()

    def read() -> None:
        try:
            inbox.put_nowait(conn.recv())
        except (EOFError, OSError):  # the parent is gone: stop
            loop.remove_reader(conn.fileno())
            inbox.put_nowait(None)

    async def one(client: StreamingClient, watch: ClockWatch, request_id: int, spec: RequestSpec) -> None:
        try:
            result = await client.send(spec)
        except Exception as exc:  # noqa: BLE001 - the parent gets a row for every request, never a hang
            result = RequestResult(api=spec.api, status="errored", error=scrub(f"{type(exc).__name__}: {exc}"),
                                   t_done=time.monotonic())
        result.client_lag_max_s = watch.lag_max_s(result.t_send, result.t_done)
        conn.send(("result", request_id, result))

    async with ClockWatch() as watch, StreamingClient(base_url, get_adapter(engine), model_id, headers=headers,
                                                      timeout_s=timeout_s) as client:
        loop.add_reader(conn.fileno(), read)
        conn.send("ready")
        tasks: set[asyncio.Task[None]] = set()
        while (message := await inbox.get()) is not None:
            task = loop.create_task(one(client, watch, *message))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)
    loop.remove_reader(conn.fileno())
    conn.send(("clock", watch.cell()))


if __name__ == "__main__":
    _worker_main(int(sys.argv[1]))
