#!/usr/bin/env bash
# The capacity step of this run again, on a fresh H200 box, after ninferkit learned what its first
# pass missed (the memory a server takes at its first computation, see README.md):
#
#   docs/examples/h200-llamacpp/capacity-rerun.sh WHEELS_DIR LLAMA_CPP_SDIST RUN_DIR
#
# RUN_DIR is this run at the path it was made at (/tmp/job/run: its recorded launches name their logs
# by absolute path). The step reuses every recorded launch that saw the same free memory and launches
# only what the refit asks for. WHEELS_DIR needs only pydantic (with its four dependencies), gguf,
# sniffio and tzdata: no notebook runs. About 7 minutes: the CUDA build of llama-server (6), the model
# generated beside it and checked against the run's artifact.json, then the launches.
set -euo pipefail
wheels=$1 sdist=$2 run_dir=$3
python=${PYTHON:-python3}
profile=${PROFILE:-params/h200-llamacpp.yaml}

"$python" -m pip install -q --no-index --no-deps --no-compile --target /tmp/ninferkit-site "$wheels"/*.whl
export PYTHONPATH="$PWD:/tmp/ninferkit-site" PYTHONUNBUFFERED=1
export NINFERKIT_CACHE=${NINFERKIT_CACHE:-/tmp/ninferkit-cache}
mkdir -p "$NINFERKIT_CACHE/src"
cp "$sdist" "$NINFERKIT_CACHE/src/"
"$python" -c 'from ninferkit.embedded import llama_cpp_source; print(llama_cpp_source())'
"$python" -c '
import sys
from ninferkit.embedded import build_llama_cpp
from ninferkit.params import load_profile
print(build_llama_cpp(load_profile(sys.argv[1]).profile.engine.build, ("llama-server",)))
' "$profile" &
build=$!
"$python" -m ninferkit verify "$profile" --run-dir "$run_dir-verify"
wait "$build"
# the same generated model as the run's, or the recorded launches would describe another one
"$python" -c '
import json, sys
was, now = (json.load(open(f"{d}/artifact.json"))["sha256"] for d in sys.argv[1:])
print("model sha256", now, "same as the run" if was == now else f"DIFFERS from the run ({was})")
sys.exit(was != now)
' "$run_dir" "$run_dir-verify"
"$python" -m ninferkit capacity search "$profile" --run-dir "$run_dir"
