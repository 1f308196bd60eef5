"""NInfer's `ninfer-serve`: the engine the runbook exists for, in every build the field reports run.

A build is described by what it has (`builds.py`: log format, container readers, options, KV types,
APIs); the flag table (`flags.py`) turns a profile into its command line and checks the profile
against the build before anything runs, because a wrong flag costs a multi-minute model load before
NInfer says no. The logs are read by `logs.py`, failures by `diagnoses.py`. Server-side per-request
truth is the `--request-log-jsonl` file (`request_log.py`); responses carry `usage` (cached and
reasoning tokens on later builds) and, on G3 builds, llama.cpp-style `timings`.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ninferkit.bounded import LOG_FILE_BYTES, read_file
from ninferkit.engines.api_dialect import llama_cpp_timings
from ninferkit.engines.base import EngineAdapter, serve_of
from ninferkit.engines.kv import KVLayout
from ninferkit.engines.ninfer import logs
from ninferkit.engines.ninfer.auto_room import kv_auto_findings
from ninferkit.engines.ninfer.builds import Build, detect_build, known_builds, lookup
from ninferkit.engines.ninfer.describe import describe
from ninferkit.engines.ninfer.diagnoses import (
    CONTAINER_REFUSALS,
    DIAGNOSES,
    REQUEST_ERRORS,
    parse_refusal,
    pin_advice,
    tensor_parallel_advice,
)
from ninferkit.engines.ninfer.docker import docker_files
from ninferkit.engines.ninfer.flags import POOL, argv_flags, check, field_of, queue_trap
from ninferkit.engines.ninfer.kv_layout import ninfer_kv_layout
from ninferkit.engines.ninfer.options import Serve
from ninferkit.engines.ninfer.request_log import (
    JOIN_FIELDS,
    join_client_rows,
    read_events,
    request_rows,
    with_log_clock,
)
from ninferkit.engines.ninfer.request_log import SERVER_FIELDS as LOG_FIELDS
from ninferkit.errors import NinferkitError, ProfileError, ToolMissing
from ninferkit.finding import Finding
from ninferkit.params.profile import Profile
from ninferkit.rundir.records import ProbeFacts


class NInfer(EngineAdapter):
    kind = "ninfer"
    name = "NInfer"
    default_binary = "ninfer-serve"
    apis = frozenset({"chat", "messages", "responses"})
    owned_by = "ninfer"  # G1's /v1/models (/work/shared/ninfer-live/g1-h200/http/http_probe.json); no /metrics
    capacity_pool = POOL
    diagnoses = DIAGNOSES
    request_error_codes = REQUEST_ERRORS

    # -- the build --------------------------------------------------------------------------------

    def build(self, profile: Profile) -> Build:
        """The profile's build from the table (engine.fork, engine.version, engine.build.commit), else the one
        engine.binary describes in its `--help` (read once per binary). Raises ProfileError when neither is
        at hand."""
        engine = profile.engine
        found = lookup(engine.fork, engine.version, engine.built.commit)
        if found is not None:
            return found
        binary = shutil.which(engine.binary) if engine.binary else None
        if binary is not None:
            return _described_by_help(binary, Path(binary).stat().st_mtime_ns)
        named = f"engine.fork = {engine.fork!r} is not in the NInfer build table" if engine.fork else \
            "engine.fork is not set"
        raise ProfileError(f"{named} and no ninfer-serve binary is at hand to describe itself; set engine.fork to "
                           f"one of {', '.join(known_builds())}, or engine.binary to the build (ninferkit reads "
                           "its --help)")

    def binary(self, profile: Profile) -> Path:
        if not profile.engine.binary:
            raise ProfileError("engine.binary is not set: ninferkit does not build NInfer; set it to the path of "
                               "the pinned build's ninfer-serve (or use serve.docker with engine.docker_image)")
        found = shutil.which(profile.engine.binary)
        if found is None:
            raise ToolMissing(f"engine.binary = {profile.engine.binary!r} does not exist or is not executable; "
                              "build or unpack the pinned NInfer release there first")
        return Path(found)

    # -- validation and argv ------------------------------------------------------------------------

    def validate(self, profile: Profile, build: Build | None = None) -> list[str]:
        """Check a profile against its build and GPU; return warnings (legal settings likely to fail in use).

        Raises ProfileError naming every bad field with its value and what is allowed.
        """
        build = build or self.build(profile)
        serve = serve_of(profile, Serve)
        problems = check(serve, build, profile.gpu.arch)
        if problems:
            raise ProfileError(f"profile {profile.name} does not fit NInfer build {build.name}:\n"
                               + "\n".join(f"  - {problem}" for problem in problems))
        trap = queue_trap(serve, build)
        return [] if trap is None else [trap]

    def argv(self, profile: Profile, model_path: Path, binary: Path, served_as: Path | None = None) -> list[str]:
        build = self.build(profile)
        for warning in self.validate(profile, build):
            warnings.warn(warning, UserWarning, stacklevel=2)
        argv = [str(binary), str(served_as or model_path)]
        for _, spelling, value in argv_flags(serve_of(profile, Serve), build):
            argv += [spelling] if value is True else [spelling, str(value)]
        return argv + list(profile.serve.extra_args)

    def profile_field_of(self, flag: str) -> str | None:
        return field_of(flag)

    def setup_findings(self, profile: Profile, facts: ProbeFacts, model_path: Path) -> list[Finding]:
        """Whether `--kv-capacity auto` will start on the GPU the setup step found (auto_room.py)."""
        return kv_auto_findings(profile, facts.gpu.gpus)

    # -- readiness, models, what the build reads and serves ----------------------------------------

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

    def kv_layout(self, profile: Profile, model_path: Path | None, kv_dtype: str) -> KVLayout | None:
        target = profile.capacity.model
        if target is None:
            return None  # unknown architecture: the fit estimates the slope too
        return ninfer_kv_layout(target, kv_dtype, serve_of(profile, Serve).spec.method)

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

    def request_log_path(self, profile: Profile) -> Path | None:
        found = serve_of(profile, Serve).request_log_jsonl
        return None if found is None else Path(found).expanduser()

    def server_log_truth(self, profile: Profile, rows: Sequence[Mapping[str, Any]],
                         server_logs: Sequence[Path] = (),
                         request_log: Path | None = None) -> list[dict[str, Any]] | None:
        """The engine's own record of each client row: the `--request-log-jsonl` file (unrounded timings,
        queue wait, speculative counters) when the profile sets one, else the per-request `done` lines of
        the server logs (rounded as printed: ms, 0.1 tok/s), each launch's log read on its own (its request ids
        and clock are that launch's), joined by start and done times, token counts and TTFTs that fit
        (request_log.join_client_rows; a request another launch answered fits none of a launch's times). None when
        there is neither. A record that cannot be read gives every row a `server_note` saying why, never an error:
        the client rows stand on their own."""
        serve = serve_of(profile, Serve)
        named = None if serve.request_log_jsonl is None else Path(serve.request_log_jsonl).expanduser()
        logs_present = [path for path in server_logs if path.is_file()]
        if named is not None:
            source, searched = "request_log", named.name
            what = (f"request log {named} (the run's copy, {request_log})" if request_log is not None
                    else f"request log {named} (serve.request_log_jsonl)")
        elif logs_present:
            source, searched = "server_log", ", ".join(path.name for path in logs_present)
            what = "server log " + ", ".join(map(str, logs_present))
        else:
            return None
        try:
            if named is not None:
                server_rows = [row for row in request_rows(read_events(request_log or named))
                               if row.get("status")]  # ended
            else:
                server_rows = [row for path in logs_present for row in with_log_clock(
                    [row for row in logs.request_rows_of_log(_log_text(path)) if row.get("status")], rows)]
        except (OSError, NinferkitError) as exc:
            return [{"server_note": f"{what} not read: {exc}"} for _ in rows]
        out = []
        for joined in join_client_rows(rows, server_rows):
            if joined["server_join"] is None:
                note = joined.get("server_note") or (
                    f"no request in {searched} matched this one (start and done within 5 s of the "
                    "client's, same token counts and outcome, server TTFT and times inside the client's)")
                out.append({"server_join": None, "server_note": note})
                continue
            fields = {name: joined.get(name) for name in (*LOG_FIELDS, *JOIN_FIELDS)}
            out.append({"server_source": source, **fields})
        return out

    def tokenize_request(self, text: str) -> tuple[str, dict[str, Any]]:
        """Anthropic count_tokens (all generations; no GPU run). The count is of one user message
        rendered with the chat template, so it includes the template's tokens."""
        return "/v1/messages/count_tokens", {"model": "ninferkit", "max_tokens": 1,
                                             "messages": [{"role": "user", "content": text}]}

    def token_count(self, body: Mapping[str, Any]) -> int:
        return int(body["input_tokens"])

    def accepted_container_versions(self, profile: Profile) -> frozenset[int] | None:
        return self.build(profile).containers

    def served_apis(self, profile: Profile) -> frozenset[str]:
        """The request APIs this profile's build serves (G0 builds have no Responses API)."""
        return self.build(profile).apis

    def request_extensions(self, profile: Profile, served: Mapping[str, Any] | None = None) -> frozenset[str]:
        """The build's `request_fields` (builds.py), `tools` (every generation's chat schema, IF §4) and
        `previous_response_id` where the build serves the Responses API (IF §4, G1+)."""
        build = self.build(profile)
        continued = {"previous_response_id"} if "responses" in build.apis else set()
        return build.request_fields | {"tools"} | continued

    # -- logs ----------------------------------------------------------------------------------------

    def parse_ledger(self, log_text: str) -> dict[str, Any]:
        return logs.parse_ledger(log_text)

    def parse_throughput(self, line: str) -> dict[str, Any] | None:
        return logs.parse_throughput(line)

    def parse_refusal(self, log_text: str) -> dict[str, Any] | None:
        return parse_refusal(log_text)

    def parse_request_done(self, line: str) -> dict[str, Any] | None:
        return logs.parse_request_done(line)

    def advise(self, code: str, fix: str, profile: Profile) -> str:
        """A container refusal names the revision to pin from the profile (as `verify` does); a TP2 refusal the
        profile's pair of GPUs."""
        if code in CONTAINER_REFUSALS:
            return pin_advice(profile, self.accepted_container_versions(profile)) or fix
        return tensor_parallel_advice(code, fix, profile) or fix

    def describe_log(self, log_text: str, profile: Profile | None = None) -> dict[str, Any]:
        """The log's build is compared with the profile's where the table names one (engine.fork)."""
        build = lookup(profile.engine.fork, profile.engine.version, profile.engine.built.commit) if profile else None
        return describe(log_text, build)

    # -- Docker -------------------------------------------------------------------------------------

    def docker_files(self, profile: Profile) -> dict[str, str]:
        return docker_files(profile, self.default_binary)

    def docker_mounts(self, profile: Profile) -> tuple[list[str], dict[str, Any]]:
        """The request log's folder, mounted writable at /logs."""
        log = serve_of(profile, Serve).request_log_jsonl
        if log is None:
            return [], {}
        path = Path(log).expanduser()
        return ["-v", f"{path.parent}:/logs"], {"request_log_jsonl": f"/logs/{path.name}"}


Adapter = NInfer


def _log_text(path: Path) -> str:
    return read_file(path, LOG_FILE_BYTES, "reading the server log").decode(errors="replace")


@functools.lru_cache(maxsize=8)
def _described_by_help(binary: str, mtime_ns: int) -> Build:
    """The build a binary describes in its `--help` (cached per file version: plans ask many times)."""
    result = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60)
    return detect_build(result.stdout + result.stderr)
