"""What each NInfer build has: how it logs, which containers it reads, its options, KV types and APIs.

NInfer changed its command line, stderr format, request-log schema and artifact container several
times in 2026, and forks were cut at different points and then grew on their own: the V100 report's
fork prints G3's pipe lines and has `--log-level`, but reads only container v2 like G1. So a build
is described by what it has, trait by trait, never by one generation label. `interface` names the
section of reference/ninfer-interface.md that documents its lines, nothing more.

A profile names its build with `engine.fork` (and `engine.version` where a fork's versions differ);
a build not in the table is described from its own `--help` and first log lines (`detect_build`).
Every row says where its facts come from: "IF §x" is reference/ninfer-interface.md section x, a
seed file is one of the four field reports in shared/seeds/, "live" is shared/ninfer-live/.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ninferkit.engines.ninfer.logs import log_format_of
from ninferkit.engines.ninfer.reading import LogFormat
from ninferkit.errors import ProfileError

# Option sets (IF §1.1-1.3; the G1 set equals the live `ninfer-serve --help`, ninfer-live/g1-h200/help.txt).
CORE_OPTIONS = frozenset({
    "--host", "--port", "--api-key", "--model-id", "--max-context", "--prefill-chunk", "--device",
    "--max-request-mib", "--request-log-jsonl", "--kv-dtype", "--spec", "--draft-tokens", "--lm-head-draft",
    "--default-max-tokens", "--vision", "--no-cuda-graph", "--no-prefix-reuse", "--no-thinking", "--cors",
    "--temperature", "--top-p", "--top-k", "--presence-penalty", "--frequency-penalty", "--seed", "--greedy",
})
POOL_OPTIONS = frozenset({
    "--min-p", "--kv-capacity", "--max-concurrency", "--max-pending-requests", "--pending-timeout-ms",
    "--log-stats-interval-ms", "--response-store-max-records", "--response-store-max-mib", "--preserve-thinking",
})
CONTEXT_CACHE_OPTIONS = frozenset({
    "--device-state-slots", "--host-state-slots", "--host-kv-mib", "--max-private-continuations",
    "--max-shared-prefixes", "--max-long-anchors-per-continuation", "--media-cache-mib", "--media-live-mib",
    "--media-preprocess-threads", "--context-cost-presets", "--default-thinking-budget",
})
G2_OPTIONS = frozenset({
    "--api-key-file", "--kv-slack-floor-mib", "--desktop-reserve-gib", "--desktop-reserve-mib",
    "--clamp-concurrency-to-pool", "--repetition-penalty", "--gdn-state-dtype", "--output-head-dtype",
    "--token-embedding-dtype", "--no-qsa-prefill-mma", "--tolerant-tool-calls",
})
G3_OPTIONS = frozenset({"--log-level", "--vram-headroom-mib", "--chat-template"})

G1_SET = CORE_OPTIONS | POOL_OPTIONS
BASE_KV = ("bf16", "int8")
WIDE_KV = ("bf16", "int8", "fp8", "nvfp4", "k8v4")
MTP_DFLASH = {"mtp": (1, 5), "dflash": (1, 15)}
WITH_DFLASH2 = {**MTP_DFLASH, "dflash2": (1, 15)}
ALL_APIS = frozenset({"chat", "messages", "responses"})


@dataclass(frozen=True)
class Build:
    """One NInfer build's interface, as a client needs it."""

    name: str
    interface: str
    log_format: LogFormat
    containers: frozenset[int] | None
    options: frozenset[str]
    kv_dtypes: tuple[str, ...]
    spec_draft: Mapping[str, tuple[int, int]]
    apis: frozenset[str]
    request_log_schema: int | None
    source: str
    arch_kv: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """KV dtypes that run on an architecture, where fewer than the parser accepts (Volta has no fp8 kernels)."""
    vision_needs_budget: str | None = None
    """Where it is documented that --vision without the image token budget fails image requests silently."""
    request_fields: frozenset[str] = frozenset()
    """Request extensions beyond the core API that the build reads (reasoning_effort, prompt_cache_breakpoint, ...)."""

    @property
    def tensor_parallel(self) -> bool:
        """Splits one model over two GPUs (`--tp 2 --devices A,B`)."""
        return "--tp" in self.options

    @property
    def paged_pool(self) -> bool:
        """Concurrent requests over a shared, paged KV pool (`--kv-capacity`); G0 builds run one sequence."""
        return "--kv-capacity" in self.options

    def kv_dtypes_on(self, arch: str | None) -> tuple[str, ...]:
        if arch is not None and arch in self.arch_kv:
            return tuple(d for d in self.kv_dtypes if d in self.arch_kv[arch])
        return self.kv_dtypes


_VOLTA = {"sm_70": BASE_KV}
_G3_FIELDS = frozenset({"reasoning_effort", "prompt_cache_breakpoint", "cache_control", "timings"})
_G2_FIELDS = frozenset({"reasoning_effort", "prompt_cache_breakpoint", "cache_control"})

BUILDS: dict[str, Build] = {b.name: b for b in (
    Build("Neroued/ninfer@5ea3242", "G0", "plain", frozenset({1}), CORE_OPTIONS, BASE_KV, MTP_DFLASH,
          frozenset({"chat", "messages"}), 2,
          "IF §0 G0 (upstream 2026-07-24): §1.1 options, §2.1 lines, §5.1 schema v2, §6 container v1"),
    Build("geoffwatts/ninfer-v100", "G1", "bracketed", frozenset({2}), G1_SET, BASE_KV, MTP_DFLASH,
          ALL_APIS, 9, "IF §0 G1 (f405d3d), §6 'geoffwatts/G1 upstream v2 only', §8 (NVFP4 trap-stubbed on V100)",
          arch_kv=_VOLTA, request_fields=frozenset({"reasoning_effort"})),
    Build("ziworkslab/ninfer-3090-ubuntu", "G1", "bracketed", frozenset({1, 2}), G1_SET, BASE_KV, MTP_DFLASH,
          ALL_APIS, 8,
          "live: ninfer-live/g1-h200 (f750a5d): help.txt options, startup-errors/v3_header.log 'artifact magic "
          "is not NInfer v1 or v2', http/http_probe.json (/v1/models without max_model_len)",
          request_fields=frozenset({"reasoning_effort"})),
    Build("mylordmonkeyman/ninfer-v100", "G2", "keyvalue", frozenset({2}),
          G1_SET | CONTEXT_CACHE_OPTIONS | G2_OPTIONS, WIDE_KV, WITH_DFLASH2, ALL_APIS, 19,
          "IF §0 G2, §1.3, §2.3, §8 (its V100 qualification ran fp8 KV)",
          request_fields=_G2_FIELDS),
    Build("hamawang/ninfer-v100-20260916@f17d37f", "G3", "pipe", frozenset({2}), G1_SET | {"--log-level"},
          BASE_KV, MTP_DFLASH, ALL_APIS, None,
          "seed 000: §0 engine pin, §1.4 'this engine reads only v2' (FATAL … artifact magic is not NInfer v2), "
          "§1.5 command line, §1.6 pipe log lines and --log-level debug, /v1/models max_model_len, §1.5 'Volta "
          "has no fp8 / nvfp4 / k8v4 KV kernels', §2.6 Anthropic cache_control, prompt_cache_breakpoint and "
          "Responses; options beyond the report's command are G1's (its source is not covered, IF §9 q9)",
          arch_kv=_VOLTA, request_fields=_G2_FIELDS),
    Build("Don-Chad/ninfer-3090@0.6.1", "G3", "pipe", frozenset({1, 2}),
          G1_SET | CONTEXT_CACHE_OPTIONS | G3_OPTIONS | {"--devices", "--stage-layers", "--vision-max-merged",
                                                         "--no-exit-on-engine-failure", "--slot-save-path"},
          (*WIDE_KV, "rk8v4", "rk4v4"), {**WITH_DFLASH2, "mtp": (1, 15)}, ALL_APIS, 21,
          "seed 003: prebuilt v0.6.1 tarball, 'artifact magic is not NInfer v1 or v2', rk8v4 KV, 'fp8 KV is "
          "rejected on SM86'; the option set and pipe lines are Don-Chad's late serve_options (IF §0 G3, §1.3)",
          arch_kv={"sm_86": tuple(d for d in (*WIDE_KV, "rk8v4", "rk4v4") if d != "fp8")}, request_fields=_G3_FIELDS),
    Build("plus1998/NInfer-V100-Duo@19bf15b", "G1", "bracketed", frozenset({2}),
          G1_SET | {"--tp", "--devices", "--vision-max-tokens"}, BASE_KV, MTP_DFLASH, ALL_APIS, 9,
          "seed 004: TP2 over two V100-SXM2 (--tp 2 --devices 0,1), --vision --vision-max-tokens, MTP 3-5; "
          "based on geoffwatts/ninfer-v100 (IF §0, §8), so its lines and container reader are G1's",
          arch_kv=_VOLTA, request_fields=frozenset({"reasoning_effort"}),
          vision_needs_budget="seed 004 §六.5: --vision and --vision-max-tokens must be set together"),
    Build("Flo5k5/ninfer-v100-sm70", "G3", "pipe", frozenset({3}),
          G1_SET | CONTEXT_CACHE_OPTIONS | G3_OPTIONS | {"--lookup-policy", "--lookup-min-suffix",
                                                         "--lookup-max-proposal"},
          ("bf16", "int8", "fp8"), {**WITH_DFLASH2, "mtp": (1, 7)}, ALL_APIS, 21,
          "IF §0 G3, §6 'Flo5k5: v3 only', §8 (BF16, INT8, FP8 on sm_70; MTP 1..7)", request_fields=_G3_FIELDS),
    Build("ValerioDolci/ninfer-tp2", "G3", "pipe", frozenset({3}),
          G1_SET | CONTEXT_CACHE_OPTIONS | G3_OPTIONS | {"--tp", "--devices", "--vision-device", "--no-tp-mailbox",
                                                         "--embedding-host", "--turn-anchors", "--max-vision-tokens"},
          WIDE_KV, WITH_DFLASH2, ALL_APIS, 21,
          "IF §0 G3, §1.4 'Two GPUs' (fp8 and k8v4 KV rejected at tp 2), §8 (sm_120)", request_fields=_G3_FIELDS),
    Build("zhongpei/ninfer-4090", "G3", "pipe", frozenset({3}), G1_SET | CONTEXT_CACHE_OPTIONS | G3_OPTIONS,
          WIDE_KV, WITH_DFLASH2, ALL_APIS, 21, "IF §0 G3 (b76e70d), §2.4 lines, §6 v3 reader",
          request_fields=_G3_FIELDS),
)}
TP2_KV_REJECTED = frozenset({"fp8", "k8v4"})  # IF §1.4: ValerioDolci docs/serving.md "Two GPUs"


def known_builds() -> list[str]:
    return sorted(BUILDS)


def lookup(fork: str | None, version: str | None = None, commit: str | None = None) -> Build | None:
    """The table's row for a profile's engine: the build pinned to `version` or a prefix of `commit`,
    else the fork's only row (or its unpinned one); None for a fork the table does not know."""
    if fork is None:
        return None
    rows = {name: build for name, build in BUILDS.items() if name.partition("@")[0] == fork}
    for name, build in rows.items():
        pin = name.partition("@")[2]
        if pin and (pin == version or (commit is not None and commit.startswith(pin))):
            return build
    if len(rows) == 1:
        return next(iter(rows.values()))
    if fork in rows:
        return rows[fork]
    if rows:
        raise ProfileError(f"engine.version: the table knows these builds of {fork}: {', '.join(sorted(rows))}; "
                           "set engine.version (or engine.build.commit) to the one you run")
    return None


# ---------------------------------------------------------------------------------------------
# A build the table does not know, described from its own --help and first log lines
# ---------------------------------------------------------------------------------------------

_OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
_CHOICES = re.compile(r"--(?P<flag>kv-dtype|spec)[ =](?P<choices>[\w]+(?:\|[\w]+)+)")
CONTAINER_REFUSAL = r"artifact magic is not NInfer (?P<which>v1 or v2|v2|v1|version 1)"
"""A v1/v2 reader's refusal of a file (IF §3.1; live: startup-errors/v3_header.log); diagnoses.py too."""
_READER = re.compile(CONTAINER_REFUSAL + r"|(?P<v3only>NInfer v2 artifact is not supported|expected NInfer v3 entry "
                     r"magic)")


def containers_from_log(log_text: str) -> frozenset[int] | None:
    """The container versions a build reads, from its own refusal of a file; None when it refused none."""
    found = _READER.search(log_text)
    if found is None:
        return None
    if found["v3only"]:
        return frozenset({3})
    return {"v1 or v2": frozenset({1, 2}), "v2": frozenset({2})}.get(found["which"], frozenset({1}))


def detect_build(help_text: str, log_text: str = "") -> Build:
    """A build described by what it prints: options and choices from `--help`, log format from its first
    lines (or, before it has logged, the format IF §0 pairs with its options), readers from a refusal."""
    options = frozenset(_OPTION.findall(help_text))
    if "--max-context" not in options:
        raise ProfileError("this --help text is not ninfer-serve's (no --max-context); point engine.binary at "
                           "ninfer-serve, or set engine.fork to a build of the table: " + ", ".join(known_builds()))
    choices = {m["flag"]: tuple(m["choices"].split("|")) for m in _CHOICES.finditer(help_text)}
    fmt: LogFormat
    if "--log-level" in options:
        interface, fmt = "G3", "pipe"
    elif "--device-state-slots" in options:
        interface, fmt = "G2", "keyvalue"
    elif "--kv-capacity" in options:
        interface, fmt = "G1", "bracketed"
    else:
        interface, fmt = "G0", "plain"
    fmt = log_format_of(log_text) or fmt
    spec = {method: MTP_DFLASH.get(method, (1, 15)) for method in choices.get("spec", ("mtp", "dflash"))}
    apis = ALL_APIS if "--response-store-max-records" in options else frozenset({"chat", "messages"})
    return Build("detected from --help", interface, fmt, containers_from_log(log_text), options,
                 choices.get("kv-dtype", BASE_KV), spec, apis, None,
                 "this binary's --help" + (" and log" if log_text else ""))
