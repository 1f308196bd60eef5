"""`ninferkit` command line: one module per command in this package, named in COMMANDS with its one-line summary.

Each command module defines ``add_parser(subparsers, summary)`` and ``main(args) -> int``; it only parses
arguments and calls the library. Only the command asked for is imported and its parser built: `ninferkit --help`
lists the commands from COMMANDS alone (issue 43: building every command's parser made it 3.2x a bare Python).
Errors of the library become one readable message and an exit code (2 for a bad profile, usage or a malformed
input, 1 for anything else that failed), never a traceback. A command with ``--quiet`` shows no progress
(ninferkit.progress); the others show it as the terminal allows.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from ninferkit import progress
from ninferkit.errors import BadInput, NinferkitError

COMMANDS: dict[str, tuple[str, str]] = {
    "capacity": ("capacity", "fit the memory formula, tabulate what fits, search the largest KV pool"),
    "compare": ("compare", "A/B: per-cell deltas of RUN_B (and later runs) against RUN_A, with run-to-run spread"),
    "deploy": ("deploy", "start the profile's server as a service that stays up (or: deploy status|logs|stop PROFILE)"),
    "diagnose": ("diagnose", "what a server log says: build, ledger, throughput, requests, each failure with its fix"),
    "export": ("export", "write a run's requests as vllm bench serve's, AIPerf's or GuideLLM's files, or CSV (ms)"),
    "fleet": ("fleet", "run each host's profile on that host (Slurm or SSH) and collect the runs"),
    "import": ("import_run", "make a run directory from vllm bench serve's, AIPerf's or GuideLLM's result file"),
    "lab": ("lab", "open the notebooks in JupyterLab on a copy in RUN_DIR/lab (127.0.0.1, token on)"),
    "launch": ("launch", "start the server and leave it running"),
    "merge": ("merge", "one write-up across hosts: percentiles over the union of their requests.jsonl rows"),
    "probe": ("probe", "GPU, driver, CUDA, Docker, disk facts"),
    "report": ("report", "write RUN_DIR/report/ (the post, index.md/.html; its raw detail, appendix.md/.html; "
                         "figures) from the run's files"),
    "run": ("run", "execute the runbook notebooks in order"),
    "schema": ("schema", "print the profile's JSON Schema (docs/profile.schema.json; params/*.yaml name it on line 1)"),
    "stop": ("stop", "stop the server of a run directory"),
    "sweep": ("sweep", "run the measurement sweeps; rerun to resume"),
    "trace": ("trace", "write a run's requests as a Mooncake-style trace (JSONL) on stdout"),
    "verify": ("verify", "download (if missing) and verify the artifact: size, sha256, .ninfer header"),
}
"""Each command: the module of this package that parses and runs it, and its summary in `ninferkit --help`."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser, with the full parser of `command` (its module imported) and every other command named by its
    summary only; None builds them all (a test reading every command's help)."""
    parser = argparse.ArgumentParser(prog="ninferkit", description="A reproducible LLM-serving runbook.")
    parser.add_argument("--version", action=_Version, help="the package version and the checkout's commit")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, summary) in COMMANDS.items():
        if command is None or name == command:
            module = importlib.import_module(f"{__name__}.{module_name}")
            module.add_parser(subparsers, summary).set_defaults(handler=module.main)
        else:
            subparsers.add_parser(name, help=summary)
    return parser


def command_in(argv: Sequence[str]) -> str:
    """The command argv names: its first word that is no option (the top level has no option with a value);
    "" when none (`--help`, or nothing: argparse then says what is missing)."""
    return next((word for word in argv if not word.startswith("-")), "")


class _Version(argparse.Action):
    """--version, worked out only when asked (it runs git)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(version_line())
        parser.exit()


def version_line() -> str:
    """'ninferkit 0.1.0 (git 176ae66)': the package version and the checkout's commit, as results record them."""
    from ninferkit.version import __version__, git_state

    state = git_state()
    if state["commit"] is None:
        return f"ninferkit {__version__} (not a git checkout)"
    dirty = ", code modified since that commit" if state["dirty"] else ""
    return f"ninferkit {__version__} (git {state['commit'][:7]}{dirty})"


def main(argv: Sequence[str] | None = None) -> int:
    if list(sys.argv[1:] if argv is None else argv) == ["--version"]:
        # answered before every command's module (pydantic, httpx) is imported, and the way argparse would
        print(version_line())
        raise SystemExit(0)
    words = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(command_in(words)).parse_args(words)
    try:
        progress.mode()  # a NINFERKIT_PROGRESS that is no mode is refused before anything runs
        with progress.forced("off" if getattr(args, "quiet", False) else None):
            code: int = args.handler(args)
    except BadInput as exc:
        print(f"ninferkit {args.command}: {exc}", file=sys.stderr)
        return 2
    except NinferkitError as exc:
        print(f"ninferkit {args.command}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `ninferkit report R | head`: the reader has what it wanted; no traceback, no log
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the interpreter's final flush goes nowhere
        return 141  # as a shell reports a pipe's writer ended by SIGPIPE
    except OSError as exc:  # a file the command reads or writes (permissions, gone): named, its traceback kept
        from pathlib import Path

        from ninferkit.os_errors import named

        run_dir = getattr(args, "run_dir", None)
        print(named(exc, f"ninferkit {args.command}", Path(run_dir) if run_dir else None), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"ninferkit {args.command}: interrupted", file=sys.stderr)
        return 130
    return code
