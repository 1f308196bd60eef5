"""One shape for every extension point: sweep kinds, interop formats, deploy modes, report renderers.

A name maps to one implementation; registering a name twice is a bug; asking for an unknown name
raises the caller's error type with the names that do exist, so the message says what to write.
A kind of thing that is one module of its package is found there (`discover`), so adding one is adding
its file, with no list to keep beside it.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Generic, TypeVar

from ninferkit.errors import NinferkitError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, what: str, error: type[NinferkitError]) -> None:
        self.what = what
        self.error = error
        self._items: dict[str, T] = {}
        self._discovered: set[str] = set()

    def add(self, name: str, item: T) -> T:
        if name in self._items:
            raise ValueError(f"{self.what} '{name}' is already registered")
        self._items[name] = item
        return item

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise self.error(f"{self.what} '{name}' is not registered; registered: {', '.join(self.names())}") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def discover(self, package: str, attribute: str) -> None:
        """Import every module of `package` and register the `attribute` of each that has one under its `name`,
        once per package; modules load on first use, so importing the package costs nothing. Marked found
        before the imports, so a module that asks the registry while it loads does not start a second pass."""
        if package in self._discovered:
            return
        self._discovered.add(package)
        for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
            item = getattr(importlib.import_module(f"{package}.{module.name}"), attribute, None)
            if item is not None:
                self.add(item.name, item)
