"""vLLM's KV bytes per token, from a checkpoint's config.json (capacity-model.md §2)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ninferkit.engines.kv import KVLayout
from ninferkit.errors import ProfileError

_TORCH_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
_VLLM_KV_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "bfloat16": 2, "float16": 2, "half": 2}


def vllm_kv_layout(config: Mapping[str, Any], kv_cache_dtype: str = "auto", tensor_parallel: int = 1) -> KVLayout:
    """vLLM: per GPU, sum over full-attention layers of 2 x kv_heads_per_rank x head_size x dtype bytes."""
    cfg = config.get("text_config", config)
    n_layer = int(cfg["num_hidden_layers"])
    heads = int(cfg.get("num_key_value_heads", cfg["num_attention_heads"]))
    head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // int(cfg["num_attention_heads"]))
    if kv_cache_dtype == "auto":
        dtype_name = str(_dtype(cfg) or _dtype(config) or "bfloat16")
        size = _TORCH_BYTES.get(dtype_name)
    else:
        size = _VLLM_KV_BYTES.get(kv_cache_dtype)
    if size is None:
        raise ProfileError(f"vLLM kv_cache_dtype {kv_cache_dtype!r}: byte size not known; allowed: auto, "
                           f"{', '.join(_VLLM_KV_BYTES)}")
    per_rank = max(1, heads // tensor_parallel)
    kinds = list(cfg.get("layer_types") or ["full_attention"] * n_layer)
    full = sum(1 for kind in kinds if kind == "full_attention")
    total = full * 2 * per_rank * head_dim * size
    return KVLayout(total, full, f"{full} full-attention layers x 2 x {per_rank} KV heads/rank x {head_dim} x "
                    f"{size} B = {total:,} B/token", {"other": len(kinds) - full})


def _dtype(config: Mapping[str, Any]) -> Any:
    """The weights' dtype a config.json names: `dtype` (transformers 5 writes it) or `torch_dtype` (before 5)."""
    return config.get("dtype") or config.get("torch_dtype")
