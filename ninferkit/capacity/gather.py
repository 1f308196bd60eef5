"""The capacity record from observations: gather them (saved logs, a running server), fit, tabulate, and the
record's tables for display. The 04_capacity_fit step (ninferkit/steps/capacity.py) launches and writes it.

Observations come from the launch step's own server (server.json's log), from earlier capacity
launches of this run (capacity/observations.jsonl, so a rerun resumes), from new launches at every
grid point when `capacity.fit_launches` is on, and from the search when `capacity.search` is on.
`fit_logs` does the same from saved startup logs without launching anything (the CLI's `fit`).
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd

from ninferkit.artifact import planned_path
from ninferkit.capacity.answer import BOTH, LOGGED, TYPED, Basis, answer
from ninferkit.capacity.evidence import narrowed
from ninferkit.capacity.fit import CapacityFit, FamilyFit, Priors, fit
from ninferkit.capacity.interval import Interval, intersect_all
from ninferkit.capacity.known import KnownTerms, joined_family, known_terms, typed_family
from ninferkit.capacity.limits import engine_limit_note, engine_max_pool
from ninferkit.capacity.observations import Observation, Setting, from_log_file, from_served, with_served
from ninferkit.capacity.search import SearchResult, budget_after_weights
from ninferkit.capacity.table import cells_from
from ninferkit.engines import get_adapter
from ninferkit.engines.capacity_rules import CapacityRules
from ninferkit.engines.kv import KVLayout
from ninferkit.engines.pool import PoolRule
from ninferkit.errors import ProfileError
from ninferkit.params.profile import Profile
from ninferkit.rundir.records import CapacityRecord, VariantCapacity
from ninferkit.rundir.runs import utc_now

FORMULA = ("runtime(C, S, K) = F(C, S) + b x K, with K the KV pool in tokens (whole pages of P), "
           "b the bytes per pool token (the KV cache's, and any compute buffer that grows with the pool) and "
           "F(C, S) = F_ref + f_slot x (C - C_ref) + f_ctx x (S - S_ref); "
           "it starts iff runtime <= A, the free memory after weights, and serves iff runtime + U <= A, with U "
           "what the server takes at first use (after its books); auto picks "
           "M = min(M_max, M_min + floor((A - R - B_min) / B_step)) pages with headroom R")


def model_file(profile: Profile) -> Path | None:
    if profile.artifact.served:
        return None  # the model is a running server's, on its machine
    model = planned_path(profile)
    return model if model.exists() else None


def check_concurrencies(profile: Profile, rule: PoolRule) -> None:
    """Refuse a grid with more slots than the engine takes (NInfer: 8), before any launch or table."""
    at_most = rule.max_concurrency
    over = [c for c in profile.capacity.concurrencies if at_most is not None and c > at_most]
    if over:
        raise ProfileError(f"capacity.concurrencies: {over}: {profile.engine.kind} takes at most {at_most} slots "
                           f"(allowed: 1..{at_most})")


def check_dtypes(profile: Profile, adapter: CapacityRules, dtypes: Sequence[str | None]) -> None:
    """Refuse, before any launch, a KV dtype the engine cannot use with this model (a launch would
    only fail, after minutes of loading on a large model)."""
    layout = _layout_for(profile, adapter)
    for dtype in dtypes:
        try:
            layout(dtype)
        except ProfileError as exc:
            raise ProfileError(f"capacity.kv_dtypes: {dtype!r}: {exc}") from None


def _layout_for(profile: Profile, adapter: CapacityRules) -> Callable[[str | None], KVLayout | None]:
    path = model_file(profile)

    def layout(dtype: str | None) -> KVLayout | None:
        return adapter.kv_layout(profile, path, dtype or adapter.capacity_pool.default_kv_dtype)

    return layout


def _priors(profile: Profile) -> Priors:
    section = profile.capacity

    def interval(value: list[int] | None) -> Interval | None:
        return None if value is None else Interval.of(value[0], value[1])

    return Priors(interval(section.prior_per_slot_bytes), interval(section.prior_per_context_token_bytes),
                  section.prior_source or "capacity.prior_* in the profile")


def fit_observations(profile: Profile, observations: Sequence[Observation]) -> CapacityFit:
    adapter = get_adapter(profile.engine.kind)
    return fit(list(observations), _layout_for(profile, adapter), adapter.capacity_pool, _priors(profile))


def _available(result: CapacityFit, profile: Profile, observations: Sequence[Observation]) -> Interval | None:
    """Free memory after weights by the logs: the budget (minus weights) if one is set, else what the
    launches saw."""
    section = profile.capacity
    if section.memory_budget_bytes is not None:
        under_budget = budget_after_weights(Interval.exact(section.memory_budget_bytes), observations)
        if under_budget is not None:
            return under_budget
    return result.available


def _bases(profile: Profile, observations: Sequence[Observation], result: CapacityFit,
           known: KnownTerms | None) -> tuple[list[Basis], list[str]]:
    """The answers to give and the conflicts between typed terms and logs: one basis where they agree (or
    only one of them is there), one each where they disagree, the logs' first."""
    base = Setting.from_profile(profile)
    family = result.family_for(base.family)
    if family is None and result.families:
        family = max(result.families.values(), key=lambda f: len(f.observations))
    logged_a = _available(result, profile, observations)
    weights = _logged_weights(observations)
    conflicts: list[str] = []
    if known is None:
        return [_basis(LOGGED, "the launches' own logs", result, family, logged_a, profile, weights)], conflicts
    typed_a = known.free_after_weights
    a_conflict = typed_a is not None and logged_a is not None and typed_a.intersect(logged_a) is None
    if a_conflict:
        conflicts.append(f"free after weights: typed {known.text['free_after_weights']} ({known.source}) = "
                         f"{typed_a.as_gib(3)} GiB, but the logs saw {logged_a.as_gib(3)} GiB")  # type: ignore[union-attr]
    both_a = logged_a if typed_a is None else typed_a if logged_a is None else typed_a.intersect(logged_a)
    typed_weights = known.weights or weights
    if known.fixed is None:  # typed terms without a formula of their own only fill in what the logs lack
        if a_conflict:
            return [_basis(LOGGED, "the launches' own logs", result, family, logged_a, profile, weights),
                    _basis(TYPED, known.source, result, family, typed_a, profile, typed_weights)], conflicts
        return [_basis(BOTH if observations else TYPED, known.source, result, family, both_a, profile,
                       typed_weights)], conflicts
    b = _typed_slope(profile, result, known, family, conflicts)
    reference = family.reference if family is not None else (base.concurrency, base.context_per_slot)
    label = family.label if family is not None else _label(base)
    typed_fam = typed_family(known, family.family if family is not None else base.family, label, reference, b)
    typed_basis = _basis(TYPED, known.source, result, typed_fam, typed_a if typed_a is not None else logged_a,
                         profile, typed_weights)
    printed = known.as_printed()
    printed_a = printed.free_after_weights if printed.free_after_weights is not None else logged_a
    typed_basis = replace(typed_basis, as_printed=_basis(
        TYPED, known.source, result, typed_family(printed, typed_fam.family, label, reference, b), printed_a,
        profile, printed.weights or weights))
    if family is None:
        return [typed_basis], conflicts
    joined = joined_family(family, known, b)
    if joined.consistent and not a_conflict:
        return [_basis(BOTH, f"{known.source}; the launches' own logs", result, joined, both_a, profile,
                       typed_weights)], conflicts
    if family.consistent and not joined.consistent:
        c, s = family.reference
        conflicts.append(f"fixed part: typed {known.text['fixed']} ({known.source}) = "
                         f"{known.fixed.as_gib(3)} GiB, but the logs pin it at C={c}, S={s} to "
                         f"{family.fixed(c, s).as_gib(3)} GiB ({'; '.join(o.source for o in family.observations)})")
    logged = _basis(LOGGED, "the launches' own logs", result, family,
                    logged_a if logged_a is not None else typed_a, profile, weights)
    return [logged, typed_basis], conflicts


def _basis(name: str, source: str, result: CapacityFit, family: FamilyFit | None, available: Interval | None,
           profile: Profile, weights: Interval | None) -> Basis:
    # under a budget a launch fits by its books alone (the search's rule); on a device, less first use
    room = available if profile.capacity.memory_budget_bytes is not None else result.room(available)
    return Basis(name, source, result, family, available, room, weights)


def _typed_slope(profile: Profile, result: CapacityFit, known: KnownTerms, family: FamilyFit | None,
                 conflicts: list[str]) -> Fraction | None:
    """b for the typed formula: the logs' or architecture's exact one, else the typed one where it is exact;
    a typed b the architecture contradicts is a conflict (the architecture's is used: it is exact)."""
    adapter = get_adapter(profile.engine.kind)
    exact = family.fixed_bytes_per_token if family is not None else None
    if exact is None:
        layout = _layout_for(profile, adapter)(profile.serve.kv.dtype)
        exact = None if layout is None else Fraction(layout.runtime_bytes_per_token)
    typed_b = known.bytes_per_token
    if exact is not None and typed_b is not None and not typed_b.holds(exact):
        conflicts.append(f"bytes per token: typed {known.text['bytes_per_token']} ({known.source}), but the "
                         f"model's KV layout gives {int(exact):,} B; the typed formula uses the layout's")
    if exact is None and typed_b is not None and typed_b.width == 0:
        exact = typed_b.low
    return exact


def _logged_weights(observations: Sequence[Observation]) -> Interval | None:
    seen = [o.weights for o in observations if o.weights is not None]
    return intersect_all(seen) if seen else None


def _label(setting: Setting) -> str:
    parts = [f"kv={setting.kv_dtype or 'default'}"]
    if setting.spec:
        parts.append(f"spec={setting.spec}{setting.draft_tokens or ''}")
    return " ".join(parts)


def capacity_record(profile: Profile, observations: Sequence[Observation],
                    searches: Sequence[SearchResult] = ()) -> CapacityRecord:
    """capacity.json's record: the fit, the decision table, the search, and what the data leaves open.

    The top-level figures are the first answer's (the logs' where typed terms conflict with them, with the
    conflict named beside the largest pool); `answers` holds every answer."""
    rule = get_adapter(profile.engine.kind).capacity_pool
    known = known_terms(profile.capacity, rule, profile.engine.kind)
    result = fit_observations(profile, observations)
    bases, conflicts = _bases(profile, observations, result, known)
    primary = bases[0]
    base = Setting.from_profile(profile)
    dtype = base.kv_dtype
    available, room, family = primary.available, primary.room, primary.family
    slope = result.slopes.get(family.family[0] if family else dtype)
    if slope is None and family is not None and family.consistent:
        slope = family.parameter("bytes_per_token")
    fixed = family.fixed(*family.reference) if family is not None and family.consistent else None
    max_pool = memory_pool = None
    if family is not None and family.consistent and room is not None:
        max_pool = family.max_pool(base.concurrency, base.context_per_slot, room, rule)
        memory_pool = family.memory_pool(base.concurrency, base.context_per_slot, room, rule)
    top = engine_max_pool(rule, base.concurrency, base.context_per_slot)
    engine_bound = max_pool is not None and max_pool.low is not None and top is not None and max_pool.low >= top
    dtypes: list[str | None] = list(profile.capacity.kv_dtypes) or [dtype]
    reference_family = family.family if family is not None else base.family
    cells = cells_from(profile.capacity.concurrencies, profile.capacity.contexts, dtypes)
    answers = [answer(b, base, rule, cells, reference_family, list(profile.capacity.what_if)) for b in bases]
    pinned, unpinned = result.terms()
    if known is not None:
        pinned = [f"typed: {line}" for line in known.describe()] + pinned
    layout = result.layouts.get(reference_family[0])
    note = engine_limit_note(rule, base.concurrency, base.context_per_slot, top, memory_pool) \
        if engine_bound and top is not None else None
    if len(answers) > 1:
        other = answers[1].get("max_kv_tokens_interval")
        note = (f"CONFLICT: the {answers[0]['basis']} give this; the {answers[1]['basis']} ({answers[1]['source']}) "
                f"give {other} tokens; see conflicts" + (f"; {note}" if note else ""))
    return CapacityRecord.model_validate(narrowed({
        "schema_version": CapacityRecord.SCHEMA_VERSION,
        "created": utc_now(),
        "engine": profile.engine.kind,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "setting": base.as_dict(),
        "page_tokens": rule.page_tokens,
        "auto_headroom_bytes": rule.auto_headroom_bytes,
        "bytes_per_token": None if slope is None else slope.as_bytes()[0] if slope.width == 0 else slope.as_bytes(),
        "bytes_per_token_source": result.slope_sources.get(reference_family[0])
        or (None if slope is None else primary.source),
        "bytes_per_token_by_dtype": {str(k): None if v is None else v.as_bytes() for k, v in result.slopes.items()},
        "payload_bytes_per_token_by_dtype": {str(k): None if v is None else v.as_bytes()
                                             for k, v in result.payload_slopes.items()},
        "architecture": None if layout is None else layout.detail,
        "fixed_bytes": None if fixed is None else fixed.as_bytes(),
        "fixed_bytes_at": None if family is None else {"concurrency": family.reference[0],
                                                        "context_per_slot": family.reference[1],
                                                        "family": family.label},
        "free_after_weights_bytes": None if available is None else available.as_bytes(),
        "free_after_weights_source": _available_source(profile, result, known, primary),
        "first_use_bytes": None if result.first_use is None else result.first_use.as_bytes(),
        "max_kv_tokens": None if max_pool is None or max_pool.low is None else int(max_pool.low),
        "max_kv_tokens_interval": None if max_pool is None else [None if v is None else int(v)
                                                                  for v in (max_pool.low, max_pool.high)],
        "max_kv_tokens_bounded_by": None if max_pool is None or max_pool.low is None
        else "engine" if engine_bound else "memory",
        "max_kv_tokens_note": note,
        "known_terms": None if known is None else {"source": known.source, **known.text},
        "answers": answers,
        "observations": [o.as_dict() for o in observations],
        "decision_table": answers[0]["decision_table"],
        "searches": [found.as_dict() for found in searches],
        "search_launches": sum(found.launches for found in searches),
        "formula": FORMULA.replace("P)", f"P = {rule.page_tokens})"),
        "terms_pinned": pinned,
        "terms_unpinned": unpinned,
        "conflicts": conflicts + result.conflicts,
        "notes": result.notes,
    }))


def variant_capacity(name: str, profile: Profile, own: Observation | None, others: Sequence[Observation],
                     source: str) -> VariantCapacity:
    """The capacity a variant leaves: its launch's observation (`own`, read from its log at its own setting) and the
    largest pool the fit gives at its setting (`profile`: the variant's), the run's other launches (`others`)
    pinning what every launch of the model shares (bytes per token, the memory free after the weights)."""
    if own is None:
        return VariantCapacity(name=name, source=source, note="its log holds no startup memory books this ninferkit "
                               "reads (it did not start, or printed none)")
    record = capacity_record(profile, [own, *others])
    return VariantCapacity(name=name, setting=own.setting.as_dict(), kv_tokens=own.kv_tokens, served=own.served,
                           runtime_bytes=None if own.runtime is None else own.runtime.as_bytes(),
                           free_after_weights_bytes=record.free_after_weights_bytes,
                           max_kv_tokens=record.max_kv_tokens, max_kv_tokens_interval=record.max_kv_tokens_interval,
                           max_kv_tokens_bounded_by=record.max_kv_tokens_bounded_by, source=source,
                           note=None if record.max_kv_tokens is not None else
                           "the fit leaves its largest pool open: " + "; ".join(record.terms_unpinned or ["no term"]))


def _available_source(profile: Profile, result: CapacityFit, known: KnownTerms | None, primary: Basis) -> str:
    if profile.capacity.memory_budget_bytes is not None:
        return "capacity.memory_budget_bytes minus the weights the launches loaded (a stand-in, not a device limit)"
    if result.available is not None:
        return "the launches' own logs"
    if known is not None and known.free_after_weights is not None and primary.available is not None:
        return f"capacity.known.free_after_weights ({known.source})"
    return "unknown"


def fit_logs(profile: Profile, logs: Sequence[str | Path]) -> CapacityRecord:
    """Fit saved startup logs (no launch). Each log's own slots, context and KV dtype, where it
    prints them, override the profile's; otherwise the profile's serve settings are assumed."""
    return capacity_record(profile, log_observations(profile, logs))


def log_observations(profile: Profile, logs: Sequence[str | Path]) -> list[Observation]:
    """Each saved log's observation (none for a log with nothing to fit), at the setting it prints."""
    rule = get_adapter(profile.engine.kind).capacity_pool
    check_concurrencies(profile, rule)
    base = Setting.from_profile(profile)
    return [obs for log in logs if (obs := from_log_file(profile.engine.kind, Path(log), base, rule)) is not None]


def served_observations(profile: Profile, url: str, pool: dict[str, Any] | None, logs: Sequence[Path],
                        served: bool | None) -> list[Observation]:
    """A running server's observations: each log's books (at the setting it prints) and, where it reports one
    that no log already shows, its pool at the setting it reports (no bytes: only a log or typed terms give the
    memory); `served` whether a real request was answered."""
    found = log_observations(profile, logs)
    if served is not None:
        found = [with_served(obs, served) for obs in found]
    if pool is not None and all(obs.kv_tokens != pool["kv_tokens"] for obs in found):
        found.append(from_served(pool, Setting.from_profile(profile), f"{url} {pool.get('source')}", served))
    return found


def fit_server(profile: Profile, url: str, pool: dict[str, Any] | None, logs: Sequence[Path]) -> CapacityRecord:
    """`capacity fit --url`: fit a running server's observations (nothing launched, no request sent)."""
    return capacity_record(profile, served_observations(profile, url, pool, logs, None))


def table_frame(record: CapacityRecord) -> pd.DataFrame:
    """The decision table for display: one row per cell and reading."""
    columns = ["kv_dtype", "concurrency", "context_per_slot", "reading", "pool_tokens", "fits", "margin_gib",
               "verdict"]
    return pd.DataFrame([row.as_dict() for row in record.decision_table]).reindex(columns=columns)


def observations_frame(record: CapacityRecord) -> pd.DataFrame:
    rows = [{"source": Path(str(o.source)).name, "kind": o.kind, "concurrency": o.setting.concurrency,
             "context_per_slot": o.setting.context_per_slot, "kv_dtype": o.setting.kv_dtype, "kv_tokens": o.kv_tokens,
             "started": o.started, "served": o.served, "runtime_bytes": o.runtime_bytes} for o in record.observations]
    return pd.DataFrame(rows)


def terms_frame(record: CapacityRecord) -> pd.DataFrame:
    """Pinned and open terms of the formula, one row each (conflicts first)."""
    rows = [{"status": "CONFLICT", "term": text} for text in record.conflicts]
    rows += [{"status": "pinned", "term": text} for text in record.terms_pinned]
    rows += [{"status": "open", "term": text} for text in record.terms_unpinned]
    return pd.DataFrame(rows, columns=["status", "term"])


def searches_frame(record: CapacityRecord) -> pd.DataFrame:
    """One row per search: the largest pool that started and served, per-slot context, launches, and what
    bounded it (memory, or the engine's own rule; capacity.json files older than that column have none)."""
    rows = [{"kv_dtype": found.setting.kv_dtype, "concurrency": found.setting.concurrency,
             "answer_kv_tokens": found.answer_kv_tokens, "answer_context_per_slot": found.answer_context_per_slot,
             "server_kv_tokens": found.server_kv_tokens, "verified_by_request": found.verified_by_request,
             "launches": found.launches, "mode": found.mode, "bounded_by": found.bounded_by, "note": found.note}
            for found in record.searches]
    columns = ["kv_dtype", "concurrency", "answer_kv_tokens", "answer_context_per_slot", "server_kv_tokens",
               "verified_by_request", "launches", "mode", "bounded_by", "note"]
    return pd.DataFrame(rows, columns=columns)


def search_launches_frame(record: CapacityRecord) -> pd.DataFrame:
    """Every step of the searches, in order: their launches, and the earlier launches each started from
    (`settled`); empty when the profile does not ask for a search."""
    columns = ["kv_dtype", "concurrency", "kv_tokens", "server_kv_tokens", "why", "started", "served", "fits",
               "runtime_bytes", "reused", "settled"]
    rows = [{"kv_dtype": found.setting.kv_dtype, "concurrency": found.setting.concurrency, **step.as_dict()}
            for found in record.searches for step in found.results]
    return pd.DataFrame(rows, columns=columns)

