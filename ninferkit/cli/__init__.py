"""`ninferkit` command line: one module per command in this package, found at start-up.

Each command module defines ``add_parser(subparsers)`` and ``main(args) -> int``; it only parses
arguments and calls the library. Errors of the library become one readable message and an exit code
(2 for a bad profile, usage or a malformed input, 1 for anything else that failed), never a traceback.
A command with ``--quiet`` shows no progress (ninferkit.progress); the others show it as the terminal allows.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence
from typing import Any

from ninferkit import progress
from ninferkit.errors import BadInput, NinferkitError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ninferkit", description="A reproducible LLM-serving runbook.")
    parser.add_argument("--version", action=_Version, help="the package version and the checkout's commit")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        module.add_parser(subparsers).set_defaults(handler=module.main)
    return parser


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
    from pathlib import Path

    from ninferkit.version import __version__, git_state

    state = git_state(Path(__file__).resolve().parent.parent.parent)
    if state["commit"] is None:
        return f"ninferkit {__version__} (not a git checkout)"
    dirty = ", uncommitted changes" if state["dirty"] else ""
    return f"ninferkit {__version__} (git {state['commit'][:7]}{dirty})"


def main(argv: Sequence[str] | None = None) -> int:
    if list(sys.argv[1:] if argv is None else argv) == ["--version"]:
        # answered before every command's module (pydantic, httpx) is imported, and the way argparse would
        print(version_line())
        raise SystemExit(0)
    args = build_parser().parse_args(argv)
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
