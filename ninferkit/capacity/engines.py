"""What each engine's memory formula looks like: page size, pool range, auto headroom, KV slope.

One small registry keyed by the adapter's `kind` (the same names as ninferkit.engines), so the fit,
the table and the search never branch on engine names. Sources: capacity-model.md §1.4 (NInfer
paged pool, 64-token pages, auto keeps 1 GiB), §2 (vLLM blocks), §3 (llama.cpp: `-c` is the pool,
split evenly over `-np` slots).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ninferkit.capacity.architecture import (
    KVLayout,
    gguf_metadata,
    llama_cpp_kv_layout,
    ninfer_kv_layout,
    vllm_kv_layout,
)
from ninferkit.errors import ProfileError
from ninferkit.params.profile import Profile
from ninferkit.registry import Registry
from ninferkit.units import GIB


@dataclass(frozen=True)
class PoolRule:
    """How an engine turns (concurrency C, per-slot context S) into a KV pool, in tokens."""

    page_tokens: int
    auto_headroom_bytes: int | None
    """Memory `auto` sizing leaves free; None when the engine has no automatic KV sizing."""
    shared_pool: bool
    """True: one pool shared by all slots (a slot may reach S; the pool may be smaller than C x S)."""
    default_kv_dtype: str

    def pages(self, tokens: int) -> int:
        return math.ceil(tokens / self.page_tokens)

    def resolve(self, tokens: int) -> int:
        """The pool an explicit request of `tokens` really gets (whole pages)."""
        return self.pages(tokens) * self.page_tokens

    def pool_range(self, concurrency: int, context: int) -> tuple[int, int]:
        """(smallest, largest) legal pool in tokens: NInfer pages in [max(L, C), C x L]."""
        per_slot = self.pages(context)
        if not self.shared_pool:
            tokens = self.resolve(concurrency * context)
            return tokens, tokens
        return max(per_slot, concurrency) * self.page_tokens, concurrency * per_slot * self.page_tokens

    def requested_pool(self, concurrency: int, context: int, kv_capacity: int | str | None) -> int:
        """The pool a launch with this setting asks for (auto: the smallest legal pool, its B_min point)."""
        if kv_capacity is None:
            low, high = self.pool_range(concurrency, context)
            return low if self.shared_pool else high
        if kv_capacity == "auto":
            return self.pool_range(concurrency, context)[0]
        return self.resolve(int(kv_capacity))


@dataclass(frozen=True)
class EngineCapacity:
    pool: PoolRule
    layout: Callable[[Profile, Path | None, str | None], KVLayout | None]
    """KV layout from the profile (and the model file when the engine needs it); None: unknown."""
    slot_context_cap: Callable[[Profile, Path | None], int | None] = lambda profile, model_path: None
    """The longest context the engine serves in one slot whatever the memory; None: no such cap."""


_MODELS: Registry[EngineCapacity] = Registry("capacity model for engine.kind", ProfileError)
register = _MODELS.add
engine_capacity = _MODELS.get


def _ninfer_layout(profile: Profile, model_path: Path | None, kv_dtype: str | None) -> KVLayout | None:
    target = profile.capacity.model
    if target is None:
        return None  # unknown architecture: the fit estimates the slope too
    return ninfer_kv_layout(target, kv_dtype or "bf16", profile.serve.spec.method)


def _llama_layout(profile: Profile, model_path: Path | None, kv_dtype: str | None) -> KVLayout | None:
    if model_path is None or not model_path.exists():
        return None
    dtype = kv_dtype or "f16"
    return llama_cpp_kv_layout(gguf_metadata(model_path), dtype, dtype)


def _llama_slot_cap(profile: Profile, model_path: Path | None) -> int | None:
    """llama-server caps a slot at the model's trained context ("the slot context exceeds the training
    context of the model - capping"), so a longer slot is refused by its /v1/models, not by memory."""
    if model_path is None or not model_path.exists():
        return None
    meta = gguf_metadata(model_path)
    trained = meta.get(f"{meta['general.architecture']}.context_length")
    return None if trained is None else int(trained)


def _vllm_layout(profile: Profile, model_path: Path | None, kv_dtype: str | None) -> KVLayout | None:
    config = profile.capacity.vllm_config
    if config is None:
        return None
    path = Path(config).expanduser()
    if not path.is_file():
        raise ProfileError(f"capacity.vllm_config = {config!r}: no such file; give the model's config.json")
    tp = 1 if profile.serve.gpu_devices is None else len(profile.serve.gpu_devices)
    return vllm_kv_layout(json.loads(path.read_text()), kv_dtype or "auto", tp)


register("ninfer", EngineCapacity(PoolRule(64, GIB, True, "bf16"), _ninfer_layout))
register("llama_server", EngineCapacity(PoolRule(256, None, False, "f16"), _llama_layout, _llama_slot_cap))
register("vllm", EngineCapacity(PoolRule(16, None, True, "auto"), _vllm_layout))
