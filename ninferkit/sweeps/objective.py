"""The best setting for a target (issue 39): each launch judged against the profile's `objective`, and which
variant the search launches next.

A launch (the profile's own serving, `base`, or a variant) meets the objective when every limit holds at the
cells of its sweep that match `objective.cell`: a figure is a metric's median over those rows, a percentile
(`ttft_client_s_p99`), or a goodput (`goodput_rps`, `goodput_tok_s`: the requests meeting every target of
`objective.goodput`, or their output tokens, over the wall time of everything sent at the cell, as vLLM's
`request_goodput`; measure/latency.py), from the rows alone (requests.jsonl), so the write-up re-derives the answer.

Three searches:
- `maximize` without `ordered`: every variant is launched (nothing bounds a launch not measured) and the answer is
  the launch that meets the limits with the highest figure.
- `ordered`: the variants are in the order of one option and the limits hold up to some variant and fail after it
  (a longer context keeps less decode). Alone, it bisects: each launch halves the variants left undecided, and it
  stops once the last one that meets the limits is pinned between a launch that met them and one that did not (or
  the list's end). With `maximize`, the figure is also taken to rise to one peak and fall after it (slots: more
  share the machine better, until they crowd it), so it climbs: it measures two neighbours in the middle of the
  variants that may hold the peak, keeps the side that rises, and stops once every variant that may hold the peak
  is measured (about two launches per halving).
- `largest`: per launch, the largest value of a cell parameter (the context sweep's `target_prompt_tokens`) whose
  cell meets the limits, said with the next measured cell that refutes it; the best launch is the one whose value
  is largest. The sweep's own cells decide, so nothing more is launched for it.

What each launch refuted is said with the answer.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ninferkit.measure.latency import Targets, goodput
from ninferkit.params.variants import GOODPUT, Objective
from ninferkit.rundir.records import RequestRow
from ninferkit.rundir.servings import launch_name

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
    detail: str = ""
    """With `largest`: the cell that refutes the next one (and any smaller cell that missed)."""
    limited: bool = True
    """False where the objective sets no limit (`maximize` alone): the launch is measured, not judged."""

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


def goodput_figure(sent: Sequence[RequestRow], name: str, targets: Targets) -> float | None:
    """`goodput_rps` or `goodput_tok_s` of each measured attempt at a cell (its own wall time: repeats and reruns are
    timed apart), their median; None where no attempt finished a request."""
    attempts: dict[tuple[str | None, str | None], list[RequestRow]] = defaultdict(list)
    for row in sent:
        attempts[(row.cell_id, row.attempt)].append(row)
    values = [value for rows in attempts.values() if any(row.status == "ok" for row in rows)
              if (value := goodput(rows, targets)[name]) is not None]
    return float(statistics.median(values)) if values else None


def deciding_rows(objective: Objective, launch: str, rows: Sequence[RequestRow]) -> list[RequestRow]:
    """The launch's measured requests at the objective's cells, failed ones included (goodput counts them)."""
    def matches(row: RequestRow) -> bool:
        cell = row.cell or {}
        return (row.sweep == objective.sweep and launch_name(cell) == launch
                and all(cell.get(key) == value for key, value in objective.cell.items()))
    return [row for row in rows if not row.warmup and row.prefix_role != "seed" and matches(row)]


def _figures(objective: Objective, sent: Sequence[RequestRow]) -> dict[str, float | None]:
    """Every figure the objective names, from the requests sent at its cells (a latency from the finished ones)."""
    ok = [row for row in sent if row.status == "ok"]
    targets = Targets(**objective.goodput.model_dump()) if objective.goodput else Targets()
    names = (*objective.at_most, *objective.at_least, *filter(None, [objective.maximize]))
    return {name: goodput_figure(sent, name, targets) if name in GOODPUT else figure(ok, name) for name in names}


def _missed(objective: Objective, figures: Mapping[str, float | None]) -> list[str]:
    """Each limit the figures miss, in words; an unknown figure misses."""
    missed = []
    for name, bound in objective.at_most.items():
        value = figures[name]
        if value is None or value > bound:
            missed.append(f"{name} {'unknown' if value is None else f'{value:.4g}'} > {bound:g}")
    for name, bound in objective.at_least.items():
        value = figures[name]
        if value is None or value < bound:
            missed.append(f"{name} {'unknown' if value is None else f'{value:.4g}'} < {bound:g}")
    return missed


def judge(objective: Objective, launch: str, rows: Sequence[RequestRow]) -> Verdict:
    """The launch's verdict from all the run's rows (it picks its own)."""
    sent = deciding_rows(objective, launch, rows)
    if not sent:
        return Verdict(launch, {}, None)
    if objective.largest:
        return _largest(objective, objective.largest, launch, sent)
    figures = _figures(objective, sent)
    missed = _missed(objective, figures)
    if objective.maximize:
        figures["score"] = figures[objective.maximize]
    return Verdict(launch, figures, not missed, missed, sum(row.status == "ok" for row in sent),
                   limited=bool(objective.at_most or objective.at_least))


def _largest(objective: Objective, parameter: str, launch: str, sent: Sequence[RequestRow]) -> Verdict:
    """The largest value of `parameter` whose cell meets the limits, with the next measured value, which misses
    them (every larger one does), and any smaller one that missed too (the limit then does not fall monotonically)."""
    cells: dict[float, list[RequestRow]] = defaultdict(list)
    for row in sent:
        value = (row.cell or {}).get(parameter)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            cells[value].append(row)
    if not cells:
        return Verdict(launch, {}, None)
    judged = {value: _missed(objective, _figures(objective, rows)) for value, rows in sorted(cells.items())}
    passing = [value for value, missed in judged.items() if not missed]
    shown = {value: f"{parameter} {value:g}" for value in judged}
    if not passing:
        smallest = min(judged)
        return Verdict(launch, {}, False, [f"at {shown[smallest]}, the smallest measured: "
                                           + "; ".join(judged[smallest])], len(cells[smallest]))
    best = max(passing)
    figures = {parameter: float(best), **_figures(objective, cells[best]), "score": float(best)}
    above = [value for value in judged if value > best]
    detail = (f"the next measured, {shown[above[0]]}, misses: {'; '.join(judged[above[0]])}" if above
              else "the largest cell measured")
    below = [shown[value] for value in judged if value < best and judged[value]]
    if below:
        detail += (f"; {', '.join(below)}, below it, miss(es) them: the limit does not fall monotonically with "
                   f"{parameter} here")
    return Verdict(launch, figures, True, [], sum(row.status == "ok" for row in cells[best]), detail)


def did_not_start(launch: str, why: str) -> Verdict:
    """A variant whose server did not start meets nothing."""
    return Verdict(launch, {}, False, [f"did not start: {why}"])


def next_launch(objective: Objective, order: Sequence[str], verdicts: Mapping[str, Verdict]) -> str | None:
    """The variant the search measures next; None once the answer is known. Without `ordered`: the first variant
    not judged yet. With it: the middle of the variants between the last that met the limits and the first that
    did not; with `maximize` too, the first not measured of the two neighbours in the middle of those that may
    hold the peak."""
    undecided = [name for name in order if verdicts.get(name) is None or verdicts[name].meets is None]
    if not objective.ordered:
        return undecided[0] if undecided else None
    if objective.maximize:
        peak = _Peak.of(order, verdicts)
        open_ = [index for index in range(peak.low, peak.high + 1) if order[index] in undecided]
        if not open_:
            return None
        middle = (peak.low + peak.high) // 2
        return next((order[index] for index in (middle, middle + 1) if index in open_), order[open_[0]])
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
class _Peak:
    """Where the peak of an ordered `maximize` may lie, order[low..high], from the launches' figures (`values`: by
    index; none where the launch missed the limits, which every later variant then misses too). high < low: the
    figure is not single-peaked along the order."""

    low: int
    high: int
    values: dict[int, float]

    @staticmethod
    def of(order: Sequence[str], verdicts: Mapping[str, Verdict]) -> _Peak:
        values = {index: _value(verdicts[name]) for index, name in enumerate(order) if name in verdicts
                  and (verdicts[name].meets is False or verdicts[name].meets and verdicts[name].score is not None)}
        low, high = 0, len(order) - 1
        for k, v in values.items():
            if v == -math.inf:
                high = min(high, k - 1)
        for i, j, vi, vj in _pairs(values):
            if vi < vj:
                low = max(low, i + 1)
            elif vi > vj:
                high = min(high, j - 1)
            else:
                low, high = max(low, i), min(high, j)
        return _Peak(low, high, values)

    def why_not(self, index: int, order: Sequence[str], key: str) -> tuple[str, str] | None:
        """What ruled out the variant at `index` (outside low..high), in words, and the launch nearest it that did."""
        if index < self.low:
            rising = [(i, j) for i, j, vi, vj in _pairs(self.values) if index < i and vi < vj]
            if rising:
                i, j = min(rising)
                return f"{key} rises from {order[i]} to {order[j]}, after it", order[j]
        if index > self.high:
            missed = [k for k, v in self.values.items() if k < index and v == -math.inf]
            falling = [(i, j) for i, j, vi, vj in _pairs(self.values) if j < index and vi > vj]
            if falling and (not missed or max(falling)[1] > max(missed)):
                i, j = max(falling, key=lambda pair: (pair[1], pair[0]))
                return f"{key} falls from {order[i]} to {order[j]}, before it", order[j]
            if missed:
                return f"{order[max(missed)]}, earlier in the order, misses the limits", order[max(missed)]
        return None


def _pairs(values: Mapping[int, float]) -> list[tuple[int, int, float, float]]:
    """Every two measured launches in order, (i, j, their figures), where both met the limits."""
    found = sorted((index, value) for index, value in values.items() if value != -math.inf)
    return [(i, j, vi, vj) for a, (i, vi) in enumerate(found) for j, vj in found[a + 1:]]


def _value(verdict: Verdict) -> float:
    """A launch's figure in the climb: none where it missed the limits (or has no figure)."""
    return verdict.score if verdict.meets and verdict.score is not None else -math.inf


@dataclass(frozen=True)
class Answer:
    """The best launch (None: none meets the objective), why, and what became of each launch."""

    best: str | None
    why: str
    outcomes: dict[str, str]


def answer(objective: Objective, order: Sequence[str], verdicts: Mapping[str, Verdict]) -> Answer:
    """The objective's answer from the launches' verdicts (`order`: the variants, in the profile's order)."""
    outcomes = {name: said(verdict) for name, verdict in verdicts.items() if verdict.meets is not None}
    ruled: dict[str, list[str]] = defaultdict(list)  # a launch -> the variants its verdict spared launching
    if objective.ordered and objective.maximize:
        found = _climbed(objective.maximize, order, verdicts, outcomes, ruled)
    elif objective.ordered:
        found = _bisected(order, verdicts, outcomes, ruled)
    else:
        found = _best(objective, order, verdicts, outcomes)
    for name, spared in ruled.items():
        outcomes[name] += f"; so {', '.join(spared)} need(s) no launch"
    return found


def _best(objective: Objective, order: Sequence[str], verdicts: Mapping[str, Verdict],
          outcomes: dict[str, str]) -> Answer:
    """Every launch measured: the one that meets the limits with the highest figure (or the largest cell)."""
    passing = [verdict for verdict in verdicts.values() if verdict.meets]
    for name in order:
        outcomes.setdefault(name, "not measured")
    if not passing:
        return Answer(None, "no launch meets the limits", outcomes)
    key = objective.maximize or objective.largest
    if key is None:
        names = [verdict.launch for verdict in passing]
        return Answer(names[0], f"meets the limits (so do: {', '.join(names)})" if len(names) > 1 else
                      "meets the limits", outcomes)
    best = max(passing, key=lambda verdict: verdict.score if verdict.score is not None else -math.inf)
    if best.score is None:
        return Answer(best.launch, f"meets the limits; no launch has {key}", outcomes)
    level = [verdict.launch for verdict in passing if verdict is not best and verdict.score == best.score]
    for verdict in passing:
        if verdict is not best and verdict.score is not None:
            than = "level with" if verdict.launch in level else "below"
            outcomes[verdict.launch] += f"; {than} {best.launch}'s {key} {best.score:.4g}"
    most = "highest" if objective.maximize else "largest"
    tie = f"; {', '.join(level)} level with it (a tie names the first in order)" if level else ""
    among = "that meet the limits" if best.limited else "measured"
    return Answer(best.launch, f"the {most} {key} ({best.score:.4g}) of the {len(passing)} launch(es) {among}{tie}",
                  outcomes)


def _bisected(order: Sequence[str], verdicts: Mapping[str, Verdict], outcomes: dict[str, str],
              ruled: dict[str, list[str]]) -> Answer:
    """The last variant in order that meets the limits, and what refuted each variant not launched."""
    low, high = _bracket(order, verdicts)
    for index, name in enumerate(order):
        if name in outcomes:
            continue
        if index < low:
            outcomes[name] = f"not launched: {order[low]}, later in the order, met the limits"
            ruled[order[low]].append(name)
        elif index > high and high < len(order):
            outcomes[name] = f"not launched: {order[high]}, earlier in the order, missed them"
            ruled[order[high]].append(name)
        else:
            outcomes[name] = "not measured"
    if high - low > 1:
        return Answer(None, f"not pinned yet: {', '.join(order[low + 1:high])} undecided", outcomes)
    if low < 0:
        return Answer(None, f"no variant meets the limits: the first in order, {order[0]}, misses them"
                      if order else "no variants", outcomes)
    bound = f"; {order[high]} misses them" if high < len(order) else " (the last variant)"
    return Answer(order[low], f"the last variant in order that meets the limits{bound}", outcomes)


def _climbed(key: str, order: Sequence[str], verdicts: Mapping[str, Verdict], outcomes: dict[str, str],
             ruled: dict[str, list[str]]) -> Answer:
    """The peak of the figure `key` along the order, and what ruled out each variant not launched."""
    peak = _Peak.of(order, verdicts)
    for index, name in enumerate(order):
        if name in outcomes:
            continue
        ruled_out = peak.why_not(index, order, key)
        if ruled_out is None:
            outcomes[name] = "not measured"
        else:
            outcomes[name], by = f"not launched: {ruled_out[0]}", ruled_out[1]
            ruled[by].append(name)
    measured = [verdicts[name] for name in order if name in verdicts and verdicts[name].meets]
    best = max(measured, key=_value, default=None)
    if best is None or best.score is None:
        if peak.high < 0:
            return Answer(None, f"no variant meets the limits: the first in order, {order[0]}, misses them",
                          outcomes)
        return Answer(None, "no launch meets the limits with a figure to climb", outcomes)
    if peak.high < peak.low:
        return Answer(best.launch, f"the highest {key} ({best.score:.4g}) measured; {key} does not rise to one peak "
                      "along the order here, so variants not launched may hold a higher one", outcomes)
    undecided = [order[index] for index in range(peak.low, peak.high + 1) if outcomes[order[index]] == "not measured"]
    if undecided:
        return Answer(None, f"not pinned yet: {', '.join(undecided)} may hold the peak", outcomes)
    for verdict in measured:
        if verdict is not best and verdict.score is not None:
            outcomes[verdict.launch] += f"; below {best.launch}'s {key} {best.score:.4g}"
    return Answer(best.launch, f"the peak of {key} ({best.score:.4g}) along the order", outcomes)


def said(verdict: Verdict) -> str:
    """A verdict in words: met or missed (which limits), with its figures and how many requests decided."""
    shown = ", ".join(f"{name} {value:.4g}" for name, value in verdict.figures.items()
                      if value is not None and name != "score")
    head = ("meets the limits" if verdict.limited else "measured") if verdict.meets else "misses: " + "; ".join(
        verdict.missed)
    text = f"{head} ({shown}; {verdict.rows} request{'' if verdict.rows == 1 else 's'})" if shown else head
    return f"{text}: {verdict.detail}" if verdict.detail else text
