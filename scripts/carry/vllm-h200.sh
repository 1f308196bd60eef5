#!/usr/bin/env bash
# Packs vLLM 0.26.0 and what the H200 machine lacks to serve with it and run ninferkit's runbook there, in
# pieces small enough to carry to a machine with no network (the device tool carries at most 64 MiB a call,
# the working tree included; ignored files already there stay while the machine is held).
#
#   scripts/carry/vllm-h200.sh          here (needs pip and PyPI): writes .carry/vllm/pieces/site.tar.xz.NN
#
# then, on the device machine, one call per piece with `carry: [".carry/vllm/pieces/site.tar.xz.NN"]` (any
# command), and in the call that serves: `source scripts/carry/vllm-h200-unpack.sh` (joins the pieces, unpacks
# them into /tmp/site once, exports PYTHONPATH) before `python3 -m ninferkit run params/h200-vllm.yaml`.
#
# Why these files: scripts/carry/vllm-h200.pins lists every wheel with the reason it is there. vLLM itself is
# packed without the parts a dense text model on an H200 (sm_90) never loads (DROPPED below: each import is
# optional in vllm 0.26.0, guarded by try/except or an explicit backend choice): FlashAttention 2's kernels
# (sm_90 runs FlashAttention 3), the MoE kernels, the Rust frontend (used only with VLLM_USE_RUST_FRONTEND=1),
# and the Blackwell FMHA and DeepGEMM (FP8) sources. That takes the engine from 304 MB (the wheel) to about
# 110 MB once xz-compressed: FlashAttention 3's fat binary shrinks 38 MB -> 11 MB under xz.
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

# 44 MiB: a call carries 64 MiB with the working tree, which is about 19 MB (docs/examples/ included)
echo "== packing $(du -sh "$out/site" | cut -f1) into 44 MiB xz pieces (a few minutes on 2 cores)"
mkdir -p "$out/pieces"
tar -C "$out" -cf - site | xz -T0 -4 | split -b 44M -d -a 2 - "$out/pieces/site.tar.xz."
(cd "$out/pieces" && sha256sum site.tar.xz.* > SHA256SUMS)
ls -l "$out/pieces"
echo "carry each piece in its own call, in order, while the machine stays held:"
for piece in "$out"/pieces/site.tar.xz.*; do echo "   carry: [\"$piece\"]"; done
echo "   and with the last one also \"$out/pieces/SHA256SUMS\"; then: source scripts/carry/vllm-h200-unpack.sh"
