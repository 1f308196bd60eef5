# Sourced by vllm-h200-capture.sh and vllm-h200-session.sh (set: out, py, api, model): the steps both take.
step() { echo "== $(date +%T) $*"; }

wait_ready() {  # wait_ready PORT PID: until /health answers 200, the process dies, or 200 s pass
  for _ in $(seq 400); do
    $py -c "import httpx, sys; sys.exit(httpx.get('http://127.0.0.1:$1/health').status_code != 200)" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}

fail_start() {  # fail_start NAME ARG...: a start that should fail; its argv, log and exit code
  step "failure: $1"
  local name=$1; shift
  echo "$py ${api[*]} $*" > "$out/startup-errors/$name.argv"
  timeout 120 $py "${api[@]}" "$@" > "$out/startup-errors/$name.log" 2>&1
  echo "exit $?" >> "$out/startup-errors/$name.argv"
}

healthy_start() {  # healthy_start FREE_MEMORY_FRACTION ARG...: start, record its HTTP answers, then the failures
  # that need a running server (its port taken; a memory fraction the GPU no longer has), and stop it
  local fraction=$1; shift
  step "healthy start: $*"
  echo "$py ${api[*]} $*" > "$out/healthy.argv"
  local start pid
  start=$(date +%s)
  $py "${api[@]}" "$@" > "$out/healthy.log" 2>&1 &
  pid=$!
  if wait_ready 8100 $pid; then
    echo "ready after $(( $(date +%s) - start )) s" >> "$out/healthy.argv"
    $py scripts/carry/vllm-h200-http.py "$out/http" http://127.0.0.1:8100 > "$out/http.log" 2>&1
    fail_start port_in_use "${common[@]}" --port 8100 --enforce-eager
    fail_start free_memory_below_utilization "${common[@]}" --port 8106 --gpu-memory-utilization "$fraction" --enforce-eager
  else
    echo "healthy start failed" >> "$out/healthy.argv"
  fi
  kill -INT $pid 2>/dev/null; wait $pid 2>/dev/null
}
