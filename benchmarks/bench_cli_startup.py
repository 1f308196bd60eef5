"""How long `ninferkit --help`, `--version` and a command's `--help` take, against a bare `python -c pass`.

Each is a fresh interpreter, run `--repeats` times interleaved (every repetition runs every one, in turn), wall time
around the process; min and median, and each one's ratio to the bare interpreter's (issue 43: `--help` < 3x).
With `--baseline DIR` the same commands of another checkout (say `git archive main ninferkit` unpacked in DIR) run
in the same rounds, so a change is measured against what it changes under one load.

Python compiles a module it has no cached bytecode for on every start (and never caches it where
PYTHONDONTWRITEBYTECODE is set): an installed package has its .pyc, so this writes them first (`compileall`) for
each checkout measured, and says so.

Run: .venv/bin/python benchmarks/bench_cli_startup.py [--repeats 7] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ARGS = {"--help": ["--help"], "--version": ["--version"], "sweep --help": ["sweep", "--help"]}


def command(checkout: Path, args: list[str]) -> list[str]:
    """`ninferkit ARGS` from that checkout, as the console script runs it."""
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(checkout)!r}); sys.argv[0] = 'ninferkit'; "
            "from ninferkit.cli import main; sys.exit(main())", *args]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--baseline", type=Path, help="another ninferkit checkout, measured in the same rounds")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    checkouts = {"ninferkit": REPO} | ({"baseline": args.baseline} if args.baseline else {})
    for name, checkout in checkouts.items():
        if not (checkout / "ninferkit" / "cli" / "__init__.py").is_file():
            parser.error(f"--baseline {checkout}: no ninferkit checkout there (ninferkit/cli/__init__.py)")
        compileall.compile_dir(checkout / "ninferkit", quiet=1)
        print(f"{name}: {checkout} (bytecode written, as an installed package has it)")
    runs = {"bare": [sys.executable, "-c", "pass"]}
    for name, checkout in checkouts.items():
        runs |= {f"{name} {label}": command(checkout, words) for label, words in ARGS.items()}
    times: dict[str, list[float]] = {label: [] for label in runs}
    load = os.getloadavg()
    for repeat in range(args.repeats):
        order = list(runs)[repeat % len(runs):] + list(runs)[:repeat % len(runs)]
        for label in order:
            started = time.perf_counter()
            subprocess.run(runs[label], stdout=subprocess.DEVNULL, check=True)
            times[label].append(time.perf_counter() - started)
    bare_min, bare_median = min(times["bare"]), statistics.median(times["bare"])
    print(f"\nload average at start {load[0]:.2f}, at end {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; "
          f"{args.repeats} rounds\n")
    print("| what | min / median, ms | / bare (min, median) |\n|---|---|---|")
    for label, values in times.items():
        low, middle = min(values), statistics.median(values)
        print(f"| {label} | {low * 1000:.0f} / {middle * 1000:.0f} | "
              f"{low / bare_min:.2f}x, {middle / bare_median:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
