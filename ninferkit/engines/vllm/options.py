"""The `serve` section of a vLLM profile."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from ninferkit.params.base import Section, shaped
from ninferkit.params.history import Upgrade
from ninferkit.params.serve import ServeSection

HAS_BUILD = False
"""vLLM runs as pip installed it, with its wheel's own kernels: it has no engine.build (engine.version names
the installed version)."""
RECORDED_UPGRADES: tuple[Upgrade, ...] = ()
"""Fields of this engine's profile an older ninferkit recorded (params/history.py): the shared rules read them."""



class Spec(Section):
    """Speculative decoding: `--speculative-config` as vLLM reads it (one JSON object). Which methods exist is read
    from the vLLM that will run (facts.py), so a method that version lacks is refused by name before it starts."""

    method: str | None = Field(None, **shaped(r"^[a-z0-9][a-z0-9_]*$",
                                              "a method name: lowercase letters, digits and '_'"),
                               description="the speculative method, e.g. ngram (no draft model: drafts are n-grams "
                               "the prompt already holds), eagle3, mtp, draft_model, dflash; null: off")
    num_speculative_tokens: int | None = Field(None, ge=1, le=64, description="tokens drafted per step")
    options: dict[str, int | float | str] = Field(
        default_factory=dict, description="the method's other --speculative-config keys, as vLLM names them "
        "(ngram: prompt_lookup_max, prompt_lookup_min; draft methods: model)")

    @field_validator("options")
    @classmethod
    def _names(cls, value: dict[str, int | float | str]) -> dict[str, int | float | str]:
        reserved = {"method", "num_speculative_tokens"} & set(value)
        if reserved:
            raise ValueError(f"{sorted(reserved)} have their own fields (serve.spec.method, "
                             "serve.spec.num_speculative_tokens)")
        return value


class Serve(ServeSection):
    """vLLM sizes its KV pool itself, and its scheduler batches up to `--max-num-seqs` sequences: that flag is
    the engine's concurrency, so `max_concurrency` (what the runbook plans with: capacity cells, a search "at
    C = 32") becomes it unless `max_num_seqs` says otherwise. `vllm_default` leaves the flag out, as report 001's
    command does (vLLM's own default then depends on its version and the GPU)."""

    gpu_memory_utilization: float | None = Field(None, gt=0, le=1, description="fraction of total GPU memory")
    weights_dtype: str | None = Field(None, description="--dtype: compute dtype of the weights, e.g. float16")
    swap_space_gib: float | None = Field(None, ge=0, le=4096, description="--swap-space: CPU swap space per GPU "
                                         "(vLLM before 0.18 only: the launch refuses it where the installed vLLM "
                                         "has no such option)")
    tensor_parallel: int = Field(1, ge=1, le=8, description="GPUs one model is split over (serve.gpu_devices)")
    max_num_seqs: Annotated[int, Field(ge=1, le=65_536)] | Literal["vllm_default"] | None = Field(
        None, description="--max-num-seqs: sequences in one batch; null: serve.max_concurrency; vllm_default: no "
        "flag (vLLM's default, which depends on its version and the GPU)")
    trust_remote_code: bool = Field(False, description="--trust-remote-code: run the checkpoint's own model code")
    attention_backend: str | None = Field(None, description="--attention-backend, e.g. FLASH_ATTN, TRITON_ATTN, "
                                          "FLASHINFER; checked against the installed vLLM's own list")
    prefix_caching: bool | None = Field(None, description="--enable-prefix-caching / --no-enable-prefix-caching; "
                                        "null: vLLM's default")
    enforce_eager: bool = Field(False, description="--enforce-eager: no CUDA graphs and no torch.compile (a "
                                "faster start, a slower decode)")
    tool_call_parser: str | None = Field(None, **shaped(r"^[a-z0-9][a-z0-9_-]*$",
                                                        "a parser name: lowercase letters, digits, '_' and '-'"),
                                         description="--enable-auto-tool-"
                                         "choice --tool-call-parser NAME (e.g. hermes): vLLM reads `tools` and "
                                         "streams the model's calls as tool_calls; null: no tools")
    otlp_traces_jsonl: str | None = Field(None, description="where ninferkit's OTLP receiver keeps vLLM's own "
                                          "per-request spans (--otlp-traces-endpoint), joined to the rows by "
                                          "request id, concurrent requests included; null: no tracing")
    otlp_port: int = Field(4318, ge=1, le=65_535, description="the loopback port of that receiver (OTLP/HTTP's "
                           "own port by default)")
    checkpoint_quantization: str | None = Field(
        None, **shaped(r"^[a-z0-9][a-z0-9_-]*$", "a quantization method as vLLM names it (modelopt_fp4)"),
        description="the checkpoint's quantization as vLLM names the method it reads from config.json's "
        "quantization_config (modelopt_fp4: a ModelOpt NVFP4 checkpoint; awq, gptq, fp8, ...); no flag: it says "
        "what the checkpoint is, so the plan refuses a GPU below that method's minimum compute capability (the "
        "pinned vLLM's own, engines/vllm/versions) before anything is fetched; null: not stated, vLLM checks it at "
        "start-up")
    spec: Spec = Spec()

    @field_validator("extra_args")
    @classmethod
    def _page_is_vllms_default(cls, value: list[str]) -> list[str]:
        if any(arg == "--block-size" or arg.startswith("--block-size=") for arg in value):
            raise ValueError("--block-size: ninferkit sizes vLLM's KV pool in 16-token blocks (serve.kv.capacity's "
                             "bytes, the capacity search's one-page step, the fit); another block size would put "
                             "each of them off by its pages, so it is not taken: remove it")
        return value

    def tensor_parallel_size(self) -> int:
        return self.tensor_parallel

    def max_num_seqs_flag(self) -> int | None:
        """The --max-num-seqs value (None: the flag is left out)."""
        if self.max_num_seqs == "vllm_default":
            return None
        return self.max_num_seqs or self.max_concurrency

    def speculation(self) -> tuple[str | None, int | None]:
        return self.spec.method, self.spec.num_speculative_tokens
