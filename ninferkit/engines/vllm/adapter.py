"""vLLM's OpenAI server (`python -m vllm.entrypoints.openai.api_server`): the engine people compare NInfer with.

vLLM sizes its KV pool from `--gpu-memory-utilization` (a fraction of *total* memory) after a
profiling pass, so a profile gives no token count for the pool; the pool it chose is in the
startup log ("GPU KV cache size: N tokens", "Maximum concurrency for M tokens per request: Xx").
Responses carry no per-request timings: server-side truth is the Prometheus `/metrics` counters,
read before and after a request that ran alone (`metrics_deltas`), and, where the profile sets
`serve.otlp_traces_jsonl`, vLLM's own span of every request, concurrent ones included (otlp.py).
The log lines, refusals, metric names and answers are those a real vLLM 0.26.0 printed on an H200
(tests/data/vllm-live/); its flags are checked against the installed vLLM's own parser
and lists (facts.py) before anything starts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ninferkit.engines.base import OUT_OF_MEMORY_AT_FIRST_USE, EngineAdapter, serve_of
from ninferkit.engines.host import power_limit_files
from ninferkit.engines.kv import KVLayout
from ninferkit.engines.log_reader import rule
from ninferkit.engines.pool import PoolRule
from ninferkit.engines.vllm.facts import VllmFacts, installed_facts, recorded_facts
from ninferkit.engines.vllm.kv_layout import vllm_kv_layout
from ninferkit.engines.vllm.options import Serve
from ninferkit.engines.vllm.otlp import join_spans, read_spans, span_rows
from ninferkit.engines.vllm.otlp_receiver import endpoint
from ninferkit.errors import BadInput, ProfileError, ToolMissing
from ninferkit.params.profile import Profile
from ninferkit.prometheus_text import samples
from ninferkit.units import GIB, MIB

WEIGHT_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8_per_token_head",
                   "fp8_per_token_head", "nvfp4")
NO_BFLOAT16_ARCHS = ("sm_60", "sm_61", "sm_70", "sm_75")  # compute capability below 8.0
API_KEY_VARIABLE = "VLLM_API_KEY"  # vLLM's server reads its --api-key default from here
RECEIVER_MODULE = "ninferkit.engines.vllm.otlp_receiver"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
"""The OpenAI server as `python -m` runs it (seed 001 §5.2): every vLLM version has it, `vllm serve` came later."""


def _gib(number: str) -> tuple[int, int]:
    """(bytes, resolution in bytes) of a GiB value printed with some decimals."""
    decimals = len(number.partition(".")[2])
    return round(float(number) * GIB), round(GIB / 10**decimals)


_LEDGER = (
    (re.compile(r"Model loading took (?P<gib>[\d.]+) GiB(?: memory)? and (?P<s>[\d.]+) seconds?"), "weights"),
    (re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB"), "kv_memory"),
    (re.compile(r"GPU KV cache size: (?P<n>[\d,]+) tokens"), "kv_tokens"),
    (re.compile(r"Maximum concurrency for (?P<t>[\d,]+) tokens per request: (?P<x>[\d.]+)x"), "concurrency"),
    (re.compile(r"# GPU blocks: (?P<g>\d+)(?:, # CPU blocks: (?P<c>\d+))?"), "blocks"),
    (re.compile(r"Setting attention block size to (?P<n>\d+) tokens"), "block_size"),
    (re.compile(r"Padding mamba page size by (?P<p>[\d.]+)%"), "mamba_padding"),
    (re.compile(r"Uvicorn running on (?P<url>http://\S+)"), "listening"),
    (re.compile(r"Free memory on device \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup\. Desired GPU "
                r"memory utilization is \((?P<u>[\d.]+), (?P<want>[\d.]+) GiB\)\. Actual usage is (?P<w>[\d.]+) GiB "
                r"for weight, (?P<act>[\d.]+) GiB for peak activation, (?P<nt>[\d.]+) GiB for non-torch memory, and "
                r"(?P<cg>[\d.]+) GiB for CUDAGraph memory"), "memory"),
    (re.compile(r"`--kv-cache-memory=(?P<fit>\d+)` \([\d.]+ GiB\) to fit into requested memory, or "
                r"`--kv-cache-memory=(?P<full>\d+)` \([\d.]+ GiB\) to fully utilize gpu memory"), "kv_suggestion"),
    (re.compile(r"init engine \(profile, create kv cache, warmup model\) took (?P<s>[\d.]+) s"), "init"),
    (re.compile(r"Initial free memory (?P<free>[\d.]+) GiB, reserved (?P<kv>[\d.]+) GiB memory for KV Cache as "
                r"specified by kv_cache_memory_bytes config"), "explicit_pool"),
    (re.compile(r"Initializing a V1 LLM engine \(v[^)]*\) with config: .*?\bmax_seq_len=(?P<n>\d+)"), "max_len"),
    (re.compile(r"CUDA out of memory\. Tried to allocate (?P<n>[\d.]+) (?P<unit>[GM]iB)"), "failed_allocation"),
)
"""vLLM 0.26.0's startup lines, as it printed them on the H200 (tests/data/vllm-live/session3): the memory line
(gpu_worker.py) is the one that states the device's free memory, so capacity has its A; the suggestion beside it
is vLLM's own answer for a pool that fills the GPU, which the capacity fit is checked against."""
_NOT_ENOUGH_KV = re.compile(
    r"max seq len \((?P<len>\d+)\), \(?(?P<need>[\d.]+) GiB KV cache is needed, which is larger than the "
    r"available KV cache memory \((?P<avail>[\d.]+) GiB\)(?:.*?estimated maximum model length is (?P<est>\d+))?",
    re.DOTALL)
_FREE_BELOW_UTILIZATION = re.compile(
    r"Free memory on device \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup is less than desired GPU "
    r"memory utilization \((?P<u>[\d.]+), (?P<want>[\d.]+) GiB\)")


_EAGER = re.compile(r"Enforce eager set|Cudagraph is disabled under eager mode")
"""--enforce-eager: no torch.compile, no CUDA graphs (the ledger's cuda_graphs; compare's headline names it)."""
_EXPLICIT_POOL = re.compile(r"as specified by kv_cache_memory_bytes config")


def _memory_terms(found: re.Match[str], out: dict[str, Any]) -> None:
    """The memory line's GiB figures as bytes with their resolutions (its weights figure is the same as
    "Model loading took"'s, which the ledger already holds)."""
    for group, name in (("free", "device_free_bytes"), ("total", "device_total_bytes"), ("want", "requested_bytes"),
                        ("act", "activation_peak_bytes"), ("nt", "non_torch_bytes"), ("cg", "cudagraph_bytes")):
        out[name], out[f"{name}_resolution_bytes"] = _gib(found[group])
    out["gpu_memory_utilization"] = float(found["u"])


class VLLM(EngineAdapter):
    kind = "vllm"
    name = "vLLM"
    default_binary = "python3"  # the interpreter of the environment vLLM is installed in
    apis = frozenset({"chat", "messages", "responses"})  # all three answered 200 on vLLM 0.26.0 (tests/data/vllm-live)
    owned_by = "vllm"  # vLLM 0.26.0's /v1/models (tests/data/vllm-live/session2/http/models.json); Server: uvicorn
    metric_prefix = "vllm:"
    capacity_pool = PoolRule(16, None, True, "auto")  # 16-token blocks shared by all sequences
    diagnoses = (
        rule("kv_cache_too_small_for_max_len",
             r"To serve at least one request with the models?'?s'? max seq len \((?P<len>\d+)\)",
             "the KV cache left after weights and activations cannot hold one request of max_model_len {len}",
             "raise serve.gpu_memory_utilization or lower serve.max_context (the log's 'estimated maximum "
             "model length' is what fits)"),
        rule("no_kv_cache_memory", r"No available memory for the cache blocks",
             "weights and profiling peak used all memory that gpu_memory_utilization allows",
             "raise serve.gpu_memory_utilization, lower serve.prefill_chunk (max_num_batched_tokens), or "
             "use more GPUs (serve.tensor_parallel)"),
        rule("free_memory_below_utilization", r"Free memory on device(?: \S+)? \((?P<free>[\d.]+)/(?P<total>[\d.]+) "
             r"GiB\) on startup is less than desired GPU memory utilization \((?P<u>[\d.]+)",
             "only {free} of {total} GiB are free, less than the fraction {u} of total memory vLLM was told to use",
             "stop the other process on the GPU, or lower serve.gpu_memory_utilization"),
        rule("memory_profiling_error", r"Error in memory profiling",
             "free memory rose during profiling: another process released GPU memory meanwhile",
             "run vLLM alone on the GPU and restart"),
        rule("bfloat16_unsupported", r"Bfloat16 is only supported on GPUs with compute capability of at least 8\.0",
             "the GPU (compute capability below 8.0, e.g. V100) has no bfloat16",
             "set serve.weights_dtype: float16"),
        # the pool allocated (an explicit one skips vLLM's memory profiling), then warm-up needed more: on the H200,
        # the n-gram rejection sampler's first run asked 192 MiB with 193 MiB free (tests/data/vllm-live/session4)
        rule(OUT_OF_MEMORY_AT_FIRST_USE, r"for KV Cache as specified[\s\S]*?CUDA out of memory\. "
             r"Tried to allocate (?P<size>[\d.]+ [GM]iB)",
             "the GPU ran out of memory at warm-up (it asked {size} more) after the KV cache was allocated: with "
             "--kv-cache-memory-bytes vLLM skips its memory profiling, so activations and the sampler's first run "
             "must fit in what the pool leaves",
             "lower serve.kv.capacity by more than {size} worth of tokens (the capacity search steps down so), or "
             "size the pool with serve.gpu_memory_utilization and let vLLM profile"),
        rule("cuda_out_of_memory", r"CUDA out of memory|OutOfMemoryError",
             "a CUDA allocation failed (often during CUDA-graph capture at high utilization, which the KV "
             "sizing does not account for)",
             "lower serve.max_context (--max-model-len: report 001's own advice, a shorter context needs less "
             "memory per request), lower serve.gpu_memory_utilization a little, or add --enforce-eager to "
             "serve.extra_args"),
        rule("port_in_use", r"\[Errno 98\][^\n]*|Address already in use",
             "the port is already in use", "stop the other server or set serve.port to a free port"),
        rule("unknown_argument", r"unrecognized arguments: (?P<arg>[^\n]+)",
             "this vLLM version does not know {arg}", "remove it, or pin a vLLM version that has it"),
        rule("vllm_not_installed", r"No module named '?vllm'?",
             "the Python that engine.binary names has no vLLM installed",
             "set engine.binary to the python of the environment vLLM was installed into (e.g. vllm-env/bin/python)"),
        rule("package_missing", r"ModuleNotFoundError: No module named '(?P<module>[^']+)'",
             "vLLM imports {module}, which its environment lacks (vLLM 0.26.0 on the H200 imported flashinfer at "
             "engine start for its top-k/top-p sampler)",
             "install the package that provides {module} into vLLM's environment (pip's name may differ: "
             "flashinfer is flashinfer-python)"),
        rule("attention_backend_unknown", r"Unknown attention backend: '(?P<name>[^']+)'\. Valid options are: "
             r"(?P<valid>[^\n]+?)\.?\s*$",
             "this vLLM has no attention backend {name}",
             "set serve.attention_backend to one of its own ({valid}), or null for vLLM's choice"),
        rule("max_model_len_above_model", r"User-specified max_model_len \((?P<asked>\d+)\) is greater than the "
             r"derived max_model_len \((?P<derived>[^)]*)\)",
             "serve.max_context {asked} is above what the model's config allows ({derived})",
             "lower serve.max_context to the model's trained context"),
        rule("model_path_missing",
             r"Repo id must be in the form 'repo_name' or 'namespace/repo_name': '(?P<path>[^']+)'",
             "the model path {path} is not a folder on this machine, so vLLM took it for a hub repo id",
             "point the artifact at the checkpoint folder (ninferkit verify names where it looked)"),
        rule("model_not_found", r"is not a local folder and is not a valid model identifier|"
             r"does not appear to have a file named config\.json",
             "the model path is not a Hugging Face checkpoint folder",
             "point artifact at the checkpoint folder (config.json, tokenizer, weights)"),
    )

    def binary(self, profile: Profile) -> Path:
        name = profile.engine.binary or self.default_binary
        found = shutil.which(name)
        if found is None:
            version = f"=={profile.engine.version}" if profile.engine.version else ""
            raise ToolMissing(f"{name} is not on PATH; engine.binary names the python of the environment holding "
                              f"vLLM (`pip install vllm{version}` into a CUDA environment)")
        return Path(found)

    def validate(self, profile: Profile) -> None:
        """Raise ProfileError for settings vLLM has no flag for, or values it rejects on this GPU."""
        serve, problems = serve_of(profile, Serve), []
        if serve.kv.capacity == "auto":
            problems.append("serve.kv.capacity = 'auto': vLLM sizes its pool from serve.gpu_memory_utilization "
                            "unless told a size; allowed: null (that sizing) or a token count "
                            "(--kv-cache-memory-bytes)")
        if serve.kv.dtype is not None and serve.kv.dtype not in KV_CACHE_DTYPES:
            problems.append(f"serve.kv.dtype = {serve.kv.dtype!r}: allowed: {', '.join(KV_CACHE_DTYPES)}")
        if serve.weights_dtype is not None:
            if serve.weights_dtype not in WEIGHT_DTYPES:
                problems.append(f"serve.weights_dtype = {serve.weights_dtype!r}: allowed: {', '.join(WEIGHT_DTYPES)}")
            elif serve.weights_dtype == "bfloat16" and profile.gpu.arch in NO_BFLOAT16_ARCHS:
                problems.append(f"serve.weights_dtype = 'bfloat16': {profile.gpu.arch} has no bfloat16; "
                                "allowed: float16, half, float32")
        if serve.otlp_traces_jsonl is not None and serve.docker:
            problems.append("serve.otlp_traces_jsonl: the OTLP receiver runs beside a native launch only; allowed: "
                            "null, or serve.docker false")
        if serve.gpu_devices is not None and len(serve.gpu_devices) != serve.tensor_parallel:
            problems.append(f"serve.gpu_devices = {serve.gpu_devices}: needs exactly serve.tensor_parallel "
                            f"({serve.tensor_parallel}) devices")
        if problems:
            raise ProfileError(f"profile {profile.name} does not fit vLLM:\n"
                               + "\n".join(f"  - {problem}" for problem in problems))

    def argv(self, profile: Profile, model_path: Path, binary: Path, served_as: Path | None = None) -> list[str]:
        self.validate(profile)
        serve = serve_of(profile, Serve)
        argv = [str(binary), "-m", SERVER_MODULE, "--model", str(served_as or model_path), "--host", serve.host,
                "--port", str(serve.port)]
        if serve.model_id is not None:
            argv += ["--served-model-name", serve.model_id]
        argv += ["--max-model-len", str(serve.max_context)]
        if (max_num_seqs := serve.max_num_seqs_flag()) is not None:
            argv += ["--max-num-seqs", str(max_num_seqs)]
        if serve.gpu_memory_utilization is not None:
            argv += ["--gpu-memory-utilization", f"{serve.gpu_memory_utilization:g}"]
        if serve.swap_space_gib is not None:
            argv += ["--swap-space", f"{serve.swap_space_gib:g}"]
        if serve.weights_dtype is not None:
            argv += ["--dtype", serve.weights_dtype]
        if serve.kv.dtype is not None:
            argv += ["--kv-cache-dtype", serve.kv.dtype]
        if isinstance(serve.kv.capacity, int):
            argv += ["--kv-cache-memory-bytes", str(self.pool_bytes(profile, model_path, serve.kv.capacity))]
        if serve.prefill_chunk is not None:
            argv += ["--max-num-batched-tokens", str(serve.prefill_chunk)]
        if serve.tensor_parallel > 1:
            argv += ["--tensor-parallel-size", str(serve.tensor_parallel)]
        if serve.trust_remote_code:
            argv.append("--trust-remote-code")
        if serve.attention_backend is not None:
            argv += ["--attention-backend", serve.attention_backend]
        if serve.prefix_caching is not None:
            argv.append("--enable-prefix-caching" if serve.prefix_caching else "--no-enable-prefix-caching")
        if serve.enforce_eager:
            argv.append("--enforce-eager")
        if serve.spec.method is not None:
            config = {"method": serve.spec.method, **({"num_speculative_tokens": serve.spec.num_speculative_tokens}
                                                     if serve.spec.num_speculative_tokens else {}),
                      **serve.spec.options}
            argv += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
        elif serve.spec.options or serve.spec.num_speculative_tokens:
            raise ProfileError("serve.spec: options of no method; set serve.spec.method")
        if serve.tool_call_parser is not None:
            argv += ["--enable-auto-tool-choice", "--tool-call-parser", serve.tool_call_parser]
        if serve.otlp_traces_jsonl is not None:
            argv += ["--otlp-traces-endpoint", endpoint(serve.otlp_port)]
        argv += list(serve.extra_args)
        check_against_vllm(profile, argv, self.facts(profile, binary))
        if serve.otlp_traces_jsonl is None:
            return argv
        # the receiver runs vLLM as its child, so both live and stop together (otlp_receiver.py)
        return [sys.executable, "-m", RECEIVER_MODULE, "--port", str(serve.otlp_port), "--jsonl",
                str(Path(serve.otlp_traces_jsonl).expanduser()), "--", *argv]

    def pool_bytes(self, profile: Profile, model_path: Path, tokens: int) -> int:
        """The `--kv-cache-memory-bytes` that gives a pool of `tokens` (whole 16-token blocks): vLLM divides
        the bytes by a block's, so the bytes per token come from the model's config.json (capacity.vllm_config,
        else the checkpoint folder's own) at the cache dtype."""
        serve = serve_of(profile, Serve)
        layout = self.kv_layout(profile, model_path, serve.kv.dtype or "auto")
        if layout is None:
            raise ProfileError(f"serve.kv.capacity = {tokens}: vLLM takes a pool as bytes, and neither "
                               f"capacity.vllm_config nor {model_path / 'config.json'} gives the bytes per token; "
                               "set capacity.vllm_config to the model's config.json")
        return self.capacity_pool.resolve(tokens) * layout.bytes_per_token

    def profile_field_of(self, flag: str) -> str | None:
        """The serve field each flag of argv() comes from: the refusals name it, and the write-up's recipe."""
        return _FLAG_FIELDS.get(flag)

    def facts(self, profile: Profile, binary: Path) -> VllmFacts | None:
        """The installed vLLM's own lists where its Python runs here, else those recorded for engine.version."""
        found = shutil.which(str(binary))
        facts = installed_facts(Path(found)) if found else None
        if facts is None and profile.engine.version:
            facts = recorded_facts(profile.engine.version)
        return facts

    def env(self, profile: Profile) -> dict[str, str]:
        """The API key through VLLM_API_KEY (out of argv and `ps`), the GPUs for a native launch, and with the
        OTLP receiver the exporter's protocol (vLLM's default is gRPC; the receiver speaks OTLP/HTTP) and a
        short batch delay, so a request's span arrives within a fraction of a second of its end, before the
        join after its cell (the SDK's default waits 5 s)."""
        out: dict[str, str] = {}
        if serve_of(profile, Serve).otlp_traces_jsonl is not None:
            out |= {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_BSP_SCHEDULE_DELAY": "100"}
        name = profile.serve.api_key_env
        if name and os.environ.get(name):
            out[API_KEY_VARIABLE] = os.environ[name]
        if profile.serve.gpu_devices is not None and not profile.serve.docker:
            out["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, profile.serve.gpu_devices))
        return out

    def served_pool(self, props: Mapping[str, Any] | None, metrics: str | None) -> dict[str, Any] | None:
        """/metrics `vllm:cache_config_info`'s labels: kv_cache_size_tokens (0.26.0), else num_gpu_blocks x
        block_size; the cache dtype where it is not `auto` (tests/data/vllm-live/session2/http/metrics_before.json)."""
        if metrics is None:
            return None
        info = next((s.labels for s in samples(metrics) if s.name == "vllm:cache_config_info"), None)
        if info is None:
            return None
        tokens = _int_label(info, "kv_cache_size_tokens")
        blocks, block = _int_label(info, "num_gpu_blocks"), _int_label(info, "block_size")
        if tokens is None and blocks is not None and block is not None:
            tokens = blocks * block
        if tokens is None:
            return None
        found: dict[str, Any] = {"kv_tokens": tokens, "source": "/metrics vllm:cache_config_info"}
        if info.get("cache_dtype") not in (None, "auto"):
            found["kv_dtype"] = info["cache_dtype"]
        return found

    def reported_context(self, models_body: Mapping[str, Any]) -> int | None:
        data = models_body.get("data") or [{}]
        value = data[0].get("max_model_len")
        return int(value) if value is not None else None

    def parse_ledger(self, log_text: str) -> dict[str, Any]:
        """weights_bytes, weights_load_s, kv_cache_bytes, kv_tokens, kv_capacity_mode ('auto': sized from
        gpu_memory_utilization; 'explicit': --kv-cache-memory-bytes, whose line gives device_free_bytes and
        kv_cache_bytes), max_concurrency_x and its request tokens, gpu_blocks, cpu_blocks,
        attention_block_tokens, mamba_page_padding_pct, listen_url, engine_init_s, max_context (the engine
        config's max_seq_len: a capacity launch's own per-request context); from the memory line
        device_free_bytes, device_total_bytes, gpu_memory_utilization, requested_bytes, activation_peak_bytes,
        non_torch_bytes, cudagraph_bytes, and once the KV line is read too, runtime_bytes (the KV cache plus
        the three others: all vLLM takes beside the weights) and free_after_weights_bytes (the device's free
        memory at startup less the weights: the room a larger gpu_memory_utilization could give);
        kv_cache_bytes_to_fit_requested and kv_cache_bytes_to_fill_gpu (vLLM's own suggestions, exact bytes);
        cuda_graphs ("off (--enforce-eager)", or "on" where the memory line gives CUDA graphs memory).
        Rounded GiB values carry `_resolution_bytes`."""
        out: dict[str, Any] = {}
        for pattern, what in _LEDGER:
            matches = list(pattern.finditer(log_text))
            if not matches:
                continue
            found = matches[-1]
            if what == "weights":
                out["weights_bytes"], out["weights_bytes_resolution_bytes"] = _gib(found["gib"])
                out["weights_load_s"] = float(found["s"])
            elif what == "kv_memory":
                out["kv_cache_bytes"], out["kv_cache_bytes_resolution_bytes"] = _gib(found["gib"])
            elif what == "kv_tokens":
                out["kv_tokens"] = int(found["n"].replace(",", ""))
                out["kv_capacity_mode"] = "auto"
            elif what == "concurrency":
                out["max_concurrency_request_tokens"] = int(found["t"].replace(",", ""))
                out["max_concurrency_x"] = float(found["x"])
            elif what == "blocks":
                out["gpu_blocks"] = int(found["g"])
                if found["c"] is not None:
                    out["cpu_blocks"] = int(found["c"])
            elif what == "block_size":
                out["attention_block_tokens"] = int(found["n"])
            elif what == "listening":
                out["listen_url"] = found["url"]
            elif what == "memory":
                _memory_terms(found, out)
            elif what == "kv_suggestion":
                out["kv_cache_bytes_to_fit_requested"] = int(found["fit"])
                out["kv_cache_bytes_to_fill_gpu"] = int(found["full"])
            elif what == "init":
                out["engine_init_s"] = float(found["s"])
            elif what == "explicit_pool":
                out["device_free_bytes"], out["device_free_bytes_resolution_bytes"] = _gib(found["free"])
                out["kv_cache_bytes"], out["kv_cache_bytes_resolution_bytes"] = _gib(found["kv"])
            elif what == "max_len":
                out["max_context"] = int(found["n"])
            elif what == "failed_allocation":
                out["failed_allocation_bytes"] = round(float(found["n"]) * (GIB if found["unit"] == "GiB" else MIB))
            else:
                out["mamba_page_padding_pct"] = float(found["p"])
        if "kv_tokens" in out and _EXPLICIT_POOL.search(log_text):
            out["kv_capacity_mode"] = "explicit"  # --kv-cache-memory-bytes: no profiling, so no memory line
        if "activation_peak_bytes" in out and "kv_cache_bytes" in out:
            parts = ("kv_cache_bytes", "activation_peak_bytes", "non_torch_bytes", "cudagraph_bytes")
            out["runtime_bytes"] = sum(out[name] for name in parts)
            out["runtime_bytes_resolution_bytes"] = sum(out[f"{name}_resolution_bytes"] for name in parts)
        if "device_free_bytes" in out and "weights_bytes" in out:
            out["free_after_weights_bytes"] = out["device_free_bytes"] - out["weights_bytes"]
            out["free_after_weights_bytes_resolution_bytes"] = (out["device_free_bytes_resolution_bytes"]
                                                                + out["weights_bytes_resolution_bytes"])
        if _EAGER.search(log_text):
            out["cuda_graphs"] = "off (--enforce-eager)"
        elif out.get("cudagraph_bytes"):
            out["cuda_graphs"] = "on"
        return out

    def parse_refusal(self, log_text: str) -> dict[str, Any] | None:
        """The KV-too-small or free-memory refusal as byte counts (printed in GiB, so with resolutions)."""
        found = _NOT_ENOUGH_KV.search(log_text)
        if found is not None:
            required, required_res = _gib(found["need"])
            available, available_res = _gib(found["avail"])
            out: dict[str, Any] = {"kind": "kv_cache_for_max_len", "max_model_len": int(found["len"])}
            if found["est"] is not None:
                out["estimated_max_model_len"] = int(found["est"])
        else:
            found = _FREE_BELOW_UTILIZATION.search(log_text)
            if found is None:
                return None
            required, required_res = _gib(found["want"])
            available, available_res = _gib(found["free"])
            out = {"kind": "free_below_utilization", "gpu_memory_utilization": float(found["u"]),
                   "total_bytes": _gib(found["total"])[0]}
        out.update(required_bytes=required, available_bytes=available, required_bytes_resolution_bytes=required_res,
                   available_bytes_resolution_bytes=available_res, short_by_bytes=required - available)
        return out

    def kv_layout(self, profile: Profile, model_path: Path | None, kv_dtype: str) -> KVLayout | None:
        config = profile.capacity.vllm_config
        if config is None and model_path is not None and (model_path / "config.json").is_file():
            config = str(model_path / "config.json")
        if config is None:
            return None
        path = Path(config).expanduser()
        if not path.is_file():
            raise ProfileError(f"capacity.vllm_config = {config!r}: no such file; give the model's config.json")
        tp = 1 if profile.serve.gpu_devices is None else len(profile.serve.gpu_devices)
        return vllm_kv_layout(json.loads(path.read_text()), kv_dtype, tp)

    def request_log_path(self, profile: Profile) -> Path | None:
        """The OTLP receiver's span file (serve.otlp_traces_jsonl), kept in the run directory like a request log."""
        found = serve_of(profile, Serve).otlp_traces_jsonl
        return None if found is None else Path(found).expanduser()

    def server_log_truth(self, profile: Profile, rows: Sequence[Mapping[str, Any]],
                         server_logs: Sequence[Path] = (),
                         request_log: Path | None = None) -> list[dict[str, Any]] | None:
        """vLLM's own span of each row's request, joined by request id (otlp.join_spans); None without
        serve.otlp_traces_jsonl. A span file that cannot be read gives every row a `server_note` saying why. The
        server logs are not read: the spans are the per-request record joined here."""
        path = request_log or self.request_log_path(profile)
        if path is None:
            return None
        if not path.is_file():
            return [{"server_note": f"no vLLM spans: {path} does not exist (the receiver received none)"}
                    for _ in rows]
        try:
            spans = read_spans(path)
        except (OSError, BadInput) as exc:
            return [{"server_note": f"vLLM's spans not read: {exc}"} for _ in rows]
        return join_spans(rows, span_rows(spans))

    def request_extensions(self, profile: Profile, served: Mapping[str, Any] | None = None) -> frozenset[str]:
        """`tools` where the profile names a tool-call parser (vLLM refuses tool_choice "auto" without one)."""
        return frozenset({"tools"}) if serve_of(profile, Serve).tool_call_parser is not None else frozenset()

    def server_timings(self, response: Mapping[str, Any]) -> dict[str, Any]:
        """Only cached tokens ride on a vLLM response; timings come from /metrics (metrics_deltas)."""
        cached = ((response.get("usage") or {}).get("prompt_tokens_details") or {}).get("cached_tokens")
        return {} if cached is None else {"cached_tokens_server": cached}

    request_metrics_path = "/metrics"

    def request_metrics_deltas(self, before: str, after: str) -> dict[str, Any] | None:
        """metrics_deltas of one request that ran alone; None until vLLM has counted it as finished
        (its e2e histogram moved). When the counters moved by more than one request (another client
        used the server meanwhile) no number is attributed and `server_note` says so."""
        try:
            deltas = metrics_deltas(before, after)
        except BadInput as error:
            return {"server_note": f"no /metrics deltas: {error}"}
        finished = deltas.get("requests_server")
        if finished is None:
            return {"server_note": "this vLLM exports no vllm:e2e_request_latency_seconds; /metrics deltas "
                                   "cannot be tied to one request"}
        if finished == 0:
            return None
        if finished != 1:
            return {"server_note": f"vLLM's finished-request count moved by {finished}, not 1, while this request "
                                   "ran alone on our side (another client, or a restart); its /metrics deltas "
                                   "are not attributed"}
        return {"server_source": "metrics_delta", **deltas}

    def tokenize_request(self, text: str) -> tuple[str, dict[str, Any]]:
        return "/tokenize", {"prompt": text, "add_special_tokens": False}

    def token_count(self, body: Mapping[str, Any]) -> int:
        return int(body["count"])

    def output_pin_fields(self) -> dict[str, Any]:
        return {"ignore_eos": True}

    def docker_files(self, profile: Profile) -> dict[str, str]:
        """The Dockerfile pins the official image at engine.version; plus the boot-time power-limit files."""
        tag = f"v{profile.engine.version}" if profile.engine.version else "latest"
        files = {"Dockerfile": "\n".join([
            f"# Generated by ninferkit for profile {profile.name}: the official vLLM OpenAI server image.",
            f"FROM vllm/vllm-openai:{tag}",
            f'ENTRYPOINT ["python3", "-m", "{SERVER_MODULE}"]',
            "",
        ])}
        return files | power_limit_files(profile)


def check_against_vllm(profile: Profile, argv: list[str], facts: VllmFacts | None) -> None:
    """Refuse, before anything starts, what the vLLM that will run does not take: an option its parser lacks, an
    attention backend or speculative method outside its own lists, a version other than the profile pins, a GPU
    its torch has no kernels for. Without facts (no vLLM here and none recorded for engine.version) the command is
    built unchecked; the launch's own log then says what vLLM refused."""
    if facts is None:
        return
    serve, problems = serve_of(profile, Serve), []
    where = f"vLLM {facts.version} ({facts.source})"
    if profile.engine.version and profile.engine.version != facts.version:
        problems.append(f"engine.version = {profile.engine.version!r}, but engine.binary's vLLM is {facts.version}; "
                        f"allowed: {facts.version}, or the python of an environment holding vLLM "
                        f"{profile.engine.version}")
    for flag in (token.partition("=")[0] for token in argv[3:] if token.startswith("--")):
        if flag not in facts.options:
            field = _FLAG_FIELDS.get(flag, "serve.extra_args")
            problems.append(f"{field}: {where} has no option {flag}" + _REMOVED.get(flag, ""))
        elif facts.deprecated(flag):
            field = _FLAG_FIELDS.get(flag, "serve.extra_args")
            problems.append(f"{field}: {flag} is deprecated in {where}: "
                            f"{facts.options[flag].get('help') or 'its help says no more'}")
    backend = serve.attention_backend
    if backend is not None and backend not in facts.attention_backends:
        hint = ""
        stem = backend.lower().rstrip("0123456789")
        if stem in facts.speculative_methods:
            hint = (f"; {stem!r} is a speculative-decoding method in vLLM {facts.version}: set serve.spec.method: "
                    f"{stem}")
        problems.append(f"serve.attention_backend = {backend!r}: not an attention backend of {where}{hint}; "
                        f"allowed: {', '.join(facts.attention_backends)}")
    method = serve.spec.method
    if method is not None and method not in facts.speculative_methods:
        problems.append(f"serve.spec.method = {method!r}: not a speculative method of {where}; allowed: "
                        f"{', '.join(facts.speculative_methods)}")
    arch = profile.gpu.arch
    problems += _quantization_problems(serve.checkpoint_quantization, arch, facts, where)
    if arch and facts.torch_cuda_archs and arch not in facts.torch_cuda_archs:
        problems.append(f"gpu.arch = {arch!r}: {where} runs on a torch built for {', '.join(facts.torch_cuda_archs)} "
                        f"only, so it has no kernels for {arch}; allowed: a vLLM built for {arch}")
    if problems:
        raise ProfileError(f"profile {profile.name} does not fit {where}:\n"
                           + "\n".join(f"  - {problem}" for problem in problems))


def _quantization_problems(method: str | None, arch: str | None, facts: VllmFacts, where: str) -> list[str]:
    """The checkpoint's quantization (serve.checkpoint_quantization) against the vLLM's own minimum compute
    capability for it, as NInfer's build rules refuse a KV type the GPU has no kernels for: vLLM compares the two at
    start-up (config/vllm.py) and stops there, after the checkpoint was fetched and loading began. The minimum is the
    method's, as vLLM's own start-up check is: a scheme inside a method may need more (compressed-tensors says 7.0,
    its NVFP4 schemes 7.5, refused when vLLM builds the layers). Silent where the facts have no minimums (recorded
    before ninferkit read them) or the profile states no method or no arch. A negative minimum is a CPU method's."""
    minimum = facts.quantization_min_capability
    if method is None or not minimum:
        return []
    if method not in minimum:
        return [f"serve.checkpoint_quantization = {method!r}: not a quantization method of {where}; allowed: "
                f"{', '.join(sorted(minimum))}"]
    if arch is None or int(arch.removeprefix("sm_")) >= minimum[method]:
        return []
    capability = int(arch.removeprefix("sm_"))
    runs = sorted(name for name, needed in minimum.items() if 0 <= needed <= capability)
    return [f"serve.checkpoint_quantization = {method!r}: {where} refuses it below compute capability "
            f"{minimum[method] / 10:.1f} ({method}'s get_min_capability() is {minimum[method]}), and gpu.arch "
            f"{arch!r} is {capability / 10:.1f}: the launch would stop at start-up with \"The quantization method "
            f"{method} is not supported for the current GPU\"; allowed: a GPU of compute capability "
            f"{minimum[method] / 10:.1f} or later, or a checkpoint whose method runs on {arch} ({', '.join(runs)})"]


_FLAG_FIELDS = {"--swap-space": "serve.swap_space_gib", "--attention-backend": "serve.attention_backend",
                "--speculative-config": "serve.spec", "--gpu-memory-utilization": "serve.gpu_memory_utilization",
                "--max-model-len": "serve.max_context", "--max-num-seqs": "serve.max_num_seqs",
                "--dtype": "serve.weights_dtype", "--kv-cache-dtype": "serve.kv.dtype",
                "--max-num-batched-tokens": "serve.prefill_chunk", "--tensor-parallel-size": "serve.tensor_parallel",
                "--trust-remote-code": "serve.trust_remote_code", "--enforce-eager": "serve.enforce_eager",
                "--enable-prefix-caching": "serve.prefix_caching", "--no-enable-prefix-caching": "serve.prefix_caching",
                "--served-model-name": "serve.model_id", "--tool-call-parser": "serve.tool_call_parser",
                "--enable-auto-tool-choice": "serve.tool_call_parser",
                "--otlp-traces-endpoint": "serve.otlp_traces_jsonl"}
"""The profile field each flag of argv() comes from (profile_field_of), so a refusal names what to change."""
_REMOVED = {"--swap-space": " (removed from vLLM's arguments in 0.18); remove serve.swap_space_gib"}
"""Options vLLM removed without leaving a word in its parser: when, and what to do."""


# ---------------------------------------------------------------------------------------------
# /metrics deltas
# ---------------------------------------------------------------------------------------------

def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {name: value summed over label sets}, read by prometheus_text (BadInput for a text
    its parser cannot read); `_total` is dropped from counter names (clients differ on it) and `_created`
    timestamps are skipped."""
    out: dict[str, float] = {}
    for sample in samples(text):
        if sample.name.endswith("_created"):
            continue
        name = sample.name.removesuffix("_total")
        out[name] = out.get(name, 0.0) + sample.value
    return out


_DELTA_NAMES = {
    "vllm:prompt_tokens": "prompt_tokens_server",
    "vllm:generation_tokens": "generated_tokens_server",
    "vllm:prefix_cache_hits": "cached_tokens_server",
    "vllm:request_prefill_time_seconds_sum": "prompt_s_server",
    "vllm:request_decode_time_seconds_sum": "decode_s_server",
    "vllm:request_queue_time_seconds_sum": "queue_s_server",
    "vllm:time_to_first_token_seconds_sum": "ttft_s_server",
    "vllm:e2e_request_latency_seconds_sum": "e2e_s_server",
    "vllm:e2e_request_latency_seconds_count": "requests_server",
    "vllm:spec_decode_num_drafts": "spec_rounds_server",
    "vllm:spec_decode_num_draft_tokens": "drafted_tokens_server",
    "vllm:spec_decode_num_accepted_tokens": "accepted_tokens_server",
    "vllm:num_preemptions": "preemptions_server",
}


def metrics_deltas(before: str, after: str) -> dict[str, Any]:
    """Counter deltas between two /metrics scrapes, under the requests.jsonl contract names.

    Around one request (nothing else in flight) these are that request's server-side numbers;
    around several they are sums. Derived: decode_tokens_server = generated - requests (the first
    token belongs to prefill), decode_tok_s_server = decode_tokens / decode_s, prefill_tok_s_server
    = (prompt - cached) / prompt_s, acceptance_server = accepted / drafted. Metrics this vLLM
    version does not export are absent.
    """
    first, second = parse_metrics(before), parse_metrics(after)
    out: dict[str, Any] = {}
    for source, name in _DELTA_NAMES.items():
        if source in second:
            delta = second[source] - first.get(source, 0.0)
            out[name] = int(round(delta)) if not source.endswith("_sum") else delta
    requests = out.get("requests_server")
    if "generated_tokens_server" in out and requests:
        out["decode_tokens_server"] = out["generated_tokens_server"] - requests
        if out.get("decode_s_server"):
            out["decode_tok_s_server"] = out["decode_tokens_server"] / out["decode_s_server"]
    if "prompt_tokens_server" in out and out.get("prompt_s_server"):
        computed = out["prompt_tokens_server"] - out.get("cached_tokens_server", 0)
        out["prefill_tok_s_server"] = computed / out["prompt_s_server"]
    if out.get("drafted_tokens_server"):
        out["acceptance_server"] = out.get("accepted_tokens_server", 0) / out["drafted_tokens_server"]
    return out


Adapter = VLLM


def _int_label(labels: Mapping[str, str], name: str) -> int | None:
    """A label holding a whole number ("None" and other text: not given)."""
    value = labels.get(name, "")
    return int(value) if value.isdigit() else None
