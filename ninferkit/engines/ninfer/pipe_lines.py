"""G3 pipe messages (`what | value | value`, after `YYYY-MM-DD HH:MM:SS.mmm  LEVEL `), IF §2.4 and seed 000 §1.4-§2.4.

Segments are read whatever their padding (the V100 report quotes throughput lines aligned into
columns, one with an empty column). A clause the engine omits when its count is zero (IF §2.4:
prefill, decode, waiting, materializing, terminal-pending) reads as zero; a clause that is printed
without a part (`decode 126.8 tok/s` without its token count, `host 53.9%` without its duration)
gives what it prints and leaves the missing part out; a segment no rule knows is unread.
"""

from __future__ import annotations

import re
from typing import Any

from ninferkit.engines.ninfer.numbers import BYTES, count, duration_s, is_duration, put_bytes, rate
from ninferkit.engines.ninfer.reading import Read

_COUNT = r"\d[\d,]*"
_RATE = r"\d[\d,]*(?:\.\d+)?k?"
_BYTES_ONLY = re.compile("^" + BYTES.format(name="v") + "$")
_BYTES_OF = re.compile("^" + BYTES.format(name="v") + r"\s*/\s*" + BYTES.format(name="w") + "$")
_BYTE_RATE = re.compile("^" + BYTES.format(name="v") + r"/s$")


def _split(msg: str) -> tuple[str, list[str]]:
    """(head, segments): empty segments are padding between aligned columns and are dropped."""
    head, _, tail = msg.partition("|")
    return head.strip(), [segment.strip() for segment in tail.split("|") if segment.strip()] if tail else []


# -- throughput -------------------------------------------------------------------------------------

_FLOW = re.compile(rf"^(?P<kind>prefill|decode)\s+(?P<rate>{_RATE})\s*tok/s(?:\s+\((?P<n>{_COUNT})\s*tok\))?$")
_RUNNING = re.compile(r"^running\s+(?P<n>\d+)(?:\s*\((?P<detail>[^)]*)\))?$")
_RUNNING_PARTS = {"prefill": "prefilling", "decode-ready": "decode_ready"}
_QUEUE = re.compile(r"^(?P<name>waiting|materializing|terminal-pending)\s+(?P<n>\d+)$")
_BATCH = re.compile(r"^batch\s+(?P<b>\d+(?:\.\d+)?)$")
_HOST = re.compile(r"^host\s+(?P<pct>\d+(?:\.\d+)?)%(?:\s*\((?P<d>[^)]*)\))?$")


def _running(found: re.Match[str], out: dict[str, Any], unread: list[str]) -> None:
    out.update(running=int(found["n"]), prefilling=0, decode_ready=0)  # the parts are printed when nonzero
    for part in filter(None, (p.strip() for p in (found["detail"] or "").split(","))):
        name, _, number = part.rpartition(" ")
        if name in _RUNNING_PARTS and number.isdigit():
            out[_RUNNING_PARTS[name]] = int(number)
        else:
            unread.append(f"running ({part})")


def _throughput(segments: list[str]) -> Read:
    # Omitted clauses are zero: the engine prints them only when nonzero (IF §2.4).
    out: dict[str, Any] = {"interval_s": None, "prefill_tok_s": 0.0, "prefill_tokens": 0, "decode_tok_s": 0.0,
                           "decode_tokens": 0, "waiting": 0, "materializing": 0, "terminal_pending": 0,
                           "batch": None}
    unread: list[str] = []
    rest = segments
    if segments and is_duration(segments[0]):
        out["interval_s"], rest = duration_s(segments[0]), segments[1:]
    for segment in rest:
        if found := _FLOW.match(segment):
            kind = found["kind"]
            out[f"{kind}_tok_s"] = rate(found["rate"])
            if found["n"] is None:
                del out[f"{kind}_tokens"]  # printed without its count: not known, and not zero
            else:
                out[f"{kind}_tokens"] = count(found["n"])
        elif found := _RUNNING.match(segment):
            _running(found, out, unread)
        elif found := _QUEUE.match(segment):
            out[found["name"].replace("-", "_")] = int(found["n"])
        elif found := _BATCH.match(segment):
            out["batch"] = float(found["b"])
        elif (found := _HOST.match(segment)) and (found["d"] is None or is_duration(found["d"])):
            out["host_pct"] = float(found["pct"])
            if found["d"] is not None:
                out["host_s"] = duration_s(found["d"])
        else:
            unread.append(segment)
    return Read("throughput", out, tuple(unread))


# -- startup ----------------------------------------------------------------------------------------

_KV = re.compile(rf"^KV\s+(?P<tokens>{_COUNT})\s+tokens,\s*(?P<dtype>[\w-]+),\s*(?P<mode>auto|explicit)$")
_PAGES = re.compile(rf"^pages\s+(?P<a>{_COUNT})\s*/\s*(?P<b>{_COUNT})$")
_LABELLED_BYTES = re.compile(r"^(?P<label>[A-Za-z][A-Za-z ]*?)\s+" + BYTES.format(name="v") + "$")
_CAPACITY_BYTES = {"runtime": "runtime_bytes", "free": "free_after_startup_bytes"}
_MEMORY_BYTES = {"after weights": "free_after_weights_bytes", "after startup": "free_after_startup_bytes",
                 "headroom": "headroom_bytes", "slack": "slack_bytes"}
_PROGRESS = re.compile(r"^loading weights\s+\d+(?:\.\d+)?%$")
_QUIET = ("starting engine", "host state pinned", "host KV pinned", "CUDA graphs ready", "prefix cache",
          "context cache", "media", "load detail", "context cost", "server stopped", "engine init")
"""Heads of lines that say what the engine is doing; their numbers are not used by ninferkit."""


def _labelled_bytes(segment: str, keys: dict[str, str], out: dict[str, Any]) -> bool:
    """`label 1.21 GiB` into out[keys[label]]; False when the segment is not one of them."""
    found = _LABELLED_BYTES.match(segment)
    if found is None or found["label"] not in keys:
        return False
    put_bytes(out, keys[found["label"]], found["v"], found["v_unit"])
    return True


def _engine_ready(segments: list[str]) -> Read:
    out: dict[str, Any] = {}
    unread: list[str] = []
    if segments:
        out["model_name"] = segments[0]
    for segment in segments[1:]:
        if segment.startswith("total ") and is_duration(segment[6:]):
            out["ready_s"] = duration_s(segment[6:])
        elif segment.startswith("CUDA sync "):
            out["cuda_sync"] = segment[10:]
        elif not _labelled_bytes(segment, {"weights": "weights_bytes"}, out):
            unread.append(segment)
    return Read("startup", out, tuple(unread))


def _weights(head: str, segments: list[str]) -> Read:
    """`loading weights | 17.3 GiB`, its progress lines, and `weights ready | 17.3 GiB | 9.8s | 1.70 GiB/s`."""
    out: dict[str, Any] = {}
    unread: list[str] = []
    for segment in segments:
        if found := _BYTES_ONLY.match(segment):
            put_bytes(out, "weights_bytes", found["v"], found["v_unit"])
        elif found := _BYTES_OF.match(segment):
            put_bytes(out, "weights_bytes", found["w"], found["w_unit"])
        elif head == "weights ready" and is_duration(segment):
            out["weights_load_s"] = duration_s(segment)
        elif not (_BYTE_RATE.match(segment) or re.match(r"^ETA\s", segment)):
            unread.append(segment)
    return Read("startup", out, tuple(unread))


def _capacity(segments: list[str]) -> Read:
    out: dict[str, Any] = {}
    unread: list[str] = []
    for segment in segments:
        if found := _KV.match(segment):
            out.update(kv_tokens=count(found["tokens"]), kv_dtype=found["dtype"], kv_capacity_mode=found["mode"])
        elif found := _PAGES.match(segment):
            out["kv_pages"], out["kv_max_pages"] = count(found["a"]), count(found["b"])
        elif not _labelled_bytes(segment, _CAPACITY_BYTES, out):
            unread.append(segment)
    return Read("startup", out, tuple(unread))


def _memory_ledger(segments: list[str]) -> Read:
    out: dict[str, Any] = {}
    unread: list[str] = []
    for segment in segments:
        graphs = re.match(r"^CUDA graphs\s+(?P<rest>.*)$", segment)
        pair = _BYTES_OF.match(graphs["rest"]) if graphs else None
        if pair is not None:
            put_bytes(out, "graphs_observed_bytes", pair["v"], pair["v_unit"])
            put_bytes(out, "graphs_allowance_bytes", pair["w"], pair["w_unit"])
        elif not _labelled_bytes(segment, _MEMORY_BYTES, out):
            unread.append(segment)
    return Read("startup", out, tuple(unread))


def _listening(head: str, segments: list[str]) -> Read:
    out: dict[str, Any] = {"listen_url": head.removeprefix("listening on ")}
    unread: list[str] = []
    for segment in segments:
        if segment.startswith("model "):
            out["model_id"] = segment[6:]
        elif segment.startswith("auth "):
            out["auth"] = segment[5:]
        else:
            unread.append(segment)
    return Read("startup", out, tuple(unread))


def _startup(head: str, segments: list[str]) -> Read | None:
    if head == "engine ready":
        return _engine_ready(segments)
    if head in ("loading weights", "weights ready") or _PROGRESS.match(head):
        return _weights(head, segments)
    if head == "capacity":
        return _capacity(segments)
    if head == "memory ledger":
        return _memory_ledger(segments)
    if re.match(r"^listening on http://\S+$", head):
        return _listening(head, segments)
    if head == "warmup complete" and len(segments) == 1 and is_duration(segments[0]):
        return Read("startup", {"warmup_s": duration_s(segments[0])})
    if found := re.match(r"^build (?P<v>\S+)$", head):
        return Read("startup", {"runtime_version": found["v"]}, tuple(segments))
    if head in _QUIET:
        return Read("startup")
    return None


# -- requests ---------------------------------------------------------------------------------------

_REQUEST = re.compile(r"^req#(?P<id>\d+) (?P<what>started|done|rejected during (?P<phase>.+))$")
_CACHE = re.compile(rf"^cache\s+(?P<n>{_COUNT})(?:\s*\((?P<pct>\d+(?:\.\d+)?)%(?:,\s*(?P<path>[\w-]+))?\))?$")
_SPEC = re.compile(rf"^(?P<backend>\w+) accepted (?P<a>{_COUNT})/(?P<d>{_COUNT})(?:\s*\(\d+(?:\.\d+)?%\))?$")
_TIMES = {"TTFT": "ttft_s_server", "total": "e2e_s_server", "queue": "queue_s_server"}


def _protocol(segment: str, out: dict[str, Any]) -> bool:
    found = re.match(r"^(?P<protocol>[\w-]+)(?: (?P<stream>stream|non-stream))?$", segment)
    if found is None:
        return False
    out["protocol"] = found["protocol"]
    if found["stream"]:
        out["stream"] = found["stream"] == "stream"
    return True


def _started(out: dict[str, Any], segments: list[str]) -> Read:
    unread: list[str] = []
    if not segments or not _protocol(segments[0], out):
        unread += segments[:1]
    for segment in segments[1:]:
        if found := re.match(rf"^(?P<n>{_COUNT}) messages?$", segment):
            out["messages"] = count(found["n"])
        elif found := re.match(rf"^max output (?P<n>{_COUNT})$", segment):
            out["max_tokens"] = count(found["n"])
        elif segment.startswith("thinking "):
            out["thinking"] = segment[9:]
        else:
            unread.append(segment)
    return Read("request_start", out, tuple(unread))


def _done(out: dict[str, Any], segments: list[str]) -> Read:
    unread: list[str] = []
    if not segments or not _protocol(segments[0], out):
        unread += segments[:1]
    if len(segments) > 1:
        finish = re.match(rf"^tool calls (?P<n>{_COUNT})$", segments[1])
        out["finish_reason"] = "tool calls" if finish else segments[1]
        if finish:
            out["tool_calls_server"] = count(finish["n"])
    for segment in segments[2:]:
        label, _, value = segment.partition(" ")
        if found := re.match(rf"^(?P<k>prompt|output) (?P<n>{_COUNT})$", segment):
            key = "prompt_tokens_server" if found["k"] == "prompt" else "completion_tokens_server"
            out[key] = count(found["n"])
        elif found := _CACHE.match(segment):
            out["cached_tokens_server"] = count(found["n"])
            if found["path"]:
                out["prefix_reuse_path"] = found["path"]
        elif label in _TIMES and is_duration(value):
            out[_TIMES[label]] = duration_s(value)
        elif found := re.match(rf"^(?P<k>prefill|decode) (?P<rate>{_RATE}) tok/s$", segment):
            out[f"{found['k']}_tok_s_server"] = rate(found["rate"])
        elif found := _SPEC.match(segment):
            accepted, drafted = count(found["a"]), count(found["d"])
            out.update(spec_backend_server=found["backend"], accepted_tokens_server=accepted,
                       drafted_tokens_server=drafted, acceptance_server=accepted / drafted if drafted else None)
        else:
            unread.append(segment)
    if out.get("completion_tokens_server") is not None:
        out["decode_tokens_server"] = max(0, out["completion_tokens_server"] - 1)
    return Read("request_done", out, tuple(unread))


def _rejected(out: dict[str, Any], segments: list[str]) -> Read:
    unread: list[str] = []
    if not segments or not _protocol(segments[0], out):
        unread += segments[:1]
    for segment in segments[1:]:
        if found := re.match(r"^HTTP (?P<status>\d{3})$", segment):
            out["http_status"] = int(found["status"])
        elif found := re.match(rf"^(?P<n>{_COUNT}) messages?$|^messages (?P<m>{_COUNT})$", segment):
            out["messages"] = count(found["n"] or found["m"])
        elif "error_code" not in out and re.match(r"^[a-z][a-z ]*$", segment):
            out["error_code"] = segment.replace(" ", "_")  # IF §2.4: the code with `_` printed as a space
        else:
            unread.append(segment)
    return Read("request_error", out, tuple(unread))


def _request(head: str, segments: list[str]) -> Read | None:
    found = _REQUEST.match(head)
    if found is None:
        return None
    out: dict[str, Any] = {"request_id": int(found["id"])}
    if found["what"] == "started":
        return _started(out, segments)
    if found["what"] == "done":
        return _done(out, segments)
    out["phase"] = found["phase"]
    return _rejected(out, segments)


# -- failures ---------------------------------------------------------------------------------------

def _failure(msg: str, head: str, segments: list[str]) -> Read | None:
    if head == "startup failed":
        out: dict[str, Any] = {"message": msg, "phase": segments[0] if segments else None}
        if len(segments) > 1 and is_duration(segments[1]):
            out["after_s"] = duration_s(segments[1])
        return Read("error", out)
    if found := re.match(r"^server failed during (?P<when>startup|serving)$", head):
        return Read("error", {"message": msg, "when": found["when"], "detail": msg.partition("|")[2].strip()})
    if head in ("warmup failed", "server listen failed") or head.startswith("cannot bind "):
        return Read("error", {"message": msg})
    return None


def read(msg: str) -> Read | None:
    """A G3 message as read, or None when it is none of this format's lines."""
    head, segments = _split(msg)
    if head == "throughput" and segments:
        return _throughput(segments)
    return _request(head, segments) or _startup(head, segments) or _failure(msg, head, segments)

