"""The best setting for the target (issue 39): the profile's `objective` answered in the post, from the rows alone.

The section says the question (the limits, the goodput targets, the cells that decide), the answer and why, the
launches the search took and their wall time, and per launch what its figures showed or why the search did not need
it (sweeps/settle.py re-derives all of it from requests.jsonl and the variants' records, as the sweeps step does at
the end of its launches, so the step and a post rebuilt later say the same). A `largest` objective (the largest
context that keeps decode >= Z) is answered for the base's own cells too, so this section stands without variants.
"""

from __future__ import annotations

from pydantic import ValidationError

from ninferkit.measure.latency import Targets
from ninferkit.params.variants import BASE, Objective
from ninferkit.report.data import RunData
from ninferkit.report.document import Block, Paragraph, Section, Table
from ninferkit.report.fmt import number
from ninferkit.sweeps.settle import settle

TITLE = "The best setting for the target"


def section(run: RunData) -> Section | None:
    """The objective's section; None for a run whose profile has none."""
    recorded = run.profile.get("objective")
    if not isinstance(recorded, dict):
        return None
    try:
        objective = Objective.model_validate(recorded)
    except ValidationError:
        return Section(TITLE, [Paragraph("The recorded objective no longer reads with this ninferkit's schema; its "
                                         "answer is not derived.")])
    return Section(TITLE, _answer(run, objective))


def _answer(run: RunData, objective: Objective) -> list[Block]:
    """The question, the answer with the launches it took, and each launch's outcome."""
    names = [BASE, *run.variants]
    searched = names[1:] if objective.ordered else names
    found = settle(objective, run.dir, list(run.variants), run.counted.rows)
    records = [record for record, _ in run.variants.values() if record is not None]
    seconds = [record.seconds for record in records if record.seconds is not None]
    took = (f" It took {len(records)} of {len(names) - 1} variant launch(es) besides the base"
            + (f" ({number(sum(seconds))} s from their launches to their stops)." if seconds else ".")
            if run.variants else " The base's own cells decide: no launch beyond the base's.")
    said = f"Answer: {found.best}: {found.why}." if found.best else f"No answer: {found.why}."
    head = f"Objective: {_goal(objective)} with {_limits(objective)}, at {_at(objective)}. {said}{took}"
    blocks: list[Block] = [Paragraph(head)]
    if objective.goodput is not None:
        blocks.append(Paragraph(
            f"Goodput counts the requests that finished within every target ({_targets(objective)}) per second of "
            "the wall time from the cell's first send to its last end, failed requests included in that time: "
            "vLLM's request goodput (`vllm bench serve --goodput`), which takes DistServe's per-request latency "
            "targets (Zhong et al., 2024); goodput_tok_s counts those requests' output tokens instead. Each attempt "
            "at a cell is timed on its own; the figure is their median."))
    outcomes = tuple((name, found.outcomes.get(name, "not measured")) for name in searched)
    blocks.append(Table(("launch", "against the objective"), outcomes,
                        "Each launch's figures at the objective's cells (from its rows), what it ruled out, or why the "
                        "search did not need it."))
    return blocks


def _goal(objective: Objective) -> str:
    if objective.largest:
        return f"the largest {objective.largest} per launch"
    if objective.ordered and objective.maximize:
        return f"the peak of {objective.maximize} along the variants' order"
    if objective.maximize:
        return f"the highest {objective.maximize}"
    return "the last variant in order" if objective.ordered else "a launch"


def _limits(objective: Objective) -> str:
    asked = [*(f"{key} ≤ {value:g}" for key, value in objective.at_most.items()),
             *(f"{key} ≥ {value:g}" for key, value in objective.at_least.items())]
    if objective.goodput is not None:
        asked.append(f"goodput targets {_targets(objective)}")
    return "; ".join(asked) or "no limit"


def _targets(objective: Objective) -> str:
    return Targets(**objective.goodput.model_dump()).describe() if objective.goodput else "none set"


def _at(objective: Objective) -> str:
    cell = ", ".join(f"{key}={value}" for key, value in objective.cell.items())
    return f"the {objective.sweep} sweep's {cell}" if cell else f"every cell of the {objective.sweep} sweep"
