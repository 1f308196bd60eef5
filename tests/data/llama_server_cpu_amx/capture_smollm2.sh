#!/usr/bin/env bash
# Call 3 of 3: the real SmolLM2-135M-Instruct Q4_1 file on the AMX CPU, with the embedded default's own
# flags (ninferkit launch params/local-cpu.yaml --dry-run), repacking on and off, and other thread counts.
set -uo pipefail
cp .parts/c/smolpart.* /root/stash/
cat /root/stash/smolpart.0* > /root/smollm2.gguf
sha256sum /root/smollm2.gguf
server=$(ls -d /root/nkcache/build/*/bin/llama-server | head -1); echo "$server"
flags=(--host 127.0.0.1 --port 18124 --alias embedded -c 8192 -np 2 --metrics -lv 4 -ctk f16 -ctv f16
       --spec-type ngram-mod --spec-ngram-mod-n-match 24 --spec-ngram-mod-n-min 48 --spec-ngram-mod-n-max 64)
for name in t1-repack t1-no-repack t2-repack t16-repack; do
  case $name in
    t1-repack) extra=(-t 1);; t1-no-repack) extra=(-t 1 --no-repack);; t2-repack) extra=(-t 2);; t16-repack) extra=(-t 16);;
  esac
  log=$OUT/smollm2-$name.log
  "$server" -m /root/smollm2.gguf "${flags[@]}" "${extra[@]}" > "$log" 2>&1 &
  pid=$!
  answer=""
  for i in $(seq 1 240); do
    kill -0 $pid 2>/dev/null || break
    answer=$(curl -s -m 60 http://127.0.0.1:18124/v1/chat/completions -H 'Content-Type: application/json' \
      -d '{"messages":[{"role":"user","content":"Write a JSON object with keys name, age, city for Alice, 30, Paris."}],"max_tokens":64,"temperature":0}') && case "$answer" in *choices*) break;; esac
    sleep 0.5
  done
  if kill -0 $pid 2>/dev/null; then kill $pid; wait $pid; code="still serving (stopped by us)"; else wait $pid; code="exited $?"; fi
  echo "$name: $code, answer ${answer:0:160}"
  grep -E "model buffer size|REPACK|repack|SIGSEGV|Segmentation|signal|draft" "$log" | cut -c1-160 | head -6
done
