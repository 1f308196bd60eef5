"""llama.cpp's KV bytes per token, from a GGUF file's own metadata (read without loading tensors): full-
attention layers x KV heads x head size x the cache type's bytes per value (ggml blocks with their scales;
sliding-window and recurrent layers are fixed costs, capacity-model.md §3)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ninferkit.engines.kv import KVLayout
from ninferkit.errors import ProfileError

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
