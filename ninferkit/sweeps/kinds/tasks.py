"""The tasks sweep: the task suite at one or more context depths, decode rate and acceptance per task.

A task runs at every depth of `sweeps.tasks.depths` unless `task_depths` gives it its own (seed 000 §2.3 measured
the summary after its 5.9K document and every other task as the instruction alone).

The tasks run at each task's own output length unless the profile pins one. With
`sweeps.tasks.speculation_ab` each task cell has a twin with `speculation: off`, measured on a second
server of the profile with speculative decoding off (sweeps/spec_off.py), right after it: both sides of the
A/B in one run and one table. The twin alone carries the extra parameter, so a cell measured with the
profile's own speculation keeps its id, and pairs with the same cell of another run. The table names the
speculative decoding each cell ran with (the profile's method, or `off`) and how its requests ended
(`finish_reason`: `stop` where the model ended at its own length, `length` at max_tokens).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import pandas as pd

from ninferkit.errors import ProfileError
from ninferkit.measure.workloads import TASK_NAMES, load_task, task_request
from ninferkit.params.sweeps import TasksSweep
from ninferkit.rundir.servings import SPEC_OFF
from ninferkit.sweeps.cell import Cell, CellParams, Label, Planner, sent_output_tokens
from ninferkit.sweeps.execute import Recorder, SweepContext, request_spec
from ninferkit.sweeps.kinds import columns
from ninferkit.sweeps.kinds.base import SweepKind
from ninferkit.sweeps.kinds.columns import ViewColumn
from ninferkit.sweeps.metrics import sent_values

INSTRUCTION_TOKENS = 200
"""What a task's instruction adds to its document, at most."""


@dataclass(frozen=True, kw_only=True)
class TasksCell(CellParams):
    task: str
    context_depth: int
    repetitions: int
    warmup: int
    speculation: str | None = None
    """`off` on the speculation A/B's other side; absent (None) on a cell with the profile's own."""

    OMITTED_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"speculation"})


class Tasks(SweepKind[TasksSweep, TasksCell]):
    name = "tasks"
    params = TasksCell
    table_keys = ("task", "context_depth", "speculation", "api")
    sorted_by = 3
    labels = (Label("task"), Label("context_depth", "depth {}"),
              Label("speculation", "speculation {}"))
    view = (ViewColumn("task", "task"), ViewColumn("depth", "context_depth"), ViewColumn("speculation", "speculation"),
            columns.API, columns.REQUESTS, columns.PREFILL, columns.DECODE, columns.ENGINE, columns.ACCEPTANCE,
            columns.PER_ROUND, ViewColumn("output tokens", "completion_tokens_median", "plain"),
            ViewColumn("finish", "finish_reason", "plain"), columns.ANSWER, columns.GPU)
    orders = {"task": TASK_NAMES}

    def plan(self, section: TasksSweep, planner: Planner) -> list[Cell[TasksCell]]:
        sides: list[str | None] = [None, SPEC_OFF] if section.speculation_ab else [None]
        if section.speculation_ab and planner.profile.serve.speculation()[0] is None:
            raise ProfileError("sweeps.tasks.speculation_ab = true: serve.spec sets no method, so there is no "
                               "speculative decoding to compare against; allowed: false, or a serve.spec.method")
        cells = []
        for depth in dict.fromkeys([*section.depths, *(d for name in section.tasks for d in section.depths_of(name))]):
            for name in (name for name in section.tasks if depth in section.depths_of(name)):
                task = load_task(name)
                output = section.output_tokens or task.output_tokens
                field = f"sweeps.tasks.task_depths.{name}" if name in section.task_depths else "sweeps.tasks.depths"
                planner.fits(field, depth + INSTRUCTION_TOKENS, sent_output_tokens(section.api, output))
                effort = {"reasoning_effort": task.reasoning_effort} if task.reasoning_effort else {}
                for side in sides:
                    params = TasksCell(task=name, context_depth=depth, output_tokens=output, api=section.api,
                                       pin_output=section.pin_output, repetitions=section.repetitions,
                                       warmup=section.warmup, speculation=side, **{**planner.common, **effort})
                    cells.append(planner.cell(self, params, needs="tools" if task.tools else None))
        return cells

    async def run(self, ctx: SweepContext, cell: Cell[TasksCell], record: Recorder) -> None:
        params = cell.params
        task = load_task(params.task)
        async with ctx.client() as client:
            for index in range(params.warmup + params.repetitions):
                request = task_request(ctx.tokenizer, task, params.context_depth)
                result = await client.send(request_spec(ctx, cell, request.messages, tools=request.tools))
                await record(result, index - params.warmup, index < params.warmup,
                             prompt_content_tokens=request.prompt.content_tokens)

    def key_columns(self, cell: Mapping[str, Any], speculation: str | None) -> dict[str, Any]:
        keys = self.key_values(cell)
        keys["speculation"] = keys["speculation"] or speculation or SPEC_OFF
        return keys

    def sort_key(self, column: pd.Series) -> pd.Series:
        return column.map(lambda v: TASK_NAMES.index(v) if v in TASK_NAMES else v)

    def outcome_columns(self, measured: pd.DataFrame) -> dict[str, Any]:
        return {"finish_reason": sent_values(measured, "finish_reason")}


KIND = Tasks()
