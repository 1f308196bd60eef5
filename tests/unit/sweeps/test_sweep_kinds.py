"""A sweep kind is one module plus its profile section: a kind added here, and no other file, is planned,
checked before a run, tabulated and written up.

The toy kind (output length against decode rate, at one prompt length) is this module's `OutputLength`;
its profile section is `OutputLengthSweep`, added to the profile's `sweeps` the way params/sweeps.py adds
the others. Its cells' requests are real ones: the context sweep's measured requests of the recorded
embedded run (tests/data/run_dirs/embedded-1, README there), replayed into the toy's cells, since a unit test
has no server to send them to (tests/live runs the kinds' runners against one).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field, create_model

from ninferkit.engines import get_adapter
from ninferkit.errors import ProfileError
from ninferkit.measure.client import RequestResult
from ninferkit.measure.workloads import exact_prompt, user_messages
from ninferkit.params.base import Section
from ninferkit.params.sweeps import Api, SweepsSection
from ninferkit.registry import Registry
from ninferkit.report import write_report
from ninferkit.report.data import load_run
from ninferkit.rundir.records import ServerRecord
from ninferkit.rundir.runs import Run, open_run, read_jsonl
from ninferkit.rundir.servings import run_servings
from ninferkit.steps import preflight
from ninferkit.sweeps import kinds
from ninferkit.sweeps.cell import Cell, CellParams, Label, Planner
from ninferkit.sweeps.execute import Recorder, SweepContext, _append_outcome, base_row, ended_outcome, request_spec
from ninferkit.sweeps.kinds import columns
from ninferkit.sweeps.kinds.base import SweepKind
from ninferkit.sweeps.kinds.columns import ViewColumn
from ninferkit.sweeps.plan import build_plan, parse_only
from ninferkit.sweeps.tables import build_tables, save_tables
from tests.conftest import DATA, REPO, whole

RECORDED = DATA / "run_dirs" / "embedded-1"


class OutputLengthSweep(Section):
    """The toy kind's profile section."""

    enabled: bool = False
    lengths: list[int] = Field(default_factory=lambda: [16, 32])
    prompt_tokens: int = 64
    repetitions: int = Field(2, ge=1)
    api: Api = "chat"


@dataclass(frozen=True, kw_only=True)
class OutputLengthCell(CellParams):
    prompt_tokens: int
    repetitions: int


class OutputLength(SweepKind[OutputLengthSweep, OutputLengthCell]):
    name = "output_length"
    params = OutputLengthCell
    table_keys = ("output_tokens", "prompt_tokens_target", "api")
    labels = (Label("output_tokens", "{} output tokens"),)
    view = (ViewColumn("output tokens", "output_tokens"), columns.REQUESTS, columns.DECODE,
            ViewColumn("completion tokens", "completion_tokens_median", "plain"))

    def plan(self, section: OutputLengthSweep, planner: Planner) -> list[Cell[OutputLengthCell]]:
        cells = []
        for length in section.lengths:
            planner.fits("sweeps.output_length.lengths", section.prompt_tokens, length)
            cells.append(planner.cell(self, OutputLengthCell(
                output_tokens=length, prompt_tokens=section.prompt_tokens, repetitions=section.repetitions,
                api=section.api, pin_output=True, **planner.common)))
        return cells

    async def run(self, ctx: SweepContext, cell: Cell[OutputLengthCell], record: Recorder) -> None:
        async with ctx.client() as client:
            for repetition in range(cell.params.repetitions):
                prompt = exact_prompt(ctx.tokenizer, cell.params.prompt_tokens)
                await record(await client.send(request_spec(ctx, cell, user_messages(prompt.text))), repetition, False)


TOY = OutputLength()
ToySweeps = create_model("ToySweeps", __base__=SweepsSection, output_length=(OutputLengthSweep, OutputLengthSweep()))


@pytest.fixture
def toy_kind(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The toy kind registered for one test (the kinds of sweeps/kinds/ found first, as a run finds them)."""
    registered = Registry[kinds.AnyKind]("sweep kind", ProfileError)
    registered.discover(kinds.__name__, "KIND")
    monkeypatch.setattr(kinds, "_KINDS", registered)
    kinds.register(TOY)
    yield


def toy_run(tmp_path: Path, **section: Any) -> Run:
    """A run of the embedded profile whose `sweeps` has the toy's section (the others as the profile has them)."""
    run = open_run(REPO / "params" / "local-cpu.yaml", tmp_path / "run")
    sweeps = ToySweeps(**dict(run.profile.sweeps), output_length=OutputLengthSweep(**section))
    return replace(run, loaded=replace(run.loaded, profile=run.profile.model_copy(update={"sweeps": sweeps})))


def test_the_registry_finds_the_kinds_of_its_folder_in_profile_order() -> None:
    assert kinds.names() == ["context", "tasks", "concurrency", "rate", "prefix_reuse", "sessions", "agent", "trace"]
    with pytest.raises(ProfileError, match="registered: agent, concurrency, context, prefix_reuse, rate, sessions, "
                       "tasks, trace"):
        kinds.get_kind("output_length")


def test_a_new_kind_is_planned_and_checked_before_a_run(tmp_path: Path, toy_kind: None) -> None:
    run = toy_run(tmp_path)
    adapter = get_adapter(run.profile.engine.kind)
    assert "output_length" in parse_only("output_length,context")
    assert not build_plan(run.profile, adapter, ["output_length"], explicit=False)  # off unless named
    cells = build_plan(run.profile, adapter, ["output_length"], explicit=True)
    assert [(c.sweep, c.params.output_tokens, c.label) for c in cells] == [
        ("output_length", 16, "output_length output_tokens=16"),
        ("output_length", 32, "output_length output_tokens=32")]
    assert cells[0].cell_id == build_plan(run.profile, adapter, ["output_length"], explicit=True)[0].cell_id
    assert cells[0].params.as_dict()["temperature"] == run.profile.sweeps.temperature  # the sampling every cell has

    too_long = toy_run(tmp_path, enabled=True, lengths=[run.profile.serve.max_context])
    assert any(problem.startswith("sweeps.output_length.lengths: 64 prompt")
               for problem in preflight.problems(too_long.profile, ["sweeps"]))


def test_a_new_kinds_cells_are_tabulated_and_written_up(tmp_path: Path, toy_kind: None) -> None:
    run = toy_run(tmp_path, lengths=[16, 32])
    adapter = get_adapter(run.profile.engine.kind)
    ctx = SweepContext(run, adapter, "http://recorded", "recorded-model", {}, None, [],  # type: ignore[arg-type]
                       base_row(run, adapter, ServerRecord(), run_servings(run.dir).main), 60.0, None,
                       run_servings(run.dir).main)
    measured = [row for row in read_jsonl(RECORDED / "requests.jsonl")
                if row["sweep"] == "context" and not row["warmup"] and row["status"] == "ok"]
    cells = build_plan(run.profile, adapter, ["output_length"], explicit=True)
    for cell, rows in zip(cells, (measured[:2], measured[2:4]), strict=True):
        record = Recorder(ctx, cell, "replay")
        for repetition, row in enumerate(rows):
            asyncio.run(record(RequestResult(**{name: row[name] for name in RequestResult.__dataclass_fields__
                                                if name in row and name != "server"}), repetition, False))
        _append_outcome(ctx, cell, ended_outcome(ctx, record))

    table = build_tables(run)["output_length"]
    assert list(table.columns[:3]) == ["output_tokens", "prompt_tokens_target", "api"]
    assert table["output_tokens"].tolist() == [16, 32] and table["n_ok"].tolist() == [2, 2]
    assert table["status"].tolist() == ["done", "done"]
    save_tables(run.dir, build_tables(run))

    assert list(load_run(run.dir.path).tables)[-1] == "output_length"  # after the kinds of the folder
    text = whole(write_report(run.dir.path, ["markdown"]))
    assert "*tables/output_length.csv (every column), 2 cells:" in text  # the toy's view, with its columns
    assert "| output tokens | requests |" in text and "completion tokens" in text
    assert "output length sweep: p50 / p90 / p99" in text
    assert "| 16 output tokens | 2 |" in text
    assert json.loads(run.dir.sweep_cells.read_text().splitlines()[0])["sweep"] == "output_length"


def test_typed_parameters_keep_the_recorded_cell_ids() -> None:
    """The recorded spec A/B run's plan (every kind but rate, both sides of the tasks' A/B): each cell's
    parameters, typed again by its kind, hash to the id the run recorded (resume and A/B pairing need it)."""
    plan = json.loads((DATA / "run_dirs" / "embedded-spec-ab" / "sweeps" / "plan.json").read_text())
    again = {cell["cell_id"]: kinds.get_kind(cell["sweep"]).recorded(cell["params"]) for cell in plan["cells"]}
    assert {cell_id: cell.cell_id for cell_id, cell in again.items()} == {cell_id: cell_id for cell_id in again}
    assert {cell.sweep for cell in again.values()} == {"context", "tasks", "concurrency", "prefix_reuse"}
    assert sum(cell.params.as_dict().get("speculation") == "off" for cell in again.values()) == 9
