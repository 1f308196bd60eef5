"""The `sweeps:` section of a profile: which measurements 03_sweeps runs, and how big.

One sub-section per sweep kind, named as its module in ninferkit/sweeps/kinds/ (which reads it; this
schema imports no kind), in the order the kinds run and tabulate. `ab` pairs runs and is no kind. Defaults
suit a GPU box; the embedded profile shrinks them.
What a profile names is what runs: a kind whose sub-section the profile leaves out is off (a user trimming a
run deletes a section and gets a shorter run, not the defaults), and a named one runs unless it says
`enabled: false` (rate, sessions, agent and trace are off until they say `enabled: true`).
Repetitions exclude warm-up requests, which are sent and recorded (warmup: true) but not tabulated.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field, model_validator

from ninferkit.params.base import Section

Api = Literal["chat", "messages", "responses"]
TaskName = Literal["coding", "json_extraction", "summarization", "translation", "reasoning", "bug_root_cause",
                   "chit_chat", "fiction", "agent"]
Scenario = Literal["cold", "identical_resend", "max_tokens_changed", "sentence_appended", "session_marker_changed",
                   "prompt_cache_breakpoint", "anthropic_cache_control", "responses_previous_response_id"]
ThinkTime = Literal["fixed", "exponential"]
ToolApi = Literal["chat", "messages"]
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
MAX_TOKENS = 16_777_216
"""serve.max_context's own bound: no prompt or output is longer."""
MAX_COUNT = 10_000
"""Repetitions, warm-ups and requests per client: beyond this a sweep would run for days."""
MAX_CLIENTS = 1024
"""Concurrent clients of the concurrency sweep (one connection each)."""
MAX_REPEATS = 100
"""Reruns of every cell (`repeats`): each repeat is the whole plan again."""
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
Clients = Annotated[int, Field(ge=1, le=MAX_CLIENTS)]
ALL_TASKS: list[TaskName] = ["coding", "json_extraction", "summarization", "translation", "reasoning",
                             "bug_root_cause", "chit_chat", "fiction", "agent"]
ALL_SCENARIOS: list[Scenario] = ["cold", "identical_resend", "max_tokens_changed", "sentence_appended",
                                 "session_marker_changed", "prompt_cache_breakpoint", "anthropic_cache_control",
                                 "responses_previous_response_id"]


class ContextSweep(Section):
    """Prompt length against prefill rate, TTFT, decode rate and acceptance (cold prompts)."""

    enabled: bool = True
    targets: list[Tokens] = Field(default_factory=lambda: [512, 1024, 2048], description="prompt tokens")
    output_tokens: int = Field(64, ge=1, le=MAX_TOKENS)
    repetitions: int = Field(2, ge=1, le=MAX_COUNT)
    warmup: int = Field(1, ge=0, le=MAX_COUNT)
    api: Api = "chat"
    pin_output: bool = Field(True, description="generate exactly output_tokens (e.g. ignore_eos)")


class TasksSweep(Section):
    """The task suite at one or more context depths: decode rate and acceptance per task."""

    enabled: bool = True
    tasks: list[TaskName] = Field(default_factory=lambda: list(ALL_TASKS))
    depths: list[Annotated[int, Field(ge=0, le=MAX_TOKENS)]] = Field(
        default_factory=lambda: [8192], description="document tokens before the task")
    output_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS, description="null: each task's own natural length")
    concurrency: dict[Annotated[int, Field(ge=0, le=MAX_TOKENS)], Clients] = Field(
        default_factory=dict, description="requests of a task sent at once, by depth ({8192: 2}: at 8,192 each "
        "repetition is two requests at once, each its own document, seed 003 §二's C2 rows); a depth not named: one "
        "at a time; a depth named that depths lacks sends nothing (the plan notes it), so -p can trim depths alone")
    repetitions: int = Field(1, ge=1, le=MAX_COUNT)
    warmup: int = Field(1, ge=0, le=MAX_COUNT)
    api: Api = "chat"
    pin_output: bool = Field(False, description="true: generate exactly the output length (random models)")
    speculation_ab: bool = Field(False, description="also run every task with speculative decoding off, on a second "
                                 "server of this profile with serve.spec reset, beside the run's own: both sides "
                                 "of the A/B in one run (it needs memory for both servers)")
    task_depths: dict[TaskName, list[Annotated[int, Field(ge=0, le=MAX_TOKENS)]]] = Field(
        default_factory=dict, description="a task measured at its own depths instead of `depths` (seed 000 §2.3: "
        "the summary after its 5.9K document, every other task alone)")

    @model_validator(mode="after")
    def _depths_of_run_tasks(self) -> TasksSweep:
        """A depth for a task the sweep does not run would plan nothing, and its author meant something."""
        idle = [name for name in self.task_depths if name not in self.tasks]
        if idle:
            raise ValueError(f"task_depths names {', '.join(idle)}, not in sweeps.tasks.tasks; allowed: "
                             f"{', '.join(self.tasks)}")
        empty = [name for name, depths in self.task_depths.items() if not depths]
        if empty:
            raise ValueError(f"task_depths gives {', '.join(empty)} no depth; leave it out to use sweeps.tasks.depths")
        return self

    def depths_of(self, task: str) -> list[int]:
        """The depths `task` is measured at: its own where task_depths names it, else the sweep's."""
        return next((depths for name, depths in self.task_depths.items() if name == task), self.depths)


class ConcurrencySweep(Section):
    """N closed-loop clients: per-request and aggregate rates, and the wait before prefill."""

    enabled: bool = True
    levels: list[Clients] = Field(default_factory=lambda: [1, 2, 4], description="clients sending at once")
    requests_per_client: int = Field(3, ge=1, le=MAX_COUNT)
    prompt_tokens: int = Field(1024, ge=1, le=MAX_TOKENS)
    output_tokens: int = Field(128, ge=1, le=MAX_TOKENS)
    warmup: int = Field(1, ge=0, le=MAX_COUNT, description="requests sent before each level, not tabulated")
    api: Api = "chat"
    pin_output: bool = True
    cached: bool = Field(False, description="every request sends one prompt, which the warm-up puts in the prefix "
                         "cache, so each lane is served from it (seed 000 §2.2's two concurrent 8K requests, both "
                         "cache hits); false: each prompt cold")


class LatencyTargets(Section):
    """What a request must meet to count toward goodput (vLLM's `--goodput`, DistServe); null: no target.
    ninferkit/measure/latency.py defines each metric, with the names other tools give it."""

    ttft_s: float | None = Field(None, gt=0, le=86_400, description="client time to first token, seconds")
    tpot_s: float | None = Field(None, gt=0, le=86_400, description="time per output token after the first, "
                                 "seconds (vLLM's TPOT; AIPerf's and GuideLLM's ITL)")
    itl_s: float | None = Field(None, gt=0, le=86_400, description="the longest gap between two text events of a "
                                "request, seconds (vLLM's ITL; AIPerf's ICL): no stall longer than this")


class RateSweep(Section):
    """Open loop: requests arrive at each offered rate (Poisson, seeded: the same seed gives the same
    schedule, scaled by the rate), whether or not earlier ones have ended; goodput under `slo`, and whether
    the server kept up with the rate (its latency did not grow as requests kept arriving)."""

    enabled: bool = Field(False, description="off by default: run it with --only rate, or set true")
    rates: list[Annotated[float, Field(gt=0, le=10_000)]] = Field(
        default_factory=lambda: [0.5, 1.0, 2.0, 4.0], description="requests per second offered, one cell each, "
        "in this order: up to a rate the server cannot keep up with")
    requests: int | None = Field(32, ge=1, le=MAX_COUNT, description="requests per rate (null: use duration_s)")
    duration_s: float | None = Field(None, gt=0, le=86_400, description="seconds of arrivals per rate, instead "
                                     "of a request count")
    prompt_tokens: int = Field(1024, ge=1, le=MAX_TOKENS)
    output_tokens: int = Field(128, ge=1, le=MAX_TOKENS)
    warmup: int = Field(1, ge=0, le=MAX_COUNT, description="requests sent one at a time before each rate")
    api: Api = "chat"
    pin_output: bool = True
    arrival_seed: int = Field(0, description="seed of the arrival times")
    slo: LatencyTargets = LatencyTargets()

    @model_validator(mode="after")
    def _one_length(self) -> RateSweep:
        if (self.requests is None) == (self.duration_s is None):
            raise ValueError("set exactly one of requests and duration_s (the other null)")
        return self


class PrefixReuseSweep(Section):
    """Which changes to a prompt keep the prefix cache: cached tokens and TTFT per scenario."""

    enabled: bool = True
    scenarios: list[Scenario] = Field(default_factory=lambda: list(ALL_SCENARIOS))
    prompt_tokens: int = Field(16384, ge=16, le=MAX_TOKENS)
    output_tokens: int = Field(16, ge=1, le=MAX_TOKENS)
    repetitions: int = Field(2, ge=1, le=MAX_COUNT)
    pin_output: bool = True


class SessionsSweep(Section):
    """N concurrent sessions of K turns, each turn's real reply sent back in the next turn's history, with
    think time between turns: per turn, prompt and cached tokens and TTFT, on each API asked for."""

    enabled: bool = Field(False, description="off by default: run it with --only sessions, or set true")
    apis: list[Api] = Field(default_factory=lambda: list(get_args(Api)),
                            description="one cell each: Chat resends the history; Messages resends it behind a "
                            "cache_control breakpoint, Responses names the last reply by previous_response_id, "
                            "each where the engine reads the field")
    sessions: Clients = Field(2, description="sessions running at once")
    turns: int = Field(4, ge=1, le=256, description="turns per session")
    document_tokens: int = Field(512, ge=1, le=MAX_TOKENS, description="the document the first turn asks about "
                                 "(a fresh session marker first, so no session shares another's prefix)")
    output_tokens: int = Field(32, ge=1, le=MAX_TOKENS)
    pin_output: bool = Field(True, description="every reply exactly output_tokens long: the history grows alike "
                             "on every engine")
    think_time_s: float = Field(0.0, ge=0, le=3600, description="seconds between a reply and the next turn "
                                "(the mean where think_time is exponential)")
    think_time: ThinkTime = Field("fixed", description="fixed, or drawn from an exponential law (seeded)")
    think_seed: int = Field(0, description="seed of the drawn think times")


class AgentSweep(Section):
    """An agent loop that loops: the model's own tool calls are parsed, run against small local tools
    (ninferkit/measure/agent_tools.py) and their results sent back, until it answers or reaches the round-trip limit."""

    enabled: bool = Field(False, description="off by default: run it with --only agent, or set true")
    apis: list[ToolApi] = Field(default_factory=lambda: list(get_args(ToolApi)),
                                description="Chat `tool_calls`, Anthropic `tool_use`")
    sessions: Clients = Field(1, description="agent sessions running at once")
    max_round_trips: int = Field(4, ge=1, le=64, description="requests per session at most: the loop's limit")
    output_tokens: int = Field(128, ge=1, le=MAX_TOKENS)
    tool_choice: Literal["auto", "required"] = Field(
        "auto", description="required: the model must call a tool every round trip (the loop ends at the limit)")


class TraceSweep(Section):
    """Replay a Mooncake-style trace open loop (ninferkit/measure/traces.py): each request sent at its timestamp
    divided by `speed`, its prompt built block by block from its hash_ids so shared ids share a prefix."""

    enabled: bool = Field(False, description="off by default: run it with --only trace, or set true")
    path: str | None = Field(None, description="the trace, relative to the working directory and inside it "
                             "(`ninferkit trace RUN_DIR > traces/yesterday.jsonl` writes one); null: the small "
                             "trace ninferkit ships")
    block_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS, description="prompt tokens per hash id; null: "
                                     "512 (Mooncake's) for a path, 64 for the shipped trace")
    speed: float = Field(1.0, gt=0, le=1000, description="2: the trace's requests arrive twice as fast")
    api: Api = "chat"

    @model_validator(mode="after")
    def _inside(self) -> TraceSweep:
        if self.path is not None and (self.path.startswith("/") or ".." in self.path.split("/") or not self.path):
            raise ValueError(f"path {self.path!r}: a path relative to the working directory, inside it (no "
                             "leading /, no ..)")
        return self


class ABSweep(Section):
    """Pair this run's cells with a finished baseline run of the same plan (another profile)."""

    enabled: bool = False
    baseline_run_dir: str | None = Field(None, description="run directory of the other side (A)")


KINDS_ON_WHEN_NAMED = ("context", "tasks", "concurrency", "prefix_reuse")
"""The kinds whose `enabled` defaults to true: on when the profile names their sub-section, off when it does not."""


class SweepsSection(Section):
    context: ContextSweep = ContextSweep()
    tasks: TasksSweep = TasksSweep()
    concurrency: ConcurrencySweep = ConcurrencySweep()
    rate: RateSweep = RateSweep()
    prefix_reuse: PrefixReuseSweep = PrefixReuseSweep()
    sessions: SessionsSweep = SessionsSweep()
    agent: AgentSweep = AgentSweep()
    trace: TraceSweep = TraceSweep()
    ab: ABSweep = ABSweep()
    temperature: float | None = Field(0.0, ge=0.0, description="0: greedy, as seed 000 measures; null: no temperature "
                                      "is sent and the engine samples as it does by default (seed 003 §二: '默认采样': "
                                      "speculative acceptance depends on it)")
    seed: int | None = Field(0, description="sent on the chat API (the Messages and Responses APIs have no seed)")
    reasoning_effort: ReasoningEffort | None = Field(
        "none", description="sent as reasoning_effort on the chat API to engines that read it (seed 000 §2: "
        "'reasoning_effort: none' unless noted); a task that names its own keeps it (reasoning: xhigh); "
        "null: never sent")
    repeats: int = Field(1, ge=1, le=MAX_REPEATS, description="run every cell this many times, each repeat its own "
                         "cell in the ledger (a rerun resumes mid-repeats); tables then give the median of the "
                         "repeats with its bootstrap confidence interval, and compare says whether a difference lies "
                         "outside it")
    max_errors_per_cell: int = Field(3, ge=1, le=MAX_COUNT, description="stop rule: a cell with this many errors fails")
    request_timeout_s: float = Field(900.0, gt=0, le=86_400)
    telemetry: bool = Field(True, description="sample NVML, the engine log and /metrics while sweeping")
    telemetry_hz: float = Field(10.0, ge=5.0, le=100.0, description="NVML sampling rate")

    @model_validator(mode="before")
    @classmethod
    def _unnamed_kinds_are_off(cls, data: object) -> object:
        """A kind the profile leaves out does not run with the defaults (see the module's docstring)."""
        if isinstance(data, dict):
            return {**{kind: {"enabled": False} for kind in KINDS_ON_WHEN_NAMED if kind not in data}, **data}
        return data
