#!/usr/bin/env bash
# The capacity step's search against a real vLLM on the H200 machine (docs/examples/h200-vllm/h200-vllm-search/):
# the fit's launches, then the search that sets vLLM's pool with --kv-cache-memory-bytes until the largest pool
# that starts and serves is pinned. Run in each call after `source scripts/carry/vllm-h200-unpack.sh`, once the
# pieces, the GGUF and the ruamel.yaml wheels (.carry/extra/) are there; the run is in its own process session
# (setsid), so it outlives the call that started it and the next call waits on it:
#   h200-vllm-search.sh start          ruamel.yaml installed, the model converted, the run started
#   h200-vllm-search.sh wait SECONDS   until the run ends (or SECONDS pass), printing its progress
#   h200-vllm-search.sh collect OUT    the run directory and logs as tarballs under OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
work=/tmp/search
run=/tmp/runs/h200-vllm-search
mkdir -p "$work" /tmp/runs
export NINFERKIT_CACHE=/tmp/nkcache NINFERKIT_PROGRESS=lines PYTHONUNBUFFERED=1
model=/tmp/models/smollm2-135m-instruct
step() { echo "== $(date +%T) $*"; }

case "${1:?start|wait|collect}" in
start)
  step "ruamel.yaml (not on the machine): $(ls .carry/extra)"
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/extra/*.whl 2>&1 | grep -v WARNING
  step "model: GGUF -> safetensors"
  [ -f "$model/config.json" ] || python3 scripts/carry/smollm2-safetensors.py \
    /tmp/models/SmolLM2-135M-Instruct.Q4_1.gguf "$model" > "$work/model-files.txt" 2> "$work/model-convert.log"
  cat "$work/model-files.txt"
  step "the capacity step with its launches and the search (in the background): $work/run.log"
  setsid nohup bash -c "python3 -m ninferkit run params/h200-vllm.yaml --run-dir $run --steps setup,verify,capacity \
      -p capacity.fit_launches=true -p capacity.search=true -p 'capacity.concurrencies=[32]' -p capacity.max_launches=4; \
      echo \"exit \$?\"" > "$work/run.log" 2>&1 < /dev/null &
  ;;
wait)
  deadline=$(( $(date +%s) + ${2:?SECONDS} ))
  shown=0
  while [ "$(date +%s)" -lt "$deadline" ]; do
    lines=$(wc -l < "$work/run.log")
    [ "$lines" -gt "$shown" ] && sed -n "$((shown + 1)),${lines}p" "$work/run.log" && shown=$lines
    grep -q '^exit ' "$work/run.log" && break
    sleep 5
  done
  ;;
collect)
  out=${2:?OUT}
  tar -C /tmp/runs -czf "$out/h200-vllm-search.tar.gz" h200-vllm-search
  tar -C "$work" -czf "$out/search-logs.tar.gz" .
  ls -l "$out"
  ;;
esac
