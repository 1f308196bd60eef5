"""Engine adapters, one package each, chosen by the `engine.kind` a profile names.

Each package has an `options` module (the engine's `serve` section: light, no imports above the
profile schema) and an `adapter` module (everything else). Both load on first use, so importing
this package costs nothing and the profile schema can ask for an engine's options.

    >>> get_adapter("llama_server").kind
    'llama_server'
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from ninferkit.errors import ProfileError

if TYPE_CHECKING:
    from ninferkit.engines.base import EngineAdapter
    from ninferkit.params.serve import ServeSection

KINDS = ("llama_server", "ninfer", "vllm")


def _module(kind: str, name: str) -> ModuleType:
    if kind not in KINDS:
        raise ProfileError(f"engine.kind '{kind}' is not an engine ninferkit drives; allowed: {', '.join(KINDS)}")
    return importlib.import_module(f"ninferkit.engines.{kind}.{name}")


def get_adapter(kind: str) -> EngineAdapter:
    adapter: type[EngineAdapter] = _module(kind, "adapter").Adapter
    return adapter()


def serve_section(kind: str) -> type[ServeSection]:
    """The class that validates a profile's `serve` section for this engine."""
    section: type[ServeSection] = _module(kind, "options").Serve
    return section


__all__ = ["KINDS", "get_adapter", "serve_section"]
