"""The runbook's steps, each declared once in its own module (`STEP`), found by name like the sweep kinds.

A module of ninferkit/steps that defines `STEP` is a step: its name (what `--steps` and the manifest say), its
notebook, the record it writes into the run directory, and whether a `--url` run takes it by default. The
runner, the fleet and the notebooks' facade ask this catalog, so a new step is its notebook, its module and
its record.

    >>> get_step("setup").notebook
    '00_setup.ipynb'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from ninferkit.errors import ProfileError
from ninferkit.registry import Registry
from ninferkit.rundir.records import RunbookStep


@dataclass(frozen=True)
class Step:
    name: str
    notebook: str | None
    """The notebook that runs it (notebooks/<notebook>); None for a step no notebook runs (attach: `--url`)."""
    writes: str
    """The record it writes, relative to the run directory."""
    run: Callable[..., Any]
    """`run(run, **options) -> record`: what the notebook's cell calls."""
    url: bool = False
    """Whether a `--url` run (someone else's server) takes it by default."""
    runbook: bool = True
    """Whether `ninferkit run` runs it (06_deploy leaves a service behind, so it runs only by hand)."""
    needs_server: bool = False
    """Whether it sends requests to the run's own running server (the sweeps); a step that reads the launch's files
    (capacity, writeup) or launches its own does not, so the sweeps step does not start the base again for it."""

    @property
    def label(self) -> str:
        """The name with its notebook, as the write-up and the runner's lines show it: 'setup (00_setup)'."""
        return f"{self.name} ({PurePath(self.notebook).stem})" if self.notebook else self.name

    @property
    def order(self) -> str:
        """The notebooks' own order (00 ... 06); the attach step stands in for the launch step, just before it."""
        return self.notebook or "02_"


_STEPS: Registry[Step] = Registry("step", ProfileError)


def steps() -> list[Step]:
    """Every step, in runbook order."""
    _STEPS.discover("ninferkit.steps", "STEP")
    return sorted((_STEPS.get(name) for name in _STEPS.names()), key=lambda step: step.order)


def get_step(name: str) -> Step:
    """Raises ProfileError, with the steps there are, for a name that is none."""
    _STEPS.discover("ninferkit.steps", "STEP")
    return _STEPS.get(name)


def runbook_steps() -> list[str]:
    """The steps `ninferkit run` runs, in order: those with a notebook, deploy aside."""
    return [step.name for step in steps() if step.notebook and step.runbook]


def runbook() -> list[RunbookStep]:
    """Every step in order with its label, as a run's manifest records them for its write-up (which sits below
    the steps and reads them there)."""
    return [RunbookStep(name=step.name, label=step.label) for step in steps()]


def url_steps() -> list[str]:
    """The steps a `--url` run takes by default."""
    return [step.name for step in steps() if step.url]


__all__ = ["Step", "get_step", "runbook", "runbook_steps", "steps", "url_steps"]
