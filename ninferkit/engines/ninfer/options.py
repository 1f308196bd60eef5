"""The `serve` section of a NInfer profile: one field per `ninfer-serve` option the runbook sets.

Which build has which option, and how each field becomes a flag, is the flag table
(`ninferkit.engines.ninfer.flags`); this module only says what a value may be, and how a field an older
ninferkit recorded reads today (`RECORDED_UPGRADES`, params/history.py).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ninferkit.params.base import Section
from ninferkit.params.history import CannotUpgrade, Upgrade
from ninferkit.params.serve import ServeSection

LogLevel = Literal["trace", "debug", "info", "warning", "error", "critical", "off"]

HAS_BUILD = True
"""engine.build pins the NInfer release (commit, tarball, binary hashes)."""



class Spec(Section):
    method: str | None = Field(None, description="speculative decoding backend: mtp, dflash, dflash2")
    draft_tokens: int | None = Field(None, ge=1, le=16)
    lm_head_draft: bool = False


class Serve(ServeSection):
    spec: Spec = Spec()
    pending_timeout_ms: int | None = Field(None, ge=1, le=86_400_000,
                                           description="deadline for a queued request to be admitted")
    max_pending_requests: int | None = Field(None, ge=1, le=100_000,
                                             description="requests allowed to wait beyond concurrency")
    log_stats_interval_ms: int | None = Field(None, ge=0, le=3_600_000,
                                              description="periodic throughput line; 0 disables")
    preserve_thinking: bool = Field(False, description="keep closed-turn reasoning in later prompts")
    thinking: bool = Field(True, description="false: --no-thinking, thinking off unless a request asks")
    cors: bool = Field(False, description="permissive CORS headers (browser clients)")
    vision: bool = Field(False, description="load the Vision weights and accept images")
    vision_max_tokens: int | None = Field(None, ge=64, le=16384, description="token budget of one image")
    request_log_jsonl: str | None = Field(None, description="path of the engine's per-request JSONL log")
    tensor_parallel: int = Field(1, ge=1, le=8, description="GPUs one model is split over (serve.gpu_devices)")
    log_level: LogLevel | None = Field(None, description="stderr verbosity (debug prints the memory ledger)")

    def speculation(self) -> tuple[str | None, int | None]:
        return self.spec.method, self.spec.draft_tokens

    def tensor_parallel_size(self) -> int:
        return self.tensor_parallel


def _generation(data: dict[str, Any], value: Any) -> str | None:
    """engine.generation named the interface generation (reference/ninfer-interface.md §0) that picked the log
    format and options; a build is now the row of the build table engine.fork names, whose `interface` is that
    label. A recorded generation reads as that row where the fork's row agrees with it, or, with no fork, where
    one row alone has that interface; otherwise nothing says which build ran."""
    from ninferkit.engines.ninfer.builds import BUILDS, lookup

    if value is None:
        return None
    engine = data.get("engine") or {}
    fork = engine.get("fork")
    if fork:
        build = lookup(fork, engine.get("version"), (engine.get("build") or {}).get("commit"))
        if build is None:
            raise CannotUpgrade(f"engine.fork {fork!r} is not in today's NInfer build table "
                                "(engines/ninfer/builds.py), so nothing says which build of that interface ran")
        if build.interface != value:
            raise CannotUpgrade(f"engine.fork {fork!r} is the build {build.name}, whose interface is "
                                f"{build.interface}, not {value}")
        return f"the interface of {build.name}, engine.fork's build in the NInfer build table"
    rows = [build for build in BUILDS.values() if build.interface == value]
    if len(rows) != 1:
        raise CannotUpgrade(f"engine.fork is not set and {len(rows)} builds of the NInfer build table have interface "
                            f"{value} ({', '.join(build.name for build in rows) or 'none'}), which differ in "
                            "options and KV types")
    engine["fork"] = rows[0].name.partition("@")[0]
    return f"engine.fork {engine['fork']}, the one build of the NInfer build table with interface {value}"


RECORDED_UPGRADES = (Upgrade("engine.generation", "9dd358c (2026-12-01)", _generation),)
"""Fields of a NInfer profile an older ninferkit recorded (params/history.py)."""
