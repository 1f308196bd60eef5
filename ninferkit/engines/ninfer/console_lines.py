"""G0/G1 console messages (after `ninfer-serve: `), IF §2.1-2.2 and the live G1 capture (ninfer-live/g1-h200).

The messages are the same in the plain (G0) and bracketed (G1) formats; only the prefix differs,
which `logs.py` strips. Startup: `loading model...`, load progress per phase, `model loaded in`,
the `KV capacity` line, `warming up...`, `listening on`; per request: submitted, done, error and
rejected lines; every `--log-stats-interval-ms`: the throughput line.
"""

from __future__ import annotations

import re
from typing import Any

from ninferkit.engines.ninfer.numbers import BYTE_UNITS, BYTES, count, key_values, put_bytes
from ninferkit.engines.ninfer.reading import Read, unread_pairs

# -- startup ----------------------------------------------------------------------------------------

_LOAD = re.compile(r"^load\s+(?P<phase>\S+(?: \S+)*?)\s+(?P<pct>\d+(?:\.\d+)?)%\s+" + BYTES.format(name="done")
                   + r"\s*/\s*" + BYTES.format(name="total") + r"\s+(?P<s>\d+(?:\.\d+)?)\s*s$")
_LOADED = re.compile(r"^model loaded in (?P<s>\d+(?:\.\d+)?(?:e[+-]?\d+)?) s$")
_CAPACITY = re.compile(r"^KV capacity (?P<mode>auto|explicit)(?P<rest>(?: .*)?)$")
_CAPACITY_ITEM = re.compile(r"(?P<k>[\w-]+)=(?P<v>[\d.,]+)(?: (?P<u>B|KiB|MiB|GiB|tokens)\b)?"
                            r"(?:/(?P<v2>[\d.,]+)(?: (?P<u2>B|KiB|MiB|GiB)\b)?)?")
_CAPACITY_BYTES = {"runtime": "runtime_bytes", "free-after-weights": "free_after_weights_bytes",
                   "free-after-startup": "free_after_startup_bytes", "headroom": "headroom_bytes",
                   "slack": "slack_bytes"}
_LISTEN = re.compile(r"^listening on (?P<url>http://\S+) \(model id: (?P<model>[^,]+), auth: (?P<auth>\w+)\)$")
_QUIET = ("loading model...", "warming up...")


def _capacity(mode: str, rest: str) -> Read:
    out: dict[str, Any] = {"kv_capacity_mode": mode}
    unread: list[str] = []
    position = 0
    for item in _CAPACITY_ITEM.finditer(rest):
        unread += rest[position:item.start()].split()
        position = item.end()
        key, value, unit, second, second_unit = item["k"], item["v"], item["u"], item["v2"], item["u2"]
        if key == "resolved" and unit == "tokens" and second is None:
            out["kv_tokens"] = count(value)
        elif key == "pages" and unit is None and second is not None and second_unit is None:
            out["kv_pages"], out["kv_max_pages"] = count(value), count(second)
        elif key in _CAPACITY_BYTES and unit in BYTE_UNITS and second is None:
            put_bytes(out, _CAPACITY_BYTES[key], value, unit)
        elif key == "graphs" and unit in BYTE_UNITS and second_unit in BYTE_UNITS:
            put_bytes(out, "graphs_observed_bytes", value, unit)
            put_bytes(out, "graphs_allowance_bytes", second, second_unit)
        else:
            unread.append(item.group(0))
    unread += rest[position:].split()
    return Read("startup", out, tuple(unread))


def _startup(msg: str) -> Read | None:
    if msg in _QUIET:
        return Read("startup")
    if found := _LOAD.match(msg):
        if found["phase"] != "weights":
            return Read("startup", {}, (f"load phase {found['phase']!r}",))
        out: dict[str, Any] = {}
        put_bytes(out, "weights_bytes", found["total"], found["total_unit"])
        if float(found["pct"]) == 100:
            out["weights_load_s"] = float(found["s"])
        return Read("startup", out)
    if found := _LOADED.match(msg):
        return Read("startup", {"ready_s": float(found["s"])})
    if found := _CAPACITY.match(msg):
        return _capacity(found["mode"], found["rest"])
    if found := _LISTEN.match(msg):
        return Read("startup", {"listen_url": found["url"], "model_id": found["model"], "auth": found["auth"]})
    if found := re.match(r"^runtime (?P<v>\S+)$", msg):  # Don-Chad's G0 fork (IF §2.1)
        return Read("startup", {"runtime_version": found["v"]})
    return None


# -- throughput -------------------------------------------------------------------------------------

_THROUGHPUT_KNOWN = frozenset({"interval", "prefill", "decode", "running", "prefilling", "decode_ready", "waiting",
                               "avg_decode_batch"})


def _throughput(msg: str) -> Read | None:
    if not msg.startswith("throughput interval="):
        return None
    pairs, words = key_values(msg.removeprefix("throughput "))
    out: dict[str, Any] = {}
    unread = unread_pairs(pairs, _THROUGHPUT_KNOWN) + words
    for key, name, suffix in (("interval", "interval_s", "s"), ("prefill", "prefill_tok_s", "tok/s"),
                              ("decode", "decode_tok_s", "tok/s")):
        value = pairs.get(key, "").removesuffix(suffix)
        if re.fullmatch(r"\d+(?:\.\d+)?", value):
            out[name] = float(value)
        else:
            out[name] = None
            unread.append(f"{key}={pairs.get(key)}" if key in pairs else f"no {key}=")
    for key in ("running", "prefilling", "decode_ready", "waiting"):
        if key in pairs:
            if pairs[key].isdigit():
                out[key] = int(pairs[key])
            else:
                unread.append(f"{key}={pairs[key]}")
    batch = pairs.get("avg_decode_batch")
    out["batch"] = None  # `n/a`: no decode rounds in the interval (IF §2.2)
    if batch is not None and batch != "n/a":
        if re.fullmatch(r"\d+(?:\.\d+)?", batch):
            out["batch"] = float(batch)
        else:
            unread.append(f"avg_decode_batch={batch}")
    return Read("throughput", out, tuple(unread))


# -- requests ---------------------------------------------------------------------------------------

_START = re.compile(r"^\[req (?P<id>\d+)\] (?P<protocol>\w+) (?P<stream>stream|non-stream) (?P<rest>.*?)\s*"
                    r"→\s*(?P<state>submitted|running)$")
_START_KEYS = {"msgs": "messages", "max_tokens": "max_tokens", "tools": "tools", "media": "media"}
_START_TEXT = frozenset({"tool_choice", "tool_history", "thinking", "preserve_thinking", "preserve_change"})
_DONE = re.compile(r"^\[req (?P<id>\d+)\] done (?P<rest>.*)$")
_SPEC = re.compile(r"^(?P<backend>\w+) (?P<per_round>\d+(?:\.\d+)?)tok/round \((?P<pct>\d+(?:\.\d+)?)%\)$")
_DONE_KNOWN = frozenset({"finish", "tool_calls", "prompt", "gen", "cache", "reuse", "ttft", "prefill", "decode",
                         "wall"})
_ERROR = re.compile(r"^\[req (?P<id>\d+)\] error (?P<message>.*)$")
_REJECTED = re.compile(r"^\[req (?P<id>\d+)\] rejected (?P<rest>.*?)(?: message=(?P<message>.*))?$")
_REJECTED_KNOWN = frozenset({"phase", "protocol", "msgs", "media", "tools", "status", "code"})


def _start(found: re.Match[str]) -> Read:
    rest = found["rest"]
    out: dict[str, Any] = {"request_id": int(found["id"]), "protocol": found["protocol"],
                           "stream": found["stream"] == "stream"}
    if sampler := re.search(r" ?sampler=\[(?P<s>[^\]]*)\]", rest):
        out["sampler"] = sampler["s"]
        rest = rest[:sampler.start()] + rest[sampler.end():]
    if source := re.search(r" \((?P<s>client|server default)\)", rest):
        out["max_tokens_source"] = source["s"]
        rest = rest[:source.start()] + rest[source.end():]
    pairs, words = key_values(rest)
    unread = unread_pairs(pairs, set(_START_KEYS) | _START_TEXT) + words
    for key, name in _START_KEYS.items():
        if key in pairs:
            if pairs[key].isdigit():
                out[name] = int(pairs[key])
            else:
                unread.append(f"{key}={pairs[key]}")
    out.update({key: pairs[key] for key in _START_TEXT if key in pairs})
    return Read("request_start", out, tuple(unread))


def _number(value: str, suffix: str, per: int) -> float | None:
    """'98ms' with suffix 'ms' and per 1000 -> 0.098; None when the value is not a number with that suffix."""
    number = value.removesuffix(suffix)
    return float(number) / per if value.endswith(suffix) and re.fullmatch(r"\d+(?:\.\d+)?", number) else None


def _done(found: re.Match[str]) -> Read:
    rest, _, spec = found["rest"].partition(" speculative=")
    pairs, words = key_values(rest)
    unread = unread_pairs(pairs, _DONE_KNOWN) + words
    out: dict[str, Any] = {"request_id": int(found["id"]), "finish_reason": pairs.get("finish")}
    for key, name in (("prompt", "prompt_tokens_server"), ("gen", "completion_tokens_server"),
                      ("cache", "cached_tokens_server"), ("tool_calls", "tool_calls_server")):
        if key in pairs:
            if pairs[key].isdigit():
                out[name] = int(pairs[key])
            else:
                unread.append(f"{key}={pairs[key]}")
    if out.get("completion_tokens_server") is not None:
        out["decode_tokens_server"] = max(0, out["completion_tokens_server"] - 1)  # IF §2.1: decode = (gen-1)/s
    for key, name, suffix, per in (("ttft", "ttft_s_server", "ms", 1000), ("wall", "e2e_s_server", "s", 1),
                                   ("prefill", "prefill_tok_s_server", "tok/s", 1),
                                   ("decode", "decode_tok_s_server", "tok/s", 1)):
        if key not in pairs:
            continue
        out[name] = _number(pairs[key], suffix, per)
        if out[name] is None and pairs[key] != "n/a":  # n/a: no decode interval (IF §2.1)
            unread.append(f"{key}={pairs[key]}")
    if "reuse" in pairs:
        out["prefix_reuse_path"] = pairs["reuse"]
    if spec == "off":
        out.update(spec_backend_server="none", acceptance_server=None)  # the request log's word for it
    elif found_spec := _SPEC.match(spec):
        out.update(spec_backend_server=found_spec["backend"], acceptance_server=float(found_spec["pct"]) / 100,
                   tokens_per_round_server=float(found_spec["per_round"]))
    elif spec:
        unread.append(f"speculative={spec}")
    return Read("request_done", out, tuple(unread))


def _rejected(found: re.Match[str]) -> Read:
    pairs, words = key_values(found["rest"])
    unread = unread_pairs(pairs, _REJECTED_KNOWN) + [w for w in words if w not in ("stream", "non-stream")]
    out: dict[str, Any] = {"request_id": int(found["id"]), "error": found["message"]}
    for key, name in (("phase", "phase"), ("protocol", "protocol"), ("code", "error_code")):
        if key in pairs:
            out[name] = pairs[key]
    if pairs.get("status", "").isdigit():
        out["http_status"] = int(pairs["status"])
    if "stream" in words or "non-stream" in words:
        out["stream"] = "stream" in words
    return Read("request_error", out, tuple(unread))


def _request(msg: str) -> Read | None:
    if not msg.startswith("[req "):
        return None
    if found := _DONE.match(msg):
        return _done(found)
    if found := _START.match(msg):
        return _start(found)
    if found := _ERROR.match(msg):
        return Read("request_error", {"request_id": int(found["id"]), "error": found["message"]})
    if found := _REJECTED.match(msg):
        return _rejected(found)
    return None


def read(msg: str) -> Read | None:
    """A G0/G1 message as read, or None when it is none of this format's lines."""
    if msg.startswith("warmup failed"):  # `warmup failed (continuing): <what>` (IF §2.1): no level printed
        return Read("error", {"message": msg})
    return _throughput(msg) or _request(msg) or _startup(msg)
