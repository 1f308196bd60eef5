"""What a NInfer log says went wrong: memory refusals as exact numbers, and every known failure with its fix.

The field reports' error tables come first (seed 000 §1.7, seed 003), then the engine's own errors
(IF §3). Startup failures come before request errors: they end the process.
"""

from __future__ import annotations

import re
from typing import Any

from ninferkit.engines.base import DiagnosisRule, rule
from ninferkit.engines.ninfer.logs import count

_N = r"(?P<{}>[\d,]+)"
_REFUSALS = (
    ("sequence_budget", re.compile(
        r"model weights and requested context require " + _N.format("required") + r" bytes of device memory "
        r"\(weights " + _N.format("weights") + r", sequence/workspace/graphs " + _N.format("runtime")
        + r"\), but only " + _N.format("available") + r" bytes are free before loading weights")),
    ("weights", re.compile(r"model weights require " + _N.format("required") + r" bytes of device memory, "
                           r"but only " + _N.format("available") + r" bytes are free before loading weights")),
    ("auto_minimum", re.compile(
        r"minimum Engine runtime reservation requires " + _N.format("runtime") + r" bytes in addition to "
        + _N.format("headroom") + r" bytes of automatic headroom(?:/slack floor)?, but only "
        + _N.format("available") + r" bytes are available after weights")),
    ("auto_headroom", re.compile(
        r"automatic KV headroom(?:/slack floor)? requires " + _N.format("headroom") + r" bytes, but only "
        + _N.format("available") + r" bytes are available after weights")),
    ("explicit", re.compile(
        r"requested Engine runtime reservation requires " + _N.format("runtime") + r" bytes, but only "
        + _N.format("available") + r" bytes are available for runtime capacity")),
    ("graph_allowance", re.compile(r"CUDA Graph preparation consumed " + _N.format("required")
                                   + r" bytes, exceeding the planned allowance of " + _N.format("available")
                                   + r" bytes")),
)


def parse_refusal(log_text: str) -> dict[str, Any] | None:
    """The last memory refusal in a log as exact numbers (NInfer prints plain byte counts).

    `required_bytes` is what the engine asked for in total (for the `auto` minimum: runtime
    reservation + headroom), `available_bytes` what it had; `runtime_reservation_bytes`,
    `headroom_bytes` and `weights_bytes` are the parts when the message names them.
    """
    best: tuple[int, str, re.Match[str]] | None = None
    for kind, pattern in _REFUSALS:
        for found in pattern.finditer(log_text):
            if best is None or found.start() > best[0]:
                best = (found.start(), kind, found)
    if best is None:
        return None
    _, kind, found = best
    values = {key: count(value) for key, value in found.groupdict().items() if value is not None}
    out: dict[str, Any] = {"kind": kind, "line": found.group(0)}
    if "runtime" in values:
        out["runtime_reservation_bytes"] = values["runtime"]
    if "headroom" in values:
        out["headroom_bytes"] = values["headroom"]
    if "weights" in values:
        out["weights_bytes"] = values["weights"]
    required = values.get("required")
    if required is None:
        required = values.get("runtime", 0) + values.get("headroom", 0)
    out.update(required_bytes=required, available_bytes=values["available"],
               required_bytes_resolution_bytes=1, available_bytes_resolution_bytes=1,
               short_by_bytes=required - values["available"])
    return out


DIAGNOSES: tuple[DiagnosisRule, ...] = (
    # The field reports' error table (field-reports.md section 2.5), then the engine's own errors
    # (ninfer-interface.md section 3). Startup failures come first: they end the process.
    rule("driver_missing", r"couldn't communicate with the NVIDIA driver",
         "the NVIDIA driver is not installed or not loaded (the card is on the bus but has no driver)",
         "install the proprietary R580 server driver (the last branch for Volta) and reboot"),
    rule("open_kernel_module", r"not supported by open nvidia\.ko",
         "the open kernel module is loaded; Volta (V100) is supported only by the proprietary module (GSP)",
         "purge the *-open driver packages and install the proprietary driver of the same branch"),
    rule("cuda_runtime_missing", r"(?P<lib>libcudart\.so\.\d+): cannot open shared object file",
         "{lib} is missing: the image's CUDA runtime differs from the one the binary was linked against",
         "build the image on the matching runtime base (nvidia/cuda:12.8.0-runtime for CUDA 12 builds); "
         "see run_dir/docker/Dockerfile"),
    rule("compat_libcuda", r"cudaErrorCompatNotSupportedOnDevice",
         "the image's forward-compatibility libcuda was loaded on a GeForce card, which does not support it",
         "delete /usr/local/cuda/compat in the image (the generated Dockerfile does this for GeForce cards)"),
    rule("port_in_use", r"(?:failed to bind|cannot bind) (?P<host>[^\s:]+):(?P<port>\d+)"
         r"|server status=failed phase=bind host=\"?(?P<host2>[^\s\"]+)\"? port=(?P<port2>\d+)",
         "the listen address is already in use (or not bindable)",
         "stop the other server (`ss -ltnp` shows it) or set serve.port to a free port"),
    rule("unknown_argument", r"unknown argument: (?P<arg>\S+)",
         "this ninfer-serve build does not know the option {arg} (options differ per generation and fork)",
         "remove {arg}, or set engine.generation/engine.fork to the build you run; "
         "`ninfer-serve --help` lists its options"),
    rule("artifact_v3_on_old_reader", r"artifact magic is not NInfer (?P<which>v1 or v2|v2|v1|version 1)",
         "the artifact's container version is one this engine build cannot read (reader accepts {which}); "
         "a hub's `main` was replaced by a container v3 file",
         "pin artifact.revision to the revision with the container this engine reads, and verify it "
         "(01_artifact_verify checks the header)"),
    rule("artifact_v2_on_v3_reader", r"NInfer v2 artifact is not supported",
         "this G3 build reads container v3 only and was given a v2 file",
         "pin a v3 revision of the artifact, or upgrade the file with tools/upgrade_ninfer_v2_to_v3.py"),
    rule("artifact_v1_on_v2_reader", r"NInfer artifact v1 is no longer supported",
         "this build reads container v2 and was given a v1 file",
         "pin a v2 revision, or migrate with python3 -m tools.artifact.migrate_v1_to_v2"),
    rule("artifact_not_v3", r"expected NInfer v3 entry magic",
         "this G3 build reads container v3 only and the file is not one",
         "pin a v3 revision of the artifact and verify it"),
    rule("artifact_extension", r"NInfer accepts only \.ninfer artifacts",
         "the model path does not end in .ninfer", "point artifact.filename at the .ninfer file"),
    rule("artifact_corrupt", r"(?P<what>artifact is shorter than the v1 prefix|json_bytes must be positive|"
         r"declared JSON or payload start extends beyond the file|invalid JSON directory|"
         r"directory root has missing or extra members|extends beyond the file|overlaps or is out of order)",
         "the artifact file is truncated or corrupt ({what})",
         "re-download it and check size and sha256 (01_artifact_verify)"),
    rule("no_target", r"artifact (?:model_id|identity) '(?P<id>[^']+)' has no registered target",
         "this build has no target for the model {id} on this GPU",
         "use an artifact this fork supports (e.g. groupwise-int on V100), or a fork that has the target"),
    rule("wrong_gpu", r"family runtime requires compute capability (?P<cc>[\d.]+[^\n]*)",
         "this build requires compute capability {cc}; the GPU is a different architecture",
         "use the fork built for this GPU (sm_70 V100, sm_86 RTX 3090, sm_120 RTX 50xx) and set gpu.arch"),
    rule("insufficient_memory", r"(?:requires? [\d,]+ bytes[^\n]*but only [\d,]+ bytes are "
         r"(?:free|available)|CUDA Graph preparation consumed [\d,]+ bytes)",
         "not enough GPU memory for weights + runtime reservation (auto keeps 1 GiB more headroom); "
         "parse_refusal gives the exact byte counts",
         "set serve.kv.capacity explicitly, sized by the capacity formula (04_capacity_fit), or lower "
         "serve.max_context / serve.max_concurrency"),
    rule("pinned_host_memory", r"cudaMallocHost failed",
         "pinned host memory could not be allocated (host KV / state tiers)",
         "lower --host-kv-mib / --host-state-slots, or add host RAM"),
    rule("kv_capacity_too_small", r"kv[_-]capacity must be at least (?:--)?max[_-]context",
         "the KV pool is smaller than one request's context", "set serve.kv.capacity >= serve.max_context"),
    rule("kv_capacity_range", r"kv_capacity is outside the usable range for max_context and max_concurrency",
         "the KV pool's 64-token page count is outside [max(L, C), C*L] (L = ceil(max_context/64))",
         "choose serve.kv.capacity between max_context and max_context x max_concurrency"),
    rule("option_invalid", r"(?P<what>--[\w-]+(?: [\w|]+)? (?:must|requires?|cannot)[^\n]*|"
         r"max_context exceeds the variant native context capacity|DFlash is not supported by this target)",
         "the engine rejected an option value: {what}",
         "fix the profile field behind it (ninferkit validates these before launch for known generations)"),
    rule("request_log_open", r"(?P<what>failed to open request JSONL log for append|request JSONL log must not "
         r"overwrite the model artifact)[^\n]*",
         "the request log cannot be written ({what})",
         "point serve.request_log_jsonl at a writable file in an existing folder, not the artifact"),
    rule("warmup_failed", r"warmup failed[^\n]*",
         "the one-request warmup after loading failed (fatal in G2/G3)",
         "read the lines above it; usually memory or a CUDA error"),
    rule("request_queue_timeout", r"request[_ ]queue[_ ]timeout|expired before submission|"
         r"while waiting for admission",
         "a queued request was not admitted within --pending-timeout-ms (default 30 s); prefill is serial, so "
         "a long prompt ahead in the queue holds later ones (HTTP 503)",
         "raise serve.pending_timeout_ms (the field reports use 600000)"),
    rule("context_length_exceeded", r"context[_ ]length[_ ]exceeded|prepared prompt (?:has (?P<n>\d+) tokens, "
         r"exceeding Engine max_context (?P<m>\d+)|exceeds Engine (?:context capacity|max_context))",
         "prompt plus output does not fit the server's max_context (HTTP 400)",
         "send a smaller prompt or fewer max_tokens, or raise serve.max_context (memory permitting)"),
    rule("server_overloaded", r"server[_ ]overloaded|inference request queue is full",
         "max_concurrency + max_pending_requests requests were already in flight (HTTP 429)",
         "send fewer concurrent requests or raise serve.max_pending_requests"),
    rule("model_not_found", r"model[_ ]not[_ ]found|model '(?P<model>[^']*)' not found",
         "the request's model is not the server's public id (HTTP 404)",
         "send model = serve.model_id (the server's --model-id); /v1/models lists it"),
    rule("vision_disabled", r"vision[_ ]disabled|Vision is disabled for this server",
         "the request carries images but the server runs without --vision (HTTP 400)",
         "start with --vision (serve.extra_args) or send text only"),
    rule("invalid_api_key", r"invalid[_ ]api[_ ]key|missing or invalid API key",
         "the request has no or a wrong API key (HTTP 401)",
         "export the variable serve.api_key_env names with the server's key"),
    rule("service_unavailable", r"service[_ ]unavailable|inference engine is unavailable",
         "the engine stopped or failed after startup (HTTP 503)", "read the server log; restart with 02_launch"),
)
