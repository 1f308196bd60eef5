#!/usr/bin/env bash
# Issue 42's device work, once scripts/carry/vllm-h200.sh's pieces and the GGUF's are carried (the sessions' calls
# are in docs/examples/h200-vllm/run.sh's closing note and docs/examples/h200-vllm-qwen3/run.sh). Run there, in
# this checkout's root, after `source scripts/carry/vllm-h200-unpack.sh`, one stage per call or several in one:
#   vllm-h200-round2.sh prep OUT        the random Qwen3 shape (item 4), and the carried packages' bytecode (every
#                                       vLLM launch imports them twice); the SmolLM2 stages make its folder first
#   vllm-h200-round2.sh flashinfer OUT  the machine's first start, with VLLM_USE_FLASHINFER_SAMPLER=0 (item 5);
#                                       the otlp stage's launch is then the start with vLLM's default
#   vllm-h200-round2.sh otlp OUT        h200-vllm with vLLM's spans collected: concurrency and rate (item 2), and
#                                       the agent loop on a tool parser, tool_choice required then auto (item 3)
#   vllm-h200-round2.sh qwen3 OUT       the second shape's runbook and capacity search (at most $LAUNCHES launches,
#                                       else the profile's capacity.max_launches), then by hand: the search's answer
#                                       serves and one page (16 tokens) more does not (item 4)
#   vllm-h200-round2.sh chain OUT STAGE...  those stages in order, in a process session of their own
# Each stage writes under OUT and tars its run directories there as it goes; a stage that fails leaves its log.
set -uo pipefail
stage=${1:?prep|flashinfer|otlp|qwen3|chain|wait|collect}
out=${2:?OUT or SECONDS}
shift 2
mkdir -p "$out"
export NINFERKIT_CACHE=/tmp/nkcache NINFERKIT_PROGRESS=lines PYTHONUNBUFFERED=1
py=python3
gguf=/tmp/models/SmolLM2-135M-Instruct.Q4_1.gguf
smollm2=/tmp/models/smollm2-135m-instruct
qwen3=/tmp/models/qwen3-gqa-random
step() { echo "== $(date +%T) $*"; }
ready() {  # ready PORT PID: seconds until /health answers 200; fails if the process dies or 400 s pass
  local start=$SECONDS
  for _ in $(seq 800); do
    $py -c "import httpx, sys; sys.exit(httpx.get('http://127.0.0.1:$1/health').status_code != 200)" 2>/dev/null \
      && { echo $((SECONDS - start)); return 0; }
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}
smollm2_folder() {  # SmolLM2 from the GGUF, once
  [ -f "$smollm2/config.json" ] && return 0
  step "model: SmolLM2 GGUF -> safetensors"
  $py scripts/carry/smollm2-safetensors.py "$gguf" "$smollm2" > "$out/smollm2-files.txt" 2> "$out/smollm2-convert.log"
}

case "$stage" in
prep)
  # pip installed the packages with --no-compile: whether this python writes bytecode on import decides whether each
  # launch compiles vLLM's modules again; compiled once here on every core, beside the models
  echo "dont_write_bytecode=$($py -c 'import sys; print(sys.flags.dont_write_bytecode)')" \
    "vllm .pyc before: $(find /tmp/site/vllm -name '*.pyc' | wc -l)" | tee "$out/bytecode.txt"
  ( start=$SECONDS; $py -m compileall -q -j 0 /tmp/site > /dev/null 2>&1
    echo "compileall /tmp/site: $((SECONDS - start)) s, vllm .pyc after: $(find /tmp/site/vllm -name '*.pyc' | wc -l)" \
      >> "$out/bytecode.txt" ) &
  step "model: the random Qwen3 shape"
  [ -f "$qwen3/config.json" ] || $py scripts/carry/qwen3-gqa-random.py "$gguf" "$qwen3" > "$out/qwen3-files.txt" \
    2> "$out/qwen3-make.log"
  cat "$out/qwen3-files.txt"; tail -3 "$out/qwen3-make.log"; cp "$qwen3/config.json" "$out/qwen3-config.json"
  wait; cat "$out/bytecode.txt"
  ;;
flashinfer)
  smollm2_folder
  # The first start on a machine that has started vLLM before nothing: without FlashInfer's sampler, with the argv
  # the otlp stage's runbook then launches (less the receiver and tool flags); that launch is the start with vLLM's
  # default (its server.json ready_s), so neither start profits from the other's FlashInfer compile.
  argv=$($py -m ninferkit launch params/h200-vllm.yaml --dry-run)
  echo "$argv" > "$out/flashinfer-argv.txt"
  step "start with VLLM_USE_FLASHINFER_SAMPLER=0: $argv"
  VLLM_USE_FLASHINFER_SAMPLER=0 setsid bash -c "exec $argv" > "$out/flashinfer-0.log" 2>&1 &
  pid=$!  # its own process group: vLLM's engine process goes with it
  echo "VLLM_USE_FLASHINFER_SAMPLER=0 ready after: $(ready 8100 $pid || echo failed) s" | tee -a "$out/flashinfer.txt"
  kill -INT -- -$pid; timeout 30 tail --pid=$pid -f /dev/null; kill -KILL -- -$pid 2>/dev/null; sleep 2
  ;;
otlp)
  smollm2_folder
  common=(-p serve.otlp_traces_jsonl=/tmp/runs/spans-otlp.jsonl -p serve.tool_call_parser=hermes
          -p sweeps.tasks.enabled=false -p sweeps.prefix_reuse.enabled=false -p capacity.fit_launches=false)
  step "h200-vllm with vLLM's spans: context, concurrency, rate, agent (tool_choice required)"
  timeout 420 $py -m ninferkit run params/h200-vllm.yaml --run-dir /tmp/runs/h200-vllm-otlp \
    --steps setup,verify,launch,sweeps "${common[@]}" -p sweeps.agent.enabled=true -p sweeps.agent.tool_choice=required \
    -p 'sweeps.agent.apis=[chat]' > "$out/otlp-run.log" 2>&1
  echo "exit $?" >> "$out/otlp-run.log"; tail -15 "$out/otlp-run.log"
  step "the agent loop again, tool_choice auto"
  timeout 150 $py -m ninferkit run params/h200-vllm.yaml --run-dir /tmp/runs/h200-vllm-agent-auto \
    --steps setup,verify,launch,sweeps "${common[@]}" -p serve.otlp_traces_jsonl=/tmp/runs/spans-auto.jsonl \
    -p sweeps.context.enabled=false -p sweeps.concurrency.enabled=false -p sweeps.rate.enabled=false \
    -p sweeps.agent.enabled=true -p sweeps.agent.tool_choice=auto -p 'sweeps.agent.apis=[chat]' \
    > "$out/agent-auto-run.log" 2>&1
  echo "exit $?" >> "$out/agent-auto-run.log"; tail -8 "$out/agent-auto-run.log"
  step "raw tool-call streams (required, a named function, auto), with their spans"
  timeout 150 $py -m ninferkit launch params/h200-vllm.yaml --run-dir /tmp/runs/toolstream "${common[@]}" \
    -p serve.otlp_traces_jsonl=/tmp/runs/spans-toolstream.jsonl > "$out/toolstream-launch.log" 2>&1 \
    && $py scripts/carry/tool-streams-http.py "$out/tool-streams" http://127.0.0.1:8100 smollm2-135m
  $py -m ninferkit stop /tmp/runs/toolstream > /dev/null 2>&1
  cp /tmp/runs/spans-toolstream.jsonl "$out/tool-streams/" 2>/dev/null
  tar -C /tmp/runs -czf "$out/otlp-runs.tar.gz" h200-vllm-otlp h200-vllm-agent-auto spans-otlp.jsonl spans-auto.jsonl
  ;;
qwen3)
  step "the second shape: runbook with the capacity search${LAUNCHES:+ (at most $LAUNCHES launches)}"
  $py -m ninferkit run params/h200-vllm-qwen3.yaml --run-dir /tmp/runs/h200-vllm-qwen3 \
    --steps setup,verify,launch,sweeps,capacity ${LAUNCHES:+-p capacity.max_launches=$LAUNCHES} 2>&1 \
    | tee "$out/qwen3-run.log" | grep --line-buffered -E '^\[|: started and served|did not serve|search C='
  echo "exit ${PIPESTATUS[0]}" | tee -a "$out/qwen3-run.log"
  tar -C /tmp/runs -czf "$out/qwen3-run.tar.gz" h200-vllm-qwen3
  answer=$($py -c "import json; print(json.load(open('/tmp/runs/h200-vllm-qwen3/capacity.json'))['searches'][0]['answer_kv_tokens'])")
  step "by hand: the search's answer, $answer tokens, then one 16-token page more"
  for tokens in "$answer" $((answer + 16)); do
    timeout 150 $py -m ninferkit launch params/h200-vllm-qwen3.yaml --run-dir "/tmp/runs/byhand-$tokens" \
      -p serve.kv.capacity="$tokens" > "$out/byhand-$tokens.log" 2>&1
    echo "serve.kv.capacity=$tokens: launch exit $?" | tee -a "$out/byhand.txt"
    $py -m ninferkit stop "/tmp/runs/byhand-$tokens" > /dev/null 2>&1
    (cd /tmp/runs && tar -czf "$out/byhand-runs.tar.gz" byhand-*)  # the glob in /tmp/runs, not here
  done
  ;;
chain)  # the stages named, in order, in their own process session: it outlives the call that starts it
  setsid nohup bash -c "for s in $*; do bash $0 \$s $out; done; echo 'chain exit'" > /tmp/round2.log 2>&1 < /dev/null &
  exit 0
  ;;
wait)  # until the chain ends or SECONDS pass, printing its log as it grows
  deadline=$((SECONDS + out)); shown=0
  while [ $SECONDS -lt $deadline ]; do
    lines=$(wc -l < /tmp/round2.log)
    [ "$lines" -gt "$shown" ] && sed -n "$((shown + 1)),${lines}p" /tmp/round2.log && shown=$lines
    grep -q '^chain exit' /tmp/round2.log && break
    sleep 3
  done
  exit 0
  ;;
collect)  # OUT: the call's $OUT; the chain's folder is /tmp/round2
  cp /tmp/round2/*.tar.gz "$out"/ 2>/dev/null
  tar -C /tmp -czf "$out/logs.tar.gz" --exclude='*.tar.gz' round2 round2.log
  ls -l "$out"
  exit 0
  ;;
esac
step "done: $stage"
