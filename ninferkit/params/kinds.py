"""The engines ninferkit drives, and each one's modules loaded by name on first use.

The profile schema asks here for an engine's `serve` class; `engines.get_adapter` asks here for its adapter.
Kept apart from the package's __init__ (which names the adapter's type) so the schema, which every engine part
imports, imports nothing that imports an engine part: the circle this module ends.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from ninferkit.errors import ProfileError

if TYPE_CHECKING:
    from ninferkit.params.serve import ServeSection

KINDS = ("llama_server", "ninfer", "vllm")


def engine_module(kind: str, name: str) -> ModuleType:
    """`ninferkit.engines.<kind>.<name>` (`options` or `adapter`); an engine ninferkit does not drive is refused."""
    if kind not in KINDS:
        raise ProfileError(f"engine.kind '{kind}' is not an engine ninferkit drives; allowed: {', '.join(KINDS)}")
    return importlib.import_module(f"ninferkit.engines.{kind}.{name}")


def has_build(kind: str) -> bool:
    """Whether the engine's profile has an `engine.build` (where its binary comes from: source, a release): an
    engine that runs as installed (vLLM, from pip) has none, so none is recorded and none is written up."""
    built: bool = engine_module(kind, "options").HAS_BUILD
    return built


def serve_section(kind: str) -> type[ServeSection]:
    """The class that validates a profile's `serve` section for this engine."""
    section: type[ServeSection] = engine_module(kind, "options").Serve
    return section
