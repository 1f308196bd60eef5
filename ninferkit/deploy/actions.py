"""Changes to the host, each printed before it runs and its result checked.

`deploy` and `probe --apply` change the machine (a container, a unit, a power limit). Every change goes
through `Host.act`: the command is printed first (so a reader of the terminal or the notebook sees what is
about to happen), run as an argv list (never a shell string), and a failure raises HostActionFailed with
what the command printed. Questions that change nothing (`docker inspect`, `systemctl is-active`) go
through `Host.ask` and print nothing.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

from ninferkit.errors import HostActionFailed, ToolMissing
from ninferkit.plain_output import child_env
from ninferkit.redaction import scrub


@dataclass
class Host:
    """Runs commands on this machine for one deployment or apply, and remembers what it did (for the record)."""

    say: Callable[[str], None] = print
    done: list[str] = field(default_factory=list)
    """Every command `act` ran, as printed."""

    def act(self, why: str, argv: list[str], timeout_s: float = 120, env: dict[str, str] | None = None) -> str:
        """Print `why` and the command, run it, return its output; HostActionFailed when it exits non-zero.
        `env` adds variables the command reads by name (a key `docker run -e NAME` copies); never printed."""
        line = shlex.join(argv)
        self.say(f"{why}: {line}")
        result = self._run(argv, timeout_s, env)
        self.done.append(line)
        if result.returncode != 0:
            raise HostActionFailed(f"`{line}` failed (exit code {result.returncode}): "
                                   f"{scrub(result.stdout.strip())[-800:] or 'it printed nothing'}")
        return result.stdout

    def ask(self, argv: list[str], timeout_s: float = 30) -> tuple[int, str]:
        """(exit code, output) of a command that changes nothing; printed nowhere."""
        result = self._run(argv, timeout_s)
        return result.returncode, result.stdout

    @staticmethod
    def _run(argv: list[str], timeout_s: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        if shutil.which(argv[0]) is None:
            raise ToolMissing(f"{argv[0]} is not installed (needed for `{shlex.join(argv)}`)")
        try:
            return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, text=True, timeout=timeout_s, env=child_env(env))
        except subprocess.TimeoutExpired as exc:
            raise HostActionFailed(f"`{shlex.join(argv)}` did not finish within {timeout_s:.0f} s") from exc
