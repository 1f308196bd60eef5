"""The sweep kinds, one module each (sweeps/kinds/<kind>.py, its `KIND`), found by name like the engines.

A module of this folder that defines `KIND` is a kind; it loads on first use, so importing this package
costs nothing. The kinds run, plan and tabulate in the order of their sections in the profile's `sweeps`
(params/sweeps.py), so a new kind is its module and its profile section. `register` adds a kind that
lives elsewhere (a test's).

    >>> get_kind("context").table_keys
    ('target_prompt_tokens', 'api')
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from ninferkit.errors import ProfileError
from ninferkit.params.sweeps import SweepsSection
from ninferkit.sweeps.kinds.base import SweepKind

AnyKind = SweepKind[Any, Any]
_registered: dict[str, AnyKind] = {}
_found = False


def register(kind: AnyKind) -> AnyKind:
    """Add a kind; a name registered twice is a bug."""
    if kind.name in _registered:
        raise ValueError(f"sweep kind '{kind.name}' is already registered")
    _registered[kind.name] = kind
    return kind


def kinds() -> list[AnyKind]:
    """Every kind, in the order of their profile sections (a kind whose section is not there last, by name)."""
    _discover()
    sections = list(SweepsSection.model_fields)
    return sorted(_registered.values(),
                  key=lambda kind: (sections.index(kind.name) if kind.name in sections else len(sections), kind.name))


def names() -> list[str]:
    return [kind.name for kind in kinds()]


def get_kind(name: str) -> AnyKind:
    """Raises ProfileError, with the kinds there are, for a name that is none."""
    found = find_kind(name)
    if found is None:
        raise ProfileError(f"sweep kind '{name}' is not one ninferkit measures; allowed: {', '.join(names())}")
    return found


def find_kind(name: str | None) -> AnyKind | None:
    """The kind of that name; None for a name that is none (a table of an older run, the A/B)."""
    _discover()
    return _registered.get(name or "")


def _discover() -> None:
    global _found
    if _found:
        return
    _found = True
    for module in pkgutil.iter_modules(__path__):
        kind = getattr(importlib.import_module(f"{__name__}.{module.name}"), "KIND", None)
        if kind is not None and _registered.get(kind.name) is not kind:
            register(kind)


__all__ = ["find_kind", "get_kind", "kinds", "names", "register"]
