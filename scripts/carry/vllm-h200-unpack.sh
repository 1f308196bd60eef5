# Sourced on the H200 machine, in the repository's root, once every piece of scripts/carry/vllm-h200.sh's output
# has been carried there: checks the pieces, unpacks them into /tmp/site once, and puts it (and this checkout, for
# `python3 -m ninferkit`) on PYTHONPATH. Also takes the SmolLM2 GGUF out of its pieces into /tmp/models once.
pieces=.carry/vllm/pieces
if [ ! -f /tmp/site/.unpacked ]; then
  (cd "$pieces" && sha256sum -c --quiet SHA256SUMS) || { echo "vllm-h200-unpack: a piece is missing or damaged" >&2; return 1; }
  cat "$pieces"/site.tar.gz.* | gzip -dc | tar -x -C /tmp && touch /tmp/site/.unpacked
  echo "vllm-h200-unpack: /tmp/site unpacked ($(du -sh /tmp/site | cut -f1))"
fi
if [ -d .carry/smollm2 ] && [ ! -f /tmp/models/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
  mkdir -p /tmp/models && cat .carry/smollm2/gguf.* > /tmp/models/SmolLM2-135M-Instruct.Q4_1.gguf
fi
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # the machine's rule: no NVLink multicast
# vLLM's first start on a fresh machine (same argv, H100, 2026-12-06, tests/data/vllm-live/session5): with
# FlashInfer's top-k/top-p sampler "init engine" took 105.3 s (ready after 160 s), without it 14.5 s (ready after
# 92 s); the sampler's kernels are compiled on first use. Kept off: the runs are greedy (temperature 0).
export VLLM_USE_FLASHINFER_SAMPLER=0
