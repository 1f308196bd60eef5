"""What every format is: a name, the peer tool it speaks for, and how a run is written in it or read from it.

An export reads the rows a run's tables count (`source`: measured requests and the ones that failed, never
warm-ups or cache seeds), cell by cell, because the peers' files hold one load each: one vLLM result per
`--append-result` line, one AIPerf artifact folder, one GuideLLM benchmark. An import returns `Imported`:
per-request rows where the tool's file has them, and the tool's aggregates kept as aggregates (`Aggregate`),
never spread out into rows they were not measured as.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ninferkit.bounded import INPUT_FILE_BYTES, loads_json, read_text_file
from ninferkit.errors import BadInput
from ninferkit.measure.latency import MS
from ninferkit.params.variants import BASE
from ninferkit.rundir.records import RequestRow
from ninferkit.rundir.servings import launch_name


@dataclass(frozen=True)
class Cell:
    """One measured load of a run: its sweep, id and parameters, and its rows (failed ones included)."""

    sweep: str
    cell_id: str
    params: dict[str, Any]
    rows: list[RequestRow]

    @property
    def ok(self) -> list[RequestRow]:
        return [row for row in self.rows if row.status == "ok"]

    @property
    def concurrency(self) -> int | None:
        """The concurrency cells' clients (`concurrency`); None for a cell of another kind."""
        value = self.params.get("concurrency") if self.sweep == "concurrency" else None
        return int(value) if isinstance(value, int) else None

    @property
    def rate_rps(self) -> float | None:
        """The rate cells' offered rate (`rate_rps`, seeded Poisson arrivals); None for a cell of another kind."""
        value = self.params.get("rate_rps")
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def variant(self) -> str:
        """The launch that measured it: a variant's name (the profile's `variants`, issue 39), else `base`."""
        return launch_name(self.params)

    @property
    def name(self) -> str:
        """A file-safe name for the cell: `<sweep>-<cell_id>`."""
        return f"{self.sweep}-{self.cell_id}"


@dataclass(frozen=True)
class Source:
    """A run as an export sees it: who served it and its cells."""

    run_id: str
    model: str | None
    engine: str | None
    url: str | None
    cells: list[Cell]
    variant_urls: dict[str, str | None] = field(default_factory=dict)
    """Where each variant's server listened (its own launch, its own port), by name."""

    def url_of(self, cell: Cell) -> str | None:
        """The server that measured the cell: the run's for the base, its variant's own for a variant (None where
        the variant's launch left no record: never the base's URL for cells another server answered)."""
        return self.variant_urls.get(cell.variant) if cell.variant != BASE else self.url


@dataclass(frozen=True)
class Aggregate:
    """One statistic a tool printed, kept as it printed it: a figure over requests, not a request."""

    metric: str
    """Ours (`ttft_client_s`, `requests_per_s`, ...): metrics.MAPPING names which of theirs it is."""
    stat: str
    """mean, median, std, min, max, p50, p90, p99..., or total / rate for a figure over the whole run."""
    value: float
    unit: str
    """As the tool wrote it: ms, s, tokens, requests/s..."""
    theirs: str
    """The tool's own name and path in its file (`mean_ttft_ms`, `time_to_first_token.avg`)."""
    load: str | None = None
    """Which of the file's loads (a GuideLLM benchmark, a vLLM result line); None where it has one."""

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "stat": self.stat, "value": self.value, "unit": self.unit,
                "theirs": self.theirs, "load": self.load}


@dataclass
class Imported:
    """What an import read from a tool's file: its rows (RequestRow fields), its aggregates, and where it came
    from."""

    tool: str
    version: str | None
    rows: list[dict[str, Any]] = field(default_factory=list)
    aggregates: list[Aggregate] = field(default_factory=list)
    model: str | None = None
    url: str | None = None
    started_utc: str | None = None
    notes: list[str] = field(default_factory=list)
    """What the file could not say (a field it lacks), in words: the import never guesses it."""
    files: list[Path] = field(default_factory=list)
    """The files the import read (imported.json records each one's sha256)."""


@dataclass(frozen=True)
class Format:
    """A format: its name (the `--format` word), the tool it speaks for, and what it can do."""

    name: str
    tool: str
    describe: str
    """What the file is, for --help and docs/interop.md."""
    export: Callable[[Source, Path], list[Path]] | None = None
    """Write the run at the path (a file or a folder, as the tool writes it); the paths written."""
    default_name: str = ""
    """The file or folder name an export takes in the run's exports/ when no -o is given."""
    read: Callable[[Path], Imported] | None = None
    """Read a tool's file (or folder) into rows and aggregates; BadInput naming what it is not."""


def cell_id(params: dict[str, Any]) -> str:
    """An imported load's cell id: as a planned cell's, the first 12 hex of its parameters' canonical sha256,
    so two imports of one load (AIPerf's and GuideLLM's at concurrency 2) pair in `ninferkit compare`."""
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]


def load_json(path: Path, what: str) -> Any:
    """A tool's JSON file; BadInput naming it when it is not JSON."""
    text = read_text_file(path, INPUT_FILE_BYTES, f"reading a {what}")
    try:
        return loads_json(text)
    except ValueError as exc:
        raise BadInput(f"{path}: not a {what} ({exc}); give the file the tool wrote") from exc


def number(value: Any) -> float | None:
    """A JSON number as a float; None for null, text or a bool (a field the tool left empty)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * MS


def seconds(milliseconds: float | None) -> float | None:
    return None if milliseconds is None else milliseconds / MS
