"""KV bytes per token from a model's architecture: the slope of every engine's memory formula.

Only layers whose cache grows with the pool count: full-attention layers (and NInfer's MTP layer
when speculative decoding is on). Recurrent (Gated-DeltaNet, Mamba) layers hold a fixed state per
sequence and sliding-window layers a fixed window; both belong to the fixed part, not the slope.
Quantized layouts include their scales (NInfer INT8-G64: one FP16 per 64 values; ggml q8_0: one FP16
per 32-value block), which naive calculators miss. Sources: shared/reference/capacity-model.md §1.5,
§1.6, §2, §3 and ninfer-interface.md §7.1.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ninferkit.errors import ProfileError


@dataclass(frozen=True)
class KVLayout:
    """The per-token KV cost of one model at one cache type, and how it was derived."""

    bytes_per_token: int
    kv_layers: int
    detail: str
    fixed_layers: dict[str, int] = field(default_factory=dict)
    """Layers with KV-like state that does not grow per pool token (recurrent, sliding window)."""
    compute_bytes_per_token: int = 0
    """Compute-buffer bytes the engine reserves per pool token beside the cache (llama.cpp on CUDA with
    a quantized cache); the engine's KV lines do not show them, its compute-buffer line does."""

    @property
    def runtime_bytes_per_token(self) -> int:
        """The memory formula's slope b: the cache and the compute buffer's share per pool token."""
        return self.bytes_per_token + self.compute_bytes_per_token


# ---------------------------------------------------------------- NInfer Qwen3.x hybrid targets

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

LLAMA_CPP_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
"""The KV cache types llama.cpp accepts for -ctk/-ctv."""


def ggml_block_size(type_name: str) -> int:
    import gguf

    try:
        qtype = gguf.GGMLQuantizationType[type_name.upper()]
    except KeyError:
        raise ProfileError(f"cache type {type_name!r} is not a ggml type; allowed: "
                           f"{', '.join(LLAMA_CPP_CACHE_TYPES)}") from None
    return int(gguf.GGML_QUANT_SIZES[qtype][0])


def ggml_row_bytes(type_name: str, n: int) -> int:
    """Bytes of one row of n values in a ggml type (f16: 2n; q8_0: n/32 x 34; q4_0: n/32 x 18)."""
    import gguf

    try:
        qtype = gguf.GGMLQuantizationType[type_name.upper()]
    except KeyError:
        raise ProfileError(f"cache type {type_name!r} is not a ggml type; allowed e.g. f32, f16, bf16, q8_0, "
                           "q4_0, q4_1, q5_0, q5_1, iq4_nl") from None
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    if n % block:
        raise ProfileError(f"cache type {type_name}: a row of {n} values is not a whole number of "
                           f"{block}-value blocks")
    return n // block * size


_SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
                   12: "<d"}


def gguf_metadata(path: str | Path, max_array: int = 4096) -> dict[str, Any]:
    """The key/value header of a GGUF file, without its tensors and without long arrays.

    gguf.GGUFReader decodes every tokenizer entry (seconds for a 150K-token vocabulary); this reads
    the same header layout (gguf.GGUF_MAGIC, gguf.GGUFValueType) and skips arrays longer than
    `max_array` (the vocabulary), which no KV formula needs. Per-layer arrays (head_count_kv of a
    hybrid) are short and kept.
    """
    file = Path(path)
    stat = file.stat()
    return dict(_gguf_metadata(str(file.resolve()), stat.st_mtime_ns, stat.st_size, max_array))


@functools.lru_cache(maxsize=8)
def _gguf_metadata(path: str, mtime_ns: int, size: int, max_array: int) -> dict[str, Any]:
    import mmap
    import struct

    import gguf

    with Path(path).open("rb") as handle:
        data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    magic, version, _tensors, count = struct.unpack_from("<IIQQ", data, 0)
    if magic != gguf.GGUF_MAGIC:
        raise ProfileError(f"{path} is not a GGUF file (magic {magic:#x})")
    offset = 24
    string_type = int(gguf.GGUFValueType.STRING)
    array_type = int(gguf.GGUFValueType.ARRAY)

    def read_string(at: int) -> tuple[str, int]:
        (length,) = struct.unpack_from("<Q", data, at)
        return data[at + 8 : at + 8 + length].decode("utf-8", "replace"), at + 8 + length

    def read_value(kind: int, at: int) -> tuple[Any, int]:
        if kind == string_type:
            return read_string(at)
        fmt = _SCALAR_FORMATS[kind]
        return struct.unpack_from(fmt, data, at)[0], at + struct.calcsize(fmt)

    meta: dict[str, Any] = {"gguf.version": version}
    for _ in range(count):
        key, offset = read_string(offset)
        (kind,) = struct.unpack_from("<I", data, offset)
        offset += 4
        if kind != array_type:
            meta[key], offset = read_value(kind, offset)
            continue
        item_kind, length = struct.unpack_from("<IQ", data, offset)
        offset += 12
        if item_kind != string_type and item_kind in _SCALAR_FORMATS:
            size = struct.calcsize(_SCALAR_FORMATS[item_kind])
            if length <= max_array:
                fmt = "<" + _SCALAR_FORMATS[item_kind][1] * length
                meta[key] = list(struct.unpack_from(fmt, data, offset))
            offset += size * length
            continue
        if length > max_array and item_kind == string_type:
            for _ in range(length):  # skip the vocabulary: lengths only, no decoding
                offset += 8 + struct.unpack_from("<Q", data, offset)[0]
            continue
        items = []
        for _ in range(length):
            value, offset = read_value(item_kind, offset)
            items.append(value)
        if length <= max_array:
            meta[key] = items
    data.close()
    return meta


def llama_cpp_kv_layout(meta: Mapping[str, Any], type_k: str = "f16", type_v: str = "f16",
                        cuda: bool = False) -> KVLayout:
    """llama.cpp: sum over layers that keep a KV cache of row_size(type_k, n_embd_k_gqa) + row_size(type_v, ...).

    Recurrent layers (per-layer head_count_kv 0, or not on the full_attention_interval) and
    sliding-window layers cost a fixed amount per sequence, not per pool token.

    On CUDA a quantized cache also grows the compute buffer by one layer's K and V rows in f16 per
    pool token, measured on an H200 with llama.cpp 11434 and flash attention on (`-fa on`, as the adapter sets it)
    (tests/data/llama_server_cuda_h200_capacity/: at 16,384 tokens per slot q8_0 reserves 116.09 MiB
    at 1 slot and 564.09 MiB at 8, exactly 4,096 B per added pool token for 8 KV heads x 128, where
    f16 reserves 93 MiB at both); the CPU backend's compute buffer does not grow. Above about 16K
    tokens of pool that term is the largest in the buffer; below it another graph's size is, so small
    pools sit off this line.
    """
    arch = str(meta["general.architecture"])

    def get(name: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{name}", default)

    n_layer = int(get("block_count"))
    n_head = get("attention.head_count")
    heads_kv = get("attention.head_count_kv", n_head)
    per_layer_heads = list(heads_kv) if isinstance(heads_kv, (list, tuple)) else [heads_kv] * n_layer
    n_head0 = n_head[0] if isinstance(n_head, (list, tuple)) else n_head
    default_head = int(get("embedding_length")) // int(n_head0)
    dk = int(get("attention.key_length", default_head))
    dv = int(get("attention.value_length", default_head))
    for role, type_name, head in (("K", type_k, dk), ("V", type_v, dv)):
        # llama_init_from_model refuses this before allocating anything ("K cache type q8_0 with block
        # size 32 does not divide n_embd_head_k=80"); said here, it is a profile error, not a failed launch.
        block = ggml_block_size(type_name)
        if head % block:
            allowed = [t for t in LLAMA_CPP_CACHE_TYPES if not dk % ggml_block_size(t) and not dv % ggml_block_size(t)]
            raise ProfileError(f"cache type {type_name!r}: its {block}-value block does not divide this model's "
                               f"{role} head size ({head}), which llama.cpp requires; allowed for this model: "
                               f"{', '.join(allowed)}")
    interval = get("full_attention_interval")
    window = get("attention.sliding_window")
    pattern = get("attention.sliding_window_pattern")
    recurrent = swa = 0
    total = kv_layers = 0
    for il in range(n_layer):
        h = int(per_layer_heads[il])
        if h == 0 or (interval and (il + 1) % int(interval)):
            recurrent += 1
            continue
        if window and _is_swa(il, pattern):
            swa += 1
            continue
        total += ggml_row_bytes(type_k, h * dk) + ggml_row_bytes(type_v, h * dv)
        kv_layers += 1
    detail = (f"{kv_layers} KV layers x (K {type_k} {per_layer_heads[0]}x{dk} + V {type_v} "
              f"{per_layer_heads[0]}x{dv}) = {total:,} B/token")
    compute = 0
    if cuda and kv_layers and (quantized_cache_type(type_k) or quantized_cache_type(type_v)):
        heads = max(int(h) for h in per_layer_heads)
        compute = ggml_row_bytes("f16", heads * dk) + ggml_row_bytes("f16", heads * dv)
        detail += f", plus {compute:,} B/token of CUDA compute buffer (one layer's K and V in f16)"
    return KVLayout(total, kv_layers, detail, {"recurrent": recurrent, "sliding_window": swa}, compute)


def quantized_cache_type(type_name: str) -> bool:
    """A ggml block type rather than a float: llama.cpp needs flash attention for it as a V cache."""
    return type_name not in ("f32", "f16", "bf16")


def _is_swa(il: int, pattern: Any) -> bool:
    if pattern is None:
        return True
    if isinstance(pattern, (list, tuple)):
        return bool(pattern[il])
    period = int(pattern)  # every period-th layer is dense, the others use the window (gemma-style)
    return period > 0 and (il + 1) % period != 0


# ---------------------------------------------------------------- vLLM (model config dict)

_TORCH_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
_VLLM_KV_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "bfloat16": 2, "float16": 2, "half": 2}


def vllm_kv_layout(config: Mapping[str, Any], kv_cache_dtype: str = "auto", tensor_parallel: int = 1) -> KVLayout:
    """vLLM: per GPU, sum over full-attention layers of 2 x kv_heads_per_rank x head_size x dtype bytes."""
    cfg = config.get("text_config", config)
    n_layer = int(cfg["num_hidden_layers"])
    heads = int(cfg.get("num_key_value_heads", cfg["num_attention_heads"]))
    head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // int(cfg["num_attention_heads"]))
    if kv_cache_dtype == "auto":
        dtype_name = str(cfg.get("torch_dtype") or config.get("torch_dtype") or "bfloat16")
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
