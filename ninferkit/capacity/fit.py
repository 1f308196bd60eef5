"""The fit: which memory formulas agree with every observation, as intervals.

Model (capacity-model.md §5.1), per family of settings that differ only in slots C and per-slot
context S (same KV dtype, speculation, prefill chunk, extra flags):

    runtime(C, S, K) = F(C, S) + b x K          K = pool tokens, b = bytes per pool token
    F(C, S) = F_ref + f_slot x (C - C_ref) + f_ctx x (S - S_ref)
    it serves iff runtime + U <= A              A = free after weights, U = taken at first use

b comes from the architecture when it is known (its cache part checked against KV payload lines where
the engine prints them, plus any compute buffer that grows per pool token), else from payload lines,
else it is a fourth unknown. Every observation is a linear constraint with an interval right-hand
side (rounding of printed units); the consistent set is enumerated exactly (`polytope`). A term the
data cannot pin (one concurrency seen: f_slot) comes back unbounded and is listed in
`terms_unpinned`, and so is every prediction that needs it.

U is what a server took after its books were printed, to run its first requests (CUDA kernels loaded
on first use, cuBLAS, ggml's pool: about 175 MiB on an H200, in no startup line). Where the engine
reports it at exit, the fit keeps the range of what the launches took; a pool within the books but not
within U of the limit starts, then fails at warm-up or at its first request.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ninferkit.capacity.interval import Interval, hull, intersect_all
from ninferkit.capacity.observations import Observation
from ninferkit.capacity.polytope import Constraint, Polytope, Vector
from ninferkit.engines.kv import KVLayout
from ninferkit.engines.pool import PoolRule
from ninferkit.units import GIB

_NO_CAP = 2**40
PARAMETERS = ("fixed_ref_bytes", "per_slot_bytes", "per_context_token_bytes", "bytes_per_token")
BOX = (Fraction(2**50), Fraction(2**40), Fraction(2**30), Fraction(2**30))


@dataclass(frozen=True)
class FamilyFit:
    """The consistent parameter set of one family, and predictions from it."""

    family: tuple[Any, ...]
    label: str
    reference: tuple[int, int]
    observations: tuple[Observation, ...]
    polytope: Polytope
    fixed_bytes_per_token: Fraction | None
    """b when it is known exactly (the polytope then has 3 parameters, else 4)."""

    @property
    def consistent(self) -> bool:
        return self.polytope.feasible

    def _weights(self, concurrency: int, context: int, tokens: int) -> tuple[list[Fraction], Fraction]:
        c_ref, s_ref = self.reference
        weights = [Fraction(1), Fraction(concurrency - c_ref), Fraction(context - s_ref)]
        if self.fixed_bytes_per_token is None:
            return weights + [Fraction(tokens)], Fraction(0)
        return weights, self.fixed_bytes_per_token * tokens

    def runtime(self, concurrency: int, context: int, tokens: int) -> Interval:
        """Predicted runtime reservation (everything but weights) for pool `tokens`."""
        weights, offset = self._weights(concurrency, context, tokens)
        return self.polytope.bounds(weights, offset)

    def fixed(self, concurrency: int, context: int) -> Interval:
        return self.runtime(concurrency, context, 0)

    def parameter(self, name: str) -> Interval:
        index = PARAMETERS.index(name)
        if index == 3 and self.fixed_bytes_per_token is not None:
            return Interval.exact(self.fixed_bytes_per_token)
        weights = [Fraction(1 if i == index else 0) for i in range(3 if self.fixed_bytes_per_token else 4)]
        return self.polytope.bounds(weights)

    def max_pool(self, concurrency: int, context: int, available: Interval, rule: PoolRule) -> Interval:
        """Largest legal pool (whole pages) with runtime <= available: [sure, possible] in tokens.

        With a per-slot pool (llama.cpp) the per-slot context grows with the pool, so S = K / C; a shared pool
        is capped at C x S only where the engine's rule says so (NInfer), else by memory alone (vLLM).
        None on a side the data leaves open.
        """
        low_pool, high_pool = rule.pool_range(concurrency, context)
        if not rule.shared_pool:  # a per-slot pool grows with the per-slot context: `context` does not bound it
            low_pool, high_pool = rule.page_tokens * concurrency, _NO_CAP
        elif not rule.capped_by_slots:  # a shared pool the engine does not cap at C x S (vLLM's blocks: on the
            high_pool = _NO_CAP         # H200 2,515,040 tokens for 64 x 8,192 planned) is bounded by memory alone
        found = self._largest(concurrency, context, available, rule, high_pool)
        # below the smallest legal pool the server does not start at all: 0 tokens
        sure = None if found.low is None else (found.low if found.low >= low_pool else Fraction(0))
        possible = None if found.high is None else (found.high if found.high >= low_pool else Fraction(0))
        return Interval(sure, possible)

    def memory_pool(self, concurrency: int, context: int, available: Interval, rule: PoolRule) -> Interval:
        """The pool memory alone would allow (whole pages), whatever the engine's rule takes: what a search
        answer at the engine's limit leaves unused. [sure, possible]; None on a side the data leaves open."""
        return self._largest(concurrency, context, available, rule, _NO_CAP)

    def _largest(self, concurrency: int, context: int, available: Interval, rule: PoolRule, cap: int) -> Interval:
        """[sure, possible] largest pool up to `cap` with runtime <= available; reaching _NO_CAP is open (None)."""
        c_ref, s_ref = self.reference

        def largest(vertex: Vector, budget: Fraction | None) -> Fraction:
            if budget is None:
                return Fraction(cap)
            b = self.fixed_bytes_per_token if self.fixed_bytes_per_token is not None else vertex[3]
            base = vertex[0] + vertex[1] * (concurrency - c_ref)
            if rule.shared_pool:
                base += vertex[2] * (context - s_ref)
                slope = b
            else:
                base -= vertex[2] * s_ref
                slope = b + vertex[2] / concurrency
            if slope <= 0:
                return Fraction(cap)
            tokens = (budget - base) / slope
            unit = rule.page_tokens * (1 if rule.shared_pool else concurrency)  # per-slot pages on every slot
            return Fraction(min(cap, math.floor(tokens / unit) * unit))

        sure = self.polytope.extremes(lambda v: largest(v, available.low)).low
        possible = self.polytope.extremes(lambda v: largest(v, available.high)).high
        return Interval(None if sure is not None and sure >= _NO_CAP else sure,  # only the open terms stop it
                        None if possible is not None and possible >= _NO_CAP else possible)


@dataclass(frozen=True)
class Priors:
    """Stated ranges for terms the launches may not pin (from a profile, with their source in words)."""

    per_slot_bytes: Interval | None = None
    per_context_token_bytes: Interval | None = None
    source: str = ""


@dataclass
class CapacityFit:
    """Everything the observations say: slopes, fixed parts per family, free memory, what is open."""

    slopes: dict[Any, Interval | None]
    """KV dtype -> bytes/token (exact when known from the architecture or payload lines)."""
    slope_sources: dict[Any, str]
    layouts: dict[Any, KVLayout | None]
    payload_slopes: dict[Any, Interval | None]
    """KV dtype -> bytes/token implied by the KV payload lines alone (a check on the architecture)."""
    families: dict[tuple[Any, ...], FamilyFit]
    available: Interval | None
    first_use: Interval | None
    """U: the range of what the launches took after their books (None where no launch reported it)."""
    notes: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    priors: Priors | None = None

    def family_for(self, family: tuple[Any, ...]) -> FamilyFit | None:
        return self.families.get(family)

    def room(self, available: Interval | None) -> Interval | None:
        """What the runtime may take of `available` and still serve: less the first-use memory U (its
        largest seen for the sure side, its smallest for the possible side)."""
        if available is None or self.first_use is None:
            return available
        return available - self.first_use

    def terms(self) -> tuple[list[str], list[str]]:
        """(pinned, unpinned) descriptions, one per term and family."""
        pinned: list[str] = []
        unpinned: list[str] = []
        for dtype, slope in self.slopes.items():
            if slope is not None and slope.bounded:
                pinned.append(f"kv={dtype}: bytes_per_token {_show(slope)} ({self.slope_sources[dtype]})")
            else:
                unpinned.append(f"kv={dtype}: bytes_per_token (architecture unknown; too few pool sizes observed)")
        for fam in self.families.values():
            if not fam.consistent:
                unpinned.append(f"{fam.label}: observations contradict each other; no formula fits them all")
                continue
            c_ref, s_ref = fam.reference
            seen_c = sorted({o.setting.concurrency for o in fam.observations})
            seen_s = sorted({o.setting.context_per_slot for o in fam.observations})
            for name in PARAMETERS:
                if name == "bytes_per_token" and fam.fixed_bytes_per_token is not None:
                    continue
                value = fam.parameter(name)
                what = {"fixed_ref_bytes": f"fixed part at C={c_ref}, S={s_ref}",
                        "per_slot_bytes": "fixed part per extra slot",
                        "per_context_token_bytes": "fixed part per token of per-slot context",
                        "bytes_per_token": "bytes_per_token"}[name]
                prior = None if self.priors is None else {"per_slot_bytes": self.priors.per_slot_bytes,
                                                          "per_context_token_bytes":
                                                              self.priors.per_context_token_bytes}.get(name)
                if prior is not None:
                    what += f" (within the stated prior {_show(prior)}: {self.priors.source})"  # type: ignore[union-attr]
                if value.bounded:
                    pinned.append(f"{fam.label}: {what} {_show(value)}")
                else:
                    why = {"per_slot_bytes": f"only concurrency {seen_c} observed",
                           "per_context_token_bytes": f"only per-slot context {seen_s} observed"}.get(
                        name, "not enough distinct observations")
                    unpinned.append(f"{fam.label}: {what} ({why})")
        return pinned, unpinned


def _show(value: Interval) -> str:
    low, high = value.as_bytes()
    return f"{low:,} B" if low == high else f"[{low:,}, {high:,}] B"


def payload_slope(observations: Sequence[Observation]) -> Interval | None:
    """b from KV payload lines alone (b x K within each printed size); None without such lines."""
    result: Interval | None = None
    for obs in observations:
        if obs.kv_bytes is None or obs.kv_tokens <= 0:
            continue
        implied = obs.kv_bytes.divide(obs.kv_tokens)
        result = implied if result is None else result.intersect(implied)
        if result is None:
            raise ValueError(f"KV payload lines disagree on bytes/token at {obs.source}")
    return result


def fit(observations: Sequence[Observation], layout_for: Callable[[str | None], KVLayout | None],
        rule: PoolRule, priors: Priors | None = None) -> CapacityFit:
    """Fit every family; see the module docstring for the model.

    layout_for(kv_dtype) gives the architecture's KV layout, or None when it is unknown (then the
    slope comes from KV payload lines when they pin a single integer, else it is fitted).
    Example: ``fit(observations, lambda d: ninfer_kv_layout("qwen3.8-27b", d, "mtp"), pool_rule)``.
    """
    notes: list[str] = []
    conflicts: list[str] = []
    by_dtype: dict[Any, list[Observation]] = {}
    for obs in observations:
        by_dtype.setdefault(obs.setting.kv_dtype, []).append(obs)
    exact: dict[Any, Fraction | None] = {}
    sources: dict[Any, str] = {}
    layouts: dict[Any, KVLayout | None] = {}
    payloads: dict[Any, Interval | None] = {}
    for dtype, group in by_dtype.items():
        layouts[dtype] = layout_for(dtype)
        try:
            payloads[dtype] = payload_slope(group)
        except ValueError as exc:
            conflicts.append(str(exc))
            payloads[dtype] = None
        arch = layouts[dtype]
        measured = payloads[dtype]
        if arch is not None:
            exact[dtype], sources[dtype] = Fraction(arch.runtime_bytes_per_token), "architecture"
            if arch.compute_bytes_per_token:
                sources[dtype] += (f" ({arch.bytes_per_token:,} B cache + {arch.compute_bytes_per_token:,} B "
                                   "compute buffer)")
            if measured is not None and not measured.holds(arch.bytes_per_token):
                conflicts.append(f"kv={dtype}: the KV payload lines imply {_show(measured)}/token, not the "
                                 f"architecture's {arch.bytes_per_token:,} B: a layout assumption is wrong")
            continue
        ints = measured.integers() if measured is not None else None
        if ints is not None and ints[0] == ints[1]:
            exact[dtype], sources[dtype] = Fraction(ints[0]), "KV payload lines"
        else:
            exact[dtype], sources[dtype] = None, "fitted"
    grouped: dict[tuple[Any, ...], list[Observation]] = {}
    for obs in observations:
        grouped.setdefault(obs.setting.family, []).append(obs)
    families: dict[tuple[Any, ...], FamilyFit] = {}
    for family, group in grouped.items():
        families[family] = _fit_family(family, group, exact.get(group[0].setting.kv_dtype), priors or Priors())
        if not families[family].consistent:
            conflicts.append(f"{families[family].label}: no single formula fits these observations: "
                             + "; ".join(o.source for o in group))
    slopes: dict[Any, Interval | None] = {}
    for dtype in by_dtype:
        if exact[dtype] is not None:
            slopes[dtype] = Interval.exact(exact[dtype])  # type: ignore[arg-type]
            continue
        fitted = [f.parameter("bytes_per_token") for f in families.values()
                  if f.family[0] == dtype and f.consistent]
        slopes[dtype] = intersect_all(fitted)
    first_use = [o.first_use for o in observations if o.first_use is not None]
    return CapacityFit(slopes, sources, layouts, payloads, families, _available(observations, notes),
                       hull(first_use) if first_use else None, notes, conflicts, priors)


def _fit_family(family: tuple[Any, ...], group: Sequence[Observation], b: Fraction | None,
                priors: Priors) -> FamilyFit:
    counts: dict[tuple[int, int], int] = {}
    for obs in group:
        key = (obs.setting.concurrency, obs.setting.context_per_slot)
        counts[key] = counts.get(key, 0) + 1
    reference = max(counts, key=lambda k: (counts[k], -k[0], -k[1]))  # most observed, then the smallest
    c_ref, s_ref = reference
    merged: dict[Vector, Interval] = {}
    for obs in group:
        coefficients: Vector = (Fraction(1), Fraction(obs.setting.concurrency - c_ref),
                                Fraction(obs.setting.context_per_slot - s_ref))
        offset = Fraction(0)
        if b is None:
            coefficients += (Fraction(obs.kv_tokens),)
        else:
            offset = b * obs.kv_tokens
        bound = _bound(obs)
        if bound is None:
            continue
        bound = bound - offset
        previous = merged.get(coefficients)
        joined = bound if previous is None else previous.intersect(bound)
        if joined is None:
            return FamilyFit(family, _family_label(group[0]), reference, tuple(group), Polytope([], []), b)
        merged[coefficients] = joined
    size = 3 if b is not None else 4
    # a fixed part is never negative, at every setting observed (not only at the reference, which would make
    # the set depend on which setting was observed most often); with b known it tightens that setting's own row
    for c, s in sorted(counts):
        at: Vector = (Fraction(1), Fraction(c - c_ref), Fraction(s - s_ref)) + (Fraction(0),) * (size - 3)
        previous = merged.get(at)
        joined = Interval(Fraction(0), None) if previous is None else previous.intersect(Interval(Fraction(0), None))
        if joined is None:
            return FamilyFit(family, _family_label(group[0]), reference, tuple(group), Polytope([], []), b)
        merged[at] = joined
    constraints = [Constraint(coef, value.low, value.high) for coef, value in merged.items()]

    def unit(index: int) -> Vector:
        return tuple(Fraction(1 if i == index else 0) for i in range(size))

    if b is None:
        constraints.append(Constraint(unit(3), Fraction(0), None))
    # without a prior, the fixed part never shrinks as slots or per-slot context grow (each term of F in
    # capacity-model.md §5.1 is >= 0: lanes, Volta staging, block tables, graphs, compute buffers): so one launch
    # at 64 x 8,192 bounds every smaller setting from above, where "2,048 tokens on 139 GiB free" was open
    for index, prior in ((1, priors.per_slot_bytes), (2, priors.per_context_token_bytes)):
        constraints.append(Constraint(unit(index), Fraction(0), None) if prior is None
                           else Constraint(unit(index), prior.low, prior.high))
    box = BOX[:size]
    label = _family_label(group[0])
    return FamilyFit(family, label, reference, tuple(group), Polytope.build(constraints, box), b)


def _bound(obs: Observation) -> Interval | None:
    """What one observation says about runtime at its pool: printed value, or a start/refuse bound."""
    if obs.runtime is not None:
        return obs.runtime
    if obs.available is None or not obs.bounds_runtime:
        return None
    if obs.started:
        return Interval(None, obs.available.high)
    return Interval(obs.available.low, None)


def _family_label(obs: Observation) -> str:
    s = obs.setting
    parts = [f"kv={s.kv_dtype or 'default'}"]
    if s.spec:
        parts.append(f"spec={s.spec}{s.draft_tokens or ''}")
    if s.prefill_chunk:
        parts.append(f"chunk={s.prefill_chunk}")
    if s.other:
        parts.append(" ".join(s.other))
    return " ".join(parts)


def _available(observations: Sequence[Observation], notes: list[str]) -> Interval | None:
    """Free memory after weights: the intersection of what every launch saw (their hull if it drifted)."""
    seen = [o.available for o in observations if o.available is not None]
    if not seen:
        return None
    common = intersect_all(seen)
    if common is None:
        span = hull(seen)
        notes.append(f"free memory after weights drifted between launches ({span.as_gib()} GiB); "
                     "the table uses the whole range")
        return span
    return common


def gib(value: Fraction | None) -> float | None:
    return None if value is None else round(float(value) / GIB, 2)
