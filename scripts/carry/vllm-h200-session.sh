#!/usr/bin/env bash
# One H200 session's work once everything is carried: the runbook on params/h200-vllm.yaml, then the captures
# the first session could not make (its healthy start lacked flashinfer): a healthy start with its HTTP answers
# and /metrics, and the failures that need a server or a memory holder. Run there after
# `source scripts/carry/vllm-h200-unpack.sh`:   scripts/carry/vllm-h200-session.sh OUT_DIR RUN_SECONDS
set -uo pipefail
out=${1:?OUT_DIR}
budget=${2:-330}
mkdir -p "$out/startup-errors"
py=python3
api=(-m vllm.entrypoints.openai.api_server)
model=/tmp/models/smollm2-135m-instruct
source "$(dirname "$0")/vllm-h200-lib.sh"

if [ -d .carry/extra ]; then  # wheels carried beside the pieces (the second session carried flashinfer so)
  step "extra wheels: $(ls .carry/extra)"
  $py -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/extra/*.whl 2>&1 | grep -v WARNING
fi
step "model: GGUF -> safetensors"
[ -f "$model/config.json" ] || $py scripts/carry/smollm2-safetensors.py /tmp/models/SmolLM2-135M-Instruct.Q4_1.gguf \
  "$model" > "$out/model-files.txt" 2> "$out/model-convert.log"
cat "$out/model-files.txt"

step "the runbook: ninferkit run params/h200-vllm.yaml (at most $budget s)"
NINFERKIT_PROGRESS=lines timeout "$budget" $py -m ninferkit run params/h200-vllm.yaml --run-dir /tmp/runs/h200-vllm \
  > "$out/run.log" 2>&1
echo "exit $?" >> "$out/run.log"
tail -25 "$out/run.log"
$py -m ninferkit stop /tmp/runs/h200-vllm > /dev/null 2>&1

common=(--model "$model" --host 127.0.0.1 --served-model-name smollm2-135m --enforce-eager)

spec='{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,"prompt_lookup_min":2}'
healthy_start 0.7 "${common[@]}" --port 8100 --max-model-len 8192 --gpu-memory-utilization 0.4 --enable-prefix-caching \
         --speculative-config "$spec"
fail_start kv_cache_below_max_len "${common[@]}" --port 8105 --max-model-len 8192 --kv-cache-memory-bytes 50000000
step "done"
