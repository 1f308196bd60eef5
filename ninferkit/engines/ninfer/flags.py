"""The NInfer flag table: one row per `ninfer-serve` option the runbook sets from a profile.

The same rows make the command line (`argv_flags`), check a profile against a build before anything
runs (`check`), write docs/ninfer-flags.md (`markdown`) and tie the write-up's recipe back to profile
fields (`field_of`). A row names the profile field, how its value is written, the option's spellings
(forks spell some differently: the build decides which one it gets) and what a value must satisfy.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ninferkit.engines.ninfer.builds import BUILDS, TP2_KV_REJECTED, Build
from ninferkit.engines.ninfer.options import Serve
from ninferkit.engines.pool import PoolRule
from ninferkit.units import GIB

PAGE_TOKENS = 64  # kPagedKVPageSize: the KV pool is counted in 64-token page groups (IF §7.3)
MAX_CONCURRENCY = 8  # `--max-concurrency must be in [1,8]` (live: startup-errors/concurrency9.log)
NATIVE_CONTEXT = 262_144  # `max_context exceeds the variant native context capacity` (IF §1.1, the Qwen3.6/3.8 targets)
POOL = PoolRule(PAGE_TOKENS, GIB, True, "bf16", MAX_CONCURRENCY, capped_by_slots=True, max_context=NATIVE_CONTEXT)
"""A paged pool shared by all slots, pages in [max(L, C), C x L]; `auto` keeps 1 GiB free (IF §7.3)."""
DEFAULT_PENDING_TIMEOUT_MS = 30_000
LONG_CONTEXT_TOKENS = 32_768  # from here a serial prefill ahead in the queue can outlast 30 s

Value = str | bool | None
"""A flag's value in a profile: None omits it, True writes a switch, a string follows the flag."""


@dataclass(frozen=True)
class Flag:
    spellings: tuple[str, ...]
    field: str
    value: Callable[[Serve], Value]
    meaning: str
    check: Callable[[Serve, Build, str | None], str | None] | None = None
    """A problem with the value on this build and GPU architecture, as 'must …' text; None when fine."""
    engine_default: str | None = None
    """The engine's own value: a build without the option gets it anyway, so nothing needs writing."""

    @property
    def flag(self) -> str:
        return self.spellings[0]

    def spelling_for(self, build: Build) -> str | None:
        return next((s for s in self.spellings if s in build.options), None)


# -- value checks ---------------------------------------------------------------------------------

def _max_context(serve: Serve, build: Build, arch: str | None) -> str | None:
    if serve.max_context > NATIVE_CONTEXT:
        return f"must be at most {NATIVE_CONTEXT} (the models' native context)"
    return None


def _kv_capacity(serve: Serve, build: Build, arch: str | None) -> str | None:
    capacity = serve.kv.capacity
    if capacity is None or capacity == "auto":
        return None
    if capacity < serve.max_context:
        return f"must be at least serve.max_context ({serve.max_context})"
    low, high = POOL.pool_range(serve.max_concurrency, serve.max_context)
    if not low <= POOL.resolve(capacity) <= high:
        return (f"must lie in {low}..{high} tokens for max_context {serve.max_context} and max_concurrency "
                f"{serve.max_concurrency} (the engine refuses a pool outside its usable range)")
    return None


def _concurrency(serve: Serve, build: Build, arch: str | None) -> str | None:
    if not build.paged_pool:
        return None if serve.max_concurrency == 1 else "must be 1: this build runs one sequence"
    if not 1 <= serve.max_concurrency <= MAX_CONCURRENCY:
        return f"must be in 1..{MAX_CONCURRENCY}"
    return None


def _kv_dtype(serve: Serve, build: Build, arch: str | None) -> str | None:
    allowed = [d for d in build.kv_dtypes_on(arch)
               if not (serve.tensor_parallel > 1 and d in TP2_KV_REJECTED)]
    if serve.kv.dtype is not None and serve.kv.dtype not in allowed:
        where = f" on {arch}" if arch else ""
        return f"must be one of {', '.join(allowed)} ({build.name}{where})"
    return None


def _prefill_chunk(serve: Serve, build: Build, arch: str | None) -> str | None:
    if serve.prefill_chunk is not None and serve.prefill_chunk % 128:
        return "must be a positive multiple of 128"
    return None


def _spec(serve: Serve, build: Build, arch: str | None) -> str | None:
    method = serve.spec.method
    if method is not None and method not in build.spec_draft:
        return f"must be one of {', '.join(build.spec_draft)}"
    if method == "dflash" and serve.vision:
        return "must not be dflash with serve.vision (the engine refuses the pair)"
    if method == "dflash" and serve.tensor_parallel > 1:
        return "must not be dflash at tensor parallel 2"
    return None


def _draft_tokens(serve: Serve, build: Build, arch: str | None) -> str | None:
    method, draft = serve.spec.method, serve.spec.draft_tokens
    if method is None:
        return None if draft is None else "needs serve.spec.method"
    if method not in build.spec_draft:
        return None  # reported on serve.spec.method
    low, high = build.spec_draft[method]
    if draft is None or not low <= draft <= high:
        return f"must be in {low}..{high} for --spec {method}"
    return None


def _lm_head_draft(serve: Serve, build: Build, arch: str | None) -> str | None:
    return "needs serve.spec.method" if serve.spec.lm_head_draft and serve.spec.method is None else None


def _tensor_parallel(serve: Serve, build: Build, arch: str | None) -> str | None:
    if serve.tensor_parallel == 1:
        return None
    if serve.tensor_parallel != 2:
        return "must be 1 or 2: NInfer forks split a model over exactly two GPUs"
    if serve.gpu_devices is None or len(serve.gpu_devices) != 2:
        return "needs serve.gpu_devices with two device indices"
    return None


def _one_device(serve: Serve, build: Build, arch: str | None) -> str | None:
    if serve.tensor_parallel == 1 and serve.gpu_devices is not None and len(serve.gpu_devices) != 1:
        return "must name one device without tensor parallel (set serve.tensor_parallel: 2 for two)"
    return None


def _vision(serve: Serve, build: Build, arch: str | None) -> str | None:
    if serve.vision and serve.vision_max_tokens is None and build.vision_needs_budget:
        return (f"needs serve.vision_max_tokens on this build, or its image requests fail silently "
                f"({build.vision_needs_budget})")
    return None


def _vision_budget(serve: Serve, build: Build, arch: str | None) -> str | None:
    return "needs serve.vision: true" if serve.vision_max_tokens is not None and not serve.vision else None


def _switch(on: bool) -> Value:
    return True if on else None


def _text(value: object) -> Value:
    return None if value is None else str(value)


# -- the table, in the order the field reports write their command lines ---------------------------

FLAGS: tuple[Flag, ...] = (
    Flag(("--host",), "serve.host", lambda s: s.host, "listen address (inside Docker: 0.0.0.0)",
         engine_default="127.0.0.1"),
    Flag(("--port",), "serve.port", lambda s: str(s.port), "listen port (inside Docker: serve.container_port)",
         engine_default="8080"),
    Flag(("--model-id",), "serve.model_id", lambda s: s.model_id,
         "public model id; omitted, the artifact's identity.model_id"),
    Flag(("--tp",), "serve.tensor_parallel", lambda s: str(s.tensor_parallel) if s.tensor_parallel > 1 else None,
         "split the model over two GPUs (tensor parallel forks)", _tensor_parallel),
    Flag(("--devices",), "serve.gpu_devices",
         lambda s: ",".join(map(str, s.gpu_devices)) if s.gpu_devices and s.tensor_parallel > 1 else None,
         "the two GPUs of a tensor-parallel pair"),
    Flag(("--device",), "serve.gpu_devices",
         lambda s: str(s.gpu_devices[0]) if s.gpu_devices and s.tensor_parallel == 1 else None,
         "the CUDA device index", _one_device, engine_default="0"),
    Flag(("--max-context",), "serve.max_context", lambda s: str(s.max_context),
         "per-request ceiling, prompt + output", _max_context),
    Flag(("--kv-capacity",), "serve.kv.capacity", lambda s: _text(s.kv.capacity),
         "shared KV pool in tokens (64-token pages), or auto", _kv_capacity),
    Flag(("--max-concurrency",), "serve.max_concurrency", lambda s: str(s.max_concurrency),
         "requests decoded as one batch (1..8)", _concurrency, engine_default="1"),
    Flag(("--max-pending-requests",), "serve.max_pending_requests", lambda s: _text(s.max_pending_requests),
         "requests allowed to wait beyond concurrency", engine_default="16"),
    Flag(("--kv-dtype",), "serve.kv.dtype", lambda s: s.kv.dtype, "KV storage type", _kv_dtype,
         engine_default="bf16"),
    Flag(("--prefill-chunk",), "serve.prefill_chunk", lambda s: _text(s.prefill_chunk),
         "prefill chunk (a multiple of 128)", _prefill_chunk, engine_default="1024"),
    Flag(("--pending-timeout-ms",), "serve.pending_timeout_ms", lambda s: _text(s.pending_timeout_ms),
         "deadline for a queued request to be admitted"),
    Flag(("--log-stats-interval-ms",), "serve.log_stats_interval_ms", lambda s: _text(s.log_stats_interval_ms),
         "period of the throughput line; 0 disables"),
    Flag(("--spec",), "serve.spec.method", lambda s: s.spec.method, "speculative decoding backend", _spec),
    Flag(("--draft-tokens",), "serve.spec.draft_tokens", lambda s: _text(s.spec.draft_tokens),
         "draft window", _draft_tokens),
    Flag(("--lm-head-draft",), "serve.spec.lm_head_draft", lambda s: _switch(s.spec.lm_head_draft),
         "optimized proposal head", _lm_head_draft),
    Flag(("--preserve-thinking",), "serve.preserve_thinking", lambda s: _switch(s.preserve_thinking),
         "keep closed-turn reasoning in later prompts"),
    Flag(("--no-thinking",), "serve.thinking", lambda s: _switch(not s.thinking), "thinking off by default"),
    Flag(("--cors",), "serve.cors", lambda s: _switch(s.cors), "permissive CORS headers"),
    Flag(("--vision",), "serve.vision", lambda s: _switch(s.vision), "load Vision and accept images", _vision),
    Flag(("--vision-max-tokens", "--max-vision-tokens", "--vision-max-merged"), "serve.vision_max_tokens",
         lambda s: _text(s.vision_max_tokens), "token budget of one image (spelled per fork)", _vision_budget),
    Flag(("--request-log-jsonl",), "serve.request_log_jsonl",
         lambda s: None if s.request_log_jsonl is None else str(Path(s.request_log_jsonl).expanduser()),
         "append the engine's per-request JSONL log"),
    Flag(("--log-level",), "serve.log_level", lambda s: s.log_level, "stderr verbosity (debug: memory ledger)",
         engine_default="info"),
    # NInfer reads its key only from argv: the value is the key itself (a placeholder in a plan without
    # it), which Launcher.redact() hides in every record.
    Flag(("--api-key",), "serve.api_key_env",
         lambda s: None if s.api_key_env is None else os.environ.get(s.api_key_env) or f"${{{s.api_key_env}}}",
         "bearer key, read from the variable serve.api_key_env names"),
)


def argv_flags(serve: Serve, build: Build) -> list[tuple[Flag, str, str | bool]]:
    """(row, spelling, value) of every option the profile sets, in the table's order. A value the engine
    takes by default on a build without the option is left out; `check` reports any other missing one."""
    out: list[tuple[Flag, str, str | bool]] = []
    for row in FLAGS:
        value = row.value(serve)
        if value is None:
            continue
        spelling = row.spelling_for(build)
        if spelling is None:
            if value == row.engine_default:
                continue
            spelling = row.flag
        out.append((row, spelling, value))
    return out


def check(serve: Serve, build: Build, arch: str | None) -> list[str]:
    """Every way the profile does not fit this build, one line per field: missing options, bad values."""
    problems = []
    for row in FLAGS:
        value = row.value(serve)
        if value is not None and row.spelling_for(build) is None and value != row.engine_default:
            problems.append(f"{row.field} needs {' / '.join(row.spellings)}, which {build.name} does not have; "
                            f"builds that have it: {', '.join(builds_with(row)) or 'none in the table'}")
        elif row.check is not None and (problem := row.check(serve, build, arch)) is not None:
            problems.append(f"{row.field} = {_shown(row, serve)}: {problem}")
    for arg in serve.extra_args:
        flag = arg.partition("=")[0]
        if flag.startswith("--") and flag not in build.options:
            problems.append(f"serve.extra_args has {flag}, which {build.name} does not have")
    return problems


def queue_trap(serve: Serve, build: Build) -> str | None:
    """A legal setting that fails in use: the admission deadline (default 30 s) counts a request's whole wait for
    admission, so one queued behind a long prompt expires (prefill runs one request at a time: seed 000 §1.5, seed
    003), and so does one waiting for a free slot when more clients send than there are slots (the engine's own
    answer: ninfer-live/g1-h200/http, three requests on one slot with a 1.5 s deadline, two 503 "expired while
    waiting for admission")."""
    timeout = serve.pending_timeout_ms or DEFAULT_PENDING_TIMEOUT_MS
    if (not build.paged_pool or timeout > DEFAULT_PENDING_TIMEOUT_MS or serve.max_concurrency < 2
            or serve.max_context < LONG_CONTEXT_TOKENS):
        return None
    return (f"serve.pending_timeout_ms is {timeout} ms with max_concurrency {serve.max_concurrency} and "
            f"max_context {serve.max_context}: a request waiting for admission longer than that (behind a long "
            "prompt, whose prefill runs one request at a time, or for a free slot while more clients send than "
            f"the {serve.max_concurrency} slots) expires with 503 request_queue_timeout; set "
            "serve.pending_timeout_ms to e.g. 600000")


def builds_with(row: Flag) -> list[str]:
    return sorted(name for name, build in BUILDS.items() if row.spelling_for(build) is not None)


def field_of(flag: str) -> str | None:
    """The profile field a flag comes from (the write-up's recipe); None for a flag the table has not."""
    return next((row.field for row in FLAGS if flag in row.spellings), None)


def _shown(row: Flag, serve: Serve) -> str:
    value = row.value(serve)
    return repr(value) if not isinstance(value, bool) else "true"


def markdown(builds: Sequence[Build] | None = None) -> str:
    """docs/ninfer-flags.md: the table as a reader sees it, with the builds that have each option."""
    builds = list(BUILDS.values()) if builds is None else list(builds)
    lines = ["# NInfer options the runbook sets", "",
             "Generated from `ninferkit/engines/ninfer/flags.py` and `builds.py` "
             "(`python -m ninferkit.engines.ninfer.flags > docs/ninfer-flags.md`); a test keeps it current.",
             "A build without an option gets the engine's default; a profile that sets another value for it is",
             "refused before anything runs.", "",
             "| option | profile field | what it does | engine default | builds that have it |",
             "|---|---|---|---|---|"]
    for row in FLAGS:
        have = [b.name for b in builds if row.spelling_for(b) is not None]
        spelled = " / ".join(f"`{s}`" for s in row.spellings)
        lacking = [b.name for b in builds if b.name not in have]
        who = "all" if not lacking else f"all but {', '.join(lacking)}" if len(lacking) < len(have) else ", ".join(have)
        lines.append(f"| {spelled} | `{row.field}` | {row.meaning} | {row.engine_default or '—'} | {who} |")
    lines += ["", "## The builds", "",
              "| build | lines like | log format | containers read | KV types | speculative (draft window) | "
              "APIs | request log schema | facts from |", "|---|---|---|---|---|---|---|---|---|"]
    for b in builds:
        containers = ", ".join(f"v{v}" for v in sorted(b.containers)) if b.containers else "not known"
        spec = ", ".join(f"{m} {lo}..{hi}" for m, (lo, hi) in b.spec_draft.items())
        kv = ", ".join(b.kv_dtypes) + "".join(f" ({arch}: {', '.join(d)})" for arch, d in b.arch_kv.items())
        lines.append(f"| `{b.name}` | {b.interface} | {b.log_format} | {containers} | {kv} | {spec} | "
                     f"{', '.join(sorted(b.apis))} | {b.request_log_schema or 'not known'} | {b.source} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
