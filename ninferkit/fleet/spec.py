"""The fleet file: which hosts run which profiles, through what, with what GPU, and where their runs go.

It is validated as a profile is (`params.load`): unknown keys refused with the closest known one, every bad
field named with what is allowed, and then each host's profiles loaded with the fleet's overrides and put
through their own preflight (`preflight.check`) for the fleet's steps, so a host whose plan cannot finish
is refused before anything is submitted or started anywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from ninferkit.errors import ProfileError
from ninferkit.params import LoadedProfile, load_profile
from ninferkit.params.base import Section, shaped
from ninferkit.params.load import field_problems, read_yaml_mapping, refuse_control_text
from ninferkit.steps import preflight
from ninferkit.steps.catalog import runbook_steps

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
GRES = re.compile(r"^[a-z][a-z0-9_]*:[A-Za-z0-9_.-]+:[1-9][0-9]*$")
"""A GRES request by type, as sbatch's --gres takes it: gpu:v100:2."""


class SshTarget(Section):
    """How to reach a host without a scheduler. The key is a file (never a password); the host key must be in
    `known_hosts` (no trust on first use)."""

    address: str = Field(min_length=1, max_length=253)
    port: int = Field(22, ge=1, le=65535)
    user: str = Field(min_length=1, max_length=64,
                      **shaped(r"^[a-z_][a-z0-9_.-]*$", "a login name: lowercase letters, digits, '_', '.' or '-', "
                               "not starting with a digit"))
    identity_file: str = Field(min_length=1, description="the private key's path on this machine")
    known_hosts: str = Field(min_length=1, description="a known_hosts file holding the host's key")
    checkout: str = Field(min_length=1, description="the ninferkit checkout on the host (absolute path)")
    python: str = Field(".venv/bin/python", description="its Python, relative to the checkout or absolute")

    @field_validator("checkout")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not PurePosixPath(value).is_absolute():
            raise ValueError(f"the checkout must be an absolute path on the host, not {value!r}")
        return value


SLURM_FIELDS = ("partition", "account", "qos", "constraint", "mem", "container_image")
"""A host's fields that only a Slurm host has: each is an `#SBATCH` line (the image, pyxis's srun option)."""


class Host(Section):
    """One box (or Slurm partition) and what it runs."""

    name: str = Field(description="names the host in every row, log line and run directory")
    via: Literal["slurm", "ssh"]
    profiles: list[str] = Field(min_length=1, description="profile files, relative to the fleet's checkout")
    gres: str | None = Field(None, description="the GPUs it must have, by Slurm GRES type: gpu:v100:2")
    partition: str | None = Field(None, **shaped(r"^[A-Za-z0-9_.-]+$",
                                                 "a Slurm partition name: letters, digits, '_', '.' or '-'"),
                             description="Slurm: --partition")
    ssh: SshTarget | None = None
    run_root: str = Field(min_length=1, description="where its run directories go: an SSH host's, an absolute "
                                                    "path there; a Slurm host's, a folder under the fleet's state "
                                                    "folder (no '..')")
    time_limit_min: int | None = Field(None, ge=1, le=30 * 24 * 60,
                                       description="overrides the limit estimated from the plan")
    account: str | None = Field(None, **shaped(r"^[A-Za-z0-9_.-]{1,64}$", "1-64 letters, digits, '_', '.' or '-'"),
                         description="Slurm: --account to charge")
    qos: str | None = Field(None, **shaped(r"^[A-Za-z0-9_.-]{1,64}$", "1-64 letters, digits, '_', '.' or '-'"),
                     description="Slurm: --qos")
    constraint: str | None = Field(None, **shaped(r"^[A-Za-z0-9_.&|,*()\[\]-]{1,256}$",
                                                  "node feature names joined by & | , * ( ) [ ] (a100&ib, "
                                                  "[rack1|rack2], (a100|h100)&ib), at most 256 characters"),
                                   description="Slurm: --constraint, node features (a100&ib, [rack1|rack2]), read "
                                               "left to right as Slurm does")
    mem: str | None = Field(None, **shaped(r"^[1-9][0-9]{0,8}[KMGT]?$",
                                           "a whole number with an optional K, M, G or T (16G)"),
                            description="Slurm: --mem per node (16G; a bare number is megabytes)")
    container_image: str | None = Field(None, **shaped(r"^[^\s\"'\\]{1,512}$",
                                                       "an image name or path with no spaces, quotes or backslashes"),
                                        description="Slurm with pyxis: the task runs in this enroot image "
                                                    "(srun --container-image: nvcr.io#nvidia/pytorch:24.05-py3, or a "
                                                    "squashfs path); the image must hold the checkout's Python")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME.match(value):
            raise ValueError(f"{value!r}: a host name is letters, digits, '_', '.', '-' (up to 63)")
        return value

    @field_validator("run_root")
    @classmethod
    def _run_root(cls, value: str) -> str:
        if ".." in PurePosixPath(value).parts:
            raise ValueError(f"{value!r}: a run_root may not contain '..' (it would leave the folder it names: "
                             "the fleet's state folder, or the path given on an SSH host)")
        return value

    @field_validator("gres")
    @classmethod
    def _gres(cls, value: str | None) -> str | None:
        if value is not None and not GRES.match(value):
            raise ValueError(f"{value!r}: a GRES by type is NAME:TYPE:COUNT, e.g. gpu:v100:2")
        return value

    @model_validator(mode="after")
    def _transport(self) -> Host:
        if self.via == "ssh" and self.ssh is None:
            raise ValueError(f"host {self.name} runs via ssh: give its ssh section (address, user, identity_file, "
                             "known_hosts, checkout)")
        if self.via == "ssh" and not PurePosixPath(self.run_root).is_absolute():
            raise ValueError(f"host {self.name} runs via ssh: its run_root must be an absolute path on the host, "
                             f"not {self.run_root!r}")
        slurm_only = [name for name in SLURM_FIELDS if getattr(self, name) is not None]
        if self.via == "ssh" and slurm_only:
            raise ValueError(f"host {self.name} runs via ssh: {', '.join(slurm_only)} "
                             f"{'is a Slurm field' if len(slurm_only) == 1 else 'are Slurm fields'} (via: slurm)")
        if self.via == "slurm" and self.ssh is not None:
            raise ValueError(f"host {self.name} runs via slurm: an ssh section is for via: ssh")
        if self.via == "slurm" and PurePosixPath(self.run_root).is_absolute():
            raise ValueError(f"host {self.name} runs via slurm: its run_root is a folder under the fleet's state "
                             f"folder (which the cluster shares), not the absolute path {self.run_root!r}")
        return self


class FleetFile(Section):
    name: str
    description: str = ""
    state_dir: str = Field(description="this machine's folder for the fleet's tasks, logs and collected runs "
                                       "(relative: to the current directory)")
    steps: list[str] = Field(default_factory=runbook_steps, description="the runbook's steps each host runs "
                                                                    "(default: all that `ninferkit run` runs)")
    overrides: list[str] = Field(default_factory=list, description="-p overrides applied to every host's profile")
    seconds_per_cell: float = Field(600.0, gt=0, le=86_400, description="the time budget of one planned sweep "
                                                                        "cell, for the time limit")
    setup_allowance_s: float = Field(1800.0, ge=0, le=86_400, description="setup and artifact (a first build "
                                                                          "or download), for the time limit")
    hosts: list[Host] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME.match(value):
            raise ValueError(f"{value!r}: a fleet name is letters, digits, '_', '.', '-' (up to 63)")
        return value

    @field_validator("steps")
    @classmethod
    def _steps(cls, value: list[str]) -> list[str]:
        allowed = runbook_steps()
        unknown = [step for step in value if step not in allowed]
        if unknown:
            raise ValueError(f"unknown step(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")
        return value

    @model_validator(mode="after")
    def _unique_hosts(self) -> FleetFile:
        names = [host.name for host in self.hosts]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"host names must be unique; written twice: {', '.join(twice)}")
        return self


@dataclass(frozen=True)
class LoadedFleet:
    """A fleet file that validated, with each host's profiles loaded (overrides applied) and preflighted."""

    spec: FleetFile
    source: Path
    profiles: dict[tuple[str, str], LoadedProfile]
    """(host name, profile path as written) -> the loaded profile."""

    @property
    def state_dir(self) -> Path:
        return Path(self.spec.state_dir).resolve()


def load_fleet(path: str | Path, overrides: list[str] | tuple[str, ...] = (), root: Path | None = None) -> LoadedFleet:
    """Read and check a fleet file; ProfileError naming every bad field, or every host whose profile would
    not pass its own preflight, before anything is written. Profile paths are relative to `root` (the
    checkout: the current directory by default) and may not leave it."""
    source = Path(path)
    _, data = read_yaml_mapping(source, "fleet file", "params/fleets/*.yaml", "name, state_dir and hosts")
    refuse_control_text(data, str(source))
    try:
        spec = FleetFile.model_validate(data)
    except ValidationError as exc:
        lines = field_problems(exc, data, FleetFile)
        raise ProfileError(f"{source} is not a valid fleet file:\n" + "\n".join(f"  - {line}" for line in lines)) \
            from None
    base = (root or Path.cwd()).resolve()
    every = [*spec.overrides, *overrides]
    loaded: dict[tuple[str, str], LoadedProfile] = {}
    refused: list[str] = []
    for host in spec.hosts:
        for written in host.profiles:
            where = (base / written).resolve()
            if not where.is_relative_to(base):
                refused.append(f"host {host.name}: profile {written} is outside the checkout {base}")
                continue
            try:
                profile = load_profile(where, every)
                preflight.check(profile, spec.steps, here=False)  # each host's run checks its own machine
            except ProfileError as exc:
                refused.append(f"host {host.name}, profile {written}: {exc}")
                continue
            loaded[(host.name, written)] = profile
    refused += run_roots_outside(spec)
    refused += shared_run_dirs(spec, loaded)
    if refused:
        raise ProfileError(f"{source}: nothing was submitted or started; {len(refused)} host profile(s) refused:\n"
                           + "\n".join(f"  - {line}" for line in refused))
    return LoadedFleet(spec, source.resolve(), loaded)


def run_roots_outside(spec: FleetFile) -> list[str]:
    """Slurm hosts whose run_root, through a symlink already there, lands outside the fleet's state folder:
    validation refuses '..' and absolute paths, and this, the last way out (merge and collect read the runs
    from under the state folder, and a resubmission writes there)."""
    state = Path(spec.state_dir).resolve()
    return [f"hosts.{place}.run_root: {host.run_root!r}: host {host.name}'s run_root resolves to "
            f"{(state / host.run_root).resolve()}, outside the fleet's state folder {state} (a symlink); give a "
            "folder under it" for place, host in enumerate(spec.hosts)
            if host.via == "slurm" and not (state / host.run_root).resolve().is_relative_to(state)]


def run_dir_name(host: Host, profile: LoadedProfile) -> str:
    """A task's run directory under its host's run_root: named by host and profile (its `name:`), not by the
    time, so a resubmission finds it."""
    return f"{host.name}-{profile.profile.name}"


def shared_run_dirs(spec: FleetFile, loaded: dict[tuple[str, str], LoadedProfile]) -> list[str]:
    """Tasks that would write one run directory (a profile listed twice on a host, two profiles with one
    `name:`): their rows would be counted twice in one run, so each clash is refused, naming both."""
    owners: dict[tuple[str, str], str] = {}
    clashes = []
    for host in spec.hosts:
        machine = f"{host.ssh.address}:{host.ssh.port}" if host.ssh is not None else "slurm"
        for place, written in enumerate(host.profiles, 1):
            profile = loaded.get((host.name, written))
            if profile is None:
                continue  # refused already
            where = str(PurePosixPath(host.run_root) / run_dir_name(host, profile))
            this = f"host {host.name}, profile {written} (#{place} of its profiles, name: {profile.profile.name})"
            first = owners.setdefault((machine, where), this)
            if first != this:
                clashes.append(f"{this} would share the run directory {where} with {first}; give each profile its "
                               "own name: (or list it once)")
    return clashes
