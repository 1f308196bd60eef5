"""Engine adapters, one file each, registered by the `engine.kind` a profile names.

    >>> get_adapter("llama_server").kind
    'llama_server'
"""

from __future__ import annotations

from ninferkit.engines.base import DiagnosisRule, EngineAdapter
from ninferkit.errors import ProfileError

_REGISTRY: dict[str, type[EngineAdapter]] = {}


def register(adapter: type[EngineAdapter]) -> type[EngineAdapter]:
    """Class decorator: make an adapter available under its `kind`; duplicates are a bug."""
    if adapter.kind in _REGISTRY:
        raise ValueError(f"engine kind '{adapter.kind}' is already registered by {_REGISTRY[adapter.kind]}")
    _REGISTRY[adapter.kind] = adapter
    return adapter


def get_adapter(kind: str) -> EngineAdapter:
    try:
        return _REGISTRY[kind]()
    except KeyError:
        raise ProfileError(f"engine.kind '{kind}' has no adapter; registered: {', '.join(sorted(_REGISTRY))}") from None


def registered_kinds() -> list[str]:
    return sorted(_REGISTRY)


# Built-in adapters register themselves on import.
import ninferkit.engines.llama_server  # noqa: E402,F401
import ninferkit.engines.ninfer  # noqa: E402,F401
import ninferkit.engines.vllm  # noqa: E402,F401

__all__ = ["DiagnosisRule", "EngineAdapter", "get_adapter", "register", "registered_kinds"]
