#!/usr/bin/env bash
# Records ninferkit/engines/vllm/versions/VERSION.json for a vLLM that no device here runs (0.19.1, the newest
# built for sm_70: the V100 of report 001), from that release as `pip install vllm==VERSION` gets it from PyPI,
# on a machine without a GPU:
#   1. download the vLLM wheel and install it, with the torch and the rest it pins, into a venv of its own (never
#      ninferkit's: its torch is CUDA's, some 10 GB installed with the NVIDIA libraries);
#   2. run facts.PROGRAM with that venv's python (what `python -m ninferkit.engines.vllm.facts` runs): vLLM's own
#      make_arg_parser, attention backends and speculative methods, and torch's architectures from its build
#      flags. With no GPU visible vLLM finds no platform, and its parser's defaults need a device, so the program
#      stands vLLM's own CPU platform in (the file's `read.platform` says so);
#   3. keep, for DATA_DIR: the server's own --help (without a GPU it stops on that missing device: the reason for
#      the stand-in), the architectures of the kernels in vLLM's and torch's shared objects
#      (scripts/fatbin-archs.py), the wheels' sha256 and the machine.
#
#   scripts/vllm-facts-from-pypi.sh VERSION WORK_DIR DATA_DIR
#
# Writes ninferkit/engines/vllm/versions/VERSION.json and DATA_DIR/{api-server-help.txt,kernel-archs.txt,
# wheels.txt,machine.txt}; WORK_DIR keeps the venv and the wheels (a rerun reuses them).
set -euo pipefail
version=${1:?VERSION}; work=${2:?WORK_DIR}; data=${3:?DATA_DIR}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$work/wheels" "$data"
work=$(cd "$work" && pwd); data=$(cd "$data" && pwd)
[ -x "$work/venv/bin/python" ] || python3 -m venv "$work/venv"
py=$work/venv/bin/python
ls "$work/wheels"/vllm-"$version"-*.whl >/dev/null 2>&1 || $py -m pip download --quiet --no-deps -d "$work/wheels" "vllm==$version"
$py -m pip install --quiet "$work/wheels"/vllm-"$version"-*.whl
torch=$($py -c 'import importlib.metadata as m; print(m.version("torch"))')
ls "$work/wheels"/torch-"$torch"-*.whl >/dev/null 2>&1 || $py -m pip download --quiet --no-deps -d "$work/wheels" "torch==$torch"

program=$("$repo/.venv/bin/python" -c 'from ninferkit.engines.vllm.facts import PROGRAM; print(PROGRAM)')
facts=$(cd "$work" && $py -c "$program" 2>"$work/facts-stderr.txt" | tail -n 1)
site=$($py -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
help=0; (cd "$work" && $py -m vllm.entrypoints.openai.api_server --help) > "$data/api-server-help.txt" 2>&1 || help=$?
echo "exit $help" >> "$data/api-server-help.txt"
"$repo/scripts/fatbin-archs.py" "$site"/vllm/*.so "$site"/vllm/vllm_flash_attn/*.so "$site"/torch/lib/libtorch_cuda.so \
  | sed "s#$site/##" > "$data/kernel-archs.txt"
(cd "$work/wheels" && sha256sum vllm-"$version"-*.whl torch-"$torch"-*.whl) > "$data/wheels.txt"
{ uname -srm; echo "cores: $(nproc)"; $py --version
  $py -m pip list 2>/dev/null | grep -iE '^(vllm|torch|triton|transformers|flashinfer-python|nvidia-cuda-runtime-cu12|nvidia-cudnn-cu12) '
  command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "no nvidia-smi: no GPU on this machine"; } > "$data/machine.txt" 2>&1

FACTS=$facts VERSION=$version DATA=${data#"$repo"/} OUT="$repo/ninferkit/engines/vllm/versions/$version.json" \
  "$repo/.venv/bin/python" - <<'PY'
import json, os
facts = json.loads(os.environ["FACTS"])
assert facts["version"] == os.environ["VERSION"], (facts["version"], os.environ["VERSION"])
read = facts["read"]
facts["recorded_from"] = (f"vLLM {facts['version']} and torch {read['torch']} as pip installs them from PyPI, "
                          "read without a GPU")
facts["how"] = (f"scripts/vllm-facts-from-pypi.sh {facts['version']}: `pip install vllm=={facts['version']}` from "
                f"PyPI into a venv of its own on a machine with no GPU (torch {read['torch']}, CUDA "
                f"{read['torch_cuda']}), then facts.PROGRAM run with that python: vLLM's own make_arg_parser, "
                "AttentionBackendEnum and SpeculativeMethod, with vLLM's CPU platform standing in for the missing "
                "GPU (a platform adds options only through pre_register_and_update, which neither vLLM's CPU nor "
                "its CUDA platform overrides), and torch's architectures from its build flags "
                "(torch._C._cuda_getArchFlags). The wheels' sha256, the server's own --help and the architectures "
                f"of the kernels in vLLM's and torch's shared objects are in {os.environ['DATA']}/")
with open(os.environ["OUT"], "w") as out:
    json.dump(facts, out, sort_keys=True)
PY
echo "wrote ninferkit/engines/vllm/versions/$version.json"
