"""KV bytes per token from architecture, checked against the figures the reference derives and prints.

Expected values are the reference's own (capacity-model.md §1.5 table and §3 "for this model
(derived)", ninfer-interface.md §7.1), not outputs of this code.
"""

from __future__ import annotations

import pytest

from ninferkit.engines.llama_server.kv_layout import ggml_row_bytes, llama_cpp_kv_layout
from ninferkit.engines.ninfer.kv_layout import ninfer_kv_layout
from ninferkit.engines.vllm.kv_layout import vllm_kv_layout
from ninferkit.errors import ProfileError

# capacity-model.md §1.5: (16 layers, no MTP) and (17 layers, + MTP) for the 27B.
NINFER_27B = {
    "bf16": (65_536, 69_632),
    "int8": (33_792, 35_904),
    "fp8": (33_024, 35_088),
    "nvfp4": (18_432, 19_584),
    "k8v4": (25_728, 27_336),
    "rk8v4": (26_112, 27_744),
}


@pytest.mark.parametrize("dtype", sorted(NINFER_27B))
def test_ninfer_27b_every_dtype_with_and_without_mtp(dtype: str) -> None:
    plain, with_mtp = NINFER_27B[dtype]
    assert ninfer_kv_layout("qwen3.8-27b", dtype).bytes_per_token == plain
    assert ninfer_kv_layout("qwen3.6-27b", dtype, "mtp").bytes_per_token == with_mtp


def test_ninfer_35b_geometry_and_page_step() -> None:
    # ninfer-interface.md §7.1: 35B main KV 20,480 (bf16) / 10,560 (int8), MTP +2,048 / +1,056.
    assert ninfer_kv_layout("qwen3.6-35b-a3b", "bf16").bytes_per_token == 20_480
    assert ninfer_kv_layout("qwen3.6-35b-a3b", "int8", "mtp").bytes_per_token == 10_560 + 1_056
    # capacity-model.md §1.6: one 64-token page of int8 + MTP is B_step = 2,297,856 B.
    assert 64 * ninfer_kv_layout("qwen3.8-27b", "int8", "mtp").bytes_per_token == 2_297_856


def test_ninfer_unknown_names_are_refused_with_the_allowed_values() -> None:
    with pytest.raises(ProfileError, match="allowed: .*int8"):
        ninfer_kv_layout("qwen3.8-27b", "int4")
    with pytest.raises(ProfileError, match="allowed: .*qwen3.8-27b"):
        ninfer_kv_layout("llama-70b", "int8")
    with pytest.raises(ProfileError, match="spec.method"):
        ninfer_kv_layout("qwen3.8-27b", "int8", "dflash")  # DFlash: 35B only (§7.1)


def test_ggml_block_sizes() -> None:
    # capacity-model.md §3: q8_0 = n/32 x 34, q4_0 = n/32 x 18, f16 = 2n.
    assert ggml_row_bytes("q8_0", 1024) == 32 * 34
    assert ggml_row_bytes("q4_0", 1024) == 32 * 18
    assert ggml_row_bytes("f16", 1024) == 2048
    with pytest.raises(ProfileError, match="not a ggml type"):
        ggml_row_bytes("q3_banana", 1024)


QWEN35_HYBRID = {  # Qwen3.6-27B's shape as llama.cpp's qwen35 architecture stores it
    "general.architecture": "qwen35",
    "qwen35.block_count": 64,
    "qwen35.full_attention_interval": 4,
    "qwen35.embedding_length": 5120,
    "qwen35.attention.head_count": 24,
    "qwen35.attention.head_count_kv": 4,
    "qwen35.attention.key_length": 256,
    "qwen35.attention.value_length": 256,
}


@pytest.mark.parametrize(("cache_type", "expected"), [("f16", 65_536), ("q8_0", 34_816), ("q4_0", 18_432)])
def test_llama_cpp_hybrid_counts_only_attention_layers(cache_type: str, expected: int) -> None:
    layout = llama_cpp_kv_layout(QWEN35_HYBRID, cache_type, cache_type)
    assert layout.bytes_per_token == expected  # capacity-model.md §3, "for this model (derived)"
    assert layout.kv_layers == 16
    assert layout.fixed_layers["recurrent"] == 48


def test_llama_cpp_sliding_window_layers_are_not_per_token() -> None:
    meta = {"general.architecture": "gemma3", "gemma3.block_count": 6, "gemma3.embedding_length": 512,
            "gemma3.attention.head_count": 8, "gemma3.attention.head_count_kv": 2,
            "gemma3.attention.key_length": 64, "gemma3.attention.value_length": 64,
            "gemma3.attention.sliding_window": 512, "gemma3.attention.sliding_window_pattern": 6}
    layout = llama_cpp_kv_layout(meta)
    assert layout.kv_layers == 1 and layout.fixed_layers["sliding_window"] == 5
    assert layout.bytes_per_token == 2 * 2 * 64 * 2


def test_vllm_hybrid_config_counts_full_attention_layers() -> None:
    config = {"text_config": {"num_hidden_layers": 64, "num_attention_heads": 24, "num_key_value_heads": 4,
                              "head_dim": 256, "hidden_size": 5120, "torch_dtype": "bfloat16",
                              "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 16}}
    # capacity-model.md §2: attention is 4,096 B per token per layer in bf16.
    assert vllm_kv_layout(config).bytes_per_token == 16 * 4096
    assert vllm_kv_layout(config, "fp8").bytes_per_token == 16 * 2048
    assert vllm_kv_layout(config, "auto", tensor_parallel=2).bytes_per_token == 16 * 2048


def test_gguf_header_reader_agrees_with_the_gguf_package(tmp_path) -> None:
    """The fast header reader must give what gguf.GGUFReader gives (on a file small enough for it)."""
    import gguf
    import numpy as np

    from ninferkit.engines.llama_server.kv_layout import gguf_metadata

    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(path, "qwen35")
    writer.add_block_count(8)
    writer.add_head_count(4)
    writer.add_head_count_kv([0, 0, 0, 2, 0, 0, 0, 2])  # per-layer: recurrent layers hold no KV
    writer.add_key_length(64)
    writer.add_value_length(64)
    writer.add_embedding_length(256)
    writer.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(5000)])
    writer.add_tensor("x.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file(progress=False)
    writer.close()
    ours = gguf_metadata(path)
    theirs = {key: field.contents() for key, field in gguf.GGUFReader(path).fields.items()
              if not key.startswith("GGUF.")}
    assert "tokenizer.ggml.tokens" not in ours  # longer than max_array: skipped
    for key, value in theirs.items():
        if key != "tokenizer.ggml.tokens":
            assert ours[key] == value, key
    assert llama_cpp_kv_layout(ours).bytes_per_token == 2 * 2 * (2 * 64 * 2)


def test_vllm_config_dtype_by_either_name() -> None:
    """transformers 5 writes `dtype` in config.json, earlier versions `torch_dtype` (issue 42 item 4); the shape is
    scripts/carry/qwen3-gqa-random.py's: GQA 16/4 with head_dim 128 of its own (hidden 1024 / 16 heads is 64)."""
    shape = {"num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 128,
             "hidden_size": 1024}
    assert vllm_kv_layout({**shape, "dtype": "bfloat16"}).bytes_per_token == 8 * 2 * 4 * 128 * 2 == 16_384
    assert vllm_kv_layout({**shape, "dtype": "float32"}).bytes_per_token == 8 * 2 * 4 * 128 * 4
    assert vllm_kv_layout({**shape, "torch_dtype": "float32"}).bytes_per_token == 8 * 2 * 4 * 128 * 4
    assert vllm_kv_layout({"text_config": shape, "dtype": "float32"}).bytes_per_token == 8 * 2 * 4 * 128 * 4
