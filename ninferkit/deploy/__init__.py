"""`ninferkit deploy`: the profile's server left running as a service, the way the field reports leave a box.

The runbook's launch starts the engine to measure it and stops it at the end; a deployment stays up. Report
000's script ends with a container started `-d --restart unless-stopped`, a boot unit that re-applies the
power limit and a health wait, and its run.sh has start, stop, logs and status: `deploy` is that, from the
profile (or from a finished run's capacity answer: `from_run.py`).

A mode is one way to run a service, one module each behind `mode_named` (`docker.py`: a container that
restarts itself; `systemd.py`: a unit for a native binary). `service.py` ties a mode to the profile: the
plan (argv and files), the boot unit (`power.py`), the start, the health wait and the acceptance checks.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ninferkit.deploy.actions import Host
from ninferkit.engines.launcher import Launcher
from ninferkit.errors import ProfileError
from ninferkit.params.profile import Profile
from ninferkit.registry import Registry

if TYPE_CHECKING:
    from ninferkit.deploy import service as service

@dataclass(frozen=True)
class Plan:
    """What a deployment runs and writes, before anything runs: shown by --dry-run, recorded in deploy.json."""

    mode: str
    name: str
    argv: list[str]
    """The command that starts the service (Docker), or the unit's ExecStart (systemd); secrets redacted."""
    files: dict[str, str]
    """Files written to the deployment's folder: name -> text."""
    url: str


@dataclass(frozen=True)
class ServiceState:
    """A service as its manager reports it now."""

    exists: bool
    running: bool
    status: str
    """The manager's own word: docker's State.Status, systemd's ActiveState/SubState."""
    restarts: int | None = None
    pid: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)


class Mode:
    """One way to keep an engine running: plan it, start it, ask about it, show its log, stop it."""

    name: ClassVar[str]

    def plan(self, profile: Profile, adapter: Launcher, model_path: Path, service: str, host: str,
             binary: Path | None) -> Plan:
        """The argv and files of the service `service`, the engine listening on `host` (its published address)."""
        raise NotImplementedError

    def needs(self, host: Host) -> str | None:
        """Why this mode cannot start a service on this machine (None: it can); asked before any change."""
        raise NotImplementedError

    def start(self, plan: Plan, folder: Path, host: Host, env: dict[str, str] | None = None) -> None:
        """Start the planned service, replacing one of the same name (as the report's run.sh start does); `env`:
        variables the start command passes on by name (an engine's key)."""
        raise NotImplementedError

    def state(self, name: str, host: Host) -> ServiceState:
        raise NotImplementedError

    def logs_argv(self, name: str, lines: int, follow: bool) -> list[str]:
        """The command that prints the service's log (run with the terminal's own output)."""
        raise NotImplementedError

    def stop(self, name: str, host: Host) -> bool:
        """Stop the service (it stays installed, and stopped across reboots); False when it was not running."""
        raise NotImplementedError


MODES: Registry[Mode] = Registry("deploy mode", ProfileError)


def mode_named(name: str) -> Mode:
    """The mode of that name: a module of this package that defines `MODE`."""
    MODES.discover(__name__, "MODE")
    return MODES.get(name)


def mode_of(profile: Profile) -> Mode:
    """deploy.mode, or Docker where the profile's engine runs in Docker, else a systemd unit."""
    return mode_named(profile.deploy.mode or ("docker" if profile.serve.docker else "systemd"))


def service_name(profile: Profile) -> str:
    """deploy.name (seed 000's container is `ninfer`), else ninferkit-<profile name>."""
    return profile.deploy.name or f"ninferkit-{profile.name}"[:63]


def publish_host(profile: Profile) -> str:
    return profile.deploy.publish_host or profile.serve.host


def service_url(profile: Profile, host: str) -> str:
    """Where the service answers from this machine (0.0.0.0 listens on loopback too)."""
    connect = "127.0.0.1" if host in ("0.0.0.0", "") else host
    return f"http://{connect}:{profile.serve.port}"


def __getattr__(name: str) -> Any:
    """`ninferkit.deploy.service` on first use (a notebook imports only `ninferkit`)."""
    if name == "service":
        return importlib.import_module(f"{__name__}.service")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
