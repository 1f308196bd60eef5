"""NInfer's `ninfer-serve`: the engine the runbook exists for, across its four interface generations.

NInfer changed its command line, stderr format, request-log schema and artifact container four
times in 2026 (G0-G3, reference/ninfer-interface.md section 0), and forks were cut at different
points. So everything here is keyed by generation, plus a small table of what particular forks
add (tensor parallel, extra KV dtypes, wider draft windows, other container readers). The profile
names the generation (`engine.generation`) and fork (`engine.fork`); `detect_generation` tells it
from `--help` output or the first stderr lines when the profile does not.

Validation happens before anything runs, because a wrong flag costs a multi-minute model load
before NInfer says no. Server-side per-request truth is the `--request-log-jsonl` file
(`ninferkit.engines.ninfer_request_log`); responses carry `usage` (G2+: cached and reasoning
tokens) and, in G3, llama.cpp-style `timings`.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ninferkit.capacity.architecture import KVLayout, ninfer_kv_layout
from ninferkit.capacity.pool import PoolRule
from ninferkit.engines import register
from ninferkit.engines.base import EngineAdapter, llama_cpp_timings, rule
from ninferkit.engines.ninfer_request_log import JOIN_FIELDS, join_client_rows, read_events, request_rows
from ninferkit.engines.ninfer_request_log import SERVER_FIELDS as LOG_FIELDS
from ninferkit.errors import NinferkitError, ProfileError, ToolMissing
from ninferkit.params.profile import Profile
from ninferkit.units import GIB, MIB

GENERATIONS = ("G0", "G1", "G2", "G3")
PAGE_TOKENS = 64  # kPagedKVPageSize: KV capacity is counted in 64-token page groups (G1+)
NATIVE_CONTEXT = 262_144  # Qwen3.6/3.8 targets: `max_context exceeds the variant native context capacity`
DEFAULT_PENDING_TIMEOUT_MS = 30_000
LONG_CONTEXT_TOKENS = 32_768  # from here a serial prefill ahead in the queue can outlast 30 s
MAX_CONCURRENCY = 8

# Options per generation (ninfer-interface.md sections 1.1-1.3; G0 also has --spec since f007ccc).
_CORE_OPTIONS = frozenset({
    "--host", "--port", "--api-key", "--model-id", "--max-context", "--prefill-chunk", "--device",
    "--max-request-mib", "--request-log-jsonl", "--kv-dtype", "--spec", "--draft-tokens", "--lm-head-draft",
    "--default-max-tokens", "--vision", "--no-cuda-graph", "--no-prefix-reuse", "--no-thinking", "--cors",
    "--temperature", "--top-p", "--top-k", "--presence-penalty", "--frequency-penalty", "--seed", "--greedy",
})
_POOL_OPTIONS = frozenset({
    "--min-p", "--kv-capacity", "--max-concurrency", "--max-pending-requests", "--pending-timeout-ms",
    "--log-stats-interval-ms", "--response-store-max-records", "--response-store-max-mib", "--preserve-thinking",
})
_CONTEXT_CACHE_OPTIONS = frozenset({
    "--device-state-slots", "--host-state-slots", "--host-kv-mib", "--max-private-continuations",
    "--max-shared-prefixes", "--max-long-anchors-per-continuation", "--media-cache-mib", "--media-live-mib",
    "--media-preprocess-threads", "--context-cost-presets", "--default-thinking-budget",
})
_G2_ONLY_OPTIONS = frozenset({
    "--api-key-file", "--kv-slack-floor-mib", "--desktop-reserve-gib", "--desktop-reserve-mib",
    "--clamp-concurrency-to-pool", "--repetition-penalty", "--gdn-state-dtype", "--output-head-dtype",
    "--token-embedding-dtype", "--no-qsa-prefill-mma", "--tolerant-tool-calls",
})
_G3_ONLY_OPTIONS = frozenset({"--log-level", "--vram-headroom-mib", "--chat-template", "--max-vision-tokens"})
OPTIONS: dict[str, frozenset[str]] = {
    "G0": _CORE_OPTIONS,
    "G1": _CORE_OPTIONS | _POOL_OPTIONS,
    "G2": _CORE_OPTIONS | _POOL_OPTIONS | _CONTEXT_CACHE_OPTIONS | _G2_ONLY_OPTIONS,
    "G3": _CORE_OPTIONS | _POOL_OPTIONS | _CONTEXT_CACHE_OPTIONS | _G3_ONLY_OPTIONS,
}
# What forks add on top of their generation (section 1.4, 1.3, 8).
FORK_OPTIONS: dict[str, frozenset[str]] = {
    "ValerioDolci/ninfer-tp2": frozenset({"--tp", "--devices", "--vision-device", "--no-tp-mailbox",
                                          "--embedding-host", "--turn-anchors"}),
    "zsq13767593046-bit/ninfer-2080ti-22g-tp2": frozenset({"--tp", "--devices", "--rope", "--yarn-factor",
                                                           "--yarn-origin"}),
    "plus1998/NInfer-V100-Duo": frozenset({"--tp", "--devices", "--vision-max-tokens"}),
    "Don-Chad/ninfer-3090": frozenset({"--devices", "--stage-layers", "--vision-max-merged",
                                       "--no-exit-on-engine-failure", "--slot-save-path"}),
    "Flo5k5/ninfer-v100-sm70": frozenset({"--lookup-policy", "--lookup-min-suffix", "--lookup-max-proposal"}),
}
TENSOR_PARALLEL_FORKS = ("ValerioDolci/ninfer-tp2", "zsq13767593046-bit/ninfer-2080ti-22g-tp2",
                         "plus1998/NInfer-V100-Duo")

KV_DTYPES: dict[str, tuple[str, ...]] = {
    "G0": ("bf16", "int8"),
    "G1": ("bf16", "int8"),
    "G2": ("bf16", "int8", "fp8", "nvfp4", "k8v4"),
    "G3": ("bf16", "int8", "fp8", "nvfp4", "k8v4"),
}
FORK_KV_DTYPES: dict[str, tuple[str, ...]] = {"Don-Chad/ninfer-3090": ("rk8v4", "rk4v4")}
# Architecture limits: Volta runs bf16 and int8 only (field-reports.md step 4; capacity-model.md 1.5),
# except forks that ship FP8 KV on sm_70 (section 8); fp8 KV is rejected on sm_86 (field-reports.md).
ARCH_KV_ONLY: dict[str, frozenset[str]] = {"sm_70": frozenset({"bf16", "int8"})}
ARCH_KV_REJECTED: dict[str, frozenset[str]] = {"sm_86": frozenset({"fp8"})}
FORK_ARCH_KV_EXTRA: dict[tuple[str, str], frozenset[str]] = {
    ("Flo5k5/ninfer-v100-sm70", "sm_70"): frozenset({"fp8"}),
    ("mylordmonkeyman/ninfer-v100", "sm_70"): frozenset({"fp8"}),
}
TP2_KV_REJECTED = frozenset({"fp8", "k8v4"})  # ValerioDolci docs/serving.md "Two GPUs"

SPEC_METHODS: dict[str, tuple[str, ...]] = {
    "G0": ("mtp", "dflash"), "G1": ("mtp", "dflash"), "G2": ("mtp", "dflash", "dflash2"),
    "G3": ("mtp", "dflash", "dflash2"),
}
DRAFT_RANGE: dict[str, tuple[int, int]] = {"mtp": (1, 5), "dflash": (1, 15), "dflash2": (1, 15)}
FORK_DRAFT_RANGE: dict[str, dict[str, tuple[int, int]]] = {
    "Flo5k5/ninfer-v100-sm70": {"mtp": (1, 7)},
    "Don-Chad/ninfer-3090": {"mtp": (1, 15)},
}

# Container versions each reader accepts (section 6, "Forks differ in what they accept"). The
# reference does not state G2's reader; v2 is what the field report's G2-era V100 system loads.
CONTAINER_VERSIONS: dict[str, frozenset[int]] = {
    "G0": frozenset({1}), "G1": frozenset({2}), "G2": frozenset({2}), "G3": frozenset({3}),
}
FORK_CONTAINER_VERSIONS: dict[str, frozenset[int]] = {
    "Don-Chad/ninfer-3090": frozenset({1, 2}),
    "JGamboa/ninfer-4090-windows": frozenset({2, 3}),
    "ww485000/ninfer-windows-v100": frozenset({2, 3}),
    "Flo5k5/ninfer-v100-sm70": frozenset({3}),
    "geoffwatts/ninfer-v100": frozenset({2}),
}

APIS: dict[str, frozenset[str]] = {
    "G0": frozenset({"chat", "messages"}),
    "G1": frozenset({"chat", "messages", "responses"}),
    "G2": frozenset({"chat", "messages", "responses"}),
    "G3": frozenset({"chat", "messages", "responses"}),
}

# CUDA runtime of the Docker base per architecture: sm_70 builds need 12.8 (CUDA 13 dropped
# offline compilation for Volta), the 3090/2080 Ti forks use 12.8, upstream sm_120a needs 13.1.
CUDA_RUNTIME_BY_ARCH = {"sm_70": "12.8.0", "sm_75": "12.8.0", "sm_86": "12.8.0", "sm_120": "13.1.0"}


def detect_generation(text: str) -> str:
    """The interface generation from `ninfer-serve --help` output or the first stderr lines.

    Rules from ninfer-interface.md section 0: G3 forks add `--log-level` and log
    `YYYY-MM-DD HH:MM:SS.mmm  INFO  starting engine`; G2 has `--device-state-slots` and logs
    `[...] [info] [ninfer-serve] startup phase=`; G1 has `--kv-capacity` and logs
    `[...] [info] ninfer-serve: loading model...`; G0 has none of them.

    Raises NinferkitError when the text looks like neither (e.g. not NInfer at all).
    """
    if "--log-level" in text or _G3_LINE.search(text):
        return "G3"
    if "--device-state-slots" in text or re.search(r"\[ninfer-serve\] (?:startup|engine|server) ", text):
        return "G2"
    if "--kv-capacity" in text or re.search(r"^\[[^]]+\] \[\w+\] ninfer-serve: ", text, re.MULTILINE):
        return "G1"
    if "--max-context" in text or re.search(r"^ninfer-serve: ", text, re.MULTILINE):
        return "G0"
    raise NinferkitError("cannot tell the NInfer generation from this text (no known flag or log prefix); "
                         "set engine.generation (G0..G3) in the profile")


_G3_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}  (?:TRACE|DEBUG|INFO|WARN|ERROR|FATAL)\s",
                      re.MULTILINE)
_PREFIXES = (
    re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}  (?:TRACE|DEBUG|INFO|WARN|ERROR|FATAL)\s+"),  # G3
    re.compile(r"^\[[^]]+\] \[\w+\] \[ninfer-serve\] "),  # G2 spdlog
    re.compile(r"^\[[^]]+\] \[\w+\] ninfer-serve: "),  # G1 console
    re.compile(r"^ninfer-serve: "),  # G0
)


def message(line: str) -> str:
    """A log line without its generation's timestamp/level prefix."""
    line = line.rstrip("\r\n")
    for prefix in _PREFIXES:
        found = prefix.match(line)
        if found:
            return line[found.end():]
    return line


# ---------------------------------------------------------------------------------------------
# Numbers as NInfer prints them
# ---------------------------------------------------------------------------------------------

_UNITS = {"B": 1, "KiB": 1024, "MiB": MIB, "GiB": GIB}
_BYTES = r"(?P<{name}>[\d,]+(?:\.\d+)?) (?P<{name}_unit>B|KiB|MiB|GiB)\b"


def byte_value(number: str, unit: str) -> tuple[int, int]:
    """(bytes, resolution in bytes) of a rounded value such as ('7.12', 'GiB').

    The resolution is one unit of the last printed digit (0.01 GiB for '7.12 GiB'), so the
    true value lies within +- half of it.
    """
    number = number.replace(",", "")
    decimals = len(number.partition(".")[2])
    scale = _UNITS[unit]
    return round(float(number) * scale), round(scale / 10**decimals)


def _put_bytes(out: dict[str, Any], key: str, number: str, unit: str) -> None:
    out[key], out[f"{key}_resolution_bytes"] = byte_value(number, unit)


def count(text: str) -> int:
    """'262,144' -> 262144 (G3 prints counts with thousands commas)."""
    return int(text.replace(",", ""))


def rate(text: str) -> float:
    """'2.34k' -> 2340.0; '71.2' -> 71.2 (G3 tok/s)."""
    text = text.replace(",", "")
    return float(text[:-1]) * 1000 if text.endswith("k") else float(text)


_DURATION_PART = re.compile(r"(?P<v>\d+(?:\.\d+)?)\s*(?P<u>us|ms|h|m|s)")
_DURATION_SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_s(text: str) -> float:
    """G3 durations: '850 us', '12.3 ms', '4.5s', '3m 2.1s', '1h 5m' -> seconds."""
    parts = list(_DURATION_PART.finditer(text))
    if not parts:
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(p["v"]) * _DURATION_SECONDS[p["u"]] for p in parts)


def key_values(text: str) -> dict[str, str]:
    """G2 spdlog `key=value key="quoted value"` pairs (unknown keys are kept, not errors)."""
    out = {}
    for found in re.finditer(r'(?P<k>[\w.-]+)=(?:"(?P<q>(?:[^"\\]|\\.)*)"|(?P<v>\S*))', text):
        out[found["k"]] = found["q"] if found["q"] is not None else found["v"]
    return out


# ---------------------------------------------------------------------------------------------
# Startup ledger, per generation
# ---------------------------------------------------------------------------------------------

_G1_CAPACITY = re.compile(r"^KV capacity (?P<mode>auto|explicit) (?P<rest>.*)$")
_G1_VALUE = re.compile(r"(?P<k>[\w-]+)=(?P<v>[\d.,]+)(?: (?P<u>B|KiB|MiB|GiB|tokens)\b)?"
                       r"(?:/(?P<v2>[\d.,]+)(?: (?P<u2>B|KiB|MiB|GiB)\b)?)?")
_G1_BYTE_KEYS = {"runtime": "runtime_bytes", "free-after-weights": "free_after_weights_bytes",
                 "free-after-startup": "free_after_startup_bytes", "headroom": "headroom_bytes",
                 "slack": "slack_bytes"}
_LISTEN_OLD = re.compile(r"^listening on (?P<url>http://\S+) \(model id: (?P<model>[^,]+), auth: (?P<auth>\w+)\)")
_G2_CAPACITY_KEYS = {"kv_capacity_tokens": "kv_tokens", "kv_page_groups": "kv_pages",
                     "kv_max_page_groups": "kv_max_pages"}
_G2_CAPACITY_BYTES = {"runtime_reservation_bytes": "runtime_bytes",
                      "available_after_weights_bytes": "free_after_weights_bytes",
                      "available_after_startup_bytes": "free_after_startup_bytes",
                      "kv_headroom_bytes": "headroom_bytes", "planned_slack_bytes": "slack_bytes",
                      "cuda_graph_allowance_bytes": "graphs_allowance_bytes"}
_G3_KV = re.compile(r"^KV (?P<tokens>[\d,]+) tokens, (?P<dtype>[\w-]+), (?P<mode>auto|explicit)$")
_G3_BYTES_SEGMENT = re.compile(r"^(?P<label>[A-Za-z ]+?) " + _BYTES.format(name="v")
                               + r"(?:/" + _BYTES.format(name="w") + ")?$")
_G3_MEMORY_KEYS = {"after weights": "free_after_weights_bytes", "after startup": "free_after_startup_bytes",
                   "headroom": "headroom_bytes", "slack": "slack_bytes"}


def _ledger_g0_g1(msg: str, out: dict[str, Any]) -> None:
    if found := re.match(r"^model loaded in (?P<s>[\d.e+-]+) s", msg):
        out["ready_s"] = float(found["s"])
    elif found := _LISTEN_OLD.match(msg):
        out.update(listen_url=found["url"], model_id=found["model"], auth=found["auth"])
    elif found := re.match(r"^runtime (?P<v>\S+)$", msg):
        out["runtime_version"] = found["v"]
    elif found := _G1_CAPACITY.match(msg):
        out["kv_capacity_mode"] = found["mode"]
        for item in _G1_VALUE.finditer(found["rest"]):
            key, value, unit = item["k"], item["v"], item["u"]
            if key == "resolved":
                out["kv_tokens"] = count(value)
            elif key == "pages":
                out["kv_pages"], out["kv_max_pages"] = count(value), count(item["v2"])
            elif key in _G1_BYTE_KEYS and unit in _UNITS:
                _put_bytes(out, _G1_BYTE_KEYS[key], value, unit)
            elif key == "graphs" and unit in _UNITS and item["u2"] in _UNITS:
                _put_bytes(out, "graphs_observed_bytes", value, unit)
                _put_bytes(out, "graphs_allowance_bytes", item["v2"], item["u2"])


def _ledger_g2(msg: str, out: dict[str, Any]) -> None:
    values = key_values(msg)
    if msg.startswith("engine status=ready"):
        if "host_to_device_bytes" in values:
            out["weights_bytes"], out["weights_bytes_resolution_bytes"] = int(values["host_to_device_bytes"]), 1
        if "target_load_ms" in values:
            out["ready_s"] = float(values["target_load_ms"]) / 1000
        for key in ("model_id", "weights_id", "target"):
            if key in values:
                out[key] = values[key]
    elif msg.startswith("engine capacity "):
        if "kv_capacity_mode" in values:
            out["kv_capacity_mode"] = values["kv_capacity_mode"]
        for source, key in _G2_CAPACITY_KEYS.items():
            if source in values:
                out[key] = int(values[source])
        for source, key in _G2_CAPACITY_BYTES.items():
            if source in values:
                out[key], out[f"{key}_resolution_bytes"] = int(values[source]), 1
    elif msg.startswith("server status=ready"):
        out["listen_url"] = f"http://{values.get('host')}:{values.get('port')}"
        out["auth"] = "bearer" if values.get("auth_enabled") == "true" else "disabled"
        if "model_id" in values:
            out["model_id"] = values["model_id"]
    elif msg.startswith("startup phase=serve-warmup status=complete") and "duration_ms" in values:
        out["warmup_s"] = float(values["duration_ms"]) / 1000


def _ledger_g3(msg: str, out: dict[str, Any]) -> None:
    head, _, tail = msg.partition(" | ")
    segments = [segment.strip() for segment in tail.split(" | ")] if tail else []
    if head == "engine ready":
        if segments:
            out["model_name"] = segments[0]
        for segment in segments[1:]:
            if segment.startswith("total "):
                out["ready_s"] = duration_s(segment[6:])
            elif found := re.match(r"^weights " + _BYTES.format(name="v") + "$", segment):
                _put_bytes(out, "weights_bytes", found["v"], found["v_unit"])
            elif segment.startswith("CUDA sync "):
                out["cuda_sync"] = segment[10:]
    elif head == "weights ready" and segments:
        if found := re.match("^" + _BYTES.format(name="v") + "$", segments[0]):
            out.setdefault("weights_bytes", byte_value(found["v"], found["v_unit"])[0])
            out.setdefault("weights_bytes_resolution_bytes", byte_value(found["v"], found["v_unit"])[1])
        if len(segments) > 1:
            out["weights_load_s"] = duration_s(segments[1])
    elif head == "capacity":
        for segment in segments:
            if found := _G3_KV.match(segment):
                out.update(kv_tokens=count(found["tokens"]), kv_dtype=found["dtype"], kv_capacity_mode=found["mode"])
            elif found := re.match(r"^pages (?P<a>[\d,]+)/(?P<b>[\d,]+)$", segment):
                out["kv_pages"], out["kv_max_pages"] = count(found["a"]), count(found["b"])
            elif found := re.match(r"^runtime " + _BYTES.format(name="v") + "$", segment):
                _put_bytes(out, "runtime_bytes", found["v"], found["v_unit"])
            elif found := re.match(r"^free " + _BYTES.format(name="v") + "$", segment):
                _put_bytes(out, "free_after_startup_bytes", found["v"], found["v_unit"])
    elif head == "memory ledger":
        for segment in segments:
            found = _G3_BYTES_SEGMENT.match(segment)
            if found is None:
                continue
            label = found["label"]
            if label in _G3_MEMORY_KEYS:
                _put_bytes(out, _G3_MEMORY_KEYS[label], found["v"], found["v_unit"])
            elif label == "CUDA graphs" and found["w"]:
                _put_bytes(out, "graphs_observed_bytes", found["v"], found["v_unit"])
                _put_bytes(out, "graphs_allowance_bytes", found["w"], found["w_unit"])
    elif head.startswith("listening on http://") and " " not in head.removeprefix("listening on "):
        out["listen_url"] = head.removeprefix("listening on ")
        for segment in segments:
            if segment.startswith("model "):
                out["model_id"] = segment[6:]
            elif segment.startswith("auth "):
                out["auth"] = segment[5:]
    elif head == "warmup complete" and segments:
        out["warmup_s"] = duration_s(segments[0])
    elif found := re.match(r"^build (?P<v>\S+)$", head):
        out["runtime_version"] = found["v"]


def _finish_ledger(out: dict[str, Any]) -> dict[str, Any]:
    """Derive what a generation does not print but its numbers imply (slack = free after weights - runtime)."""
    if "slack_bytes" not in out and "free_after_weights_bytes" in out and "runtime_bytes" in out:
        out["slack_bytes"] = out["free_after_weights_bytes"] - out["runtime_bytes"]
        out["slack_bytes_resolution_bytes"] = (out["free_after_weights_bytes_resolution_bytes"]
                                               + out["runtime_bytes_resolution_bytes"])
    return out


# ---------------------------------------------------------------------------------------------
# Throughput lines
# ---------------------------------------------------------------------------------------------

_G1_THROUGHPUT = re.compile(
    r"^throughput interval=(?P<interval>[\d.]+)s prefill=(?P<prefill>[\d.]+)tok/s decode=(?P<decode>[\d.]+)tok/s"
    r"(?P<rest>.*)$")


def _throughput_g1(msg: str) -> dict[str, Any] | None:
    found = _G1_THROUGHPUT.match(msg)
    if found is None:
        return None
    values = key_values(found["rest"])
    out: dict[str, Any] = {"interval_s": float(found["interval"]), "prefill_tok_s": float(found["prefill"]),
                           "decode_tok_s": float(found["decode"])}
    for key in ("running", "prefilling", "decode_ready", "waiting"):
        if key in values:
            out[key] = int(values[key])
    batch = values.get("avg_decode_batch")
    out["batch"] = None if batch in (None, "n/a") else float(batch)
    return out


def _throughput_g2(msg: str) -> dict[str, Any] | None:
    if not msg.startswith("throughput interval_ms="):
        return None
    values = key_values(msg)
    interval_s = float(values["interval_ms"]) / 1000
    out: dict[str, Any] = {"interval_s": interval_s}
    for source, key, kind in (("prefill_tokens_per_second", "prefill_tok_s", float),
                              ("decode_tokens_per_second", "decode_tok_s", float),
                              ("computed_prefill_tokens", "prefill_tokens", int),
                              ("committed_decode_tokens", "decode_tokens", int),
                              ("running", "running", int), ("prefilling", "prefilling", int),
                              ("decode_ready", "decode_ready", int), ("waiting", "waiting", int),
                              ("materializing", "materializing", int)):
        if source in values:
            out[key] = kind(values[source])
    batch = values.get("average_decode_batch")
    out["batch"] = None if batch in (None, "n/a", "null") else float(batch)
    if "host_active_ms" in values:
        out["host_s"] = float(values["host_active_ms"]) / 1000
        out["host_pct"] = 100 * out["host_s"] / interval_s if interval_s else None
    return out


def _throughput_g3(msg: str) -> dict[str, Any] | None:
    head, _, tail = msg.partition(" | ")
    if head != "throughput" or not tail:
        return None
    segments = [segment.strip() for segment in tail.split(" | ")]
    # Omitted clauses mean zero (prefill/decode/waiting are printed only when nonzero).
    out: dict[str, Any] = {"interval_s": duration_s(segments[0]), "prefill_tok_s": 0.0, "prefill_tokens": 0,
                           "decode_tok_s": 0.0, "decode_tokens": 0, "prefilling": 0, "decode_ready": 0,
                           "waiting": 0, "batch": None}
    for segment in segments[1:]:
        if found := re.match(r"^(?P<kind>prefill|decode) (?P<rate>[\d.,]+k?) tok/s \((?P<n>[\d,]+) tok\)$", segment):
            out[f"{found['kind']}_tok_s"] = rate(found["rate"])
            out[f"{found['kind']}_tokens"] = count(found["n"])
        elif found := re.match(r"^running (?P<n>\d+)(?: \((?P<detail>[^)]*)\))?$", segment):
            out["running"] = int(found["n"])
            for part in (found["detail"] or "").split(","):
                name, _, number = part.strip().rpartition(" ")
                if name:
                    out[name.replace("-", "_")] = int(number)
        elif found := re.match(r"^(?P<name>waiting|materializing|terminal-pending) (?P<n>\d+)$", segment):
            out[found["name"].replace("-", "_")] = int(found["n"])
        elif found := re.match(r"^batch (?P<b>[\d.]+)$", segment):
            out["batch"] = float(found["b"])
        elif found := re.match(r"^host (?P<pct>[\d.]+)% \((?P<d>[^)]*)\)$", segment):
            out["host_pct"] = float(found["pct"])
            out["host_s"] = duration_s(found["d"])
    return out


# ---------------------------------------------------------------------------------------------
# Per-request "done" lines (rounded; the fallback when no --request-log-jsonl was written)
# ---------------------------------------------------------------------------------------------

_DONE_OLD = re.compile(r"^\[req (?P<id>\d+)\] done (?P<rest>.*)$")
_SPEC_OLD = re.compile(r"speculative=(?P<backend>\w+) (?P<per_round>[\d.]+)tok/round \((?P<pct>[\d.]+)%\)")


def _done_old(msg: str) -> dict[str, Any] | None:
    found = _DONE_OLD.match(msg)
    if found is None:
        return None
    values = key_values(found["rest"])
    out: dict[str, Any] = {"request_id": int(found["id"]), "finish_reason": values.get("finish")}
    for source, key in (("prompt", "prompt_tokens_server"), ("gen", "completion_tokens_server"),
                        ("cache", "cached_tokens_server")):
        if source in values:
            out[key] = int(values[source])
    if values.get("ttft", "").endswith("ms"):
        out["ttft_s_server"] = float(values["ttft"][:-2]) / 1000
    for source, key in (("prefill", "prefill_tok_s_server"), ("decode", "decode_tok_s_server")):
        value = values.get(source, "n/a")
        out[key] = None if value == "n/a" else float(value.removesuffix("tok/s"))
    if values.get("wall", "").endswith("s"):
        out["e2e_s_server"] = float(values["wall"][:-1])
    if "reuse" in values:
        out["prefix_reuse_path"] = values["reuse"]
    if spec := _SPEC_OLD.search(found["rest"]):
        out["acceptance_server"] = float(spec["pct"]) / 100
        out["tokens_per_round_server"] = float(spec["per_round"])
    return out


def _done_g2(msg: str) -> dict[str, Any] | None:
    if not msg.startswith("request id="):
        return None
    values = key_values(msg)
    if values.get("status") != "done":
        return None
    out: dict[str, Any] = {"request_id": int(values["id"])}
    for source, key, kind in (("prompt_tokens", "prompt_tokens_server", int),
                              ("completion_tokens", "completion_tokens_server", int),
                              ("prefix_cache_hit_tokens", "cached_tokens_server", int),
                              ("prefill_tokens_per_second", "prefill_tok_s_server", float),
                              ("decode_tokens_per_second", "decode_tok_s_server", float)):
        if source in values:
            out[key] = kind(values[source])
    for source, key in (("ttft_ms", "ttft_s_server"), ("duration_ms", "e2e_s_server")):
        if source in values:
            out[key] = float(values[source]) / 1000
    if "prefix_reuse_path" in values:
        out["prefix_reuse_path"] = values["prefix_reuse_path"]
    return out


def _done_g3(msg: str) -> dict[str, Any] | None:
    head, _, tail = msg.partition(" | ")
    found = re.match(r"^req#(?P<id>\d+) done$", head)
    if found is None or not tail:
        return None
    segments = [segment.strip() for segment in tail.split(" | ")]
    out: dict[str, Any] = {"request_id": int(found["id"]), "protocol": segments[0]}
    if len(segments) > 1:
        out["finish_reason"] = segments[1]
    for segment in segments[2:]:
        if found := re.match(r"^(?P<k>prompt|output) (?P<n>[\d,]+)$", segment):
            key = "prompt_tokens_server" if found["k"] == "prompt" else "completion_tokens_server"
            out[key] = count(found["n"])
        elif found := re.match(r"^cache (?P<n>[\d,]+)(?: \([\d.]+%(?:, (?P<path>[\w-]+))?\))?$", segment):
            out["cached_tokens_server"] = count(found["n"])
            if found["path"]:
                out["prefix_reuse_path"] = found["path"]
        elif segment.startswith("TTFT "):
            out["ttft_s_server"] = duration_s(segment[5:])
        elif segment.startswith("total "):
            out["e2e_s_server"] = duration_s(segment[6:])
        elif segment.startswith("queue "):
            out["queue_s_server"] = duration_s(segment[6:])
        elif found := re.match(r"^(?P<k>prefill|decode) (?P<rate>[\d.,]+k?) tok/s$", segment):
            out[f"{found['k']}_tok_s_server"] = rate(found["rate"])
        elif found := re.match(r"^(?P<backend>\w+) accepted (?P<a>[\d,]+)/(?P<d>[\d,]+)", segment):
            accepted, drafted = count(found["a"]), count(found["d"])
            out.update(spec_backend_server=found["backend"], accepted_tokens_server=accepted,
                       drafted_tokens_server=drafted, acceptance_server=accepted / drafted if drafted else None)
    return out


# ---------------------------------------------------------------------------------------------
# Memory refusals (exact byte counts in every generation)
# ---------------------------------------------------------------------------------------------

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
# The adapter
# ---------------------------------------------------------------------------------------------

@register
class NInfer(EngineAdapter):
    kind = "ninfer"
    default_binary = "ninfer-serve"
    apis = APIS["G3"]
    capacity_pool = PoolRule(64, GIB, True, "bf16")  # a paged pool shared by all slots; `auto` keeps 1 GiB free
    diagnoses = (
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

    # -- generation, binary ----------------------------------------------------------------

    def generation(self, profile: Profile, binary: Path | None = None) -> str:
        """engine.generation, else detected from `BINARY --help` when a binary is at hand."""
        if profile.engine.generation is not None:
            return profile.engine.generation
        if binary is not None and shutil.which(str(binary)):
            result = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60)
            return detect_generation(result.stdout + result.stderr)
        raise ProfileError("engine.generation is not set and no ninfer-serve binary is at hand to ask; "
                           f"allowed: {', '.join(GENERATIONS)} (detect_generation reads `ninfer-serve --help`)")

    def binary(self, profile: Profile) -> Path:
        if not profile.engine.binary:
            raise ProfileError("engine.binary is not set: ninferkit does not build NInfer; set it to the path of "
                               "the pinned build's ninfer-serve (or use serve.docker with engine.docker_image)")
        found = shutil.which(profile.engine.binary)
        if found is None:
            raise ToolMissing(f"engine.binary = {profile.engine.binary!r} does not exist or is not executable; "
                              "build or unpack the pinned NInfer release there first")
        return Path(found)

    # -- validation and argv ------------------------------------------------------------------

    def validate(self, profile: Profile, generation: str | None = None) -> list[str]:
        """Check a profile against what this generation/fork/GPU accepts; return warnings.

        Raises ProfileError naming every bad field with its value and the allowed values. The
        returned warnings are operational traps that are legal but likely wrong (argv() emits
        them with warnings.warn).
        """
        gen = generation or self.generation(profile)
        serve, fork = profile.serve, profile.engine.fork
        problems: list[str] = []
        options = OPTIONS[gen] | FORK_OPTIONS.get(fork or "", frozenset())
        for flag in self._profile_flags(profile, gen):
            if flag not in options:
                problems.append(f"{_FLAG_FIELDS.get(flag, 'serve.extra_args')} needs {flag}, which NInfer {gen}"
                                f"{' (' + fork + ')' if fork else ''} does not have")
        for vllm_field in ("gpu_memory_utilization", "weights_dtype", "swap_space_gib"):
            if getattr(serve, vllm_field) is not None:
                problems.append(f"serve.{vllm_field} = {getattr(serve, vllm_field)!r}: not a NInfer setting; "
                                "allowed: null")
        problems += _check_kv(profile, gen)
        problems += _check_spec(profile, gen)
        if serve.max_context > NATIVE_CONTEXT and fork != "zsq13767593046-bit/ninfer-2080ti-22g-tp2":
            problems.append(f"serve.max_context = {serve.max_context}: above the targets' native context; "
                            f"allowed: up to {NATIVE_CONTEXT}")
        if serve.prefill_chunk is not None and serve.prefill_chunk % 128:
            problems.append(f"serve.prefill_chunk = {serve.prefill_chunk}: must be a positive multiple of 128")
        if gen == "G0" and serve.max_concurrency != 1:
            problems.append(f"serve.max_concurrency = {serve.max_concurrency}: NInfer G0 runs one sequence; "
                            "allowed: 1")
        elif not 1 <= serve.max_concurrency <= MAX_CONCURRENCY:
            problems.append(f"serve.max_concurrency = {serve.max_concurrency}: allowed: 1..{MAX_CONCURRENCY}")
        if serve.tensor_parallel > 1:
            if fork not in TENSOR_PARALLEL_FORKS:
                problems.append(f"serve.tensor_parallel = {serve.tensor_parallel}: needs a tensor-parallel fork; "
                                f"allowed engine.fork: {', '.join(TENSOR_PARALLEL_FORKS)}")
            if serve.tensor_parallel != 2:
                problems.append(f"serve.tensor_parallel = {serve.tensor_parallel}: NInfer forks split over "
                                "exactly two GPUs; allowed: 1, 2")
            if serve.gpu_devices is None or len(serve.gpu_devices) != serve.tensor_parallel:
                problems.append(f"serve.gpu_devices = {serve.gpu_devices}: tensor_parallel "
                                f"{serve.tensor_parallel} needs exactly {serve.tensor_parallel} device indices")
        elif serve.gpu_devices is not None and len(serve.gpu_devices) != 1:
            problems.append(f"serve.gpu_devices = {serve.gpu_devices}: one device without tensor parallel; "
                            "set serve.tensor_parallel to use more")
        if problems:
            raise ProfileError(f"profile {profile.name} does not fit NInfer {gen}:\n"
                               + "\n".join(f"  - {problem}" for problem in problems))
        return _queue_trap(profile, gen)

    def argv(self, profile: Profile, model_path: Path, binary: Path) -> list[str]:
        gen = self.generation(profile, binary)
        for warning in self.validate(profile, gen):
            warnings.warn(warning, UserWarning, stacklevel=2)
        serve = profile.serve
        argv = [str(binary), str(model_path), "--host", serve.host, "--port", str(serve.port),
                "--model-id", serve.model_id]
        if serve.tensor_parallel > 1 and serve.gpu_devices is not None:
            argv += ["--tp", str(serve.tensor_parallel), "--devices", ",".join(map(str, serve.gpu_devices))]
        elif serve.gpu_devices:
            argv += ["--device", str(serve.gpu_devices[0])]
        argv += ["--max-context", str(serve.max_context)]
        if serve.kv.capacity is not None:
            argv += ["--kv-capacity", str(serve.kv.capacity)]
        if gen != "G0":
            argv += ["--max-concurrency", str(serve.max_concurrency)]
        if serve.max_pending_requests is not None:
            argv += ["--max-pending-requests", str(serve.max_pending_requests)]
        if serve.kv.dtype is not None:
            argv += ["--kv-dtype", serve.kv.dtype]
        if serve.prefill_chunk is not None:
            argv += ["--prefill-chunk", str(serve.prefill_chunk)]
        if serve.pending_timeout_ms is not None:
            argv += ["--pending-timeout-ms", str(serve.pending_timeout_ms)]
        if serve.log_stats_interval_ms is not None:
            argv += ["--log-stats-interval-ms", str(serve.log_stats_interval_ms)]
        if serve.spec.method is not None:
            argv += ["--spec", serve.spec.method]
        if serve.spec.draft_tokens is not None:
            argv += ["--draft-tokens", str(serve.spec.draft_tokens)]
        if serve.spec.lm_head_draft:
            argv.append("--lm-head-draft")
        if serve.preserve_thinking:
            argv.append("--preserve-thinking")
        if serve.cors:
            argv.append("--cors")
        if serve.request_log_jsonl is not None:
            argv += ["--request-log-jsonl", str(Path(serve.request_log_jsonl).expanduser())]
        argv += list(serve.extra_args)
        if serve.api_key_env:
            # NInfer reads its key only from argv (G2's --api-key-file aside): redact() hides it in records.
            argv += ["--api-key", _api_key_or_placeholder(serve.api_key_env)]
        return argv

    def _profile_flags(self, profile: Profile, gen: str) -> list[str]:
        serve = profile.serve
        flags = ["--host", "--port", "--model-id", "--max-context"]
        if gen != "G0" or serve.max_concurrency != 1:
            flags.append("--max-concurrency")
        if serve.tensor_parallel > 1:
            flags += ["--tp", "--devices"]
        elif serve.gpu_devices:
            flags.append("--device")
        for flag, present in (("--kv-capacity", serve.kv.capacity is not None),
                              ("--max-pending-requests", serve.max_pending_requests is not None),
                              ("--kv-dtype", serve.kv.dtype is not None),
                              ("--prefill-chunk", serve.prefill_chunk is not None),
                              ("--pending-timeout-ms", serve.pending_timeout_ms is not None),
                              ("--log-stats-interval-ms", serve.log_stats_interval_ms is not None),
                              ("--spec", serve.spec.method is not None),
                              ("--draft-tokens", serve.spec.draft_tokens is not None),
                              ("--lm-head-draft", serve.spec.lm_head_draft),
                              ("--preserve-thinking", serve.preserve_thinking), ("--cors", serve.cors),
                              ("--request-log-jsonl", serve.request_log_jsonl is not None),
                              ("--api-key", serve.api_key_env is not None)):
            if present:
                flags.append(flag)
        flags += [arg.partition("=")[0] for arg in serve.extra_args if arg.startswith("--")]
        return flags

    # -- readiness, models ----------------------------------------------------------------------

    def is_ready(self, status_code: int, body: str) -> bool:
        # G3 answers 503 model_loading while loading; G0-G2 accept the connection and answer only when ready.
        if status_code != 200:
            return False
        try:
            return bool(json.loads(body).get("status") == "ok")
        except (ValueError, AttributeError):
            return False

    def reported_context(self, models_body: Mapping[str, Any]) -> int | None:
        data = models_body.get("data") or [{}]
        value = data[0].get("max_model_len")  # G2/G3
        return int(value) if value is not None else None

    def accepted_container_versions(self, profile: Profile) -> frozenset[int] | None:
        fork = profile.engine.fork
        if fork in FORK_CONTAINER_VERSIONS:
            return FORK_CONTAINER_VERSIONS[fork]
        return CONTAINER_VERSIONS[self.generation(profile)]

    def served_apis(self, profile: Profile) -> frozenset[str]:
        """The request APIs this profile's generation serves (G0 has no Responses API)."""
        return APIS[self.generation(profile)]

    # -- logs -------------------------------------------------------------------------------------

    def parse_ledger(self, log_text: str) -> dict[str, Any]:
        """The startup ledger with normalized keys, from any generation's stderr (last value wins).

        Keys where the generation prints them: weights_bytes, kv_tokens, kv_dtype, kv_capacity_mode,
        kv_pages, kv_max_pages, runtime_bytes, free_after_weights_bytes, free_after_startup_bytes,
        headroom_bytes, slack_bytes, graphs_observed_bytes, graphs_allowance_bytes, ready_s,
        warmup_s, listen_url, model_id, auth; each byte value printed rounded also has
        `<key>_resolution_bytes`. G0 prints no memory line; the JSONL `server_start` event has
        the exact numbers (ninfer_request_log.ledger_from_events).
        """
        out: dict[str, Any] = {}
        for line in log_text.splitlines():
            msg = message(line)
            _ledger_g0_g1(msg, out)
            _ledger_g2(msg, out)
            _ledger_g3(msg, out)
        return _finish_ledger(out)

    def parse_throughput(self, line: str) -> dict[str, Any] | None:
        """A periodic throughput line (G1, G2, G3) as numbers: interval_s, prefill_tok_s, decode_tok_s,
        prefill_tokens, decode_tokens, running, prefilling, decode_ready, waiting, batch, host_pct, host_s."""
        msg = message(line)
        return _throughput_g1(msg) or _throughput_g2(msg) or _throughput_g3(msg)

    def parse_refusal(self, log_text: str) -> dict[str, Any] | None:
        return parse_refusal(log_text)

    def parse_request_done(self, line: str) -> dict[str, Any] | None:
        """A per-request "done" line (any generation) as contract-named server numbers, or None.

        stderr values are rounded (ttft in ms, rates to 0.1 tok/s); prefer the request log
        (ninfer_request_log.request_rows). Queue time only in G3 (printed when >= 10 ms).
        """
        msg = message(line)
        return _done_old(msg) or _done_g2(msg) or _done_g3(msg)

    # -- per-request data ---------------------------------------------------------------------------

    def kv_layout(self, profile: Profile, model_path: Path | None, kv_dtype: str) -> KVLayout | None:
        target = profile.capacity.model
        if target is None:
            return None  # unknown architecture: the fit estimates the slope too
        return ninfer_kv_layout(target, kv_dtype, profile.serve.spec.method)

    def server_timings(self, response: Mapping[str, Any]) -> dict[str, Any]:
        """G3 `timings` (llama.cpp-compatible) and G2+ usage details; {} for G0/G1 bodies.

        G3's prompt time runs from admission commit to first output token, so it excludes queueing.
        """
        out: dict[str, Any] = {}
        usage = response.get("usage") or {}
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        if cached is None:
            cached = (usage.get("input_tokens_details") or {}).get("cached_tokens")
        if cached is not None:
            out["cached_tokens_server"] = cached
        timings = response.get("timings")
        if timings:
            from_timings = llama_cpp_timings(timings)
            if from_timings["cached_tokens_server"] is None:
                from_timings.pop("cached_tokens_server")
            out.update(from_timings)
        return out

    def server_log_truth(self, profile: Profile, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
        """The `--request-log-jsonl` record (unrounded timings, queue wait, speculative counters) of each
        client row, joined by start time and token counts (ninfer_request_log.join_client_rows);
        None when the profile sets no serve.request_log_jsonl. A log that cannot be read gives every
        row a `server_note` saying why, never an error: the client rows stand on their own."""
        if profile.serve.request_log_jsonl is None:
            return None
        path = Path(profile.serve.request_log_jsonl).expanduser()
        try:
            server_rows = [row for row in request_rows(read_events(path)) if row.get("status")]  # ended ones
        except (OSError, NinferkitError) as exc:
            note = f"request log {path} (serve.request_log_jsonl) not read: {exc}"
            return [{"server_note": note} for _ in rows]
        out = []
        for joined in join_client_rows(rows, server_rows):
            if joined["server_join"] is None:
                out.append({"server_join": None, "server_note": f"no request in {path.name} matched this one "
                            "(start time within 5 s, same token counts and outcome)"})
                continue
            fields = {name: joined.get(name) for name in (*LOG_FIELDS, *JOIN_FIELDS)}
            out.append({"server_source": "request_log", **fields})
        return out

    def tokenize_request(self, text: str) -> tuple[str, dict[str, Any]]:
        """Anthropic count_tokens (all generations; no GPU run). The count is of one user message
        rendered with the chat template, so it includes the template's tokens."""
        return "/v1/messages/count_tokens", {"model": "ninferkit", "max_tokens": 1,
                                             "messages": [{"role": "user", "content": text}]}

    def token_count(self, body: Mapping[str, Any]) -> int:
        return int(body["input_tokens"])

    # -- Docker ---------------------------------------------------------------------------------------

    def docker_files(self, profile: Profile) -> dict[str, str]:
        """run_dir/docker/ files: a Dockerfile on the CUDA runtime the binary was built for, and a
        systemd oneshot unit that re-applies the power limit at boot (nvidia-smi -pl does not persist)."""
        cuda = profile.engine.cuda_runtime or CUDA_RUNTIME_BY_ARCH.get(profile.gpu.arch or "", "12.8.0")
        base = f"nvidia/cuda:{cuda}-runtime-ubuntu24.04"
        lines = [
            f"# Generated by ninferkit for profile {profile.name}.",
            f"# Build from the folder holding {self.default_binary} and its libraries:",
            f"#   docker build -t {profile.engine.docker_image or 'IMAGE'} -f docker/Dockerfile <binary folder>",
            f"# Base: the CUDA {cuda} runtime the binary links against (libcudart.so.{cuda.split('.')[0]} otherwise "
            "missing).",
            f"FROM {base}",
        ]
        if _is_geforce(profile.gpu.name):
            lines += ["# GeForce cards cannot use the forward-compat libcuda (cudaErrorCompatNotSupportedOnDevice).",
                      "RUN rm -rf /usr/local/cuda/compat"]
        lines += ["COPY . /opt/ninfer/",
                  "ENV PATH=/opt/ninfer:/opt/ninfer/bin:$PATH LD_LIBRARY_PATH=/opt/ninfer:/opt/ninfer/lib",
                  f'ENTRYPOINT ["{self.default_binary}"]']
        files = {"Dockerfile": "\n".join(lines) + "\n"}
        unit = power_limit_unit(profile)
        if unit is not None:
            files["ninferkit-power-limit.service"] = unit
        return files


def power_limit_unit(profile: Profile) -> str | None:
    """A systemd oneshot unit that sets gpu.power_limit_w on the profile's GPUs at boot; None without a cap."""
    watts = profile.gpu.power_limit_w
    if watts is None:
        return None
    devices = profile.serve.gpu_devices
    select = ["-i", ",".join(map(str, devices))] if devices else []
    command = " ".join(["/usr/bin/nvidia-smi", *select, "-pl", f"{watts:g}"])
    return "\n".join([
        "# Generated by ninferkit: `nvidia-smi -pl` does not survive a reboot; this re-applies it.",
        "# Install: sudo cp ninferkit-power-limit.service /etc/systemd/system/ && "
        "sudo systemctl enable --now ninferkit-power-limit.service",
        "[Unit]",
        f"Description=GPU power limit {watts:g} W for ninferkit profile {profile.name}",
        "After=nvidia-persistenced.service",
        "",
        "[Service]",
        "Type=oneshot",
        "ExecStartPre=/usr/bin/nvidia-smi -pm 1",
        f"ExecStart={command}",
        "RemainAfterExit=yes",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ])


_FLAG_FIELDS = {
    "--kv-capacity": "serve.kv.capacity", "--max-concurrency": "serve.max_concurrency",
    "--max-pending-requests": "serve.max_pending_requests", "--kv-dtype": "serve.kv.dtype",
    "--prefill-chunk": "serve.prefill_chunk", "--pending-timeout-ms": "serve.pending_timeout_ms",
    "--log-stats-interval-ms": "serve.log_stats_interval_ms", "--spec": "serve.spec.method",
    "--draft-tokens": "serve.spec.draft_tokens", "--lm-head-draft": "serve.spec.lm_head_draft",
    "--preserve-thinking": "serve.preserve_thinking", "--cors": "serve.cors",
    "--request-log-jsonl": "serve.request_log_jsonl", "--api-key": "serve.api_key_env",
    "--tp": "serve.tensor_parallel", "--devices": "serve.gpu_devices", "--device": "serve.gpu_devices",
}


def _check_kv(profile: Profile, gen: str) -> list[str]:
    serve, fork, arch = profile.serve, profile.engine.fork or "", profile.gpu.arch
    problems = []
    dtype = serve.kv.dtype
    if dtype is not None:
        allowed = set(KV_DTYPES[gen]) | set(FORK_KV_DTYPES.get(fork, ()))
        if arch in ARCH_KV_ONLY:
            allowed &= ARCH_KV_ONLY[arch] | FORK_ARCH_KV_EXTRA.get((fork, arch), frozenset())
        allowed -= ARCH_KV_REJECTED.get(arch or "", frozenset())
        if serve.tensor_parallel > 1:
            allowed -= TP2_KV_REJECTED
        if dtype not in allowed:
            where = f"NInfer {gen}" + (f" ({fork})" if fork else "") + (f" on {arch}" if arch else "")
            problems.append(f"serve.kv.dtype = {dtype!r}: not accepted by {where}; allowed: "
                            f"{', '.join(sorted(allowed))}")
    capacity = serve.kv.capacity
    if capacity is not None and gen != "G0":
        if capacity == "auto":
            return problems
        per_request_pages = math.ceil(serve.max_context / PAGE_TOKENS)
        concurrency = serve.max_concurrency
        pages = math.ceil(capacity / PAGE_TOKENS)
        low, high = max(per_request_pages, concurrency), concurrency * per_request_pages
        if capacity < serve.max_context:
            problems.append(f"serve.kv.capacity = {capacity}: must be at least serve.max_context "
                            f"({serve.max_context})")
        elif not low <= pages <= high:
            problems.append(f"serve.kv.capacity = {capacity}: {pages} pages of {PAGE_TOKENS} tokens is outside "
                            f"[{low}, {high}] for max_context {serve.max_context} and max_concurrency "
                            f"{concurrency}; allowed: {low * PAGE_TOKENS}..{high * PAGE_TOKENS} tokens")
    return problems


def _check_spec(profile: Profile, gen: str) -> list[str]:
    spec, fork = profile.serve.spec, profile.engine.fork or ""
    problems = []
    if spec.method is None:
        if spec.draft_tokens is not None:
            problems.append(f"serve.spec.draft_tokens = {spec.draft_tokens}: needs serve.spec.method "
                            f"({', '.join(SPEC_METHODS[gen])})")
        if spec.lm_head_draft:
            problems.append("serve.spec.lm_head_draft = true: --lm-head-draft needs serve.spec.method "
                            f"({', '.join(SPEC_METHODS[gen])})")
        return problems
    if spec.method not in SPEC_METHODS[gen]:
        return [f"serve.spec.method = {spec.method!r}: not in NInfer {gen}; allowed: {', '.join(SPEC_METHODS[gen])}"]
    low, high = FORK_DRAFT_RANGE.get(fork, {}).get(spec.method, DRAFT_RANGE[spec.method])
    if spec.draft_tokens is None or not low <= spec.draft_tokens <= high:
        problems.append(f"serve.spec.draft_tokens = {spec.draft_tokens}: --spec {spec.method} needs "
                        f"--draft-tokens in [{low},{high}]")
    if spec.method == "dflash" and "--vision" in profile.serve.extra_args:
        problems.append("serve.spec.method = 'dflash': cannot be combined with --vision")
    if spec.method == "dflash" and profile.serve.tensor_parallel > 1:
        problems.append("serve.spec.method = 'dflash': rejected at tensor parallel 2; allowed: mtp")
    return problems


def _queue_trap(profile: Profile, gen: str) -> list[str]:
    serve = profile.serve
    timeout = serve.pending_timeout_ms or DEFAULT_PENDING_TIMEOUT_MS
    if gen == "G0" or timeout > DEFAULT_PENDING_TIMEOUT_MS or serve.max_concurrency < 2:
        return []
    if serve.max_context < LONG_CONTEXT_TOKENS:
        return []
    return [f"serve.pending_timeout_ms is {timeout} ms with max_concurrency {serve.max_concurrency} and "
            f"max_context {serve.max_context}: prefill runs one request at a time, so a request queued behind a "
            "long prompt expires with 503 request_queue_timeout; set serve.pending_timeout_ms to e.g. 600000"]


def _api_key_or_placeholder(name: str) -> str:
    """The key from the environment; in a plan (--dry-run) without it, a placeholder redact() hides anyway."""
    return os.environ.get(name) or f"${{{name}}}"


def _is_geforce(name: str | None) -> bool:
    return bool(name and re.search(r"GeForce|RTX \d{4}|TITAN", name, re.IGNORECASE))

