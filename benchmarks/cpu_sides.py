"""Which CPUs the client and the server of a loopback benchmark run on (`--client-cpus`, `--server-cpus`).

Deployed, the measured server is another machine (a GPU box) or at least other cores: a loopback server that
shares the client's cores takes their time from it, and the benchmark then charges the client for the server's
work (issue 43: on 2 shared cores the download ran at 0.50x curl, and even the bare reader's inter-token times at
256 streams were 1.40x the truth). These options give each side CPUs of its own; left out, each side runs where
the benchmark itself was started (a `taskset` around it), as before.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable


def cpu_set(text: str) -> frozenset[int]:
    """A CPU list as taskset and cgroups write it (`0,1`, `2-5`, `0,4-7`); argparse.ArgumentTypeError for
    anything else, or for CPUs this machine does not let the benchmark use."""
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            first, _, last = part.strip().partition("-")
            low, high = int(first), int(last or first)
            if low < 0 or high < low:
                raise ValueError
            cpus.update(range(low, high + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not a CPU list such as 0,1 or 2-5") from None
    usable = os.sched_getaffinity(0)
    if not cpus <= usable:
        raise argparse.ArgumentTypeError(f"{text!r}: CPU {', '.join(map(str, sorted(cpus - usable)))} not usable "
                                         f"here (usable: {', '.join(map(str, sorted(usable)))})")
    return frozenset(cpus)


def add_options(parser: argparse.ArgumentParser, server: str) -> None:
    """`--client-cpus` and `--server-cpus` on a benchmark's parser; `server` names its server(s) for the help."""
    parser.add_argument("--client-cpus", type=cpu_set, metavar="LIST",
                        help="CPUs of the client side (the benchmark and its readers), e.g. 0,1 (default: where it "
                             "was started)")
    parser.add_argument("--server-cpus", type=cpu_set, metavar="LIST",
                        help=f"CPUs of {server}, e.g. 2-5, apart from the client's (default: where the benchmark "
                             "was started)")


def pin_client(cpus: frozenset[int] | None) -> None:
    """This process (and every child it starts after) on `cpus`; None leaves it where it is."""
    if cpus is not None:
        os.sched_setaffinity(0, cpus)


def server_start(cpus: frozenset[int] | None) -> Callable[[], None] | None:
    """A Popen `preexec_fn` that puts the server on `cpus` before it runs (all its threads then inherit them), or
    None (it inherits the benchmark's own)."""
    if cpus is None:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def said(pid: int) -> str:
    """The CPUs a process may run on, as a list (what it really got, read back)."""
    return ",".join(map(str, sorted(os.sched_getaffinity(pid))))
