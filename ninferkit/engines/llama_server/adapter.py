"""llama.cpp's `llama-server`: the embedded default, and the engine people A/B NInfer against.

Its `-c` is the KV pool of all slots together, so a profile's per-slot `max_context` times
`max_concurrency` becomes `-c`, unless `serve.kv.capacity` names the pool explicitly. The memory
lines of the startup log are printed only at a raised log verbosity, hence `-lv 4`. Server-side
per-request truth is the `timings` object of each response (prompt and predicted counts and times, and
with speculative decoding the tokens drafted and accepted). `serve.spec` becomes `--spec-type` and the
method's own flags, checked against the binary's `--help` (help.py); a CPU launch on an AMX host gets
`--no-repack` where the pinned build would crash (amx.py).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ninferkit.engines.api_dialect import llama_cpp_timings
from ninferkit.engines.base import OUT_OF_MEMORY_AT_FIRST_USE, EngineAdapter, serve_of
from ninferkit.engines.kv import KVLayout
from ninferkit.engines.llama_server.amx import repack_argv, repack_finding
from ninferkit.engines.llama_server.embedded import build_dir, find_llama_server, llama_server_binary
from ninferkit.engines.llama_server.help import BinaryHelp, binary_help, option_prefix, spec_argv
from ninferkit.engines.llama_server.kv_layout import (
    LLAMA_CPP_CACHE_TYPES,
    gguf_metadata,
    llama_cpp_kv_layout,
    quantized_cache_type,
)
from ninferkit.engines.llama_server.options import Serve
from ninferkit.engines.log_reader import field_pattern, integer, mib, rule, text
from ninferkit.engines.pool import PoolRule
from ninferkit.errors import NinferkitError, ProfileError
from ninferkit.finding import Finding
from ninferkit.params.profile import Profile
from ninferkit.rundir.records import ProbeFacts
from ninferkit.units import MIB

LOG_VERBOSITY = "4"


BUILD_LINE = re.compile(r"\bbuild (\d+) \(([^)]*)\) with (.+?) for (.+)$", re.MULTILINE)
"""common_params_print_info: build 11434 (unknown) with GNU 12.2.0 for Linux x86_64"""

class LlamaServer(EngineAdapter):
    kind = "llama_server"
    name = "llama.cpp llama-server"
    default_binary = "llama-server"
    apis = frozenset({"chat", "messages", "responses"})
    capacity_pool = PoolRule(256, None, False, "f16")  # `-c` is the pool, split evenly over `-np` slots
    diagnoses = (
        rule("port_in_use", r"couldn't bind HTTP server socket.*port: (?P<port>\d+)",
             "port {port} is already in use by another process",
             "stop the other server (`ss -ltnp 'sport = :{port}'` shows it) or set serve.port to a free port"),
        rule("model_missing", r"failed to open GGUF file '(?P<path>[^']*)'(?: \((?P<why>[^)]*)\))?",
             "the model file {path} cannot be opened",
             "check artifact.local_dir and the file name; run the verify step (01_artifact_verify) to fetch it"),
        rule("model_unreadable", r"(?:llama_model_load: error loading model: |gguf_init_from_file_impl: )"
             r"(?P<why>.*)",
             "the model file is not a GGUF this llama-server can read ({why})",
             "re-download and verify the artifact (sha256), or use a llama.cpp build new enough for its architecture"),
        rule("unknown_argument", r"error: (?:invalid|unknown) argument: (?P<arg>\S+)",
             "this llama-server build does not know the option {arg}",
             "remove {arg} from serve.extra_args, or use a llama.cpp version that has it (`llama-server --help`)"),
        rule("cache_type_head_size", r"(?P<role>[KV]) cache type (?P<type>\w+) with block size (?P<block>\d+) "
             r"does not divide n_embd_head_\w=(?P<head>\d+)",
             "the {type} cache type cannot be used with this model: its {block}-value block does not divide the "
             "{role} head size {head}",
             "use a cache type whose block divides {head} (f16, bf16 or f32), or a model whose head size is a "
             "multiple of {block}"),
        rule("out_of_memory", r"(?:failed to allocate (?P<what>\S+ buffer) of size (?P<size>\d+)|"
             r"cudaMalloc failed: out of memory|unable to allocate (?P<what2>\S+) buffer|"
             r"failed to (?:initialize|create) the context|ggml_backend_\w+_buffer_type_alloc_buffer: .*"
             r"(?:out of memory|failed))",
             "not enough memory for the weights, the KV cache or the compute buffers",
             "lower serve.max_context or serve.max_concurrency (KV grows with both), quantise the KV cache "
             "(serve.kv.dtype q8_0), or offload fewer layers"),
        # every buffer of the books was allocated, then warm-up or the first request needed more (seen on an
        # H200: MUL_MAT at warm-up, cublasCreate at the first chat, each with under 120 MiB left)
        rule(OUT_OF_MEMORY_AT_FIRST_USE, r"CUDA error: (?P<what>out of memory|the resource allocation failed)"
             r"\n.*in function (?P<where>\w+)",
             "the GPU ran out of memory while computing ({what} in {where}), after the KV cache and compute "
             "buffers were allocated: cuBLAS, ggml's CUDA pool and kernels loaded on first use take memory the "
             "startup books do not show",
             "leave that memory free: lower serve.max_context or serve.max_concurrency a little (the capacity "
             "fit's 'taken at first use' says how much: 170-185 MiB on an H200)"),
        # amx.py: the pinned build dies with SIGSEGV at warm-up after repacking Q4_1 weights for AMX; llama.cpp
        # installs no handler for it, so the log just stops after the warm-up line. Inferred from the source and
        # the report: no log of that crash has been captured to test this against.
        rule("amx_repack_crash", r"AMX model buffer size(?=[\s\S]*?warming up the model)(?![\s\S]*listening on)",
             "the server died while warming up, after llama.cpp repacked the weights into AMX tiles (an AMX model "
             "buffer), printing no error: the crash of llama.cpp 11434 on AMX CPUs with repacked Q4_1 weights "
             "(SIGSEGV at warm-up)",
             "add --no-repack to serve.extra_args (ninferkit adds it itself for Q4_1 weights on an AMX CPU; the "
             "setup step's amx_weight_repacking finding says when)"),
    )
    ledger_fields = (
        field_pattern("model_file_bytes", r"print_info: file size\s*=\s*(?P<v>[\d.]+) MiB", mib("v")),
        field_pattern("model_params_m", r"print_info: model params\s*=\s*(?P<v>[\d.]+) M", lambda m: float(m["v"])),
        field_pattern("n_ctx_total", r"llama_context: n_ctx\s*=\s*(?P<v>\d+)", integer("v")),
        field_pattern("n_ctx_per_slot", r"llama_context: n_ctx_seq\s*=\s*(?P<v>\d+)", integer("v")),
        field_pattern("n_seq_max", r"llama_context: n_seq_max\s*=\s*(?P<v>\d+)", integer("v")),
        field_pattern("n_batch", r"llama_context: n_batch\s*=\s*(?P<v>\d+)", integer("v")),
        field_pattern("n_ubatch", r"llama_context: n_ubatch\s*=\s*(?P<v>\d+)", integer("v")),
        field_pattern("kv_cache_bytes", r"llama_kv_cache: size\s*=\s*(?P<v>[\d.]+) MiB", mib("v")),
        field_pattern("kv_cells", r"llama_kv_cache: size\s*=.*\(\s*(?P<v>\d+) cells", integer("v")),
        field_pattern("kv_layers", r"llama_kv_cache: size\s*=.*cells,\s*(?P<v>\d+) layers", integer("v")),
        # "%2u/%u seqs" is n_seq_max / n_stream: without a unified KV cache each stream has its own cells.
        field_pattern("kv_streams", r"llama_kv_cache: size\s*=.*layers,\s*\d+/(?P<v>\d+) seqs", integer("v")),
        field_pattern("kv_type_k", r"llama_kv_cache: size\s*=.*K \((?P<v>\w+)\)", text("v")),
        field_pattern("kv_type_v", r"llama_kv_cache: size\s*=.*V \((?P<v>\w+)\)", text("v")),
        field_pattern("kv_k_bytes", r"llama_kv_cache: size\s*=.*K \(\w+\):\s*(?P<v>[\d.]+) MiB", mib("v")),
        field_pattern("kv_v_bytes", r"llama_kv_cache: size\s*=.*V \(\w+\):\s*(?P<v>[\d.]+) MiB", mib("v")),
        field_pattern("compute_buffer_bytes", r"\w+:\s+\S+ compute buffer size\s*=\s*(?P<v>[\d.]+) MiB",
                      mib("v")),
        field_pattern("slots", r"initializing(?: slots)?, n_slots = (?P<v>\d+)", integer("v")),
        field_pattern("listen_url", r"listening on (?P<v>http://\S+)", text("v")),
        # system_info of a CUDA build: "CUDA : ARCHS = 900 | USE_GRAPHS = 1 | ..." (compare's headline names it)
        field_pattern("cuda_graphs", r"CUDA : [^\n]*?\bUSE_GRAPHS = (?P<v>[01])\b",
                      lambda m: f"{'built in' if m['v'] == '1' else 'not built'} (USE_GRAPHS = {m['v']})"),
    )

    def parse_ledger(self, log_text: str) -> dict[str, Any]:
        """The pattern table, plus the capacity ledger in the normalized names the capacity fit reads.

        runtime_bytes is everything but the weights (KV + recurrent state + output + compute buffers);
        free_after_weights_bytes is the device's (on the CPU: host's) free memory before loading minus
        the model buffers. MiB values are printed with 2 decimals, device memory in whole MiB
        (truncated), so each carries a `<key>_resolution_bytes`.
        """
        ledger = super().parse_ledger(log_text)
        ledger.update(_capacity_ledger(log_text, ledger))
        return ledger

    def build_banner(self, log_text: str) -> str | None:
        """llama.cpp's `build N (COMMIT) with COMPILER for TARGET` line. A build from a source tree without git
        (the PyPI sdist) prints commit "unknown", and without LLAMA_BUILD_NUMBER, build 0."""
        found = BUILD_LINE.search(log_text)
        if found is None:
            return None
        number, commit, compiler, target = found.groups()
        said = f"build {number}" if number != "0" else "build number not recorded (0)"
        said += f", commit {commit}" if commit != "unknown" else ", commit not recorded"
        return f"{said} ({compiler}, {target})"

    def parse_refusal(self, log_text: str) -> dict[str, Any] | None:
        """A failed buffer allocation at startup, with the --fit projection printed before it.

        llama.cpp prints no "required vs available" sentence. required_bytes is the projected total
        use (weights + context + compute) and available_bytes the free device memory before loading,
        both in whole MiB (truncated); weights_bytes the model buffers, runtime_reservation_bytes the
        rest; failed_buffer_bytes the one allocation that failed.
        """
        failed = _FAILED_ALLOC.search(log_text)
        if failed is None:
            return None
        out: dict[str, Any] = {"kind": "allocation", "line": failed.group(0), "failed_buffer": failed["what"],
                               "failed_buffer_bytes": int(failed["size"])}
        projected = list(_PROJECTED.finditer(log_text))
        if projected:
            used = (int(projected[-1]["used"]) + 0.5) * MIB
            out.update(required_bytes=round(used), required_bytes_resolution_bytes=MIB,
                       available_bytes=round((int(projected[-1]["free"]) + 0.5) * MIB),
                       available_bytes_resolution_bytes=MIB)
            models = [mib * MIB for mib in _weight_buffers(log_text, _gpu_free_mib(log_text))]
            if models:
                out.update(weights_bytes=round(sum(models)), weights_bytes_resolution_bytes=len(models) * _MIB2,
                           runtime_reservation_bytes=round(used - sum(models)),
                           runtime_reservation_bytes_resolution_bytes=MIB + len(models) * _MIB2)
        return out

    def setup_findings(self, profile: Profile, facts: ProbeFacts, model_path: Path) -> list[Finding]:
        """AMX on the CPU and weights whose repacking crashes this build (amx.py)."""
        return repack_finding(profile, model_path, frozenset(facts.cpu.amx or ()))

    def uses_gpu(self, profile: Profile) -> bool:
        return profile.engine.built.backend == "cuda"

    def binary(self, profile: Profile) -> Path:
        return llama_server_binary(profile.engine.binary, profile.engine.built)

    def found_binary(self, profile: Profile) -> Path | None:
        """The profile's or PATH's llama-server, else the cached build where it is built (the embedded default's
        is: a dry run showed `ExecStart=llama-server`, a name on no PATH: issue 40)."""
        found = find_llama_server(profile.engine.binary)
        if found is not None:
            return found
        try:
            built = build_dir(profile.engine.built) / "bin" / self.default_binary
        except NinferkitError:  # a CUDA build whose architecture no GPU here says: not built on this machine
            return None
        return built if built.exists() else None

    def argv(self, profile: Profile, model_path: Path, binary: Path, served_as: Path | None = None) -> list[str]:
        serve = serve_of(profile, Serve)
        if serve.kv.capacity == "auto":
            raise ProfileError("serve.kv.capacity = 'auto': llama-server has no automatic KV sizing; "
                               "allowed: a token count or null (max_context x max_concurrency)")
        pool = serve.kv.capacity or serve.max_context * serve.max_concurrency
        argv = [str(binary), "-m", str(served_as or model_path), "--host", serve.host, "--port", str(serve.port)]
        if serve.model_id is not None:
            argv += ["--alias", serve.model_id]
        argv += ["-c", str(pool), "-np", str(serve.max_concurrency), "--metrics", "-lv", LOG_VERBOSITY]
        if serve.kv.dtype is not None:
            if serve.kv.dtype not in LLAMA_CPP_CACHE_TYPES:
                raise ProfileError(f"serve.kv.dtype = {serve.kv.dtype!r}: not a llama.cpp cache type; "
                                   f"allowed: {', '.join(LLAMA_CPP_CACHE_TYPES)}")
            try:
                self.kv_layout(profile, model_path, serve.kv.dtype)  # refuses a type the model's heads cannot take
            except ProfileError as exc:
                raise ProfileError(f"serve.kv.dtype = {serve.kv.dtype!r}: {exc}") from None
            argv += ["-ctk", serve.kv.dtype, "-ctv", serve.kv.dtype]
            if quantized_cache_type(serve.kv.dtype):
                argv += ["-fa", "on"]  # a quantised V cache needs flash attention
        if serve.prefill_chunk is not None:
            argv += ["-b", str(serve.prefill_chunk), "-ub", str(serve.prefill_chunk)]
        if serve.threads is not None:
            argv += ["-t", str(serve.threads)]
        if profile.engine.built.backend == "cuda":
            argv += ["-ngl", "999"]
        offered = self._help(profile, binary)
        argv += spec_argv(serve.spec, offered, binary.name)
        argv += repack_argv(profile, model_path)  # the setup step's amx_weight_repacking finding says why
        return argv + _offered_extra_args(serve.extra_args, offered, binary.name)

    def _help(self, profile: Profile, binary: Path) -> BinaryHelp | None:
        """The --help of the binary a launch runs: `binary` where it is a file or a name on PATH, else the
        cached build a launch would use (engine.binary null) where it exists; None when neither is there."""
        found = shutil.which(str(binary))
        if found:
            return binary_help(Path(found))
        if profile.engine.binary is None:
            try:
                return binary_help(build_dir(profile.engine.built) / "bin" / self.default_binary)
            except NinferkitError:  # a CUDA build whose architecture cannot be known here
                return None
        return None

    def profile_field_of(self, flag: str) -> str | None:
        """The speculative-decoding flags come from serve.spec; the rest are found by name or value."""
        if flag == "--spec-type":
            return "serve.spec.method"
        for method in ("draft-", *_NGRAM_METHODS):
            if flag.startswith(option_prefix(method)):
                return f"serve.spec.options.{flag.removeprefix(option_prefix(method))}"
        return None

    def env(self, profile: Profile) -> dict[str, str]:
        # llama-server reads its key from LLAMA_API_KEY, which keeps the secret out of argv and `ps`.
        name = profile.serve.api_key_env
        return {"LLAMA_API_KEY": os.environ[name]} if name and name in os.environ else {}

    def reported_context(self, models_body: Mapping[str, Any]) -> int | None:
        data = models_body.get("data") or [{}]
        value = (data[0].get("meta") or {}).get("n_ctx")
        return int(value) if value is not None else None

    def tokenize_request(self, text: str) -> tuple[str, dict[str, Any]]:
        return "/tokenize", {"content": text, "add_special": False}

    def token_count(self, body: Mapping[str, Any]) -> int:
        return len(body["tokens"])

    def output_pin_fields(self) -> dict[str, Any]:
        return {"ignore_eos": True}

    request_extensions_path = "/props"
    owned_by = "llamacpp"  # llama-server b11434's /v1/models (tests/data/llama-server-live/)
    metric_prefix = "llamacpp:"  # with --metrics, which the launch always passes
    server_header = "llama.cpp"

    def request_extensions(self, profile: Profile, served: Mapping[str, Any] | None = None) -> frozenset[str]:
        """`reasoning_effort` (read on chat: "none" turns thinking off, other values go to the chat template),
        and `tools` where the model's chat template renders them (/props `chat_template_caps`: llama-server
        takes `tools` from any template, but one without tool support drops the definitions and the calls
        from the prompt). It refuses `previous_response_id` ("llama.cpp does not support
        'previous_response_id'") and reads neither `cache_control` nor `prompt_cache_breakpoint`."""
        caps = str((served or {}).get("chat_template_caps") or "")  # printed as a Python dict
        return frozenset({"reasoning_effort", *(["tools"] if _SUPPORTS_TOOLS.search(caps) else [])})

    def served_signs(self, models: Mapping[str, Any] | None, props: Mapping[str, Any] | None,
                     metrics: str | None, server_header: str | None) -> list[str]:
        signs = super().served_signs(models, props, metrics, server_header)
        if props is not None and "build_info" in props and "total_slots" in props:
            signs.append("/props has build_info and total_slots")
        return signs

    def served_version(self, props: Mapping[str, Any] | None) -> str | None:
        build = (props or {}).get("build_info")
        return str(build) if build else None

    def served_pool(self, props: Mapping[str, Any] | None, metrics: str | None) -> dict[str, Any] | None:
        """/props: total_slots, and each slot's context (default_generation_settings.n_ctx); the pool is their
        product, one KV stream per slot, as the launch's ledger reads it (kv_cells x kv_streams)."""
        slots = (props or {}).get("total_slots")
        context = ((props or {}).get("default_generation_settings") or {}).get("n_ctx")
        if not isinstance(slots, int) or not isinstance(context, int):
            return None
        return {"kv_tokens": slots * context, "max_concurrency": slots, "max_context": context,
                "source": "/props total_slots x default_generation_settings.n_ctx"}

    def server_timings(self, response: Mapping[str, Any]) -> dict[str, Any]:
        timings = response.get("timings")
        return llama_cpp_timings(timings) if timings else {}

    def kv_layout(self, profile: Profile, model_path: Path | None, kv_dtype: str) -> KVLayout | None:
        if model_path is None or not model_path.exists():
            return None
        return llama_cpp_kv_layout(gguf_metadata(model_path), kv_dtype, kv_dtype,
                                   cuda=profile.engine.built.backend == "cuda")

    def slot_context_cap(self, profile: Profile, model_path: Path | None) -> int | None:
        """llama-server caps a slot at the model's trained context ("the slot context exceeds the training
        context of the model - capping"), so a longer slot is refused by its /v1/models, not by memory."""
        if model_path is None or not model_path.exists():
            return None
        meta = gguf_metadata(model_path)
        trained = meta.get(f"{meta['general.architecture']}.context_length")
        return None if trained is None else int(trained)

    def work_before_prefill(self, log_text: str) -> str | None:
        """The host-RAM prompt cache: before a new task, llama-server copies every idle slot's KV state
        off the device into host memory ("saving idle slot to prompt cache"), seconds per long prompt,
        none of it in the request's `timings` (seen on an H200: up to 20 s before a 64K-token prefill)."""
        saves = [float(m["mib"]) for m in _PROMPT_SAVE.finditer(log_text)]
        if not saves:
            return None
        return (f"llama-server saved {len(saves)} prompts ({sum(saves) / 1024:,.1f} GiB in all, up to "
                f"{max(saves) / 1024:,.2f} GiB each) to its host-RAM prompt cache, each before a new task "
                "started; that copy is not in any request's timings. Add `--cache-ram 0` to serve.extra_args to "
                "measure without it (prefix reuse inside a slot still works).")


_NGRAM_METHODS = ("ngram-map-k4v", "ngram-map-k", "ngram-simple", "ngram-mod", "ngram-cache")
"""Longest first: `--spec-ngram-map-k4v-size-n` is ngram-map-k4v's, not ngram-map-k's."""
_SUPPORTS_TOOLS = re.compile(r"['\"]supports_tools['\"]\s*:\s*(?:True|true)")
_MIB2 = 0.01 * MIB + 1  # a "%.2f MiB" value (stored as whole bytes) is known to +- half of this
_CONTEXT_START = re.compile(r"llama_context: constructing llama_context")
_MODEL_BUFFER = re.compile(r"load_tensors:\s+(?P<dev>\S+) model buffer size\s*=\s*(?P<v>[\d.]+) MiB")
_RUNTIME_BUFFER = re.compile(r"\s(?P<dev>\S+)\s+(?P<what>KV|RS|output|compute) buffer size\s*=\s*(?P<v>[\d.]+) MiB")
_DEVICE_FREE = re.compile(r"^.*?-\s+(?P<dev>\S+)\s*: .*\((?P<total>\d+) MiB, (?P<free>\d+) MiB free\)", re.MULTILINE)
_PROJECTED = re.compile(r"projected to use (?P<used>\d+) MiB of \w+ memory vs\. (?P<free>\d+) MiB")
_PROMPT_SAVE = re.compile(r"prompt_save:\s+- saving prompt with length \d+, total state size = (?P<mib>[\d.]+) MiB")
_FAILED_ALLOC = re.compile(r"failed to allocate (?P<what>\S+) buffer of size (?P<size>\d+)")
# llama_memory_breakdown_print's device row, whole MiB (truncated): total = free + (self = model + context +
# compute) + unaccounted. Printed when --fit projects (before loading) and again when the server exits.
_BREAKDOWN_ROW = re.compile(r"\|\s+-\s+(?P<dev>\S+) \(.*?\)\s*\|\s*(?P<total>\d+)\s*=\s*(?P<free>\d+)\s*\+\s*"
                            r"\(\s*(?P<self>\d+)\s*=.*?\)\s*\+\s*(?P<unaccounted>-?\d+)\s*\|")


def _gpu_free_mib(log_text: str) -> dict[str, int]:
    """Free MiB before loading per GPU (CUDA0, ...) from the device list; empty on a CPU-only run."""
    return {m["dev"]: int(m["free"]) for m in _DEVICE_FREE.finditer(log_text) if m["dev"] != "CPU"}


# Host model buffer types that hold re-laid-out copies of weights for the CPU's own kernels (AMX tiles,
# ARM/x86 repacking). With the model file mapped, the mapping (CPU_Mapped) still spans those tensors.
REPACKED_HOST_BUFFERS = frozenset({"AMX", "CPU_REPACK", "CPU_AARCH64", "KLEIDIAI"})
MAPPED_HOST_BUFFER = "CPU_Mapped"


def model_buffers(log_text: str) -> dict[str, float]:
    """MiB per model buffer type, as load_tensors prints them (CUDA0, CPU_Mapped, CUDA_Host, AMX, ...)."""
    out: dict[str, float] = {}
    for found in _MODEL_BUFFER.finditer(log_text):
        out[found["dev"]] = out.get(found["dev"], 0.0) + float(found["v"])
    return out


def _weight_buffers(log_text: str, gpus: Mapping[str, int]) -> list[float]:
    """MiB of the model buffers that hold the weights once, in the memory being fitted.

    With a GPU: the GPUs' buffers alone (token embeddings stay in host memory as CPU_Mapped, staging
    buffers are CUDA_Host). On the CPU: every host buffer, except that a repacked copy (AMX, CPU_REPACK)
    of tensors the file mapping also spans is not counted twice; without a mapping (--no-mmap) the
    repacked and plain buffers hold different tensors and all count. So a CPU with AMX and one without
    it book the same weights.
    """
    buffers = model_buffers(log_text)
    if gpus:
        return [mib for dev, mib in buffers.items() if dev in gpus]
    mapped = MAPPED_HOST_BUFFER in buffers
    return [mib for dev, mib in buffers.items() if not (mapped and dev in REPACKED_HOST_BUFFERS)
            and not dev.endswith("_Host")]


def _first_use_mib(after_context: str, gpus: Mapping[str, int]) -> int | None:
    """Device memory the server took after its books, to run (warm-up, requests): CUDA's lazily loaded
    kernels, cuBLAS's handle and workspace, ggml's CUDA pool. The breakdown it prints at exit leaves it
    'unaccounted', beside the CUDA context that was already held when the free memory was read before
    loading; so it is that row's unaccounted less (total - free before loading), summed over the GPUs.
    None without an exit row for every GPU (a server that never listened or crashed, or a CPU run)."""
    after_listening = after_context.partition("listening on")[2]  # empty if it never listened
    rows = {m["dev"]: m for m in _BREAKDOWN_ROW.finditer(after_listening) if m["dev"] in gpus}
    if not gpus or set(rows) != set(gpus):
        return None
    return sum(int(row["unaccounted"]) - (int(row["total"]) - gpus[dev]) for dev, row in rows.items())


def _capacity_ledger(log_text: str, ledger: Mapping[str, Any]) -> dict[str, Any]:
    """Normalized capacity keys (the names NInfer's adapter uses), from the last context built."""
    out: dict[str, Any] = {}
    starts = list(_CONTEXT_START.finditer(log_text))
    after_context = log_text[starts[-1].start():] if starts else log_text
    context_text = after_context.split("listening on", 1)[0]
    gpus = _gpu_free_mib(log_text)
    buffers = [b for b in _RUNTIME_BUFFER.finditer(context_text) if not gpus or b["dev"] in gpus]
    models = _weight_buffers(log_text, gpus)
    model_mib = model_buffers(log_text)
    if "kv_cells" in ledger:
        out["kv_tokens"] = ledger["kv_cells"] * ledger.get("kv_streams", 1)
        out["kv_capacity_mode"] = "explicit"
    if "kv_cache_bytes" in ledger:
        out["kv_cache_bytes_resolution_bytes"] = _MIB2
    if "kv_type_k" in ledger:
        same = ledger["kv_type_k"] == ledger.get("kv_type_v")
        out["kv_dtype"] = ledger["kv_type_k"] if same else f"{ledger['kv_type_k']}/{ledger.get('kv_type_v')}"
    if "n_seq_max" in ledger:
        out["max_concurrency"] = ledger["n_seq_max"]
    if "n_ctx_per_slot" in ledger:
        out["max_context"] = ledger["n_ctx_per_slot"]
    if buffers:
        out["runtime_bytes"] = round(sum(float(b["v"]) for b in buffers) * MIB)
        out["runtime_bytes_resolution_bytes"] = len(buffers) * _MIB2
    for dev, mib_value in model_mib.items():  # every buffer type, named: CUDA0, CPU_Mapped, AMX, CUDA_Host, ...
        out[f"model_buffer_{dev}_bytes"] = round(mib_value * MIB)
    if models:
        out["weights_bytes"] = round(sum(models) * MIB)
        out["weights_bytes_resolution_bytes"] = len(models) * _MIB2
    host = [int(m["free"]) for m in _DEVICE_FREE.finditer(log_text) if m["dev"] == "CPU"]
    free_mib = sum(gpus.values()) if gpus else (host[0] if host else None)
    if free_mib is not None and "weights_bytes" in out:
        # device info prints whole MiB, truncated: the true value lies in [v, v + 1) MiB per device
        rows = max(1, len(gpus))
        out["free_after_weights_bytes"] = round((free_mib + rows / 2) * MIB) - out["weights_bytes"]
        out["free_after_weights_bytes_resolution_bytes"] = rows * MIB + out["weights_bytes_resolution_bytes"]
    first_use = _first_use_mib(after_context, gpus)
    if first_use is not None:
        # three truncated whole-MiB values per GPU (unaccounted, total, free): the truth is in (v - 1, v + 2) MiB
        out["first_use_bytes"] = round((first_use + 0.5 * len(gpus)) * MIB)
        out["first_use_bytes_resolution_bytes"] = 3 * len(gpus) * MIB
    return out


Adapter = LlamaServer


def _offered_extra_args(extra: list[str], offered: BinaryHelp | None, binary: str) -> list[str]:
    """serve.extra_args as given, once each option in it is one the binary's --help lists (a variant's flag the
    build lacks is refused before any launch, issue 39); unchecked where the --help cannot be read (no binary
    built yet: the launch's log then says `unknown argument`). A value that looks like an option (`-1`) is none."""
    if offered is None:
        return list(extra)
    options = [arg.split("=", 1)[0] for arg in extra if re.match(r"^--?[A-Za-z]", arg)]
    missing = [option for option in options if option not in offered.options]
    if missing:
        raise ProfileError(f"serve.extra_args: {', '.join(missing)}: not an option of this {binary} (its --help "
                           "does not list it); allowed: an option `llama-server --help` lists, or a llama.cpp "
                           "version that has it (engine.build.source)")
    return list(extra)
