"""What an installed vLLM offers, asked of that vLLM: its version, its server's argument list (with the options it
marks deprecated), its attention backends and speculative-decoding methods, and the CUDA architectures its
kernels were built for.

vLLM removes and renames options between releases (`--swap-space` went in 0.18) and its lists of backends and
speculative methods change with every release, so a profile is checked against the vLLM that will run, as
llama-server's flags are checked against its `--help`. The facts come from running a short program with the
profile's Python (`engine.binary`): it reads vLLM's own parser (`make_arg_parser`, what `python -m
vllm.entrypoints.openai.api_server` parses) and its own type lists, so nothing here restates them. Where that
Python cannot be run here (a dry run on a laptop), the facts recorded from an install of the same version
(`versions/<version>.json`, made with `python -m ninferkit.engines.vllm.facts` on it: 0.26.0 on the H200 it ran on,
0.19.1 as pip installs it from PyPI, read on a machine without a GPU by scripts/vllm-facts-from-pypi.sh) stand in,
and say so.
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ninferkit.cache import cache_dir

PROGRAM = r"""
import json, os, re, sys, typing
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
import vllm
import vllm.platforms as platforms
read = {"python": sys.version.split()[0], "vllm": os.path.dirname(vllm.__file__), "gpu": None,
        "platform": platforms.current_platform.device_type}
if not read["platform"]:  # no GPU here: the parser's defaults need a device, and vLLM's own CPU platform has one
    from vllm.platforms.cpu import CpuPlatform
    platforms.current_platform = CpuPlatform()
    read["platform"] = "cpu, standing in: no GPU visible"
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.openai.cli_args import make_arg_parser
parser = make_arg_parser(FlexibleArgumentParser())
deprecated = {s for a in getattr(FlexibleArgumentParser, "_deprecated", ()) for s in a.option_strings}
options = {}
for action in parser._actions:
    for name in action.option_strings:
        if name.startswith("--"):
            options[name] = {"deprecated": name in deprecated, "help": re.sub(r"\s+", " ", action.help or "")[:400]}
def flat(kind):
    out = []
    for arg in typing.get_args(kind):
        out += flat(arg) if typing.get_args(arg) else [arg]
    return out
from vllm.v1.attention.backends.registry import AttentionBackendEnum
from vllm.config.speculative import SpeculativeMethod
archs = []
try:
    import torch
    archs = (torch._C._cuda_getArchFlags() or "").split()
    read |= {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
             "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
except Exception:
    pass
from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS, get_quantization_config
minimum = {}
for method in QUANTIZATION_METHODS:
    try:
        minimum[method] = int(get_quantization_config(method).get_min_capability())
    except Exception:
        pass
json.dump({"version": vllm.__version__, "options": options,
           "attention_backends": [m.name for m in AttentionBackendEnum],
           "speculative_methods": flat(SpeculativeMethod), "torch_cuda_archs": archs,
           "quantization_min_capability": minimum, "read": read},
          sys.stdout, sort_keys=True)
"""
"""Run with the engine's Python (`python -c PROGRAM`): prints the facts as one JSON object. Each quantization
method's minimum compute capability is its config class's own `get_min_capability()`, which vLLM compares with the
GPU's at start-up (config/vllm.py) and refuses below: an NVFP4 checkpoint (modelopt_fp4, 75) on a V100 (70). The
architectures are
torch's build flags (`torch.cuda.get_arch_list()` gives the same list, but only where a GPU is visible), so the
facts read the same on a machine without one; `read` says where they were read (interpreter, vLLM's folder, torch
and its CUDA, the GPU if any)."""


@dataclass(frozen=True)
class VllmFacts:
    """One vLLM install's own lists; `source` says whether they were read from it or recorded."""

    version: str
    options: dict[str, dict[str, object]]
    attention_backends: tuple[str, ...]
    speculative_methods: tuple[str, ...]
    torch_cuda_archs: tuple[str, ...]
    source: str
    quantization_min_capability: dict[str, int] = field(default_factory=dict)
    """quantization method -> the compute capability vLLM needs for it (75: 7.5); empty where the facts were
    recorded before ninferkit read them (0.26.0's)."""

    def deprecated(self, option: str) -> bool:
        return bool(self.options.get(option, {}).get("deprecated"))


def parse_facts(text: str, source: str) -> VllmFacts:
    data = json.loads(text)
    return VllmFacts(str(data["version"]), dict(data["options"]), tuple(data["attention_backends"]),
                     tuple(data["speculative_methods"]), tuple(data.get("torch_cuda_archs") or ()), source,
                     {str(method): int(value)
                      for method, value in (data.get("quantization_min_capability") or {}).items()})


def installed_facts(python: Path) -> VllmFacts | None:
    """The facts of the vLLM that `python` imports (read once per interpreter file); None when it has none."""
    try:
        stat = python.stat()
    except OSError:
        return None
    return _installed(str(python), stat.st_mtime_ns)


_WHERE = ("import importlib.util as u, os, sys; s = u.find_spec('vllm'); "
          "print(s.origin if s else '', os.stat(s.origin).st_mtime_ns if s else '')")
"""Where `python` finds vLLM, without importing it (importing takes 20 s or more): the facts' cache key."""


@functools.lru_cache(maxsize=8)
def _installed(python: str, mtime_ns: int) -> VllmFacts | None:
    """Asked once per vLLM install: importing vLLM takes 20-30 s (seen on the H200), and a run asks from each of
    its steps' processes, so the answer is kept in the cache, keyed by the interpreter, vLLM's own files and the
    program (a newer one reads more)."""
    try:
        where = subprocess.run([python, "-c", _WHERE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if where.returncode != 0 or not where.stdout.split():
        return None
    key = hashlib.sha256(f"{python}|{mtime_ns}|{where.stdout.strip()}|{PROGRAM}".encode()).hexdigest()[:16]
    cached = cache_dir() / "vllm-facts" / f"{key}.json"
    source = f"read from {Path(python).name}'s vLLM"
    if cached.is_file():
        return parse_facts(cached.read_text(), source)
    try:
        done = subprocess.run([python, "-c", PROGRAM], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if done.returncode != 0 or not text.startswith("{"):
        return None
    facts = parse_facts(text, source)
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(cached)
    return facts


def recorded_facts(version: str) -> VllmFacts | None:
    """The facts recorded from an install of `version`, if ninferkit has them; the file's `recorded_from` says which
    install (the refusals quote it), its `how` the command, the machine and the wheels."""
    found = resources.files("ninferkit.engines.vllm").joinpath("versions", f"{version}.json")
    if not found.is_file():
        return None
    text = found.read_text()
    return parse_facts(text, f"recorded from {json.loads(text)['recorded_from']} "
                             f"(ninferkit/engines/vllm/versions/{version}.json)")


if __name__ == "__main__":
    exec(compile(PROGRAM, "<vllm facts>", "exec"))
