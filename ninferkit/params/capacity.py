"""The `capacity:` section of a profile: the what-if grid 04_capacity_fit answers, and how it may launch.

The grid (concurrencies x per-slot contexts x KV dtypes) is what the decision table covers. Launches
cost minutes each on a GPU with a large model, so both the fit launches (`fit_launches`) and the
search (`search`) are opt-in; without them the step fits what the launch step and saved logs show.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from ninferkit.params.base import Section


class CapacitySection(Section):
    concurrencies: list[int] = Field(default_factory=lambda: [1, 2], description="slots (max_concurrency)")
    contexts: list[int] = Field(default_factory=lambda: [4096, 8192], description="per-slot tokens")
    kv_dtypes: list[str] = Field(default_factory=list, description="KV dtypes to tabulate; empty: serve.kv.dtype")
    model: str | None = Field(None, description="NInfer target whose KV geometry sets bytes/token, e.g. "
                              "qwen3.8-27b; null: bytes/token is fitted from the data")
    vllm_config: str | None = Field(None, description="vLLM: path of the model's config.json for bytes/token")
    free_after_weights_bytes: int | list[int] | None = Field(
        None, description="device bytes free after weights for the table when no observation reports it: "
        "a number, or [low, high] when it is known only roughly (CUDA context, desktop)")
    memory_budget_bytes: int | None = Field(None, ge=1, description="stand-in device memory (weights + "
                                            "runtime) for engines with no limit to find, e.g. llama.cpp on CPU")
    fit_launches: bool = Field(False, description="launch every grid point once to observe it")
    search: bool = Field(False, description="search the largest KV pool that starts and serves a request, at "
                         "each concurrency and KV dtype of the grid")
    search_context: int | None = Field(None, ge=1, description="per-slot context of a shared-pool engine's "
                                       "search (NInfer, vLLM); null: serve's")
    max_launches: int = Field(8, ge=1, le=64, description="launch budget of each search (one per concurrency "
                              "and KV dtype of the grid)")
    prior_per_slot_bytes: list[int] | None = Field(None, description="[low, high] fixed bytes per extra slot, "
                                                   "for cells the launches do not pin")
    prior_per_context_token_bytes: list[int] | None = Field(None, description="[low, high] fixed bytes per "
                                                            "token of per-slot context")
    prior_source: str | None = Field(None, description="where the priors come from, shown beside them")

    @field_validator("prior_per_slot_bytes", "prior_per_context_token_bytes", "free_after_weights_bytes")
    @classmethod
    def _pair(cls, value: int | list[int] | None) -> int | list[int] | None:
        if isinstance(value, list) and (len(value) != 2 or value[0] > value[1]):
            raise ValueError("must be [low, high] with low <= high")
        return value

    @field_validator("concurrencies", "contexts")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if not value or any(v < 1 for v in value):
            raise ValueError("must be a non-empty list of positive integers")
        return value
