"""What an engine's KV memory is made of, for the capacity fit and search and the plan check.

Only the rules live here (`engines/pool.py`, `engines/kv.py` and each engine's `kv_layout.py` hold the
shapes); the capacity package, preflight and the write-up's memory section ask them.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from ninferkit.engines.kv import KVLayout
from ninferkit.engines.part import EnginePart
from ninferkit.engines.pool import PoolRule
from ninferkit.params.profile import Profile


class CapacityRules(EnginePart):
    """An engine's KV pool rule and KV layout; adapters set `capacity_pool`."""

    capacity_pool: ClassVar[PoolRule]
    """How (concurrency, per-slot context) becomes this engine's KV pool (the capacity fit and search)."""

    def kv_layout(self, profile: Profile, model_path: Path | None, kv_dtype: str) -> KVLayout | None:
        """KV bytes per token from the model's architecture (None: unknown, the fit estimates it);
        raises ProfileError for a KV dtype the engine cannot use with this model."""
        return None

    def slot_context_cap(self, profile: Profile, model_path: Path | None) -> int | None:
        """The longest context the engine serves in one slot whatever the memory; None: no such cap."""
        return None
