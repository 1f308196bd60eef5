#!/usr/bin/env bash
# Records what a real vLLM 0.26.0 prints and answers on the H200 machine, for tests/data/vllm-live/: its own
# argument list and facts, a healthy startup, HTTP answers and /metrics around them, and the failures the
# adapter diagnoses, each provoked for real. Run there after `source scripts/carry/vllm-h200-unpack.sh`:
#
#   scripts/carry/vllm-h200-capture.sh OUT_DIR
#
# Every step runs whatever the one before it did; each writes its own files, so a failure is itself recorded.
set -uo pipefail
out=${1:?OUT_DIR}
mkdir -p "$out"/startup-errors
model=/tmp/models/smollm2-135m-instruct
source "$(dirname "$0")/vllm-h200-lib.sh"
py=python3
api=(-m vllm.entrypoints.openai.api_server)


step "machine"
{ nvidia-smi; nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv
  $py -c 'import sys, torch; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))'
  $py -m pip list 2>/dev/null | grep -iE '^(torch|transformers|numba|numpy|triton|typing.extensions|pydantic|httpx|pandas|safetensors|tokenizers) '
} > "$out/machine.txt" 2>&1

step "model: GGUF -> safetensors"
[ -f "$model/config.json" ] || $py scripts/carry/smollm2-safetensors.py /tmp/models/SmolLM2-135M-Instruct.Q4_1.gguf "$model" \
  > "$out/model-files.txt" 2> "$out/model-convert.log"
cat "$out/model-files.txt"

step "vLLM's own argument list and facts"
$py "${api[@]}" --help > "$out/api-server-help.txt" 2>&1; echo "exit $?" >> "$out/api-server-help.txt"
$py -m vllm.entrypoints.cli.main serve --help=all > "$out/serve-help-all.txt" 2>&1
$py -m ninferkit.engines.vllm.facts > "$out/facts.json" 2> "$out/facts.log"
for lib in /tmp/site/vllm/_C_stable_libtorch.abi3.so /tmp/site/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so; do
  echo "$(basename "$lib"): $(cuobjdump --list-elf "$lib" 2>/dev/null | grep -o 'sm_[0-9]*a\?' | sort -u | tr '\n' ' ')"
done > "$out/kernel-archs.txt"

common=(--model "$model" --host 127.0.0.1 --served-model-name smollm2-135m)
fail_start unknown_argument_swap_space "${common[@]}" --port 8101 --swap-space 32
fail_start attention_backend_dflash2 "${common[@]}" --port 8102 --attention-backend dflash2
fail_start model_path_missing --model /tmp/models/no-such-model --host 127.0.0.1 --port 8103
fail_start max_model_len_above_model "${common[@]}" --port 8104 --max-model-len 1000000 --enforce-eager
fail_start kv_cache_below_max_len "${common[@]}" --port 8105 --max-model-len 8192 --kv-cache-memory-bytes 50000000 --enforce-eager

spec='{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,"prompt_lookup_min":2}'
healthy_start 0.9 "${common[@]}" --port 8100 --max-model-len 8192 --gpu-memory-utilization 0.5 --enable-prefix-caching \
         --speculative-config "$spec"
step "done"
