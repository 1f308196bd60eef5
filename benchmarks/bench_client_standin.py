"""Can ninferkit's client keep up with a fast server? Figures against a stand-in that only streams.

A stand-in server in C (`standin_sse.c`, built here with the system cc into a temporary folder) sends
llama-server's chat SSE chunks either as fast as the socket takes them ("flood") or one every 5 ms
("paced"), each text chunk's content being the CLOCK_MONOTONIC instant it was sent. Each reader runs in a
process of its own, so its CPU is its own (counted around the load only: no start-up or import time):

- `bare`: the floor for any Python reader. Non-blocking sockets under one selector, kept-alive
  connections, one clock read per `recv`, lines split, `json.loads` of every data line;
- `ninferkit`: `StreamingClient.send`, as the sweeps call it (one client, `max_connections` the concurrency);
- `workers` (the paced phases at c64 and up): the same over as many worker processes as the sweeps would give
  that load (`measure/client_workers.spread`: the stand-in's 5 ms gap, the client's CPU per event measured at the
  reader's start, the CPUs' idle share measured just before the phase; the decision and its reason are printed);
  its CPU is not compared (the workers' own start-up would be in it), its stamps are;
- `bare-split` (the same phases): the bare reader over as many processes as the client has CPUs, the streams
  dealt out among them: the floor for the `workers` reader's stamps, what the machine and the stand-in allow any
  Python reader spread over those cores (its CPU is not compared either);
- `baseline`, with `--baseline DIR`: the same, from another ninferkit checkout (say `git archive main ninferkit`
  unpacked in DIR), so a change is measured against what it changes in one run, under one load.

Phases, interleaved (every repetition runs every phase for every reader, the readers' order rotating),
three repetitions, min and median printed, and each figure's ratio to the bare reader:

- client CPU seconds per 1,000 tokens, paced, at concurrency 1 and 64;
- ceiling tokens/s, flood, c64 and c256 (128-token requests), and requests/s with 8-token requests; beside them
  the tokens per second of client CPU, which a loaded machine does not move (wall-clock ceilings it does);
- paced at c64 and c256: stamp lag p99 (the client's stamp minus the send time inside the event) and ITL p99
  (the client's gaps between text events) against the truth (the gaps between the send times), and their
  ratio (`ITL p99 / truth`: 1.05 is the issue's "within 5%"); beside the lag, its p99 over the events of mid-stream
  only (a stream's first 2 and last 10 left out), which tells a steady lag from one of streams starting and ending
  together.

AIPerf and GuideLLM are not driven here: the script says whether they are installed. Loopback only, bounded in
count (the
phases' sizes below) and time (each reader's run is killed after READER_TIMEOUT_S); SIGTERM or Ctrl-C stop
the readers and the stand-in servers.

The readers and the stand-in share the CPUs the benchmark was started on unless `--client-cpus` and
`--server-cpus` part them (cpu_sides): deployed, the server is another machine, so a stand-in on the readers' cores
charges them its own work. Both sides' CPUs are printed as each process got them.

Run: .venv/bin/python benchmarks/bench_client_standin.py [--repeats 3] [--baseline DIR]
         [--client-cpus 0,1 --server-cpus 2-5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cpu_sides

REPO = Path(__file__).resolve().parent.parent
SOURCE = Path(__file__).resolve().parent / "standin_sse.c"
READERS = ("bare", "ninferkit", "workers", "bare-split", "baseline")
STANDIN_GAP_S = 0.005
"""The stand-in's pace in paced mode (PACE_NS in standin_sse.c)."""
READER_TIMEOUT_S = 60
MID_AFTER, MID_BEFORE_END = 2, 10
"""A stream's events left out of the mid-stream lag: its first ones and its last ones, where its start and end
(a connection, a request sent, a result handed back) meet other streams' events."""
MESSAGES = [{"role": "user", "content": "Write a haiku about a lighthouse."}]


@dataclass(frozen=True)
class Phase:
    """One load shape: the server's mode, the concurrency, how many requests of how many tokens."""

    name: str
    mode: str
    concurrency: int
    requests: int
    tokens: int

    @property
    def spread(self) -> bool:
        """Whether the `workers` reader runs it: the paced phases past one process's worth of streams."""
        return self.mode == "paced" and self.concurrency >= 64


PHASES = (Phase("paced c1", "paced", 1, 8, 128), Phase("paced c64", "paced", 64, 128, 128),
          Phase("paced c256", "paced", 256, 512, 128), Phase("flood c64", "flood", 64, 256, 128),
          Phase("flood c256", "flood", 256, 512, 128), Phase("flood c64, 8-token", "flood", 64, 1024, 8))
"""Paced c1 sends 8 requests (1,024 tokens, 5 s): with 3, its CPU was 20-30 ms, and run to run it moved by half."""


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measured(requests: list[tuple[list[float], list[float]]], cpu: float, wall: float) -> dict[str, Any]:
    """A reader's figures from each request's (stamps, send times) of its text events."""
    lags = [stamp - sent for stamps, sends in requests for stamp, sent in zip(stamps, sends, strict=True)]
    mid = [stamp - sent for stamps, sends in requests
           for stamp, sent in zip(stamps[MID_AFTER:-MID_BEFORE_END], sends[MID_AFTER:-MID_BEFORE_END], strict=True)]
    gaps = [b - a for stamps, _ in requests for a, b in zip(stamps, stamps[1:], strict=False)]
    truth = [b - a for _, sends in requests for a, b in zip(sends, sends[1:], strict=False)]
    tokens = sum(len(stamps) for stamps, _ in requests)
    return {"tokens": tokens, "requests": len(requests), "cpu_s": cpu, "wall_s": wall,
            "lag_p99_ms": _ms(percentile(lags, 99)), "mid_lag_p99_ms": _ms(percentile(mid, 99)),
            "itl_p99_ms": _ms(percentile(gaps, 99)),
            "truth_itl_p99_ms": _ms(percentile(truth, 99))}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def send_times(parts: list[str]) -> list[float]:
    """The stand-in's send instants, from the text it streamed ("<ns>;" per token), in seconds."""
    return [int(part) / 1e9 for part in "".join(parts).split(";") if part]


# ---- the readers (each runs as `--reader NAME` in its own process) ----

def bare_reader(port: int, phase: Phase) -> dict[str, Any]:
    done, cpu, wall = bare_requests(port, phase.concurrency, phase.requests, phase.tokens)
    return measured(done, cpu, wall)


def bare_requests(port: int, concurrency: int, requests: int,
                  tokens: int) -> tuple[list[tuple[list[float], list[float]]], float, float]:
    """The bare reader's loop: each request's (stamps, send times), its CPU seconds and wall seconds."""
    body = json.dumps({"model": "embedded", "messages": MESSAGES, "stream": True, "max_tokens": tokens,
                       "stream_options": {"include_usage": True}}).encode()
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body)) + body
    selector = selectors.DefaultSelector()
    done: list[tuple[list[float], list[float]]] = []
    left = requests

    def start(sock: socket.socket) -> None:
        sock.sendall(request)
        selector.register(sock, selectors.EVENT_READ, {"buffer": b"", "finished": False, "stamps": [], "parts": []})

    cpu0, wall0 = cpu_s(), time.monotonic()
    for _ in range(min(concurrency, left)):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setblocking(False)
        start(sock)
        left -= 1
    while selector.get_map():
        for key, _ in selector.select():
            conn, state = key.fileobj, key.data
            assert isinstance(conn, socket.socket)
            data = conn.recv(65536)
            now = time.monotonic()
            if not data:
                raise SystemExit("bare reader: the stand-in closed a connection mid-answer")
            *lines, state["buffer"] = (state["buffer"] + data).split(b"\n")
            for line in lines:
                if line.startswith(b"data: "):
                    payload = line[6:]
                    if payload == b"[DONE]":
                        state["finished"] = True
                        continue
                    for choice in json.loads(payload)["choices"]:
                        content = choice["delta"].get("content")
                        if content:
                            state["stamps"].append(now)
                            state["parts"].append(content)
                elif state["finished"] and line == b"0\r":  # the last chunk: this answer is whole
                    done.append((state["stamps"], send_times(state["parts"])))
                    selector.unregister(conn)
                    if left:
                        left -= 1
                        start(conn)
                    else:
                        conn.close()
                    break
    return done, cpu_s() - cpu0, time.monotonic() - wall0


def bare_split_reader(port: int, phase: Phase) -> dict[str, Any]:
    """The bare reader in as many forked processes as this process may use CPUs, the phase's streams and requests
    dealt out among them, started together; their requests merged (no CPU: each child's is its own)."""
    count = max(1, min(len(os.sched_getaffinity(0)), phase.concurrency))
    children = []
    wall0 = time.monotonic()
    for index in range(count):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: one share of the phase, its requests back as JSON, then out at once
            os.close(read_end)
            share = bare_requests(port, len(range(index, phase.concurrency, count)),
                                  len(range(index, phase.requests, count)), phase.tokens)[0]
            with os.fdopen(write_end, "w") as out:
                json.dump(share, out)
            os._exit(0)
        os.close(write_end)
        children.append((pid, read_end))
    done: list[tuple[list[float], list[float]]] = []
    for pid, read_end in children:
        with os.fdopen(read_end) as pipe:
            text = pipe.read()
        _, status = os.waitpid(pid, 0)
        if status:
            raise SystemExit(f"bare-split: a child exited with status {status}")
        done += [(stamps, sends) for stamps, sends in json.loads(text)]
    figures = measured(done, 0.0, time.monotonic() - wall0)
    figures.update(cpu_s=None, workers=count)
    return figures


def ninferkit_reader(port: int, phase: Phase, repo: Path, over_workers: bool = False) -> dict[str, Any]:
    """ninferkit's client, in this process or (`over_workers`) over the worker processes the sweeps would give the
    phase's load; with workers, the figures carry `workers` and no CPU (theirs is not this process's)."""
    sys.path.insert(0, str(repo))
    from ninferkit.engines import get_adapter
    from ninferkit.measure.client import RequestResult, RequestSpec, StreamingClient

    spec = RequestSpec("chat", MESSAGES, phase.tokens)
    results: list[RequestResult] = []
    url = f"http://127.0.0.1:{port}"
    adapter = get_adapter("llama_server")
    workers, why = 1, ""
    if over_workers:  # a baseline checkout has no workers: imported only here
        from ninferkit.host.cpu_idle import measure_idle
        from ninferkit.measure.client_workers import WorkerClient, client_cost, spread

        decided = spread(phase.concurrency / STANDIN_GAP_S, STANDIN_GAP_S, client_cost(), measure_idle)
        workers, why = decided.workers, decided.why

    async def run() -> tuple[float, float]:
        client: Any = (WorkerClient(url, adapter, "embedded", workers=workers) if workers > 1 else
                       StreamingClient(url, adapter, "embedded", max_connections=phase.concurrency))
        async with client:
            pending = iter(range(phase.requests))

            async def worker() -> None:
                for _ in pending:
                    results.append(await client.send(spec))

            cpu0, wall0 = cpu_s(), time.monotonic()
            await asyncio.gather(*(worker() for _ in range(phase.concurrency)))
            return cpu_s() - cpu0, time.monotonic() - wall0

    cpu, wall = asyncio.run(run())
    failed = [result.error for result in results if result.status != "ok"]
    if failed:
        raise SystemExit(f"ninferkit reader: {len(failed)} requests not ok, first: {failed[0]}")
    figures = measured([(result.text_event_times, send_times(result.reply.text_parts)) for result in results],
                       cpu, wall)
    if over_workers:
        figures.update(cpu_s=None, workers=workers, why=why)
    return figures


# ---- the parent ----

@contextmanager
def standins(workdir: Path, built: Path | None, cpus: frozenset[int] | None) -> Iterator[dict[str, int]]:
    """The stand-in serving on two loopback ports, {mode: port}, built here unless `built` names a binary of it
    (a machine without cc), on `cpus` (None: the benchmark's own); stopped on the way out."""
    binary = built or workdir / "standin_sse"
    if built is None:
        subprocess.run(["cc", "-O2", "-pthread", "-o", str(binary), str(SOURCE)], check=True)
    servers: list[subprocess.Popen[bytes]] = []
    try:
        ports = {}
        for mode in ("flood", "paced"):
            ports[mode] = free_port()
            server = subprocess.Popen([str(binary), str(ports[mode]), mode], stdout=subprocess.PIPE,
                                      preexec_fn=cpu_sides.server_start(cpus))
            servers.append(server)
            assert server.stdout is not None
            if server.stdout.readline().strip() != b"listening":
                raise SystemExit(f"the stand-in did not start on port {ports[mode]}")
            print(f"stand-in server, {mode}: CPUs {cpu_sides.said(server.pid)}", flush=True)
        yield ports
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run_reader(reader: str, port: int, phase: Phase, baseline: Path | None) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--reader", reader, "--port", str(port), "--phase", phase.name]
    if reader == "baseline":
        argv += ["--repo", str(baseline)]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = child.communicate(timeout=READER_TIMEOUT_S)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if child.returncode:
        raise SystemExit(f"{reader} in {phase.name!r} exited {child.returncode}: {err.decode()[-1500:]}")
    figures: dict[str, Any] = json.loads(out)
    return figures


def figures_of(run: dict[str, Any], phase: Phase) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    if phase.mode == "paced" and run["cpu_s"] is not None:
        out["CPU s / 1,000 tokens"] = run["cpu_s"] / run["tokens"] * 1000
    if phase.mode == "flood" and phase.tokens > 8:
        out["tokens/s"] = run["tokens"] / run["wall_s"]
        out["tokens per client CPU s"] = run["tokens"] / run["cpu_s"]
    if phase.name == "flood c64, 8-token":
        out["requests/s"] = run["requests"] / run["wall_s"]
        out["requests per client CPU s"] = run["requests"] / run["cpu_s"]
    if phase.spread:
        out["stamp lag p99 ms"] = run["lag_p99_ms"]
        out["stamp lag p99 ms, mid-stream"] = run["mid_lag_p99_ms"]
        out["ITL p99 ms"] = run["itl_p99_ms"]
        out["truth ITL p99 ms"] = run["truth_itl_p99_ms"]
        out["ITL p99 / truth"] = run["itl_p99_ms"] / run["truth_itl_p99_ms"]
        if "workers" in run:
            out["worker processes"] = run["workers"]
    return out


def summary(values: list[float | None]) -> tuple[float, float] | None:
    known = [value for value in values if value is not None]
    return (min(known), statistics.median(known)) if known else None


def print_table(collected: dict[tuple[str, str, str], list[float | None]], readers: tuple[str, ...],
                repeats: int) -> None:
    others = readers[1:]
    print("\n| phase | figure | " + " | ".join(f"{r} min / median" for r in readers) + " | "
          + " | ".join(f"{r} / bare (min, median)" for r in others) + " |")
    print("|---|---|" + "---|" * (len(readers) + len(others)))
    keys = sorted({(phase, figure) for phase, figure, _ in collected}, key=lambda key: (
        [p.name for p in PHASES].index(key[0]), key[1]))
    for phase, figure in keys:
        cells, sums = [], {}
        for reader in readers:
            found = sums[reader] = summary(collected.get((phase, figure, reader), []))
            cells.append("n/a" if found is None else f"{found[0]:.4g} / {found[1]:.4g}")
        bare = sums["bare"]
        for reader in others:
            ours = sums[reader]
            cells.append("n/a" if bare is None or ours is None or not bare[0] or not bare[1] else
                         f"{ours[0] / bare[0]:.2f}x, {ours[1] / bare[1]:.2f}x")
        print(f"| {phase} | {figure} | " + " | ".join(cells) + " |")
    print(f"\n{repeats} repetitions; ITL p99 of the truth is the stand-in's own gaps (its sleep plus its scheduling)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another ninferkit checkout to run as a third reader")
    parser.add_argument("--only", action="append", metavar="PHASE", help="run only this phase (repeatable; default: "
                        "all): " + "; ".join(p.name for p in PHASES))
    parser.add_argument("--standin", type=Path, help="a stand-in binary built elsewhere (cc -O2 -pthread -static "
                        "standin_sse.c), for a machine without cc")
    cpu_sides.add_options(parser, "the stand-in servers")
    parser.add_argument("--repo", type=Path, default=REPO, help=argparse.SUPPRESS)
    parser.add_argument("--reader", choices=READERS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reader:
        phase = next(p for p in PHASES if p.name == args.phase)
        if args.reader in ("bare", "bare-split"):
            figures = (bare_reader if args.reader == "bare" else bare_split_reader)(args.port, phase)
        else:
            figures = ninferkit_reader(args.port, phase, args.repo, over_workers=args.reader == "workers")
        print(json.dumps(figures))
        return 0
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    names = [p.name for p in PHASES]
    chosen = args.only or names
    unknown = [name for name in chosen if name not in names]
    if unknown:
        parser.error(f"--only: no phase {', '.join(map(repr, unknown))}; the phases: {'; '.join(names)}")
    if args.standin is not None and not os.access(args.standin, os.X_OK):
        parser.error(f"--standin {args.standin}: not an executable file")
    if args.baseline is not None and not (args.baseline / "ninferkit" / "measure" / "client.py").is_file():
        parser.error(f"--baseline {args.baseline}: no ninferkit checkout there (ninferkit/measure/client.py)")
    readers = READERS if args.baseline is not None else READERS[:-1]
    cpu_sides.pin_client(args.client_cpus)  # the readers (and a workers reader's processes) inherit it
    print(f"readers: CPUs {cpu_sides.said(0)}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds the finally blocks: readers, stand-ins
    for peer in ("aiperf", "guidellm"):
        found = shutil.which(peer)
        said = f"installed at {found}, not driven by this benchmark" if found else "not installed, not run"
        print(f"{peer}: {said}")
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    collected: dict[tuple[str, str, str], list[float | None]] = {}
    started = time.monotonic()
    with (tempfile.TemporaryDirectory(prefix="ninferkit-standin-") as workdir,
          standins(Path(workdir), args.standin, args.server_cpus) as ports):
        for repeat in range(args.repeats):
            for phase in (p for p in PHASES if p.name in chosen):
                taking = [reader for reader in readers if reader not in ("workers", "bare-split") or phase.spread]
                turn = repeat % len(taking)
                for reader in taking[turn:] + taking[:turn]:
                    run = run_reader(reader, ports[phase.mode], phase, args.baseline)
                    if "why" in run:
                        print(f"{phase.name}, repetition {repeat + 1}: {run['why']}", flush=True)
                    elif "workers" in run:
                        print(f"{phase.name}, repetition {repeat + 1}: {reader} over {run['workers']} processes",
                              flush=True)
                    for figure, value in figures_of(run, phase).items():
                        collected.setdefault((phase.name, figure, reader), []).append(value)
            print(f"repetition {repeat + 1} done at {time.monotonic() - started:.0f} s", flush=True)
    load = os.getloadavg()
    print(f"load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print_table(collected, readers, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
