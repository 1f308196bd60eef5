"""Output meant for a log, not a terminal: a child process told not to colour, and text without control codes.

A Jupyter kernel forces colour on every program it starts (ipykernel's `init_environment` sets
``CLICOLOR_FORCE=1`` and ``FORCE_COLOR=1`` in the kernel's own environment, so that `!ls` is coloured in a
cell), and the runbook's programs run inside kernels: cmake then colours its pipe, and a piped
``./scripts/runbook`` log held 274 lines of escape codes from one llama.cpp build. So every program ninferkit
starts gets `child_env` (``NO_COLOR=1``, no-color.org; ``CLICOLOR=0``, bixense.com/clicolors, which cmake and
BSD tools read; the forcing variables unset, since they win over both), and any text that still carries
control sequences (a program that ignores all of these) is cleaned by `plain` before it reaches a line of
progress or the runner's terminal.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

NO_COLOUR = {"NO_COLOR": "1", "CLICOLOR": "0"}
COLOUR_FORCING = ("CLICOLOR_FORCE", "FORCE_COLOR")

_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, erase line
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: window titles, hyperlinks
    r"|\x1b[@-Z\\-_]"  # other two-byte escapes
    r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"  # the C0 controls but tab, newline and carriage return
)


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a program ninferkit starts: this process's, without colour forcing, told not to
    colour, plus `extra` (an engine's API key variable)."""
    env = {name: value for name, value in os.environ.items() if name not in COLOUR_FORCING}
    return {**env, **NO_COLOUR, **(extra or {})}


def plain(text: str) -> str:
    """`text` without terminal control sequences (colour, cursor moves, titles); tabs, newlines and carriage
    returns stay, for the caller that reads a rewritten line as its last state."""
    return _CONTROL.sub("", text)
