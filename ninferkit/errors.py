"""The one exception tree of ninferkit.

Every error a user can meet derives from :class:`NinferkitError`, so a caller (the CLI, a notebook,
the runner) can catch at the layer it cares about. Each message ends with the next step to take.

    NinferkitError
    +-- BadInput                a file or answer ninferkit reads is malformed (exit code 2, like a bad profile)
    |   +-- ProfileError        a profile field is unknown, mistyped or out of range
    +-- RunDirBusy              another live process is running in the same run directory
    +-- DiskFull                a result file could not be written: its disk is full
    +-- ToolMissing             a program the step needs (cmake, a compiler, docker) is not installed
    +-- ArtifactError           an artifact is missing, differs from its pin, or cannot be read
    |   +-- ChecksumMismatch
    +-- ServerError             the inference server could not be started, reached or stopped
    |   +-- ServerStartError    the process exited during startup (carries the diagnosis)
    |   +-- ReadinessTimeout    the process lived but never became ready
    |   +-- ServerExited        the process died after it was ready
    +-- RequestFailed           one HTTP request to the server failed
    +-- SweepFailed             sweep cells measured nothing, or the server refused our credentials
    +-- StepFailed              a runbook step (notebook) failed; names the step and the diagnosis
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


class NinferkitError(Exception):
    """Root of every error ninferkit raises on purpose."""


class BadInput(NinferkitError):
    """Something ninferkit reads is malformed (a profile, a run directory's file, a server's answer);
    the message names the file or field, what is wrong and what to do."""


class ProfileError(BadInput):
    """A profile does not validate; the message lists each bad field with what is allowed."""


class RunDirBusy(NinferkitError):
    """Another live process runs in the same run directory; the message names it."""


class DiskFull(NinferkitError):
    """A result file could not be written for lack of space; a rerun after freeing space completes the step."""


class ToolMissing(NinferkitError):
    """A program a step needs is not installed; the message says how to install it."""


class ArtifactError(NinferkitError):
    """An artifact is missing, unreadable, or differs from what the profile pins."""


class ChecksumMismatch(ArtifactError):
    """Size or sha256 of a file differs from the pinned value."""


@dataclass(frozen=True)
class Diagnosis:
    """A named failure recognised in a server log: what it is, why, and what to do."""

    code: str
    cause: str
    fix: str
    evidence: str = ""

    def __str__(self) -> str:
        text = f"{self.code}: {self.cause}. Fix: {self.fix}"
        return f"{text}\n  log: {self.evidence}" if self.evidence else text


@dataclass
class ServerError(NinferkitError):
    """The inference server could not be started, reached or stopped."""

    message: str
    argv: list[str] = field(default_factory=list)
    url: str = ""
    exit_code: int | None = None
    log_path: Path | None = None
    log_tail: str = ""
    diagnosis: Diagnosis | None = None

    def __post_init__(self) -> None:
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [self.message]
        if self.diagnosis is not None:
            parts.append(f"Diagnosis: {self.diagnosis}")
        elif self.log_tail:
            parts.append("Last log lines:\n" + self.log_tail)
        if self.log_path is not None:
            parts.append(f"Full log: {self.log_path}")
        return "\n".join(parts)


class ServerStartError(ServerError):
    """The server process exited before it became ready."""


class ReadinessTimeout(ServerError):
    """The server process stayed alive but never answered ready within the timeout."""


class ServerExited(ServerError):
    """The server process died after it had become ready."""


class RequestFailed(NinferkitError):
    """One HTTP request to the server failed (transport error or HTTP error status)."""


class SweepFailed(NinferkitError):
    """The sweeps ended with cells that measured nothing (each with the server's answer and a diagnosis;
    a rerun retries them), or stopped because the server refused the requests' credentials."""


class StepFailed(NinferkitError):
    """A runbook step failed; carries the step name, its notebook and the diagnosis."""

    def __init__(self, step: str, notebook: Path, reason: str) -> None:
        self.step = step
        self.notebook = notebook
        self.reason = reason
        super().__init__(
            f"step '{step}' failed: {reason}\nExecuted notebook (with the failing cell): {notebook}"
        )


class HostActionFailed(NinferkitError):
    """A change ninferkit made to the host on request (`deploy`, `probe --apply`) failed or did not take;
    the message names the command, what it printed and what was checked."""
