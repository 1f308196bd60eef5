"""Benchmark of the artifact step against the usual tools, in one run on the same file and server.

1. sha256: `ninferkit verify --file F --sha256 H --json` vs `sha256sum F` on the same file (default
   1 GiB of random bytes), file warm in the page cache, runs alternated. Reported: the command's wall
   time (Python start-up included) and the hashing rate ninferkit itself measures.
2. download: `ninferkit.artifact.download()` (streams, hashes as it writes, renames after the sha256
   matches) vs `curl -o` (no verification), vs `curl -o` followed by `sha256sum` (what the field
   reports do), and vs `curl -o` then `sync FILE` (the bytes on disk, as ninferkit's fsync before its
   rename leaves them), from the same loopback server (tests/range_server.py, run as its own process,
   sendfile), runs alternated, dirty pages flushed with sync before each, output on the same
   filesystem. Both wall times are taken around the call from outside (ninferkit's includes its fsync
   before the rename; curl does not sync). CPU s/GiB is user+sys of the downloading process, and the
   server's CPU per GiB is printed for each contender so a slow server cannot hide behind a ratio.
   Beside them the disk alone: `dd conv=fsync` of the served file (from the page cache) to the output
   folder, what making the file durable costs without a network.

The client side (this process, curl, sha256sum) and the HTTP server share the CPUs the benchmark was started on
unless `--client-cpus` and `--server-cpus` part them (cpu_sides); deployed, the server is Hugging Face's.

`--out-dir DIR` puts the downloads there (default: beside the served file): on a tmpfs (/dev/shm) an fsync costs
nothing, so the client's own cost against curl is measured apart from the disk's durable write rate, which curl
never waits for. `--baseline DIR` runs another ninferkit checkout (say `git archive main ninferkit` unpacked in DIR)
as one more contender, its download and its `verify --file` interleaved with this checkout's in the same runs.
ninferkit's downloads run in a process of their own each (as curl's do), timed around the `download()` call
inside it, so start-up is not in the rate; its CPU is that process's own over the call (all its threads).

Targets (issue 3): ninferkit >= 0.9 of sha256sum's rate and >= 0.9 of curl's throughput.

    python benchmarks/bench_artifact.py [--size-mib 1024] [--repeat 3] [--dir DIR] [--out-dir DIR]
        [--baseline DIR] [--client-cpus 0,1 --server-cpus 2-5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import cpu_sides  # noqa: E402

from ninferkit.artifact import sha256_file  # noqa: E402

MIB = 1024 * 1024


def make_file(path: Path, size: int) -> None:
    if path.exists() and path.stat().st_size == size:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        left = size
        while left:
            block = os.urandom(min(16 * MIB, left))
            handle.write(block)
            left -= len(block)


def cpu_s() -> float:
    """CPU seconds of this process plus its finished children (the server is not finished yet)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(argv: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return time.perf_counter() - started, done.stdout


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user+sys) of a running process, from /proc (Linux); 0.0 where unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Series:
    """Rates (bytes/s), CPU seconds per GiB and the server's CPU per GiB of repeated runs of one contender."""

    def __init__(self) -> None:
        self.rates: list[float] = []
        self.cpu_per_gib: list[float] = []
        self.server_cpu_per_gib: list[float] = []

    def add(self, size: int, seconds: float, cpu_seconds: float, server_cpu_seconds: float = 0.0) -> None:
        self.rates.append(size / seconds)
        self.cpu_per_gib.append(cpu_seconds * 1024**3 / size)
        self.server_cpu_per_gib.append(server_cpu_seconds * 1024**3 / size)

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def slowest(self) -> float:
        """The lowest rate of the runs (the issue's tables give min and median)."""
        return min(self.rates)

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpu_per_gib)

    @property
    def server_cpu(self) -> float:
        return statistics.median(self.server_cpu_per_gib)


def checkout_python(checkout: Path) -> list[str]:
    """This interpreter, running the ninferkit of `checkout` (-P: not the working folder's), the packages it was
    given on PYTHONPATH kept behind it."""
    path = os.pathsep.join(filter(None, [str(checkout.resolve()), os.environ.get("PYTHONPATH")]))
    return ["env", f"PYTHONPATH={path}", sys.executable, "-P"]


def bench_sha256(path: Path, expected: str, repeat: int, baseline: Path | None) -> dict[str, Series]:
    size = path.stat().st_size
    checkouts = {"ours": REPO, **({"baseline": baseline} if baseline else {})}
    series = {name: Series() for name in ("ours", "ours_hashing", "sha256sum", "baseline", "baseline_hashing")}
    theirs = series["sha256sum"]
    timed(["sha256sum", str(path)])  # warm the page cache: both sides then read from memory
    for _ in range(repeat):
        for name, checkout in checkouts.items():
            cpu = cpu_s()
            seconds, out = timed(checkout_python(checkout) + ["-m", "ninferkit", "verify", "--file", str(path),
                                                               "--sha256", expected, "--json"])
            result = json.loads(out)
            assert result["ok"] and result["sha256"] == expected, result["problems"]
            series[name].add(size, seconds, cpu_s() - cpu)
            series[f"{name}_hashing"].add(size, result["sha256_seconds"], 0.0)
        cpu = cpu_s()
        seconds, out = timed(["sha256sum", str(path)])
        assert out.split()[0] == expected
        theirs.add(size, seconds, cpu_s() - cpu)
    return series


def bench_download(served: Path, out: Path, expected: str, repeat: int, server_cpus: frozenset[int] | None,
                   baseline: Path | None) -> dict[str, Series]:
    size = (served / "blob.bin").stat().st_size
    out.mkdir(parents=True, exist_ok=True)
    server = subprocess.Popen([sys.executable, str(REPO / "tests" / "range_server.py"), str(served)],
                              stdout=subprocess.PIPE, text=True, preexec_fn=cpu_sides.server_start(server_cpus))
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{server.stdout.readline().strip()}/org/model/resolve/{'0' * 40}/blob.bin"
        print(f"download: the client (ninferkit, curl, sha256sum) on CPUs {cpu_sides.said(0)}, the HTTP server on "
              f"CPUs {cpu_sides.said(server.pid)}", flush=True)
        series = {"ours": Series(), "curl": Series(), "curl_sync": Series(), "curl_sha256sum": Series(),
                  "disk": Series(), "baseline": Series()}
        for _ in range(repeat):
            _one_download(series["curl"], out / "curl.bin", size, server.pid, lambda dest: timed(
                ["curl", "-s", "-f", "-o", str(dest), url])[0])
            _one_download(series["curl_sync"], out / "curl.bin", size, server.pid, lambda dest: timed(
                ["curl", "-s", "-f", "-o", str(dest), url])[0] + timed(["sync", str(dest)])[0])
            _one_download(series["curl_sha256sum"], out / "curl.bin", size, server.pid, lambda dest: timed(
                ["curl", "-s", "-f", "-o", str(dest), url])[0] + timed(["sha256sum", str(dest)])[0])
            _one_download(series["ours"], out / "ours.bin", size, server.pid, lambda dest: _timed_download(
                REPO, url, dest, size, expected))
            if baseline is not None:
                _one_download(series["baseline"], out / "baseline.bin", size, server.pid,
                              lambda dest: _timed_download(baseline, url, dest, size, expected))
            _one_download(series["disk"], out / "disk.bin", size, server.pid, lambda dest: timed(
                ["dd", f"if={served / 'blob.bin'}", f"of={dest}", "bs=8M", "conv=fsync", "status=none"])[0])
        return series
    finally:
        server.terminate()
        server.wait(timeout=10)


DOWNLOAD_CHILD = """
import json, resource, sys, time
from pathlib import Path
from ninferkit.artifact import download
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
url, dest, size, expected = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cpu0, started = cpu(), time.perf_counter()
download(url, dest, size, expected, progress=False)
print(json.dumps({"seconds": time.perf_counter() - started, "cpu_s": cpu() - cpu0}))
"""
"""A download by one checkout's ninferkit in a process of its own, timed around the call (start-up left out)."""


def _timed_download(checkout: Path, url: str, dest: Path, size: int, expected: str) -> tuple[float, float]:
    _, out = timed(checkout_python(checkout) + ["-c", DOWNLOAD_CHILD, url, str(dest), str(size), expected])
    found = json.loads(out)
    return found["seconds"], found["cpu_s"]


def _one_download(series: Series, dest: Path, size: int, server_pid: int,
                  fetch: Callable[[Path], float | tuple[float, float]]) -> None:
    """One run of one contender; `fetch` gives its seconds, or its seconds and its own CPU seconds (else the CPU
    of this process and its finished children over the run)."""
    dest.unlink(missing_ok=True)
    os.sync()
    cpu, server_cpu = cpu_s(), process_cpu_s(server_pid)
    got = fetch(dest)
    seconds, own_cpu = got if isinstance(got, tuple) else (got, cpu_s() - cpu)
    series.add(size, seconds, own_cpu, process_cpu_s(server_pid) - server_cpu)
    assert dest.stat().st_size == size
    dest.unlink()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one, removed after)")
    parser.add_argument("--out-dir", type=Path, help="where the downloads are written (default: DIR/out); a tmpfs "
                        "such as /dev/shm leaves the disk out")
    parser.add_argument("--baseline", type=Path, help="another ninferkit checkout to run as one more contender")
    cpu_sides.add_options(parser, "the loopback HTTP server")
    args = parser.parse_args()
    if args.baseline is not None and not (args.baseline / "ninferkit" / "artifact" / "fetch.py").is_file():
        parser.error(f"--baseline {args.baseline}: no ninferkit checkout there (ninferkit/artifact/fetch.py)")
    cpu_sides.pin_client(args.client_cpus)
    with tempfile.TemporaryDirectory(prefix="bench-artifact-") as scratch:
        work = args.dir or Path(scratch)
        served = work / "served"
        blob = served / "blob.bin"
        make_file(blob, args.size_mib * MIB)
        expected = sha256_file(blob).hexdigest
        print(f"file: {blob} ({args.size_mib} MiB), {os.cpu_count()} CPUs, min and median of {args.repeat} runs, "
              f"load average before: {os.getloadavg()[0]:.1f}")
        out = args.out_dir or work / "out"
        filesystem = subprocess.run(["df", "--output=fstype,target", str(out.parent if not out.exists() else out)],
                                    capture_output=True, text=True).stdout.split()[-2:]
        print(f"downloads written to {out} ({' on '.join(filesystem)})")
        sha = bench_sha256(blob, expected, args.repeat, args.baseline)
        dl = bench_download(served, out, expected, args.repeat, args.server_cpus, args.baseline)
    startup, _ = timed(checkout_python(REPO) + ["-m", "ninferkit", "verify", "--help"])
    rows = [
        ("sha256    ninferkit verify --file (wall, start-up included)", sha["ours"]),
        ("          ninferkit hashing alone (sha256_seconds in --json)", sha["ours_hashing"]),
        ("          sha256sum", sha["sha256sum"]),
        ("download  ninferkit.artifact.download() (sha256 while writing)", dl["ours"]),
        ("          curl -o (no verification)", dl["curl"]),
        ("          curl -o, then sync FILE (on disk, as ninferkit leaves it)", dl["curl_sync"]),
        ("          curl -o, then sha256sum (the field reports' workflow)", dl["curl_sha256sum"]),
        ("disk      dd conv=fsync of the file from memory (no network)", dl["disk"]),
    ]
    if args.baseline is not None:
        rows[2:2] = [("          baseline: verify --file (wall, start-up included)", sha["baseline"]),
                     ("          baseline: hashing alone", sha["baseline_hashing"])]
        rows.insert(6, ("          baseline: download()", dl["baseline"]))
    print(f"{'':<66} {'MiB/s min / median':>18} {'CPU s/GiB':>10} {'server CPU s/GiB':>17}")
    for label, series in rows:
        cpu = f"{series.cpu:10.2f}" if series.cpu else f"{'-':>10}"
        server = f"{series.server_cpu:17.2f}" if series.server_cpu else f"{'-':>17}"
        rates = f"{series.slowest / MIB:.0f} / {series.rate / MIB:.0f}"
        print(f"{label:<66} {rates:>18} {cpu} {server}")
    print(f"ratio ninferkit/sha256sum: {sha['ours'].rate / sha['sha256sum'].rate:.2f} wall "
          f"({startup:.2f} s of ninferkit's wall is Python start-up), "
          f"{sha['ours_hashing'].rate / sha['sha256sum'].rate:.2f} hashing alone  (target >= 0.9)")
    print(f"ratio ninferkit/curl download: {dl['ours'].rate / dl['curl'].rate:.2f} of the medians, "
          f"{dl['ours'].slowest / dl['curl'].slowest:.2f} of the slowest  (target >= 0.9); "
          f"against curl + sha256sum: {dl['ours'].rate / dl['curl_sha256sum'].rate:.2f}; CPU per GiB "
          f"{dl['ours'].cpu:.2f} s vs curl's {dl['curl'].cpu:.2f} s, "
          f"curl + sha256sum's {dl['curl_sha256sum'].cpu:.2f} s")
    print(f"sha256 alone (ninferkit's hashing) runs at {sha['ours_hashing'].rate / dl['curl'].rate:.2f} of curl's "
          f"download rate (medians): one stream's sha256 is one thread's work, so a download that hashes every byte "
          f"as it arrives is at most that; curl then sync: {dl['ours'].rate / dl['curl_sync'].rate:.2f}; the disk's "
          f"durable write alone (dd conv=fsync) runs at {dl['disk'].rate / dl['curl'].rate:.2f} of curl's rate")
    if args.baseline is not None:
        print(f"baseline: verify --file {sha['baseline'].rate / sha['sha256sum'].rate:.2f} of sha256sum's rate "
              f"(wall); download {dl['baseline'].rate / dl['curl'].rate:.2f} of curl's (medians), "
              f"{dl['baseline'].slowest / dl['curl'].slowest:.2f} of the slowest")
    print(f"load average after the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
