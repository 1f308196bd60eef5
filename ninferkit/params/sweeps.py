"""The `sweeps:` section of a profile: which measurements 03_sweeps runs, and how big.

One sub-section per sweep kind. Defaults suit a GPU box; the embedded profile shrinks them.
Repetitions exclude warm-up requests, which are sent and recorded (warmup: true) but not tabulated.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ninferkit.params.base import Section

Api = Literal["chat", "messages", "responses"]
TaskName = Literal["coding", "json_extraction", "summarization", "translation", "reasoning", "bug_root_cause",
                   "chit_chat", "fiction", "agent"]
Scenario = Literal["cold", "identical_resend", "max_tokens_changed", "sentence_appended", "session_marker_changed",
                   "prompt_cache_breakpoint", "anthropic_cache_control", "responses_previous_response_id"]
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
ALL_TASKS: list[TaskName] = ["coding", "json_extraction", "summarization", "translation", "reasoning",
                             "bug_root_cause", "chit_chat", "fiction", "agent"]
ALL_SCENARIOS: list[Scenario] = ["cold", "identical_resend", "max_tokens_changed", "sentence_appended",
                                 "session_marker_changed", "prompt_cache_breakpoint", "anthropic_cache_control",
                                 "responses_previous_response_id"]


class ContextSweep(Section):
    """Prompt length against prefill rate, TTFT, decode rate and acceptance (cold prompts)."""

    enabled: bool = True
    targets: list[int] = Field(default_factory=lambda: [512, 1024, 2048], description="prompt tokens")
    output_tokens: int = Field(64, ge=1)
    repetitions: int = Field(2, ge=1)
    warmup: int = Field(1, ge=0)
    api: Api = "chat"
    pin_output: bool = Field(True, description="generate exactly output_tokens (e.g. ignore_eos)")


class TasksSweep(Section):
    """The task suite at one or more context depths: decode rate and acceptance per task."""

    enabled: bool = True
    tasks: list[TaskName] = Field(default_factory=lambda: list(ALL_TASKS))
    depths: list[int] = Field(default_factory=lambda: [8192], description="document tokens before the task")
    output_tokens: int | None = Field(None, ge=1, description="null: each task's own natural length")
    repetitions: int = Field(1, ge=1)
    warmup: int = Field(1, ge=0)
    api: Api = "chat"
    pin_output: bool = Field(False, description="true: generate exactly the output length (random models)")


class ConcurrencySweep(Section):
    """N closed-loop clients: per-request and aggregate rates, and the wait before prefill."""

    enabled: bool = True
    levels: list[int] = Field(default_factory=lambda: [1, 2, 4], description="clients sending at once")
    requests_per_client: int = Field(3, ge=1)
    prompt_tokens: int = Field(1024, ge=1)
    output_tokens: int = Field(128, ge=1)
    warmup: int = Field(1, ge=0, description="requests sent before each level, not tabulated")
    api: Api = "chat"
    pin_output: bool = True


class PrefixReuseSweep(Section):
    """Which changes to a prompt keep the prefix cache: cached tokens and TTFT per scenario."""

    enabled: bool = True
    scenarios: list[Scenario] = Field(default_factory=lambda: list(ALL_SCENARIOS))
    prompt_tokens: int = Field(16384, ge=16)
    output_tokens: int = Field(16, ge=1)
    repetitions: int = Field(2, ge=1)
    pin_output: bool = True


class ABSweep(Section):
    """Pair this run's cells with a finished baseline run of the same plan (another profile)."""

    enabled: bool = False
    baseline_run_dir: str | None = Field(None, description="run directory of the other side (A)")


class SweepsSection(Section):
    context: ContextSweep = ContextSweep()
    tasks: TasksSweep = TasksSweep()
    concurrency: ConcurrencySweep = ConcurrencySweep()
    prefix_reuse: PrefixReuseSweep = PrefixReuseSweep()
    ab: ABSweep = ABSweep()
    temperature: float = Field(0.0, ge=0.0, description="0: greedy, as the field reports measure")
    seed: int | None = Field(0, description="sent on the chat API (the Messages and Responses APIs have no seed)")
    reasoning_effort: ReasoningEffort | None = Field(
        "none", description="sent as reasoning_effort on the chat API to engines that read it (seed 000 §2: "
        "'reasoning_effort: none' unless noted); a task that names its own keeps it (reasoning: xhigh); "
        "null: never sent")
    max_errors_per_cell: int = Field(3, ge=1, description="stop rule: a cell with this many errors fails")
    request_timeout_s: float = Field(900.0, gt=0)
    telemetry: bool = Field(True, description="sample NVML, the engine log and /metrics while sweeping")
    telemetry_hz: float = Field(10.0, ge=5.0, le=100.0, description="NVML sampling rate")
