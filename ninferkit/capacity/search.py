"""The search: the largest KV pool that starts and serves a request, with as few launches as possible.

Where the engine sizes its own pool (`auto`) and prints its slack (NInfer G1+), one launch gives
the answer: the largest explicit pool is the auto pool plus floor(slack / bytes-per-page) pages,
capped at C x ceil(S/64) pages (capacity-model.md §5.3.1); a second launch at that pool verifies it.
Otherwise the fit predicts the answer as an interval and launches bisect that interval in whole
pages, re-fitting after every launch (§5.3.2). Every launch is an observation; the answer is
verified by a launch at it that starts and serves a request. When a launch at the fit's sure answer
does not serve, the fit is missing a term and its sure side cannot be trusted, but it was probably
close: the search then steps down from that pool by 1, 2, 4... strides until one serves, and bisects
what is left (on the H200, plain bisection from the grid's pools had stopped 3% short in 6 launches). The
stride is one page, or, where the failed launch's log names the allocation its first use did not get,
that many bytes' worth of pages.

An answer at the engine's own limit (NInfer's C x ceil(S/64) pages, a llama.cpp slot at the model's
trained context) is not memory's: the result says which bounded it (`bounded_by`) and, from the
fit, what memory alone would allow (`limits`).

A memory budget (capacity.memory_budget_bytes) stands in for device memory where the engine has no
limit to find (llama.cpp on a CPU host): a launch "fits" when weights + runtime, as its log
reports them, stay within the budget. The launches and their logs are real; the limit is the
budget's, not the machine's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ninferkit.capacity.fit import CapacityFit
from ninferkit.capacity.interval import Interval, intersect_all
from ninferkit.capacity.limits import engine_limit_note, engine_max_pool
from ninferkit.capacity.observations import Observation, Setting
from ninferkit.engines.pool import PoolRule, snap_down

Refit = Callable[[list[Observation]], CapacityFit]


@dataclass
class SearchResult:
    setting: Setting
    mode: str  # "auto-slack" | "bisection" | "budget-bisection"
    answer_tokens: int | None = None
    verified: bool = False
    launches: int = 0
    steps: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""
    shared_pool: bool = False
    bounded_by: str | None = None
    """What set the answer: "engine" (its own pool rule), "memory", or None (not found, or no upper side)."""
    memory_allows: Interval | None = None
    """The pool memory alone would allow at this setting, from the fit ([sure, possible] tokens)."""
    refused_tokens: int | None = None
    """The smallest pool shown not to fit (None: no upper side found), and by what: "launch" or "fit"."""
    refused_by: str | None = None
    step_tokens: int | None = None
    """The search's unit: one page for a shared pool (vLLM's 16-token block), one page a slot otherwise. The answer
    is pinned to one unit when `refused_tokens - answer_tokens == step_tokens`: what served, and one page more not."""

    def as_dict(self) -> dict[str, Any]:
        """The answer with what the server itself reported at it (its KV line's cells), beside the count
        of launches that found it, what bounded it and what memory alone would allow."""
        reported = [step["server_kv_tokens"] for step in self.steps
                    if step["kv_tokens"] == self.answer_tokens and step["fits"]]
        per_slot = (self.setting.context_per_slot if self.shared_pool  # the pool grows, the per-slot cap is fixed
                    else None if self.answer_tokens is None else self.answer_tokens // self.setting.concurrency)
        return {"setting": self.setting.as_dict(), "mode": self.mode, "answer_kv_tokens": self.answer_tokens,
                "answer_context_per_slot": per_slot, "server_kv_tokens": reported[-1] if reported else None,
                "verified_by_request": self.verified, "launches": self.launches, "results": self.steps,
                "bounded_by": self.bounded_by, "shared_pool": self.shared_pool,
                "refused_kv_tokens": self.refused_tokens, "refused_by": self.refused_by,
                "step_tokens": self.step_tokens,
                "memory_allows_kv_tokens": None if self.memory_allows is None else [
                    None if v is None else int(v) for v in (self.memory_allows.low, self.memory_allows.high)],
                "note": self.note}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchResult:
        """A search as capacity.json recorded it: its launches are facts a re-fit keeps (`memory_allows` stays
        what the fit said at the time). A record from before `shared_pool` was written says it by its per-slot
        answer: a shared pool's per-slot figure is the setting's own context."""
        setting = Setting.from_dict(data["setting"])
        answer = data.get("answer_kv_tokens")
        shared = data.get("shared_pool")
        if shared is None:
            per_slot = data.get("answer_context_per_slot")
            shared = answer is not None and per_slot == setting.context_per_slot \
                and answer != setting.context_per_slot * setting.concurrency
        allows = data.get("memory_allows_kv_tokens")
        return cls(setting, str(data["mode"]), answer, bool(data.get("verified_by_request")),
                   int(data.get("launches") or 0), list(data.get("results") or []), str(data.get("note") or ""),
                   bool(shared), data.get("bounded_by"),
                   None if allows is None else Interval.of(allows[0], allows[1]),
                   data.get("refused_kv_tokens"), data.get("refused_by"), data.get("step_tokens"))


def _fits(obs: Observation, budget: Interval | None) -> bool | None:
    """Whether a launch counts as fitting: started, served, and within the budget when there is one
    (None: the printed rounding leaves it undecided, which the search treats as not fitting)."""
    if not obs.started or not obs.served:
        return False
    if budget is None:
        return True
    if obs.runtime is None or obs.weights is None:
        return None
    total = obs.runtime + obs.weights
    if total.high is not None and budget.low is not None and total.high <= budget.low:
        return True
    if total.low is not None and budget.high is not None and total.low > budget.high:
        return False
    return None


def search(base: Setting, rule: PoolRule, launch: Callable[[Setting], Observation | None], refit: Refit,
           observations: list[Observation], max_launches: int, budget_bytes: int | None = None,
           slot_context_cap: int | None = None) -> SearchResult:
    """Find the largest pool at `base`'s slots and per-slot context; see the module docstring.

    `slot_context_cap` bounds a per-slot search (llama.cpp) where the engine serves no longer slot
    whatever the memory, so no launch is spent above it. Raises nothing on a refused launch (a
    refusal is data); stops at `max_launches`.
    """
    observed = list(observations)
    budget = None if budget_bytes is None else Interval.exact(budget_bytes)
    if rule.auto_headroom_bytes is not None and budget is None:
        result = _auto_slack(base, rule, launch, refit, observed, max_launches)
    else:
        result = _bisect(base, rule, launch, refit, observed, max_launches, budget, slot_context_cap=slot_context_cap)
    if result.answer_tokens is not None:
        _bound(result, rule, refit(observed), observed, budget, slot_context_cap)
    return result


def _bound(result: SearchResult, rule: PoolRule, fitted: CapacityFit, observed: list[Observation],
           budget: Interval | None, slot_context_cap: int | None) -> None:
    """Say whether the engine's rule set the answer, with what memory alone would allow (from the fit)."""
    base = result.setting
    family = fitted.family_for(base.family)
    available = _available(fitted, observed, budget)
    if family is not None and family.consistent and available is not None:
        result.memory_allows = family.memory_pool(base.concurrency, base.context_per_slot, available, rule)
    top = engine_max_pool(rule, base.concurrency, base.context_per_slot, slot_context_cap)
    if top is not None and result.answer_tokens is not None and result.answer_tokens >= top:
        result.bounded_by = "engine"
        result.note = engine_limit_note(rule, base.concurrency, base.context_per_slot, result.answer_tokens,
                                        result.memory_allows, slot_context_cap)


def _pool_setting(base: Setting, rule: PoolRule, tokens: int) -> Setting:
    if rule.shared_pool:
        return replace(base, kv_capacity=tokens)
    return replace(base, context_per_slot=tokens // base.concurrency, kv_capacity=None)


def _record(result: SearchResult, obs: Observation | None, tokens: int, fits: bool | None, why: str,
            settled: bool = False) -> None:
    """One step of the search; a settled one (an earlier launch the search starts from) is listed but
    is not one of its launches."""
    result.launches += 0 if settled else 1
    result.steps.append({"kv_tokens": tokens, "server_kv_tokens": None if obs is None else obs.kv_tokens,
                         "kind": None if obs is None else obs.kind,
                         "started": None if obs is None else obs.started,
                         "served": None if obs is None else obs.served, "fits": fits, "why": why,
                         "runtime_bytes": None if obs is None or obs.runtime is None else obs.runtime.as_bytes(),
                         "log": None if obs is None else obs.source,
                         "reused": bool(obs is not None and obs.extra.get("reused")), "settled": settled})


def _auto_slack(base: Setting, rule: PoolRule, launch: Callable[[Setting], Observation | None], refit: Refit,
                observed: list[Observation], max_launches: int) -> SearchResult:
    result = SearchResult(base, "auto-slack", shared_pool=rule.shared_pool)
    obs = launch(replace(base, kv_capacity="auto"))
    _record(result, obs, 0 if obs is None else obs.kv_tokens, None, "auto: read its pool and slack")
    if obs is None:
        result.note = "the auto launch left no capacity ledger"
        return result
    observed.append(obs)
    fitted = refit(observed)
    slope = fitted.slopes.get(base.kv_dtype)
    low_pool, high_pool = rule.pool_range(base.concurrency, base.context_per_slot)
    if slope is None or slope.high is None:
        result.note = "bytes/token unknown: cannot turn the slack into pages"
        return _bisect(base, rule, launch, refit, observed, max_launches, None, result)
    per_page = slope.high * rule.page_tokens
    if obs.started and obs.slack is not None and obs.slack.low is not None:
        extra = max(0, math.floor(obs.slack.low / per_page))
        answer = min(high_pool, obs.kv_tokens + extra * rule.page_tokens)
        why = f"auto pool {obs.kv_tokens:,} + floor(slack / {float(per_page):,.0f} B per page) pages"
    elif not obs.started and obs.runtime is not None and obs.available is not None and obs.available.low is not None:
        spare = obs.available.low - obs.runtime.high  # type: ignore[operator]
        if spare < 0:
            result.note = f"even the smallest pool does not fit: short by {float(-spare) / 2**30:.2f} GiB"
            return result
        answer = min(high_pool, low_pool + math.floor(spare / per_page) * rule.page_tokens)
        why = "auto refused; its message gives B_min and free memory: the explicit maximum"
    else:
        result.note = "the auto launch printed neither slack nor a refusal with numbers"
        return result
    verify = launch(_pool_setting(base, rule, answer))
    fits = None if verify is None else _fits(verify, None)
    _record(result, verify, answer, fits, why + "; verify")
    if verify is not None:
        observed.append(verify)
    result.answer_tokens = answer if fits else None
    result.verified = bool(fits)
    result.bounded_by = "memory" if fits else None  # unless the engine's limit capped it (`_bound`)
    return result


def _bisect(base: Setting, rule: PoolRule, launch: Callable[[Setting], Observation | None], refit: Refit,
            observed: list[Observation], max_launches: int, budget: Interval | None,
            result: SearchResult | None = None, slot_context_cap: int | None = None) -> SearchResult:
    """Model-guided bisection in whole pages between the largest pool seen to fit and the smallest
    seen (or predicted for sure) not to."""
    result = result or SearchResult(base, "budget-bisection" if budget is not None else "bisection",
                                    shared_pool=rule.shared_pool)
    step = rule.page_tokens * (1 if rule.shared_pool else base.concurrency)
    result.step_tokens = step
    low_pool, high_pool = rule.pool_range(base.concurrency, base.context_per_slot)
    if not rule.shared_pool:  # the per-slot context itself is what grows, up to the engine's cap if it has one
        low_pool, high_pool = step, engine_max_pool(rule, base.concurrency, base.context_per_slot,
                                                    slot_context_cap) or 2**40
    elif not rule.capped_by_slots:  # a shared pool only memory bounds (vLLM's blocks): not C x S
        high_pool = 2**40
    good, bad = _settled(base, rule, observed, budget, result, step)  # largest pool that fit, smallest that did not
    bad_by_model = False
    while result.launches < max_launches:
        candidate = _next_candidate(base, rule, refit(observed), observed, budget, good, bad, step,
                                    low_pool, high_pool, _misses(result))
        if candidate is None:
            break
        tokens, why, sure_bad = candidate
        if sure_bad:
            bad, bad_by_model = tokens, True
            continue
        obs = launch(_pool_setting(base, rule, tokens))
        fits = False if obs is None else _fits(obs, budget)
        _record(result, obs, tokens, fits, why)
        if obs is not None:
            observed.append(obs)
        if fits:
            good = tokens
        else:
            bad, bad_by_model = tokens, False
        if good is not None and bad is not None and bad - good <= step:
            break
    result.answer_tokens = good
    result.verified = good is not None
    if bad is not None:
        result.refused_tokens, result.refused_by = bad, "fit" if bad_by_model else "launch"
    if good is not None and bad is not None:
        side = "the fit (no launch needed)" if bad_by_model else "a launch"
        apart = -(-(bad - good) // step)
        result.note = f"{good:,} tokens fit; {bad:,} does not, shown by {side} ({apart:,} step(s) of {step:,} apart)"
        result.bounded_by = "memory"
    elif good is None:
        result.note = "no launch fit within the launch budget"
    else:
        result.note = "the launch budget ran out before the upper side was found"
    return result


def _settled(base: Setting, rule: PoolRule, observed: list[Observation], budget: Interval | None,
             result: SearchResult, step: int) -> tuple[int | None, int | None]:
    """The pools earlier launches at this setting already settled (the grid's, a rerun's): the search
    starts between them, so it spends no launch below what already fit, even when the fit predicts
    nothing. Only when every launch saw the same free memory (or a budget is the limit): a launch made
    while something else held memory (the H200 run's, beside the runbook's own server) settles nothing
    for this one."""
    seen_free = [o.available for o in observed if o.available is not None]
    if budget is None and seen_free and intersect_all(seen_free) is None:  # with a budget, it is the limit
        return None, None
    listed = {entry["log"] for entry in result.steps}
    same = [o for o in observed if o.setting.family == base.family and o.setting.concurrency == base.concurrency
            and (not rule.shared_pool or o.setting.context_per_slot == base.context_per_slot)
            and o.source not in listed]
    good = max((o for o in same if _fits(o, budget)), key=lambda o: o.kv_tokens, default=None)
    # memory settles the upper side (a refusal, or a start that ran out at its first computation); a
    # start that failed otherwise may have failed for another reason
    above = [o for o in same if o.out_of_memory and (good is None or o.kv_tokens > good.kv_tokens)]
    bad = min(above, key=lambda o: o.kv_tokens, default=None)
    for obs, fits in ((good, True), (bad, False)):
        if obs is not None:
            _record(result, obs, obs.kv_tokens, fits, "an earlier launch at this setting", settled=True)
    # in whole steps, as the search's own candidates are: down for what fit, up for what did not
    return (None if good is None else snap_down(good.kv_tokens, step),
            None if bad is None else -(-bad.kv_tokens // step) * step)


def _misses(result: SearchResult) -> list[int]:
    """The pools of the launches in a row, counting back from the last (an earlier one it settled on
    included), that did not fit."""
    pools = []
    for entry in reversed(result.steps):
        if entry["fits"]:
            break
        pools.append(entry["kv_tokens"])
    return pools


def _next_candidate(base: Setting, rule: PoolRule, fitted: CapacityFit, observed: list[Observation],
                    budget: Interval | None, good: int | None, bad: int | None, step: int, low_pool: int,
                    high_pool: int, misses: list[int]) -> tuple[int, str, bool] | None:
    """The next pool to launch: the fit's sure answer first, then one page above it, else the midpoint;
    below a sure answer that did not serve, 2^(k - 1) steps down from the last miss, k being the misses
    in a row at or below the sure answer.

    Returns (tokens, why, sure_bad): sure_bad means the fit alone shows it cannot fit (no launch).
    """
    lo = good if good is not None else low_pool - step
    hi = bad if bad is not None else high_pool + step
    if hi - lo <= step:
        return None
    family = fitted.family_for(base.family)
    available = _available(fitted, observed, budget)
    prediction = None
    if family is not None and family.consistent and available is not None:
        prediction = family.max_pool(base.concurrency, base.context_per_slot, available, rule)
    if prediction is not None and prediction.low is not None and prediction.low > 0:
        sure = snap_down(int(prediction.low), step)
        if bad is None and lo < high_pool <= sure:
            return high_pool, "the largest pool the engine takes (the fit says memory allows more)", False
        if lo < sure < hi:
            return sure, "the fit's sure answer", False
        refuted = sum(1 for pool in misses if pool <= sure)
        if bad is not None and sure >= hi and refuted:
            # a launch at or below the sure answer did not serve: step down from it, doubling the stride, which
            # starts at what its first use asked for and did not get where the log says (vLLM's 192 MiB at warm-up
            # on the H200 is 547 pages: one page at a time would have needed ten launches to get below it)
            stride = max(step, _shortfall_tokens(observed, hi, fitted.slopes.get(base.kv_dtype), step))
            below = max(hi - stride * 2 ** (refuted - 1), snap_down((lo + hi) // 2, step))
            if lo < below < hi:
                return below, f"{(hi - below) // step} step(s) below a pool the fit said fits, which did not", False
        possible = None if prediction.high is None else snap_down(int(prediction.high), step)
        if possible is not None and possible <= lo:
            # the fit says nothing above the largest pool that fit can fit: no launch needed for it
            return (lo + step, "the fit: one page more cannot fit", True) if lo + step < hi else None
        if possible is not None:
            middle = snap_down((lo + min(hi, possible + step)) // 2, step)
            if lo < middle < hi:
                return middle, "bisection inside the fit's interval", False
    if good is None and bad is None:
        # a per-slot pool starts at the setting's own context (what the profile serves), not at a few
        # pages, where an engine's compute buffer can follow another line than at real sizes
        first = base.context_per_slot * base.concurrency if not rule.shared_pool else 4 * low_pool
        return snap_down(min(high_pool, first), step), "no prediction yet: a first probe", False
    if bad is None:
        return min(high_pool, snap_down(2 * lo, step)), "doubling: nothing refused yet", False
    if good is None:
        half = snap_down(hi // 2, step)
        return (half, "halving: nothing fit yet", False) if half > low_pool - step else None
    return snap_down((lo + hi) // 2, step), "bisection", False


def _shortfall_tokens(observed: Sequence[Observation], pool: int, bytes_per_token: Interval | None, step: int) -> int:
    """The allocation the launch at `pool` ran out on at first use, in whole steps of the pool (0: its log
    names none, or the slope is unknown): the pool must shrink by at least that much to serve."""
    asked = [int(o.extra["failed_allocation_bytes"]) for o in observed
             if o.kv_tokens == pool and o.extra.get("failed_allocation_bytes")]
    if not asked or bytes_per_token is None or bytes_per_token.low is None or bytes_per_token.low <= 0:
        return 0
    tokens = math.ceil(max(asked) / bytes_per_token.low)
    return -(-tokens // step) * step


def budget_after_weights(budget: Interval, observations: Sequence[Observation]) -> Interval | None:
    """A memory budget less the weights the launches loaded (the last seen); None before any loaded."""
    weights = [o.weights for o in observations if o.weights is not None]
    return budget - weights[-1] if weights else None


def _available(fitted: CapacityFit, observed: list[Observation], budget: Interval | None) -> Interval | None:
    """What the runtime may take: free memory after weights less what the launches took at first use;
    or, under a budget, the budget minus the weights (a launch fits a budget by its books alone, `_fits`)."""
    if budget is None:
        return fitted.room(fitted.available)
    return budget_after_weights(budget, observed)
