"""Speculative decoding task by task: the field reports' central table, from the run's tasks table.

Each task's decode speed and acceptance (accepted / drafted tokens, the server's own counts), with the
speculation the profile sets and, where the run measured the A/B (`sweeps.tasks.speculation_ab`), without
it: the same task on a server with speculation off, measured right after. A task "gained" when its decode
rate with speculation is more than GAIN above the rate without; the caption says so. Each task's expected
character (repetitive: its answer copies text an n-gram drafter finds; creative: it does not) comes from
the task suite, so the write-up can say whether the tasks that gained are the ones expected to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from ninferkit.errors import ProfileError
from ninferkit.report.fmt import count, counts, number
from ninferkit.sweeps.kinds.columns import RATE_DECIMALS

GAIN = 0.10
"""The share by which one side's decode rate must beat the other's to count as a gain or a loss."""
OFF = "off"
PAIR_KEYS = ("task", "context_depth", "api")


@dataclass(frozen=True)
class TaskSpeculation:
    """One task at one depth: its speculation method, drafted/accepted tokens, decode rates with and without."""

    task: str
    context_depth: Any
    character: str
    method: str
    drafted: float | None
    accepted: float | None
    decode_with: float | None
    decode_without: float | None
    tokens_with: float | None
    tokens_without: float | None
    finish_with: str | None
    finish_without: str | None
    shown: dict[str, str]
    """accepted, drafted, tokens_with and tokens_without as counts (report/fmt.py counts: a median between two
    counts as the counts it lies between, from the tasks table's min and max)."""
    summed: tuple[int, int] | None = None
    """accepted and drafted tokens summed over the task's measured requests (the engine's counts), where the rows
    were read: one pair of whole counts, as the A/B gives a cell's "464 / 523"."""

    @property
    def acceptance(self) -> float | None:
        if self.summed is not None:
            return self.summed[0] / self.summed[1] if self.summed[1] else None
        return self.accepted / self.drafted if self.drafted and self.accepted is not None else None

    @property
    def ratio(self) -> float | None:
        if self.decode_with is None or not self.decode_without:
            return None
        return self.decode_with / self.decode_without

    @property
    def verdict(self) -> str:
        ratio = self.ratio
        if ratio is None:
            return "—"
        if ratio > 1 + GAIN:
            return "gained"
        if ratio < 1 - GAIN:
            return "lost"
        return "no clear change"


def task_speculation(tasks: pd.DataFrame, profile_method: str | None) -> list[TaskSpeculation]:
    """Per task and depth, the side measured with speculation beside the side without (when there is one).
    A table written before it had a `speculation` column ran every task with the profile's method. Each task's
    accepted and drafted tokens are the table's sums over its requests (sweeps/tables.py; a table written before
    them has medians, which between two requests fall between counts)."""
    if not len(tasks) or "task" not in tasks:
        return []
    frame = tasks.copy()
    frame["speculation"] = frame["speculation"] if "speculation" in frame else (profile_method or OFF)
    frame["speculation"] = frame["speculation"].fillna(profile_method or OFF)
    keys = [key for key in PAIR_KEYS if key in frame]
    if "status" in frame:
        frame = frame[frame["status"] == "done"]  # skipped and failed cells measured nothing (the tasks table says why)
    on = frame[frame["speculation"] != OFF]
    off = frame[frame["speculation"] == OFF]
    out = []
    for _, row in on.iterrows():
        match = off
        for key in keys:
            match = match[match[key] == row[key]]
        other = match.iloc[0] if len(match) else None
        out.append(TaskSpeculation(
            str(row["task"]), row.get("context_depth"), _character(str(row["task"])), str(row["speculation"]),
            _value(row, "drafted_tokens_server_median"), _value(row, "accepted_tokens_server_median"),
            _value(row, "decode_tok_s_server_median"), _value(other, "decode_tok_s_server_median"),
            _value(row, "completion_tokens_median"), _value(other, "completion_tokens_median"),
            _text(row, "finish_reason"), _text(other, "finish_reason"),
            {"accepted": _counts(row, "accepted_tokens_server"), "drafted": _counts(row, "drafted_tokens_server"),
             "tokens_with": _counts(row, "completion_tokens"), "tokens_without": _counts(other, "completion_tokens")},
            _summed(row)))
    return out


def _summed(row: pd.Series) -> tuple[int, int] | None:
    """The cell's accepted and drafted tokens summed over its requests, as the tasks table holds them (None for a
    table written before the sums, or a cell whose requests did not all count both)."""
    accepted, drafted = _value(row, "accepted_tokens_server_sum"), _value(row, "drafted_tokens_server_sum")
    return None if accepted is None or drafted is None else (int(accepted), int(drafted))


def not_measured(tasks: pd.DataFrame) -> str | None:
    """The task cells that measured nothing, with why (a skipped cell's reason), once per task."""
    if not len(tasks) or "status" not in tasks:
        return None
    missed = tasks[tasks["status"] != "done"]
    reasons = {str(row["task"]): f"{row['status']}: {row.get('reason')}" for _, row in missed.iterrows()}
    return "Not measured: " + "; ".join(f"{task} ({why})" for task, why in reasons.items()) + "." if reasons else None


def _character(task: str) -> str:
    from ninferkit.measure.workloads import load_task

    try:
        return load_task(task).character
    except ProfileError:  # a task this ninferkit's suite no longer has
        return "—"


def _value(row: pd.Series | None, column: str) -> float | None:
    if row is None or column not in row or pd.isna(row[column]):
        return None
    return float(row[column])


def _text(row: pd.Series | None, column: str) -> str | None:
    if row is None or column not in row or pd.isna(row[column]):
        return None
    return str(row[column])


def measured_without(found: list[TaskSpeculation]) -> bool:
    """Whether any task was also measured with speculation off (the caption then explains the comparison)."""
    return any(item.decode_without is not None for item in found)


def table_rows(found: list[TaskSpeculation]) -> tuple[tuple[str, ...], ...]:
    """The table's rows: decode rates to 0.1 tok/s (RATE_DECIMALS, as the task tables print the same figure)."""
    return tuple((item.task, number(item.context_depth), item.character, item.method, _drafts(item),
                  _acceptance(item),
                  number(item.decode_with, RATE_DECIMALS), number(item.decode_without, RATE_DECIMALS),
                  f"×{item.ratio:.2f}" if item.ratio is not None else "—", item.verdict,
                  f"{item.shown['tokens_with']} ({item.finish_with or '—'})",
                  f"{item.shown['tokens_without']} ({item.finish_without or '—'})") for item in found)


def _drafts(item: TaskSpeculation) -> str:
    """accepted / drafted: the sums over the task's requests where the rows were read, else the table's medians,
    each with its range where its requests differ (fmt.counts: one form for both sides)."""
    if item.summed is not None:
        return f"{count(item.summed[0])} / {count(item.summed[1])}" if item.summed[1] else "none drafted"
    return f"{item.shown['accepted']} / {item.shown['drafted']}" if item.drafted is not None else "none drafted"


def _counts(row: pd.Series | None, name: str) -> str:
    """A count the tasks table states as `{name}_median` (with `_min`/`_max` where it has them) as a count."""
    return counts(_value(row, f"{name}_median"), _value(row, f"{name}_min"), _value(row, f"{name}_max"))


COLUMNS = ("task", "depth", "expected character", "speculation", "accepted / drafted", "acceptance",
           "decode tok/s with", "decode tok/s without", "with / without", "verdict", "output tokens with (end)",
           "output tokens without (end)")


def _acceptance(item: TaskSpeculation) -> str:
    """accepted / drafted as a percentage; "no draft" where the server reported none (llama-server prints
    draft_n only for a request it drafted for)."""
    return "no draft" if item.acceptance is None else f"{100 * item.acceptance:.0f}%"


def _accepted(item: TaskSpeculation) -> str:
    return "no draft" if item.acceptance is None else f"{100 * item.acceptance:.0f}% of drafts accepted"


def summary(found: list[TaskSpeculation]) -> str:
    """Which tasks gained and lost, against what their character predicts."""
    measured = [item for item in found if item.ratio is not None]
    if not measured:
        return ("No task was measured without speculation, so no gain can be stated; "
                "sweeps.tasks.speculation_ab: true runs each task both ways in one run.")
    by_verdict = {verdict: [item for item in measured if item.verdict == verdict]
                  for verdict in ("gained", "lost", "no clear change")}
    parts = []
    for verdict, items in by_verdict.items():
        named = ", ".join(f"{item.task} (×{item.ratio:.2f}, {item.character}, {_accepted(item)})" for item in items)
        parts.append(f"{verdict}: {named or 'none'}")
    repetitive = [item for item in measured if item.character == "repetitive"]
    expected = sum(item.verdict == "gained" for item in repetitive)
    creative_gained = sum(item.verdict == "gained" for item in measured if item.character == "creative")
    against = [f"{item.task} ({_accepted(item)})" for item in measured
               if item.character == "creative" and item.verdict == "gained"]
    text = (f"Decode with speculation against without, task by task — {'; '.join(parts)}. Of the "
            f"{len(repetitive)} tasks expected to be repetitive, {expected} gained; of the "
            f"{len(measured) - len(repetitive)} expected to be creative, {creative_gained} gained.")
    if against:
        text += (f" A draft is text the prompt or the answer already holds, so a creative task gains only where its "
                 f"answer repeated itself: {', '.join(against)}, against their expected character (a small model "
                 "falls into loops; the output tokens beside them show whether it ran to the task's maximum).")
    return text
