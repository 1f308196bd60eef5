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

A depth named in `sweeps.tasks.concurrency` sends each repetition as that many requests at once, each with a
document of its own (seed 003 §二 measured its coding and agent rows up to 90K two at a time, C2, and above one at
a time): the cell carries `concurrency`, its rows the lane (`client_index`), and the table a column of it. A cell
sent one at a time carries none, so it keeps its id.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import pandas as pd

from ninferkit.errors import ProfileError
from ninferkit.measure.workloads import TASK_NAMES, TaskRequest, load_task, task_request
from ninferkit.params.sweeps import TasksSweep
from ninferkit.rundir.servings import SPEC_OFF
from ninferkit.sweeps.cell import Cell, CellParams, Label, Planner, sent_output_tokens
from ninferkit.sweeps.execute import Recorder, SweepContext, gather_or_cancel, request_spec
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
    concurrency: int | None = None
    """Requests sent at once, each repetition (`sweeps.tasks.concurrency`); absent (None) on a cell sent one at a
    time."""

    OMITTED_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"speculation", "concurrency"})


class Tasks(SweepKind[TasksSweep, TasksCell]):
    name = "tasks"
    params = TasksCell
    table_keys = ("task", "context_depth", "speculation", "api", "concurrency")
    sorted_by = 3
    labels = (Label("task"), Label("context_depth", "depth {}"),
              Label("speculation", "speculation {}"), Label("concurrency", "{} at once", one=""))
    view = (ViewColumn("task", "task"), ViewColumn("depth", "context_depth"), ViewColumn("speculation", "speculation"),
            ViewColumn("requests at once", "concurrency"),
            columns.API, columns.REQUESTS, columns.PREFILL, columns.DECODE, columns.ENGINE, columns.ACCEPTANCE,
            columns.PER_ROUND, ViewColumn("output tokens", "completion_tokens_median", "plain"),
            ViewColumn("finish", "finish_reason", "plain"), columns.ANSWER, columns.GPU)
    orders = {"task": TASK_NAMES}

    def plan(self, section: TasksSweep, planner: Planner) -> list[Cell[TasksCell]]:
        sides: list[str | None] = [None, SPEC_OFF] if section.speculation_ab else [None]
        if section.speculation_ab and planner.profile.serve.speculation()[0] is None:
            raise ProfileError("sweeps.tasks.speculation_ab = true: serve.spec sets no method, so there is no "
                               "speculative decoding to compare against; allowed: false, or a serve.spec.method")
        stray = sorted(set(section.concurrency) - set(section.depths))
        if stray and section.enabled:
            warnings.warn(f"sweeps.tasks.concurrency names depth(s) {', '.join(map(str, stray))} that "
                          f"sweeps.tasks.depths ({', '.join(map(str, section.depths))}) does not hold: nothing is "
                          "sent at them", UserWarning, stacklevel=2)
        cells = []
        for depth in dict.fromkeys([*section.depths, *(d for name in section.tasks for d in section.depths_of(name))]):
            for name in (name for name in section.tasks if depth in section.depths_of(name)):
                task = load_task(name)
                output = section.output_tokens or task.output_tokens
                field = f"sweeps.tasks.task_depths.{name}" if name in section.task_depths else "sweeps.tasks.depths"
                planner.fits(field, depth + INSTRUCTION_TOKENS, sent_output_tokens(section.api, output))
                effort = {"reasoning_effort": task.reasoning_effort} if task.reasoning_effort else {}
                at_once = section.concurrency.get(depth, 1)
                for side in sides:
                    params = TasksCell(task=name, context_depth=depth, output_tokens=output, api=section.api,
                                       pin_output=section.pin_output, repetitions=section.repetitions,
                                       warmup=section.warmup, speculation=side,
                                       concurrency=at_once if at_once > 1 else None, **{**planner.common, **effort})
                    cells.append(planner.cell(self, params, needs="tools" if task.tools else None))
        return cells

    async def run(self, ctx: SweepContext, cell: Cell[TasksCell], record: Recorder) -> None:
        """Warm-ups one at a time; then each repetition, its `concurrency` requests at once (lanes), each request
        built (tokenized) before the repetition's first is sent."""
        params = cell.params
        task = load_task(params.task)
        lanes = params.concurrency or 1
        async with ctx.client(max(8, lanes)) as client:
            for index in range(params.warmup):
                request = task_request(ctx.tokenizer, task, params.context_depth)
                result = await client.send(request_spec(ctx, cell, request.messages, tools=request.tools))
                await record(result, index - params.warmup, True, prompt_content_tokens=request.prompt.content_tokens)
            async def lane(request: TaskRequest, repetition: int, index: int) -> None:
                result = await client.send(request_spec(ctx, cell, request.messages, tools=request.tools))
                await record(result, repetition, False, prompt_content_tokens=request.prompt.content_tokens,
                             **({"client_index": index} if params.concurrency else {}))

            for repetition in range(params.repetitions):
                requests = [task_request(ctx.tokenizer, task, params.context_depth) for _ in range(lanes)]
                await gather_or_cancel([lane(request, repetition, index) for index, request in enumerate(requests)])

    def key_columns(self, cell: Mapping[str, Any], speculation: str | None) -> dict[str, Any]:
        keys = self.key_values(cell)
        keys["speculation"] = keys["speculation"] or speculation or SPEC_OFF
        keys["concurrency"] = keys["concurrency"] or 1
        return keys

    def sort_key(self, column: pd.Series) -> pd.Series:
        return column.map(lambda v: TASK_NAMES.index(v) if v in TASK_NAMES else v)

    def outcome_columns(self, measured: pd.DataFrame) -> dict[str, Any]:
        return {"finish_reason": sent_values(measured, "finish_reason")}


KIND = Tasks()
