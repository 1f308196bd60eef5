"""One shape for every extension point: engine adapters, capacity models, report renderers.

A name maps to one implementation; registering a name twice is a bug; asking for an unknown name
raises the caller's error type with the names that do exist, so the message says what to write.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from ninferkit.errors import NinferkitError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, what: str, error: type[NinferkitError]) -> None:
        self.what = what
        self.error = error
        self._items: dict[str, T] = {}

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
