"""NInfer's stderr as numbers: the startup ledger, throughput lines and per-request lines of every log format.

Every build's lines are tried against every format (a fork prints what it prints, whatever its
table row says): the plain and bracketed lines of G0/G1 (IF §2.1-2.2), G2's spdlog key=value
lines (IF §2.3) and the pipe lines of G3 and the forks that adopted them (IF §2.4; seed 000 §1.6
quotes them without the timestamp). Values are rounded as printed; each byte value carries its
`<key>_resolution_bytes` so the capacity fit can treat it as the interval it is.
"""

from __future__ import annotations

import re
from typing import Any

from ninferkit.units import GIB, MIB

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


def parse_ledger(log_text: str) -> dict[str, Any]:
    """The startup ledger with normalized keys, from any format's stderr (last value wins).

    Keys where a build prints them: weights_bytes, kv_tokens, kv_dtype, kv_capacity_mode, kv_pages,
    kv_max_pages, runtime_bytes, free_after_weights_bytes, free_after_startup_bytes, headroom_bytes,
    slack_bytes, graphs_observed_bytes, graphs_allowance_bytes, ready_s, warmup_s, listen_url, model_id,
    auth; each byte value printed rounded also has `<key>_resolution_bytes`. G0 prints no memory line;
    the JSONL `server_start` event has the exact numbers (request_log.ledger_from_events).
    """
    out: dict[str, Any] = {}
    for line in log_text.splitlines():
        msg = message(line)
        _ledger_g0_g1(msg, out)
        _ledger_g2(msg, out)
        _ledger_g3(msg, out)
    return _finish_ledger(out)


def parse_throughput(line: str) -> dict[str, Any] | None:
    """A periodic throughput line as numbers: interval_s, prefill_tok_s, decode_tok_s, prefill_tokens,
    decode_tokens, running, prefilling, decode_ready, waiting, batch, host_pct, host_s."""
    msg = message(line)
    return _throughput_g1(msg) or _throughput_g2(msg) or _throughput_g3(msg)


def parse_request_done(line: str) -> dict[str, Any] | None:
    """A per-request "done" line as contract-named server numbers, or None.

    stderr values are rounded (ttft in ms, rates to 0.1 tok/s); prefer the request log
    (request_log.request_rows). Queue time only in pipe lines (printed when >= 10 ms).
    """
    msg = message(line)
    return _done_old(msg) or _done_g2(msg) or _done_g3(msg)
