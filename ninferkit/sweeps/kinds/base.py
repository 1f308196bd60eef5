"""The shape of a sweep kind: everything one kind of measurement is, in one module (sweeps/kinds/<kind>.py).

A kind names its profile section (`sweeps.<name>`, in params/sweeps.py: the profile schema stays a leaf),
its typed cell parameters, the cells it plans from that section, the async runner that measures a cell,
its table (key columns, order, the metrics only it has), how a cell is named in words, and the columns of
its write-up table. The plan, the runner, the tables, the write-up and preflight ask the registry
(sweeps.kinds) for the kinds and read these; none of them names a kind.

The write-up's columns are data (columns.py), because formatting is the write-up's (report/views.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from ninferkit.sweeps.cell import Cell, CellParams, Label, Planner
from ninferkit.sweeps.kinds.columns import ViewColumn

if TYPE_CHECKING:
    import pandas as pd

    from ninferkit.measure.latency import Targets
    from ninferkit.rundir.records import RequestRow, TelemetrySample
    from ninferkit.sweeps.execute import Recorder, SweepContext


class KindSection(Protocol):
    """What the registry asks of a kind's profile section: whether it runs unless named."""

    @property
    def enabled(self) -> bool: ...


S = TypeVar("S", bound=KindSection)
P = TypeVar("P", bound=CellParams)


class SweepKind(ABC, Generic[S, P]):
    """One kind of measurement. `name` is its profile section's and its table's (tables/<name>.csv)."""

    name: ClassVar[str]
    params: ClassVar[type[CellParams]]
    table_keys: ClassVar[tuple[str, ...]]
    """The key columns of its table, from the cell's parameters (`prompt_tokens_target`: the `prompt_tokens`
    asked for, beside the measured `prompt_tokens_median`)."""
    sorted_by: ClassVar[int] = 1
    """How many leading table keys order the table."""
    labels: ClassVar[tuple[Label, ...]]
    view: ClassVar[tuple[ViewColumn, ...]]
    loads_server: ClassVar[bool] = False
    """Whether its requests share the server with others in flight (a lone request's wait says nothing then)."""
    orders: ClassVar[dict[str, Sequence[str]]] = {}
    """Parameters whose values sort in a fixed order (tasks in suite order), not by value."""

    def section(self, sweeps: Any) -> S:
        """Its section of the profile's `sweeps`."""
        section: S = getattr(sweeps, self.name)
        return section

    @abstractmethod
    def plan(self, section: S, planner: Planner) -> list[Cell[P]]:
        """Its cells; raises ProfileError before anything is sent when a size does not fit the served context."""

    @abstractmethod
    async def run(self, ctx: SweepContext, cell: Cell[P], record: Recorder) -> None:
        """Send the cell's requests; `record` appends each finished one as a row."""

    def recorded(self, params: dict[str, Any]) -> Cell[P]:
        """A cell of the parameters a row or ledger entry recorded (a replay of recorded requests)."""
        typed: P = self.params.recorded(params)  # type: ignore[assignment]
        return Cell(self, typed)

    def key_values(self, cell: Mapping[str, Any]) -> dict[str, Any]:
        """Its table keys' values in a recorded cell, as recorded (None: not a parameter of that cell)."""
        return {key: cell.get("prompt_tokens") if key == "prompt_tokens_target" else cell.get(key)
                for key in self.table_keys}

    def key_columns(self, cell: Mapping[str, Any], speculation: str | None) -> dict[str, Any]:
        """Its table's key columns for a recorded cell; `speculation` is the profile's method."""
        return self.key_values(cell)

    def sort_key(self, column: pd.Series) -> pd.Series:
        """The values its table sorts a key column by."""
        return column

    def measured(self, rows: pd.DataFrame) -> pd.DataFrame:
        """Of a cell's rows without warm-ups, those its table counts."""
        return rows

    def metrics(self, ok: pd.DataFrame, finished: Sequence[RequestRow], sent: Sequence[RequestRow],
                measured: pd.DataFrame, targets: Targets) -> dict[str, Any]:
        """The table's columns only this kind has, after the metrics every table has."""
        return {}

    def outcome_columns(self, measured: pd.DataFrame) -> dict[str, Any]:
        """Columns after the cell's status (how its requests ended)."""
        return {}

    def condition_columns(self, cell_rows: pd.DataFrame, telemetry: Sequence[TelemetrySample]) -> dict[str, Any]:
        """Columns after the GPU conditions (what the engine's own lines said during the cell)."""
        return {}

    detail_caption: ClassVar[str] = ""

    def detail(self, rows: pd.DataFrame) -> pd.DataFrame | None:
        """A breakdown the write-up shows below the kind's table, from the run's counted rows (all kinds' rows,
        warm-ups included), under `detail_caption`; None: the kind has none."""
        return None
