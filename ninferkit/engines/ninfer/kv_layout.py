"""NInfer's KV bytes per token: the targets' geometry (full-attention layers, KV heads, head size) times
the bytes of each KV dtype, the MTP layer's cache included when speculation is on (ninfer-interface.md
§7.1; seed 000 §2.5: 35,904 B/token for int8 KV with MTP on Qwen3.8-27B)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ninferkit.engines.kv import KVLayout
from ninferkit.errors import ProfileError


@dataclass(frozen=True)
class NinferTarget:
    full_attention_layers: int
    kv_heads: int
    head_dim: int
    mtp_layers: int
    dflash_bytes_per_token: int | None  # extra full-context BF16 KV of the DFlash drafter; None: unsupported


NINFER_TARGETS: dict[str, NinferTarget] = {
    # 64 layers, every 4th full attention (16), 4 KV heads x 256, 1 MTP layer (ninfer-interface.md §7.1).
    "qwen3.6-27b": NinferTarget(16, 4, 256, 1, None),
    "qwen3.8-27b": NinferTarget(16, 4, 256, 1, None),  # same dimensions as qwen3.6-27b
    # 40 layers, 10 full attention, 2 KV heads x 256; DFlash adds 1 layer x 8 heads x 128 BF16 (4,096 B).
    "qwen3.6-35b-a3b": NinferTarget(10, 2, 256, 1, 4096),
}


def _int8_g64(d: int) -> int:
    return d + (d // 64) * 2  # 1 B codes + one FP16 scale per 64 values


def _fp8_row256(d: int) -> int:
    return d + max(1, d // 256) * 2  # 1 B codes + one FP16 scale per 256-value row


def _nvfp4_g16(d: int) -> int:
    return d // 2 + d // 16  # 4-bit codes + one FP8 scale per 16 values


def _four_bit_g32(d: int) -> int:
    return d // 2 + (d // 32) * 2  # 4-bit codes + one FP16 scale per 32 values (rk8v4's V)


# (K bytes, V bytes) per head-token as a function of head_dim (capacity-model.md §1.5).
NINFER_KV_DTYPES: dict[str, tuple[Any, Any]] = {
    "bf16": (lambda d: 2 * d, lambda d: 2 * d),
    "int8": (_int8_g64, _int8_g64),
    "fp8": (_fp8_row256, _fp8_row256),
    "nvfp4": (_nvfp4_g16, _nvfp4_g16),
    "k8v4": (_fp8_row256, _nvfp4_g16),
    "rk8v4": (_int8_g64, _four_bit_g32),
}
_NINFER_ALIASES = {"int8-group64": "int8", "bfloat16": "bf16"}


def ninfer_kv_layout(target: str, kv_dtype: str, spec: str | None = None) -> KVLayout:
    """NInfer: KV heads x (K + V bytes per head-token) x (full-attention layers [+ MTP layer]).

    Example: ``ninfer_kv_layout("qwen3.8-27b", "int8", "mtp").bytes_per_token == 35904``.
    Raises ProfileError naming the allowed targets, dtypes or spec methods.
    """
    model = NINFER_TARGETS.get(target.lower())
    if model is None:
        raise ProfileError(f"capacity.model = {target!r}: no NInfer KV geometry known; allowed: "
                           f"{', '.join(sorted(NINFER_TARGETS))}")
    dtype = _NINFER_ALIASES.get(kv_dtype.lower(), kv_dtype.lower())
    if dtype not in NINFER_KV_DTYPES:
        raise ProfileError(f"KV dtype {kv_dtype!r}: byte layout not known for NInfer; allowed: "
                           f"{', '.join(NINFER_KV_DTYPES)}")
    k_bytes, v_bytes = (fn(model.head_dim) for fn in NINFER_KV_DTYPES[dtype])
    per_layer = model.kv_heads * (k_bytes + v_bytes)
    layers = model.full_attention_layers
    extra = 0
    note = f"{layers} full-attention layers x {model.kv_heads} KV heads x ({k_bytes} K + {v_bytes} V) B"
    if spec in (None, "", "none"):
        pass
    elif spec == "mtp":
        layers += model.mtp_layers
        note += f" + {model.mtp_layers} MTP layer (own KV pool, same dtype)"
    elif spec in ("dflash", "dflash2") and model.dflash_bytes_per_token is not None:
        extra = model.dflash_bytes_per_token
        note += f" + DFlash full-context BF16 KV {extra} B"
    else:
        raise ProfileError(f"serve.spec.method = {spec!r}: no KV geometry for it on {target}; allowed: "
                           "null, mtp" + (", dflash" if model.dflash_bytes_per_token else ""))
    total = layers * per_layer + extra
    return KVLayout(total, layers, f"{note} = {total:,} B/token",
                    {"recurrent": 0})  # GDN state is per sequence: in the fixed part


# ---------------------------------------------------------------- llama.cpp (GGUF metadata)
