"""The `serve` section of a NInfer profile: one field per `ninfer-serve` option the runbook sets.

Which build has which option, and how each field becomes a flag, is the flag table
(`ninferkit.engines.ninfer.flags`); this module only says what a value may be.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ninferkit.params.base import Section
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
