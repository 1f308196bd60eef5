"""Observations: what one launch (or one saved startup log) says about the memory formula.

An observation pairs numbers from the engine adapter's `parse_ledger` / `parse_refusal` with the
configuration that produced them. Every number is an interval: a value printed as "5.10 GiB" is
known to +- 0.005 GiB (the adapter gives `<key>_resolution_bytes`), a value printed in bytes is exact.

Ledger keys read (the adapters' normalized names): kv_tokens, runtime_bytes, free_after_weights_bytes,
slack_bytes, weights_bytes, kv_capacity_mode, kv_cache_bytes (KV payload alone, where printed),
first_use_bytes (what the server took after its books, where its exit report gives it),
failed_allocation_bytes (the allocation that ran out at first use, kept in `extra`: the least the pool must shrink).
Refusal keys: required_bytes, available_bytes (+ resolutions).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ninferkit.bounded import read_log
from ninferkit.capacity.interval import Interval
from ninferkit.engines import get_adapter
from ninferkit.engines.base import OUT_OF_MEMORY_AT_FIRST_USE
from ninferkit.engines.pool import PoolRule
from ninferkit.params.profile import Profile


@dataclass(frozen=True)
class Setting:
    """The configuration behind an observation. `family` is what the fixed part may depend on
    besides concurrency and context (which the fit treats as linear terms)."""

    concurrency: int
    context_per_slot: int
    kv_dtype: str | None
    kv_capacity: int | str | None = None
    spec: str | None = None
    draft_tokens: int | None = None
    prefill_chunk: int | None = None
    other: tuple[str, ...] = ()

    @classmethod
    def from_profile(cls, profile: Profile) -> Setting:
        serve = profile.serve
        spec, draft_tokens = serve.speculation()
        return cls(serve.max_concurrency, serve.max_context, serve.kv.dtype, serve.kv.capacity,
                   spec, draft_tokens, serve.prefill_chunk, tuple(serve.extra_args))

    @property
    def family(self) -> tuple[Any, ...]:
        return (self.kv_dtype, self.spec, self.draft_tokens, self.prefill_chunk, self.other)

    def label(self) -> str:
        parts = [f"C={self.concurrency}", f"S={self.context_per_slot}", f"kv={self.kv_dtype or 'default'}"]
        if self.kv_capacity is not None:
            parts.append(f"pool={self.kv_capacity}")
        if self.spec:
            parts.append(f"spec={self.spec}{self.draft_tokens or ''}")
        if self.prefill_chunk:
            parts.append(f"chunk={self.prefill_chunk}")
        return " ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "context_per_slot": self.context_per_slot,
                "kv_dtype": self.kv_dtype, "kv_capacity": self.kv_capacity, "spec": self.spec,
                "draft_tokens": self.draft_tokens, "prefill_chunk": self.prefill_chunk, "other": list(self.other)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Setting:
        return cls(int(data["concurrency"]), int(data["context_per_slot"]), data.get("kv_dtype"),
                   data.get("kv_capacity"), data.get("spec"), data.get("draft_tokens"),
                   data.get("prefill_chunk"), tuple(data.get("other") or ()))


@dataclass(frozen=True)
class Observation:
    """One launch's evidence. runtime = F + b x kv_tokens; it started iff runtime <= available."""

    source: str
    kind: str  # "ledger" (it started and printed its books) | "refusal" (it refused, with numbers)
    setting: Setting
    kv_tokens: int
    started: bool
    runtime: Interval | None = None
    available: Interval | None = None
    kv_bytes: Interval | None = None
    slack: Interval | None = None
    weights: Interval | None = None
    auto: bool = False
    served: bool | None = None
    """A real request was answered at this capacity (None: not tried)."""
    bounds_runtime: bool = True
    """Whether starting (or refusing) says runtime <= (or >) available; a refusal for another reason
    (weights alone do not fit, no room for the auto headroom) does not."""
    extra: dict[str, Any] = field(default_factory=dict)
    first_use: Interval | None = None
    """Device memory the server took after its books were printed, to run its first requests (None:
    not reported). A pool serves only if runtime + first use <= available."""

    @property
    def out_of_memory(self) -> bool:
        """Memory stopped it: a refusal, or a start whose first computation ran out (the adapter's
        diagnosis of its log); a start that failed otherwise says nothing about memory."""
        return not self.started or self.extra.get("diagnosis") == OUT_OF_MEMORY_AT_FIRST_USE

    def fixed(self, bytes_per_token: Interval) -> Interval | None:
        """The fixed part this observation implies for a slope in the given interval."""
        if self.runtime is None:
            return None
        return self.runtime - bytes_per_token.scale(self.kv_tokens)

    def as_dict(self) -> dict[str, Any]:
        def show(value: Interval | None) -> list[int | None] | None:
            return None if value is None else value.as_bytes()

        return {"source": self.source, "kind": self.kind, "setting": self.setting.as_dict(),
                "kv_tokens": self.kv_tokens, "started": self.started, "served": self.served, "auto": self.auto,
                "runtime_bytes": show(self.runtime), "free_after_weights_bytes": show(self.available),
                "kv_bytes": show(self.kv_bytes), "slack_bytes": show(self.slack),
                "weights_bytes": show(self.weights), "first_use_bytes": show(self.first_use),
                "bounds_runtime": self.bounds_runtime, **self.extra}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Observation:
        def interval(key: str) -> Interval | None:
            value = data.get(key)
            return None if value is None else Interval.of(value[0], value[1])

        known = {"source", "kind", "setting", "kv_tokens", "started", "served", "auto", "runtime_bytes",
                 "free_after_weights_bytes", "kv_bytes", "slack_bytes", "weights_bytes", "first_use_bytes",
                 "bounds_runtime"}
        return cls(data["source"], data["kind"], Setting.from_dict(data["setting"]), int(data["kv_tokens"]),
                   bool(data["started"]), interval("runtime_bytes"), interval("free_after_weights_bytes"),
                   interval("kv_bytes"), interval("slack_bytes"), interval("weights_bytes"), bool(data.get("auto")),
                   data.get("served"), bool(data.get("bounds_runtime", True)),
                   {k: v for k, v in data.items() if k not in known}, interval("first_use_bytes"))


def _value(record: Mapping[str, Any], key: str) -> Interval | None:
    if record.get(key) is None:
        return None
    return Interval.rounded(record[key], record.get(f"{key}_resolution_bytes"))


def from_ledger(ledger: Mapping[str, Any], setting: Setting, source: str) -> Observation | None:
    """A started server's books; None when the ledger has no pool size (nothing to fit)."""
    if ledger.get("kv_tokens") is None:
        return None
    auto = ledger.get("kv_capacity_mode") == "auto" or setting.kv_capacity == "auto"
    return Observation(source, "ledger", setting, int(ledger["kv_tokens"]), True,
                       runtime=_value(ledger, "runtime_bytes"), available=_value(ledger, "free_after_weights_bytes"),
                       kv_bytes=_value(ledger, "kv_cache_bytes"), slack=_value(ledger, "slack_bytes"),
                       weights=_value(ledger, "weights_bytes"), auto=auto, first_use=_value(ledger, "first_use_bytes"),
                       extra={key: ledger[key] for key in ("failed_allocation_bytes",) if key in ledger})


def from_refusal(refusal: Mapping[str, Any], setting: Setting, rule: PoolRule, source: str) -> Observation:
    """A refused start, read by which parts the adapter found in the message.

    - runtime_reservation_bytes: the runtime the requested pool needs. For `auto` that is the
      minimum reservation B_min, i.e. the runtime at the smallest legal pool (the headroom is not
      part of it, capacity-model.md §1.4).
    - with weights_bytes as well, available_bytes was measured before the weights were loaded
      (NInfer G0, llama.cpp), so free after weights = available - weights.
    - with only headroom_bytes, the engine refused before sizing anything: free after weights is
      known, the runtime is not.
    """
    auto = setting.kv_capacity == "auto"
    tokens = rule.requested_pool(setting.concurrency, setting.context_per_slot, setting.kv_capacity)
    runtime = available = None
    if refusal.get("runtime_reservation_bytes") is not None:
        runtime = Interval.rounded(refusal["runtime_reservation_bytes"],
                                   refusal.get("runtime_reservation_bytes_resolution_bytes",
                                               refusal.get("required_bytes_resolution_bytes")))
        available = _value(refusal, "available_bytes")
        if available is not None and refusal.get("weights_bytes") is not None:
            available = available - Interval.rounded(refusal["weights_bytes"],
                                                     refusal.get("weights_bytes_resolution_bytes"))
    elif refusal.get("headroom_bytes") is not None:
        available = _value(refusal, "available_bytes")
    extra = {key: refusal[key] for key in ("kind", "line") if refusal.get(key) is not None}
    return Observation(source, "refusal", setting, tokens, False, runtime=runtime, available=available,
                       auto=auto, bounds_runtime=runtime is not None, extra=extra)


def setting_from_ledger(ledger: Mapping[str, Any], base: Setting) -> Setting:
    """The setting a log reports about itself (slots, per-slot context, KV dtype) over the assumed one."""
    return replace(base, concurrency=int(ledger.get("max_concurrency") or base.concurrency),
                   context_per_slot=int(ledger.get("max_context") or base.context_per_slot),
                   kv_dtype=ledger.get("kv_dtype") or base.kv_dtype)


def from_log(kind: str, log_text: str, setting: Setting, rule: PoolRule, source: str) -> Observation | None:
    """Read one server log through the engine's adapter: its refusal if it refused, else its ledger,
    with the adapter's diagnosis of any failure in it (`extra["diagnosis"]`).

    What the log prints about its own setting (slots, context, KV dtype) wins over `setting`.
    """
    adapter = get_adapter(kind)
    ledger = adapter.parse_ledger(log_text)
    setting = setting_from_ledger(ledger, setting)
    refusal = adapter.parse_refusal(log_text)
    found = from_refusal(refusal, setting, rule, source) if refusal is not None else from_ledger(ledger, setting,
                                                                                                  source)
    diagnosis = adapter.diagnose(log_text)
    if found is None or diagnosis is None:
        return found
    return replace(found, extra={**found.extra, "diagnosis": diagnosis.code})


def from_log_file(kind: str, path: Path, setting: Setting, rule: PoolRule) -> Observation | None:
    """The observation in a startup log a user named (capacity fit): a regular file, read as bounded.read_log."""
    return from_log(kind, read_log(path, "fitting the capacity formula"), setting, rule, str(path))


def from_served(pool: Mapping[str, Any], setting: Setting, source: str, served: bool | None) -> Observation:
    """A running server's own report of its pool (`ApiDialect.served_pool`: vLLM's /metrics, llama-server's
    /props): the pool's size at the setting it reports, started, with no bytes (a server says none over HTTP),
    so it bounds nothing in the fit until a log or typed terms give the memory beside it."""
    return Observation(source, "ledger", setting_from_ledger(pool, setting), int(pool["kv_tokens"]), True,
                       served=served, extra={"reported_by": pool.get("source")})


def with_served(observation: Observation, served: bool) -> Observation:
    return replace(observation, served=served)
