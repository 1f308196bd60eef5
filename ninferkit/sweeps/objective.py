"""The best setting for a target (issue 39): each launch judged against the profile's `objective`, and which
variant the search launches next.

A launch (the profile's own serving, `base`, or a variant) meets the objective when every limit holds at the
cells of its sweep that match `objective.cell`: a figure is a metric's median over those rows, or a percentile
(`ttft_client_s_p99`), from the rows alone (requests.jsonl), so the write-up re-derives the answer. Without
`ordered` every variant is launched and the answer is the launch that meets the limits with the highest
`maximize`. With `ordered` the variants are in the order of one option and the limits are taken to hold up to
some variant and fail after it (a longer context keeps less decode), so the search bisects: each launch halves
the variants left undecided, and it stops once the last one that meets the limits is pinned between a launch
that met them and one that did not (or the list's end). What each launch refuted is said with the answer.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ninferkit.params.variants import BASE, Objective
from ninferkit.rundir.records import RequestRow
from ninferkit.rundir.servings import VARIANT

_PERCENTILE = re.compile(r"^(?P<metric>\w+?)_p(?P<q>\d{1,2})$")


@dataclass(frozen=True)
class Verdict:
    """One launch against the objective: its figures, and whether it meets every limit (None: no row decides)."""

    launch: str
    figures: dict[str, float | None]
    meets: bool | None
    missed: list[str] = field(default_factory=list)
    """Each limit it missed, in words ("ttft_client_s_p99 2.41 > 2")."""
    rows: int = 0

    @property
    def score(self) -> float | None:
        return self.figures.get("score")


def figure(rows: Sequence[RequestRow], name: str) -> float | None:
    """A metric's median over the rows, or its percentile for `<metric>_pNN`; None where no row has it."""
    found = _PERCENTILE.match(name)
    metric = found["metric"] if found and not hasattr(RequestRow, name) else name
    values = [float(value) for row in rows if isinstance(value := getattr(row, metric, None), (int, float))]
    if not values:
        return None
    if found and metric != name:
        return float(np.percentile(values, int(found["q"])))
    return float(statistics.median(values))


def deciding_rows(objective: Objective, launch: str, rows: Sequence[RequestRow]) -> list[RequestRow]:
    """The launch's finished measurements at the objective's cells."""
    def matches(row: RequestRow) -> bool:
        cell = row.cell or {}
        return (row.sweep == objective.sweep and str(cell.get(VARIANT) or BASE) == launch
                and all(cell.get(key) == value for key, value in objective.cell.items()))
    return [row for row in rows if row.status == "ok" and not row.warmup and row.prefix_role != "seed"
            and matches(row)]


def judge(objective: Objective, launch: str, rows: Sequence[RequestRow]) -> Verdict:
    """The launch's verdict from all the run's rows (it picks its own)."""
    own = deciding_rows(objective, launch, rows)
    if not own:
        return Verdict(launch, {}, None)
    figures: dict[str, float | None] = {name: figure(own, name) for name in (*objective.at_most, *objective.at_least)}
    missed = []
    for name, bound in objective.at_most.items():
        value = figures[name]
        if value is None or value > bound:
            missed.append(f"{name} {'unknown' if value is None else f'{value:.4g}'} > {bound:g}")
    for name, bound in objective.at_least.items():
        value = figures[name]
        if value is None or value < bound:
            missed.append(f"{name} {'unknown' if value is None else f'{value:.4g}'} < {bound:g}")
    if objective.maximize:
        figures["score"] = figure(own, objective.maximize)
    return Verdict(launch, figures, not missed, missed, len(own))


def did_not_start(launch: str, why: str) -> Verdict:
    """A variant whose server did not start meets nothing."""
    return Verdict(launch, {}, False, [f"did not start: {why}"])


def next_launch(objective: Objective, order: Sequence[str], verdicts: Mapping[str, Verdict]) -> str | None:
    """The variant the search measures next; None once the answer is known. Without `ordered`: the first variant
    not judged yet. With it: the middle of the variants between the last that met the limits and the first that
    did not."""
    undecided = [name for name in order if verdicts.get(name) is None or verdicts[name].meets is None]
    if not objective.ordered:
        return undecided[0] if undecided else None
    low, high = _bracket(order, verdicts)
    if high - low <= 1:
        return None
    return order[(low + high) // 2]


def _bracket(order: Sequence[str], verdicts: Mapping[str, Verdict]) -> tuple[int, int]:
    """(the last index that met the limits, or -1; the first after it that did not, or len(order))."""
    met = [index for index, name in enumerate(order) if name in verdicts and verdicts[name].meets]
    low = max(met, default=-1)
    missed = [index for index, name in enumerate(order)
              if index > low and name in verdicts and verdicts[name].meets is False]
    return low, min(missed, default=len(order))


@dataclass(frozen=True)
class Answer:
    """The best launch (None: none meets the objective), why, and what became of each launch."""

    best: str | None
    why: str
    outcomes: dict[str, str]


def answer(objective: Objective, order: Sequence[str], verdicts: Mapping[str, Verdict]) -> Answer:
    """The objective's answer from the launches' verdicts (`order`: the variants, in the profile's order)."""
    outcomes = {name: said(verdict) for name, verdict in verdicts.items() if verdict.meets is not None}
    if objective.ordered:
        low, high = _bracket(order, verdicts)
        for index, name in enumerate(order):
            if name in outcomes:
                continue
            if index < low:
                outcomes[name] = f"not launched: {order[low]}, later in the order, met the limits"
            elif index > high and high < len(order):
                outcomes[name] = f"not launched: {order[high]}, earlier in the order, missed them"
            else:
                outcomes[name] = "not measured"
        if high - low > 1:
            return Answer(None, f"not pinned yet: {', '.join(order[low + 1:high])} undecided", outcomes)
        if low < 0:
            return Answer(None, f"no variant meets the limits: the first in order, {order[0]}, misses them"
                          if order else "no variants", outcomes)
        bound = f"; {order[high]} misses them" if high < len(order) else " (the last variant)"
        return Answer(order[low], f"the last variant in order that meets the limits{bound}", outcomes)
    passing = [verdict for verdict in verdicts.values() if verdict.meets]
    for name in order:
        outcomes.setdefault(name, "not measured")
    if not passing:
        return Answer(None, "no launch meets the limits", outcomes)
    if objective.maximize:
        best = max(passing, key=lambda verdict: verdict.score if verdict.score is not None else float("-inf"))
        return Answer(best.launch, f"the highest {objective.maximize} ({best.score:.4g}) of the "
                      f"{len(passing)} launch(es) that meet the limits" if best.score is not None else
                      f"meets the limits; no launch has {objective.maximize}", outcomes)
    names = [verdict.launch for verdict in passing]
    return Answer(names[0], f"meets the limits (so do: {', '.join(names)})" if len(names) > 1 else "meets the limits",
                  outcomes)


def said(verdict: Verdict) -> str:
    """A verdict in words: met or missed (which limits), with its figures and how many requests decided."""
    shown = ", ".join(f"{name} {value:.4g}" for name, value in verdict.figures.items() if value is not None)
    head = "meets the limits" if verdict.meets else "misses: " + "; ".join(verdict.missed)
    return f"{head} ({shown}; {verdict.rows} requests)" if shown else head
