"""Engine adapters, one package each, chosen by the `engine.kind` a profile names.

Each package has an `options` module (the engine's `serve` section: light, no imports above the
profile schema) and an `adapter` module (everything else). Both load on first use (`engines/kinds.py`),
so importing this package costs nothing and the profile schema can ask for an engine's options.

    >>> get_adapter("llama_server").kind
    'llama_server'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ninferkit.params.kinds import engine_module

if TYPE_CHECKING:
    from ninferkit.engines.base import EngineAdapter


def get_adapter(kind: str) -> EngineAdapter:
    adapter: type[EngineAdapter] = engine_module(kind, "adapter").Adapter
    return adapter()


__all__ = ["get_adapter"]
