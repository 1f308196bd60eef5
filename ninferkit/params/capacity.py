"""The `capacity:` section of a profile: the what-if grid 04_capacity_fit answers, and how it may launch.

The grid (concurrencies x per-slot contexts x KV dtypes) is what the decision table covers. Launches
cost minutes each on a GPU with a large model, so both the fit launches (`fit_launches`) and the
search (`search`) are opt-in; without them the step fits what the launch step and saved logs show.

`known` holds terms typed from a report or a datasheet (a fixed part, bytes per token, free memory after
weights, the page size): a figure typed as text with its unit ("11.70 GiB") is as exact as its printed
digits (+- half a unit of the last one), which is why a YAML number with a fraction is refused (11.70 would
reach the parser as 11.7). `what_if` names settings the write-up answers in tokens and GiB.
"""

from __future__ import annotations

import re
from fractions import Fraction

from pydantic import Field, field_validator

from ninferkit.params.base import Section

UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 10**3, "MB": 10**6, "GB": 10**9}
_QUANTITY = re.compile(r"^\s*([0-9][0-9,]*(?:\.[0-9]+)?)\s*([A-Za-z]+)\s*$")
QUANTITY_FORMS = ("a whole number of bytes", "[low, high] bytes",
                  "text with a unit, e.g. '11.70 GiB' (units: " + ", ".join(UNITS) + ")")
Quantity = int | str | list[int]


def parse_quantity(value: Quantity) -> tuple[Fraction, Fraction]:
    """(low, high) bytes of a typed figure: "2.75 GiB" is [2.745, 2.755] GiB, 35904 or "35,904 B" exact."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r}: allowed: " + "; ".join(QUANTITY_FORMS))
    if isinstance(value, int):
        return Fraction(value), Fraction(value)
    if isinstance(value, list):
        if len(value) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in value) \
                or value[0] > value[1]:
            raise ValueError(f"{value!r}: a range must be [low, high] whole bytes with low <= high")
        return Fraction(value[0]), Fraction(value[1])
    found = _QUANTITY.fullmatch(str(value))
    if found is None or found.group(2) not in UNITS:
        raise ValueError(f"{value!r}: allowed: " + "; ".join(QUANTITY_FORMS))
    digits, unit = found.group(1).replace(",", ""), UNITS[found.group(2)]
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    center = Fraction(digits) * unit
    half = Fraction(unit, 2 * 10**decimals) if unit > 1 or decimals else Fraction(0)
    return center - half, center + half


def _quantity(value: Quantity | float | None) -> Quantity | None:
    if isinstance(value, float):
        raise ValueError(f"{value!r}: write it as text with its unit, e.g. '{value:.2f} GiB', so its printed "
                         "digits (how exact it is) are kept; allowed: " + "; ".join(QUANTITY_FORMS))
    if value is not None:
        parse_quantity(value)
    return value


class KnownTerms(Section):
    """Terms of the memory formula typed from a report or a datasheet rather than read from a log."""

    source: str = Field("typed in the profile", description="where the figures come from, shown beside them "
                        "(e.g. 'report 000 §2.5')")
    fixed: Quantity | None = Field(None, description="the fixed part F of runtime = F + b x pool, the same at "
                                   "every slot count and context (as a report's formula states it)")
    bytes_per_token: Quantity | None = Field(None, description="b: bytes per KV pool token (35904, '35,904 B')")
    free_after_weights: Quantity | None = Field(None, description="A: device memory free after the weights")
    weights: Quantity | None = Field(None, description="the weights' size, shown beside the answer")
    page_tokens: int | None = Field(None, ge=1, description="KV page size in tokens; must match the engine's")

    @field_validator("fixed", "bytes_per_token", "free_after_weights", "weights", mode="before")
    @classmethod
    def _typed(cls, value: Quantity | float | None) -> Quantity | None:
        return _quantity(value)


class WhatIf(Section):
    """One setting the write-up answers: the pool it needs, and the leftover or shortfall in tokens and GiB."""

    slots: int = Field(ge=1, description="max_concurrency")
    context: int = Field(ge=1, description="tokens per slot, every slot at full length (pool = slots x context)")
    fixed_less: Quantity | None = Field(None, description="memory taken off the fixed part in this case, e.g. "
                                        "'622 MiB' for CUDA graphs and state slots switched off")
    label: str | None = Field(None, description="words for the row, e.g. 'graphs off'")

    @field_validator("fixed_less", mode="before")
    @classmethod
    def _typed(cls, value: Quantity | float | None) -> Quantity | None:
        return _quantity(value)


class CapacitySection(Section):
    concurrencies: list[int] = Field(default_factory=lambda: [1, 2], description="slots (max_concurrency)")
    contexts: list[int] = Field(default_factory=lambda: [4096, 8192], description="per-slot tokens")
    kv_dtypes: list[str] = Field(default_factory=list, description="KV dtypes to tabulate; empty: serve.kv.dtype")
    model: str | None = Field(None, description="NInfer target whose KV geometry sets bytes/token, e.g. "
                              "qwen3.8-27b; null: bytes/token is fitted from the data")
    vllm_config: str | None = Field(None, description="vLLM: path of the model's config.json for bytes/token")
    known: KnownTerms | None = Field(None, description="terms typed from a report or a datasheet, fitted with "
                                     "the logs; where the two disagree both answers are shown")
    free_after_weights_bytes: None = Field(None, description="moved to capacity.known.free_after_weights; null "
                                           "is still read, so profiles recorded by older runs load")
    what_if: list[WhatIf] = Field(default_factory=list, description="settings answered in tokens and GiB, e.g. "
                                  "[{slots: 2, context: 163840}]")
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

    @field_validator("free_after_weights_bytes", mode="before")
    @classmethod
    def _moved(cls, value: object) -> None:
        if value is not None:
            raise ValueError(f"{value!r}: moved to capacity.known.free_after_weights (a number of bytes, "
                             "[low, high], or text with a unit such as '11.70 GiB'); allowed here: null")
        return None

    @field_validator("prior_per_slot_bytes", "prior_per_context_token_bytes")
    @classmethod
    def _pair(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and (len(value) != 2 or value[0] > value[1]):
            raise ValueError("must be [low, high] with low <= high")
        return value

    @field_validator("concurrencies", "contexts")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if not value or any(v < 1 for v in value):
            raise ValueError("must be a non-empty list of positive integers")
        return value
