"""The sweep kinds, one module each (sweeps/kinds/<kind>.py, its `KIND`), found by name like the engines.

A module of this folder that defines `KIND` is a kind; it loads on first use, so importing this package
costs nothing. The kinds run, plan and tabulate in the order of their sections in the profile's `sweeps`
(params/sweeps.py), so a new kind is its module and its profile section. `register` adds a kind that
lives elsewhere (a test's).

    >>> get_kind("context").table_keys
    ('target_prompt_tokens', 'api')
"""

from __future__ import annotations

from typing import Any

from ninferkit.errors import ProfileError
from ninferkit.params.sweeps import SweepsSection
from ninferkit.registry import Registry
from ninferkit.sweeps.kinds.base import SweepKind

AnyKind = SweepKind[Any, Any]
_KINDS: Registry[AnyKind] = Registry("sweep kind", ProfileError)


def register(kind: AnyKind) -> AnyKind:
    """Add a kind; a name registered twice is a bug."""
    _discover()
    return _KINDS.add(kind.name, kind)


def kinds() -> list[AnyKind]:
    """Every kind, in the order of their profile sections (a kind whose section is not there last, by name)."""
    _discover()
    sections = list(SweepsSection.model_fields)
    order = sorted(_KINDS.names(), key=lambda name: (sections.index(name) if name in sections else len(sections)))
    return [_KINDS.get(name) for name in order]


def names() -> list[str]:
    return [kind.name for kind in kinds()]


def get_kind(name: str) -> AnyKind:
    """Raises ProfileError, with the kinds there are, for a name that is none."""
    _discover()
    return _KINDS.get(name)


def find_kind(name: str | None) -> AnyKind | None:
    """The kind of that name; None for a name that is none (a table of an older run, the A/B)."""
    _discover()
    return _KINDS.get(name) if name in _KINDS.names() else None


def _discover() -> None:
    _KINDS.discover(__name__, "KIND")


__all__ = ["find_kind", "get_kind", "kinds", "names", "register"]
