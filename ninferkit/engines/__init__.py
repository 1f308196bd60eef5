"""Engine adapters, one file each, registered by the `engine.kind` a profile names.

    >>> get_adapter("llama_server").kind
    'llama_server'
"""

from __future__ import annotations

from ninferkit.engines.base import DiagnosisRule, EngineAdapter
from ninferkit.errors import ProfileError
from ninferkit.registry import Registry

_ADAPTERS: Registry[type[EngineAdapter]] = Registry("engine.kind", ProfileError)


def register(adapter: type[EngineAdapter]) -> type[EngineAdapter]:
    """Class decorator: make an adapter available under its `kind`; duplicates are a bug."""
    return _ADAPTERS.add(adapter.kind, adapter)


def get_adapter(kind: str) -> EngineAdapter:
    return _ADAPTERS.get(kind)()


def registered_kinds() -> list[str]:
    return _ADAPTERS.names()


# Built-in adapters register themselves on import.
import ninferkit.engines.llama_server  # noqa: E402,F401
import ninferkit.engines.ninfer  # noqa: E402,F401
import ninferkit.engines.vllm  # noqa: E402,F401

__all__ = ["DiagnosisRule", "EngineAdapter", "get_adapter", "register", "registered_kinds"]
