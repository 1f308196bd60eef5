"""What a NInfer log says went wrong: memory refusals as exact numbers, and every known failure with its fix.

The field reports' error tables come first (seed 000 §1.7, seed 003), then the engine's own errors
(IF §3), checked against the live capture (ninfer-live/g1-h200/startup-errors), and the TP2 forks' refusals
from their own source (tests/data/ninfer-tp2/refusals.json names the repo, path and commit of each). Startup failures
come before request errors: they end the process. Each fix names the profile field to change, and
the numbers the log gives (a refusal's byte counts, the context limit of a rejected prompt).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ninferkit.engines.log_reader import DiagnosisRule, rule
from ninferkit.engines.ninfer.builds import CONTAINER_REFUSAL
from ninferkit.engines.ninfer.flags import field_of
from ninferkit.engines.ninfer.numbers import count
from ninferkit.host.findings import OPEN_MODULE_REFUSAL
from ninferkit.params.profile import Profile
from ninferkit.units import GIB

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


# ---------------------------------------------------------------------------------------------
# Rules that name more than their match: the profile field behind a flag, a refusal's numbers
# ---------------------------------------------------------------------------------------------

def _gib(value: int) -> str:
    return f"{value / GIB:.2f} GiB"


def _refusal_numbers(values: Mapping[str, str], line: str) -> dict[str, str]:
    """` (needs …, … free: short by …)` from the refusal on the line; empty where the line elides them."""
    refusal = parse_refusal(line)
    if refusal is None:
        return {"numbers": ""}
    return {"numbers": f" (needs {_gib(refusal['required_bytes'])}, {_gib(refusal['available_bytes'])} free: "
                       f"short by {_gib(refusal['short_by_bytes'])})"}


def _fields_of_flags(values: Mapping[str, str], line: str) -> dict[str, str]:
    """The profile fields behind the flags the message names (flags.field_of), in the message's order."""
    fields = dict.fromkeys(field for flag in re.findall(r"--[\w-]+", values.get("what", line))
                           if (field := field_of(flag)) is not None)
    return {"fields": " / ".join(fields) or "serve.extra_args (no profile field writes it)"}


def _field_of_argument(values: Mapping[str, str], line: str) -> dict[str, str]:
    arg = values.get("arg", "")
    field = field_of(arg)
    if field is None:
        return {"remedy": f"remove {arg} from serve.extra_args"}
    return {"remedy": f"{arg} is written for {field}: leave {field} unset for this build, or set engine.fork "
                      "(and engine.version) to the build you run, so the profile is checked against it before "
                      "a launch"}


def _context_limit(values: Mapping[str, str], line: str) -> dict[str, str]:
    limit = re.search(r"max_context (\d+)", line)
    return {"above": f" above {limit[1]}" if limit else ""}


def _host_port(values: Mapping[str, str], line: str) -> dict[str, str]:
    return {"where": f"{values['host']}:{values['port']}" if "host" in values else f"port {values.get('port')}"}


_FREE_PORT = ("another process holds {where}: stop it (`ss -ltnp 'sport = :{port}'` names it) or set serve.port "
              "to a free port")
_FLAG_FIX = "change {fields} so that: {what}"
_ARTIFACT_PIN = ("pin artifact.revision to the hub commit whose file has the container this build reads "
                 "(artifact.container_revisions lists them per version) and run `ninferkit verify PROFILE`, "
                 "which reads the header before anything launches")

_PAIR_CHECK = ("check the pair before the engine: `nvidia-smi topo -m` must show NV# between the two GPUs of "
               "serve.gpu_devices (`ninferkit probe --profile PROFILE` checks the NVLink of each pair, finding "
               "tensor_parallel_without_nvlink, and reads the kernel log for their Xid errors)")
UNKNOWN_ARGUMENT = r"unknown argument: (?P<arg>\S+)"
"""A build refusing an option it does not have (live: startup-errors/unknown_flag.log)."""

DIAGNOSES: tuple[DiagnosisRule, ...] = (
    # -- the host: the field reports' error table (seed 000 §1.1, §1.7; seed 003 §一.2) --------------
    rule("driver_missing", r"couldn't communicate with the NVIDIA driver",
          "the NVIDIA driver is not installed or not loaded (the card is on the bus: `lspci` shows it)",
          "install the proprietary driver nvidia-driver-580-server (R580 is the last branch for Volta) and "
          "reboot; `ninferkit probe` checks it"),
    rule("open_kernel_module", OPEN_MODULE_REFUSAL.pattern,
          "the open kernel module is loaded; Volta (V100) is supported only by the proprietary module (GSP)",
          "apt purge \"nvidia-*-open\", then install nvidia-driver-580-server (the same branch, not -open)"),
    rule("cuda_runtime_missing", r"(?P<lib>libcu\w*\.so\.\d+): cannot open shared object file|"
          r"cannot open shared object file: (?P<lib2>libcu\w*\.so\.\d+)",
          "a CUDA library the binary links against is missing: the image's CUDA runtime is not the one the "
          "binary was built with (its RUNPATH names /usr/local/cuda-<version>)",
          "set engine.cuda_runtime to the binary's CUDA version (12.8.0 for the sm_70 and sm_86 builds), so "
          "the Dockerfile `ninferkit launch PROFILE --dry-run` writes starts FROM nvidia/cuda:<it>-runtime"),
    rule("compat_libcuda", r"cudaErrorCompatNotSupportedOnDevice",
          "the image's forward-compatibility libcuda was loaded on a GeForce card, which does not support it",
          "delete /usr/local/cuda/compat in the image (set gpu.name to the card: the generated Dockerfile does "
          "it for GeForce cards)"),
    # -- the command line -------------------------------------------------------------------------
    rule("port_in_use", r"(?:failed to bind|cannot bind) (?P<host>[^\s:|]+):(?P<port>\d+)",
          "the listen address {where} is already in use (or not bindable)", _FREE_PORT, _host_port),
    rule("port_in_use", r"server listen failed \| (?P<host>[^\s:|]+):(?P<port>\d+)",
          "the listen address {where} is already in use (or not bindable)", _FREE_PORT, _host_port),
    rule("port_in_use", r"server status=failed phase=bind host=\"?(?P<host>[^\s\"]+)\"? port=(?P<port>\d+)",
          "the listen address {where} is already in use (or not bindable)", _FREE_PORT, _host_port),
    rule("unknown_argument", UNKNOWN_ARGUMENT,
          "this ninfer-serve build has no option {arg} (options differ per fork and version)",
          "{remedy}; `ninfer-serve --help` lists the build's options", _field_of_argument),
    # -- the artifact -------------------------------------------------------------------------------
    rule("artifact_missing", r"\bopen (?P<path>\S+): (?P<why>No such file or directory|Permission denied|"
          r"Is a directory)",
          "the artifact {path} cannot be opened ({why})",
          "run `ninferkit verify PROFILE` to download and verify it, or point artifact.local_dir and "
          "artifact.filename at the file (with serve.docker: the folder mounted into the container)"),
    rule("artifact_container_mismatch", CONTAINER_REFUSAL,
          "the file's header is not a container this build reads (it reads {which}): a container v3 file (a "
          "hub's `main` was moved to v3) or not a NInfer artifact at all; `ninferkit verify --file PATH` says "
          "which", _ARTIFACT_PIN),
    rule("artifact_v2_on_v3_reader", r"NInfer v2 artifact is not supported",
          "this build reads container v3 only and was given a v2 file",
          "pin artifact.revision to a v3 file of the artifact, or upgrade the file with "
          "tools/upgrade_ninfer_v2_to_v3.py"),
    rule("artifact_v1_on_v2_reader", r"NInfer artifact v1 is no longer supported",
          "this build reads container v2 and was given a v1 file",
          "pin artifact.revision to a v2 file, or migrate it with python3 -m tools.artifact.migrate_v1_to_v2"),
    rule("artifact_not_v3", r"expected NInfer v3 entry magic",
          "this build reads container v3 only and the file is not one", _ARTIFACT_PIN),
    rule("artifact_extension", r"NInfer accepts only \.ninfer artifacts",
          "the model path does not end in .ninfer", "point artifact.filename at the .ninfer file"),
    rule("artifact_corrupt", r"(?P<what>artifact is shorter than the v1 prefix|json_bytes must be positive|"
          r"declared JSON or payload start extends beyond the file|invalid JSON directory|"
          r"directory root has missing or extra members|extends beyond the file|overlaps or is out of order)",
          "the artifact file is truncated or corrupt ({what})",
          "download it again and check its size and sha256 (`ninferkit verify PROFILE`; artifact.size_bytes "
          "and artifact.sha256 pin them)"),
    rule("no_target", r"artifact (?:model_id|identity) '(?P<id>[^']+)' has no registered target",
          "this build has no target for the model {id} on this GPU",
          "use an artifact this fork serves (artifact.repo / artifact.filename), or set engine.fork to a fork "
          "that has the target"),
    rule("wrong_gpu", r"family runtime requires compute capability (?P<cc>[\d.]+[^\n]*)",
          "this build requires compute capability {cc}; the GPU is another architecture",
          "use the fork built for this GPU (engine.fork; sm_70 V100, sm_86 RTX 3090, sm_120 RTX 50xx) and set "
          "gpu.arch to it"),
    # -- tensor parallel: the TP2 forks' own refusals (tests/data/ninfer-tp2/refusals.json) ------------
    rule("tp_peer_copy_corrupt", r"peer transport startup: host-staged validation failed: (?P<detail>[^\n]*)",
          "the TP2 engine's startup self-check copied a known pattern between its two GPUs and got other bytes back "
          "({detail}): over direct P2P (when the driver offers it) and then through host-staged copies too, so the "
          "pair cannot move data correctly and the engine refuses to serve",
          _PAIR_CHECK + "; a translated IOMMU (/sys/bus/pci/devices/<bus id>/iommu_group/type reads DMA or DMA-FQ) "
          "is where the fork saw V100s drop DMA writes (its source says so): boot with iommu=pt; the same refusal "
          "after that is the driver (reinstall nvidia-driver-580-server) or the hardware of the pair"),
    rule("tp_peer_startup_failed", r"peer transport startup: (?P<operation>[^:\n]+): (?P<error>cuda\w+): "
          r"(?P<text>[^\n]*)",
          "a CUDA call of the TP2 engine's startup check of its two GPUs failed ({operation}: {error}, {text})",
          "both GPUs of serve.gpu_devices must be visible to the engine (CUDA_VISIBLE_DEVICES, or the container's "
          "--gpus, names both), idle and healthy (`nvidia-smi`); " + _PAIR_CHECK),
    rule("tp_devices_mismatch", r"(?P<what>--devices must list exactly --tp device ids|--devices must list 1 or 2 "
          r"device ids|--tp 2 requires (?:an explicit --devices list|--devices A,B)|EngineOptions\.devices size "
          r"must equal tp|ExecutionContext requires distinct device ids, got device \d+ twice)",
          "the device list does not match the tensor-parallel width ({what}): the engine takes one GPU per rank, "
          "--tp 2 --devices A,B with A and B two different GPUs",
          "list exactly serve.tensor_parallel different GPU indices in serve.gpu_devices (seed 004: tensor_parallel: "
          "2, gpu_devices: [0, 1], two GPUs joined by NVLink to each other), and leave --tp, --devices and --device "
          "out of serve.extra_args: the profile writes them"),
    rule("tp_primary_device_conflict", r"--device and --devices disagree on the (?:primary|rank 0) device",
          "--device names another GPU than the first of --devices (rank 0, which admits and samples)",
          "remove --device from serve.extra_args: at tensor parallel the first index of serve.gpu_devices is rank 0 "
          "(ninferkit writes --device only without tensor parallel)"),
    rule("tp_mixed_gpus", r"ExecutionContext requires all devices to share the same compute capability \(device "
          r"(?P<first>\d+) is (?P<first_arch>sm_\d+), device (?P<second>\d+) is (?P<second_arch>sm_\d+)\)",
          "the two GPUs are different architectures (GPU {first} is {first_arch}, GPU {second} is {second_arch}); "
          "a TP2 engine splits one model over two GPUs of one compute capability",
          "name two GPUs of the same model in serve.gpu_devices (`nvidia-smi --query-gpu=index,name,compute_cap "
          "--format=csv` lists them), of the architecture the build is for (engine.build.cuda_arch)"),
    rule("tp_unsupported", r"(?P<what>--tp 2 does not support the DFlash speculative backend|tensor-parallel "
          r"execution supports ordinary, MTP and DFlash2 generation and causal scoring only \(no DFlash\))",
          "this TP2 build has no tensor-parallel DFlash ({what})",
          "set serve.spec.method to mtp (the fork's own advice: --tp 1, --spec mtp or --spec none), or "
          "serve.tensor_parallel to 1"),
    rule("tp_unsupported", r"(?P<what>--tp 2 does not support Vision in this build)",
          "this TP2 build has no tensor-parallel Vision ({what})",
          "set serve.vision to false, or serve.tensor_parallel to 1"),
    rule("tp_unsupported", r"(?P<what>tensor-parallel DFlash2 requires the optimized proposal head)",
          "{what}: the DFlash2 drafter runs whole on rank 0", "set serve.spec.lm_head_draft to true"),
    rule("tp_unsupported", r"(?P<what>tensor-parallel attention supports only bf16 and int8 KV caches)",
          "{what}: the KV dtype asked for has no tensor-parallel attention in this build",
          "set serve.kv.dtype to int8 (seed 004's launcher default) or bf16"),
    rule("tp_unsupported", r"(?P<what>tensor-parallel execution requires Host state slots and Host KV capacity of 0|"
          r"--host-state-slots must be 0 with --tp 2|--host-kv-mib must be 0 with --tp 2)",
          "{what}: rank 1's KV pages and states have no host tier, so a tensor-parallel server keeps none",
          "remove --host-state-slots and --host-kv-mib from serve.extra_args (at --tp 2 both default to 0)"),
    # -- memory (IF §3.1, capacity-model.md §1.4): the numbers come from the refusal itself --------
    rule("insufficient_memory", r"(?:minimum Engine runtime reservation requires|automatic KV headroom"
          r"(?:/slack floor)? requires)",
          "serve.kv.capacity `auto` could not size a pool: the minimum runtime plus auto's 1 GiB headroom does "
          "not fit in what the weights leave free{numbers}",
          "set serve.kv.capacity to an explicit pool (explicit keeps no headroom; seed 000 §1.7), sized by "
          "`ninferkit capacity fit LOG`, or lower serve.max_concurrency", _refusal_numbers),
    rule("insufficient_memory", r"requested Engine runtime reservation requires",
          "the explicit KV pool does not fit in what the weights leave free{numbers}",
          "lower serve.kv.capacity (or serve.max_context x serve.max_concurrency): `ninferkit capacity fit LOG` "
          "gives the largest pool that fits", _refusal_numbers),
    rule("insufficient_memory", r"model weights and requested context require",
          "the weights and this context do not fit in free GPU memory{numbers}",
          "lower serve.max_context (this build sizes one sequence for it)", _refusal_numbers),
    rule("insufficient_memory", r"model weights require [\d,]+ bytes",
          "the weights alone do not fit in free GPU memory{numbers}",
          "free the GPU (another process holds memory: `nvidia-smi`), or use a smaller artifact or a GPU with "
          "more memory (gpu.memory_gib)", _refusal_numbers),
    rule("insufficient_memory", r"CUDA Graph preparation consumed",
          "CUDA graph capture took more memory than the runtime planned for it{numbers}",
          "add --no-cuda-graph to serve.extra_args, or lower serve.max_concurrency", _refusal_numbers),
    rule("pinned_host_memory", r"cudaMallocHost failed",
          "pinned host memory could not be allocated (host KV / state tiers)",
          "lower --host-kv-mib / --host-state-slots in serve.extra_args, or add host RAM"),
    # -- option values (live: startup-errors/*.log; IF §3.1) ---------------------------------------
    rule("kv_capacity_too_small", r"kv[_-]capacity must be at least (?:--)?max[_-]context",
          "the KV pool is smaller than one request's context",
          "set serve.kv.capacity to at least serve.max_context (or lower serve.max_context)"),
    rule("kv_capacity_range", r"kv_capacity is outside the usable range for max_context and max_concurrency",
          "the KV pool's 64-token page count is outside [max(L, C), C x L] (L = ceil(max_context / 64), C = "
          "max_concurrency): a pool above max_context x max_concurrency can never be used",
          "set serve.kv.capacity between serve.max_context and serve.max_context x serve.max_concurrency, or "
          "raise serve.max_concurrency"),
    rule("option_invalid", r"(?P<what>--[\w-]+(?: [\w|]+)? (?:must|requires?|cannot)[^\n]*)",
          "the engine refused an option value: {what}", _FLAG_FIX, _fields_of_flags),
    rule("option_invalid", r"(?P<what>max_context exceeds the variant native context capacity)",
          "the engine refused an option value: {what}",
          "lower serve.max_context to the model's native context"),
    rule("option_invalid", r"(?P<what>DFlash is not supported by this target)",
          "the engine refused an option value: {what}", "set serve.spec.method to mtp"),
    rule("request_log_open", r"(?P<what>failed to open request JSONL log for append|request JSONL log must not "
          r"overwrite the model artifact)[^\n]*",
          "the request log cannot be written ({what})",
          "point serve.request_log_jsonl at a writable file in an existing folder, not the artifact"),
    rule("warmup_failed_continuing", r"warmup failed \(continuing\):?(?P<detail>[^\n]*)",
         "the one-request warmup after loading failed:{detail}; this build logs it and goes on serving (G0/G1)",
         "read the error: the first real request may fail the same way"),
    rule("warmup_failed", r"warmup failed(?P<detail>[^\n]*)",
          "the one-request warmup after loading failed{detail} (fatal in G2/G3 builds, logged and ignored in "
          "G0/G1)",
          "read the lines above it: usually memory (lower serve.kv.capacity) or a CUDA error"),
    # -- what a build reports without naming the reason (G2/G3) -----------------------------------
    rule("startup_failed", r"startup failed \| (?P<phase>[^|\n]+?) \| (?P<after>[^|\n]+)",
          "startup stopped while {phase}, {after} in",
          "the error line after it gives the reason; with none, set serve.log_level: debug and start again"),
    rule("engine_failed", r"server failed during (?P<when>startup|serving) \| (?P<detail>[^\n]+)",
          "the engine stopped during {when}: {detail}",
          "no rule of ninferkit knows this message; read the lines before it (serve.log_level: debug prints "
          "more)"),
    rule("engine_failed", r"server status=failed phase=(?P<when>startup|serving)(?P<detail>[^\n]*)",
          "the engine stopped during {when}:{detail}",
          "no rule of ninferkit knows this message; read the lines before it (serve.log_level: debug prints "
          "more)"),
    # -- one request answered with an error (REQUEST_ERRORS) ---------------------------------------
    rule("request_queue_timeout", r"request[_ ]queue[_ ]timeout|expired before submission|"
          r"while waiting for admission",
          "a queued request was not admitted within the pending timeout (30 s unless set); prefill runs one "
          "request at a time, so a long prompt ahead in the queue holds later ones (HTTP 503)",
          "raise serve.pending_timeout_ms (the field reports use 600000)"),
    rule("context_length_exceeded", r"context[_ ]length[_ ]exceeded|prepared prompt (?:has \d+ tokens, "
          r"exceeding|exceeds) Engine (?:max_context|context capacity)",
          "prompt plus output does not fit the server's max_context (HTTP 400)",
          "send a shorter prompt or fewer max_tokens, or raise serve.max_context{above} (serve.kv.capacity "
          "must hold it)", _context_limit),
    rule("server_overloaded", r"server[_ ]overloaded|inference request queue is full",
          "max_concurrency + max_pending_requests requests were already in flight (HTTP 429)",
          "send fewer concurrent requests or raise serve.max_pending_requests"),
    rule("model_not_found", r"model[_ ]not[_ ]found|model '(?P<model>[^']*)' not found",
          "the request's model is not the server's public id (HTTP 404)",
          "send model = the server's id (serve.model_id; /v1/models lists it)"),
    rule("vision_disabled", r"vision[_ ]disabled|Vision is disabled for this server",
          "the request carries images but the server runs without --vision (HTTP 400)",
          "set serve.vision: true, or send text only"),
    rule("invalid_api_key", r"invalid[_ ]api[_ ]key|missing or invalid API key",
          "the request has no or a wrong API key (HTTP 401)",
          "export the variable serve.api_key_env names with the server's key"),
    # -- the engine after it started -----------------------------------------------------------------
    rule("service_unavailable", r"service[_ ]unavailable|inference engine is unavailable",
          "the engine stopped or failed after startup (HTTP 503)",
          "read the server log before this line; start the server again (`ninferkit launch PROFILE`)"),
)

REQUEST_ERRORS = frozenset({"request_queue_timeout", "context_length_exceeded", "server_overloaded",
                            "model_not_found", "vision_disabled", "invalid_api_key", "warmup_failed_continuing"})
"""Codes of one request answered with an error (the warmup's included): the server itself goes on serving."""


CONTAINER_REFUSALS = frozenset({"artifact_container_mismatch", "artifact_v2_on_v3_reader"})


def pin_advice(profile: Profile, accepted: frozenset[int] | None) -> str | None:
    """The revision to pin for a container refusal, from artifact.container_revisions, as `verify` names it
    (artifact/compat.py): the newest container version this build reads that the profile has a revision for
    (seed 000 §1.7: "钉 revision `204e3d92c30d`（v2 容器）"). None where the profile records none."""
    pins = profile.artifact.container_revisions
    pinned = [(version, pins[version]) for version in sorted(accepted or (), reverse=True) if version in pins]
    if not pinned:
        return None
    version, revision = pinned[0]
    if profile.artifact.revision == revision:
        return (f"pin artifact.revision to {revision[:12]} (container v{version}): the profile already pins it, so "
                f"the file the engine read is not that revision's; `ninferkit verify PROFILE` checks "
                f"{profile.artifact.filename}'s sha256 and header and downloads the pinned file")
    return (f"pin artifact.revision to {revision[:12]} (container v{version}, artifact.container_revisions; this "
            "build reads v" + ", v".join(str(v) for v in sorted(accepted or ())) + "), then `ninferkit verify "
            "PROFILE`, which reads the header before anything launches")


PAIR_CODES = frozenset({"tp_peer_copy_corrupt", "tp_peer_startup_failed"})
DEVICE_LIST_CODES = frozenset({"tp_devices_mismatch", "tp_primary_device_conflict"})
_DEVICE_FLAGS = ("--tp", "--devices", "--device")


def tensor_parallel_advice(code: str, fix: str, profile: Profile) -> str | None:
    """A TP2 refusal's fix with the profile's pair: the GPUs a self-check failure is about, and whether the profile's
    serve.tensor_parallel and serve.gpu_devices agree (then the engine's flags came from serve.extra_args or from a
    command line of its own). None for the other codes."""
    serve = profile.serve
    parallel, devices = serve.tensor_parallel_size(), serve.gpu_devices
    if code in PAIR_CODES:
        pair = (f"GPUs {' and '.join(map(str, devices))} (serve.gpu_devices)" if devices else
                f"the first {parallel} GPUs (serve.gpu_devices is unset)")
        return f"{fix}; this profile's pair is {pair}"
    if code not in DEVICE_LIST_CODES:
        return None
    given = [arg for arg in serve.extra_args if arg in _DEVICE_FLAGS]
    if devices is None and parallel == 1:
        writes = "no device flag"
    elif devices is not None and parallel == 1 and len(devices) == 1:
        writes = f"--device {devices[0]}"
    elif devices is not None and len(devices) == parallel and len(set(devices)) == parallel:
        writes = f"--tp {parallel} --devices {','.join(map(str, devices))}"
    else:
        return (f"{fix}; this profile has serve.tensor_parallel {parallel} and serve.gpu_devices {devices}, which do "
                "not agree")
    where = (f"serve.extra_args adds {' '.join(given)}: remove it" if given else
             "the engine was started with other flags than this profile's (`ninferkit launch PROFILE --dry-run` prints "
             "the profile's command)")
    return (f"the profile's serve.tensor_parallel {parallel} and serve.gpu_devices {devices} agree (ninferkit writes "
            f"{writes} from them), so {where}")
