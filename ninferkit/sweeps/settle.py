"""The objective's answer from a run's files (issue 39): the one reading that the sweeps step (at the end of its
variants' launches, and on a rerun with nothing left to send) and the post (report/objective.py) both make.

Each launch is judged (sweeps/objective.py) on the rows the tables count: the attempt each cell's last ledger entry
names, of the serving the cell has now, with the engine's own record laid over them (sweeps/tables.py
`counted_rows`). A variant whose last launch did not start (its variant.json says `failed`) meets nothing, whatever
an earlier launch of it measured: a rerun that did not launch it again leaves that record as its word. Read from the
files alone, the answer is the same whoever asks and whenever: the step as its launches end, the post rebuilt later.
"""

from __future__ import annotations

from collections.abc import Sequence

from ninferkit.params.variants import BASE, Objective
from ninferkit.rundir.records import RequestRow
from ninferkit.rundir.runs import RunDir
from ninferkit.rundir.servings import run_servings
from ninferkit.sweeps.objective import Answer, Verdict, answer, did_not_start, judge
from ninferkit.sweeps.tables import counted_rows, latest_outcomes


def launch_verdicts(objective: Objective, run_dir: RunDir, names: Sequence[str],
                    rows: Sequence[RequestRow] | None = None) -> dict[str, Verdict]:
    """Each named launch (`base` or a variant) against the objective, from the run's counted rows and its variants'
    records. `rows`: the counted rows as the caller has read them (the post's `RunData.counted`); None reads them."""
    counted = counted_rows(run_dir, latest_outcomes(run_dir, run_servings(run_dir))) if rows is None else rows
    found = {name: judge(objective, name, counted) for name in names}
    for name in names:
        record = None if name == BASE else run_dir.variant(name).read_variant()
        if record is not None and record.state == "failed":
            found[name] = did_not_start(name, (record.error or "no reason recorded").splitlines()[0])
    return found


def settle(objective: Objective, run_dir: RunDir, variants: Sequence[str],
           rows: Sequence[RequestRow] | None = None) -> Answer:
    """The objective's answer over the launches it searches: the variants in the profile's order with `ordered`
    (the base is not in that order), else the base and every variant. `rows` as in `launch_verdicts`."""
    searched = list(variants) if objective.ordered else [BASE, *variants]
    return answer(objective, searched, launch_verdicts(objective, run_dir, searched, rows))


def answer_line(found: Answer) -> str:
    """The answer in one line, as the sweeps step prints and records it: `<launch>: <why>`, or `no answer: <why>`."""
    return f"{found.best or 'no answer'}: {found.why}"
