#!/usr/bin/env bash
# Packs vLLM 0.26.0 and what the H200 machine lacks to serve with it and run ninferkit's runbook there, in
# pieces small enough to carry to a machine with no network (the device tool carries at most 64 MiB a call,
# the working tree included; ignored files already there stay while the machine is held).
#
#   scripts/carry/vllm-h200.sh          here (needs pip and PyPI): writes .carry/vllm/pieces/site.tar.gz.NN
#
# then, on the device machine, one call per piece with `carry: [".carry/vllm/pieces/site.tar.gz.NN"]` (any
# command), and in the call that serves: `source scripts/carry/vllm-h200-unpack.sh` (joins the pieces, unpacks
# them into /tmp/site once, exports PYTHONPATH) before `python3 -m ninferkit run params/h200-vllm.yaml`.
#
# Why these files: scripts/carry/vllm-h200.pins lists every wheel with the reason it is there. vLLM itself is
# packed without the parts a dense text model on an H200 (sm_90) never loads (DROPPED below: each import is
# optional in vllm 0.26.0, guarded by try/except or an explicit backend choice): FlashAttention 2's kernels
# (sm_90 runs FlashAttention 3), the MoE kernels, the Rust frontend (used only with VLLM_USE_RUST_FRONTEND=1),
# and the Blackwell FMHA and DeepGEMM (FP8) sources. That takes the engine from 304 MB (the wheel) to about
# 189 MB under gzip -1 (582 MB unpacked, the OpenTelemetry exporters included).
#
# Why gzip -1, not xz (issue 42 item 5), timed here on the 2-core machine with others working on it, same tar:
#   gzip -1     7.0 s   188,587,033 B  -> 5 pieces of 40 MiB
#   xz -T0 -4 210.7 s   117,649,100 B  -> 3 pieces  (an earlier session: over 18 minutes on a busier machine)
# xz saves two carrying calls, but a call carrying 40 MiB to a held machine cost 3 to 8 s of device time (session
# of 2026-12-06: held time 542.8, 546.7, 550.5, 553.5, 556.8 s after each), far less than the 204 s (or 18
# minutes) xz takes here; gzip -dc unpacked all five pieces there within the first call's 10 s.
set -euo pipefail
cd "$(dirname "$0")/../.."

out=.carry/vllm
pins=scripts/carry/vllm-h200.pins
platform=(--only-binary=:all: --python-version 3.12 --implementation cp --platform any)
for tag in manylinux1 manylinux2014 manylinux_2_5 manylinux_2_17 manylinux_2_24 manylinux_2_26 manylinux_2_27 \
           manylinux_2_28 manylinux_2_31; do
  platform+=(--platform "${tag}_x86_64")
done
DROPPED=(vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so vllm/_moe_C_stable_libtorch.abi3.so vllm/vllm-rs
         vllm/third_party/fmha_sm100 vllm/third_party/deep_gemm)

git check-ignore -q "$out" || { echo "$out is not ignored by git: the pieces must never be committed" >&2; exit 2; }
mapfile -t wanted < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$pins" | grep -v '^$')
echo "== fetching ${#wanted[@]} wheels for CPython 3.12 manylinux x86_64 into $out/wheels (pip caches them)"
mkdir -p "$out/wheels"
python3 -m pip download --quiet --no-deps "${platform[@]}" --dest "$out/wheels" "${wanted[@]}" \
  2> >(grep -v "^WARNING: Location" >&2)

echo "== installing them into $out/site (no dependencies resolved: the machine has the rest)"
rm -rf "$out/site" "$out/pieces"
python3 -m pip install --quiet --no-deps --no-compile --target "$out/site" "${platform[@]}" \
  --no-index --find-links "$out/wheels" "${wanted[@]}"
for path in "${DROPPED[@]}"; do
  [ -e "$out/site/$path" ] || { echo "vllm-h200.sh: $path is not in the vllm wheel: the pins changed?" >&2; exit 1; }
  echo "   dropped $path ($(du -sh "$out/site/$path" | cut -f1))"
  rm -rf "${out:?}/site/$path"
done
rm -rf "$out/site/bin"

# 40 MiB: a call carries 64 MiB with the working tree, which is about 20 MB (docs/examples/ included)
echo "== packing $(du -sh "$out/site" | cut -f1) into 40 MiB gzip pieces (seconds)"
mkdir -p "$out/pieces"
tar -C "$out" -cf - site | gzip -1 | split -b 40M -d -a 2 - "$out/pieces/site.tar.gz."
(cd "$out/pieces" && sha256sum site.tar.gz.* > SHA256SUMS)
ls -l "$out/pieces"
echo "carry each piece in its own call, in order, while the machine stays held:"
for piece in "$out"/pieces/site.tar.gz.*; do echo "   carry: [\"$piece\"]"; done
echo "   and with the last one also \"$out/pieces/SHA256SUMS\"; then: source scripts/carry/vllm-h200-unpack.sh"
