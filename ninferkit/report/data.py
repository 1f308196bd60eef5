"""A run directory's raw files, read once and tolerant of gaps.

The write-up is built from these files only (never from a live server or the profile on disk), so
`ninferkit report RUN_DIR` re-renders any run on any machine. A file a step did not write is a gap
the write-up names, not an error.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

from ninferkit.bounded import read_log, regular_file
from ninferkit.engines import get_adapter
from ninferkit.engines.base import EngineAdapter
from ninferkit.errors import BadInput, NinferkitError, ProfileError
from ninferkit.measure.latency import Targets
from ninferkit.params.kinds import KINDS
from ninferkit.params.profile import Profile
from ninferkit.params.report import ReportSection
from ninferkit.params.variants import BASE
from ninferkit.rundir.recorded import RecordedProfile, read_recorded
from ninferkit.rundir.records import (
    ArtifactRecord,
    CapacityRecord,
    CellEntry,
    GpuInfo,
    ImportedRecord,
    LlamaBenchRecord,
    Manifest,
    ProbeRecord,
    RequestRow,
    RunFile,
    ServerRecord,
    StepEntry,
    TelemetrySample,
    VariantRecord,
)
from ninferkit.rundir.runs import RunDir, json_object
from ninferkit.rundir.servings import VARIANT, run_servings
from ninferkit.sweeps.counting import Counted
from ninferkit.sweeps.plan import sweep_names
from ninferkit.sweeps.tables import counted, demote_unmeasured, latest_outcomes, measured_ok, sweep_table, table_cells
from ninferkit.sweeps.truth import rows_with_server_truth


@dataclass
class RunData:
    """Everything the write-up may use from one run directory; absent files are empty values."""

    dir: RunDir
    manifest: Manifest = field(default_factory=Manifest)
    probe: ProbeRecord | None = None
    artifact: ArtifactRecord | None = None
    server: ServerRecord | None = None
    requests: list[RequestRow] = field(default_factory=list)
    """The rows the sweep tables count (with the engine's own record laid over them)."""
    telemetry: list[TelemetrySample] = field(default_factory=list)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    capacity: CapacityRecord | None = None
    server_log: str | None = None
    ledger: dict[str, Any] = field(default_factory=dict)
    """The launch step's startup ledger: what this ninferkit reads in logs/server.log (the log is the record,
    so an old run shows what a newer parser finds in it), else what server.json recorded."""
    ledger_source: str = "server.json"
    llama_bench: LlamaBenchRecord | None = None
    """benchmarks/bench_llama_bench.py's llama_bench.json, where that benchmark ran on this run."""
    imported: ImportedRecord | None = None
    """imported.json, where `ninferkit import` made this run from a peer tool's file."""
    missing: dict[str, str] = field(default_factory=dict)
    """A raw file this run has no data in -> the runbook step that writes it."""
    superseded: int = 0
    """Rows of requests.jsonl left out because a later attempt of their cell replaced them."""
    counted: Counted = field(default_factory=lambda: Counted([]))
    """How the rows counted were chosen: how many were left out as another run's, another profile's, or
    copies of a request already counted."""
    rebuilt: dict[str, str] = field(default_factory=dict)
    """A table file that could not be read -> what was wrong with it; the table shown was rebuilt from the rows."""
    cells: dict[str, CellEntry] = field(default_factory=dict)
    """cell_id -> the last entry of sweeps/cells.jsonl for the run's profile (status, reason, diagnosis)."""
    variant_requests: list[RequestRow] = field(default_factory=list)
    """The counted rows of the profile's variants (issue 39); `requests` and `tables` hold the base's alone, so
    every section but the variants' reads the profile's own serving as before."""
    variant_tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    """The sweep tables of a run with variants, whole: every variant's rows beside the base's (`variant` column)."""
    variants: dict[str, tuple[VariantRecord | None, ServerRecord | None]] = field(default_factory=dict)
    """Each variant's variant.json and its server.json (the startup ledger), by name, in the profile's order."""
    recorded: RecordedProfile | None = None
    """The recorded profile read by today's schema (rundir/recorded.py); None where the run records none or a
    field of it cannot be upgraded (`profile_refused` says which)."""
    profile_refused: str | None = None

    @property
    def todays_profile(self) -> Profile | None:
        """The recorded profile as today's schema reads it (the KV layout's fields, the deployment's command, the
        tables' targets); None where it cannot be read."""
        return self.recorded.profile if self.recorded is not None else None

    def launch_tables(self) -> dict[str, pd.DataFrame]:
        """The sweep tables with every launch's rows: `variant_tables` where the run has variants, else `tables`
        (the base's alone). The report-shaped tables read these, so a cell measured on a variant's launch reaches
        them, each row naming its launch."""
        return self.variant_tables or self.tables

    def variant_set(self, name: str) -> dict[str, Any]:
        """What variant `name` set: its variant.json's record, else the recorded profile's (not launched yet)."""
        record = self.variants.get(name, (None, None))[0]
        if record is not None:
            return dict(record.set)
        return next((dict(each.get("set") or {}) for each in self.profile.get("variants") or []
                     if isinstance(each, dict) and each.get("name") == name), {})

    def launch_setting(self, launch: str, key: str) -> Any:
        """A dotted serve setting (`serve.max_concurrency`) as launch `launch` ran it: what its variant set, else
        the profile's own."""
        changed = self.variant_set(launch) if launch != BASE else {}
        if key in changed:
            return changed[key]
        node: Any = self.profile
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return node

    @property
    def run_id(self) -> str:
        return str(self.manifest.run_id or self.dir.path.name)

    @property
    def profile(self) -> dict[str, Any]:
        return self.manifest.profile

    @property
    def engine(self) -> str | None:
        """The engine that ran: server.json's, else the profile's."""
        return (self.server.engine if self.server else None) or (self.profile.get("engine") or {}).get("kind")

    @property
    def adapter(self) -> EngineAdapter | None:
        """The adapter of the engine that ran (server.json's, else the profile's); None for an engine this
        ninferkit does not know (a run directory from elsewhere still gets its write-up)."""
        return get_adapter(self.engine) if self.engine in KINDS else None

    @property
    def settings(self) -> ReportSection:
        """The `report:` section the run was made with (defaults when the manifest has none)."""
        return ReportSection.model_validate(self.profile.get("report") or {})

    @property
    def probe_gpus(self) -> list[GpuInfo]:
        """The GPUs the setup step's probe found (none without a probe)."""
        return self.probe.gpus if self.probe else []

    @property
    def gpu_available(self) -> bool:
        """From the setup step's probe; a run without one (`ninferkit sweep` alone) has a GPU when NVML
        sampled one."""
        return self.probe.facts.gpu.available if self.probe else bool(self.nvml())

    def measured(self, sweep: str | None = None) -> list[RequestRow]:
        """Requests with status ok that are measurements (of one sweep, or all): not warm-ups, and not the
        requests a prefix-reuse cell sends only to seed the cache (prefix_role "seed")."""
        return measurements(self.requests, sweep)

    def measured_variants(self) -> list[RequestRow]:
        """As `measured`, of the variants' rows (issue 39)."""
        return measurements(self.variant_requests)

    def cell_rows(self, sweep: str, variants: bool = False) -> dict[str, list[RequestRow]]:
        """Each cell's measured requests, failed ones included: a cell's verdicts (kept up, goodput) count the
        requests that failed, where `measured` keeps only the finished ones. Each repeat of a cell
        (`sweeps.repeats`) is a cell of its own here: a verdict or a rate over time spans one repeat's requests.
        With `variants`, the variants' cells too (a variant's cell id names its variant, so none is merged)."""
        out: dict[str, list[RequestRow]] = defaultdict(list)
        for row in [*self.requests, *(self.variant_requests if variants else [])]:
            if row.sweep == sweep and not row.warmup and row.prefix_role != "seed":
                out[str(row.cell_id)].append(row)
        return dict(out)

    def nvml(self) -> list[TelemetrySample]:
        return [row for row in self.telemetry if row.source == "nvml"]


def measurements(rows: list[RequestRow], sweep: str | None = None) -> list[RequestRow]:
    """The rows with status ok that are measurements (of one sweep, or all): not warm-ups, and not the requests a
    prefix-reuse cell sends only to seed the cache (prefix_role "seed")."""
    return [row for row in rows if row.status == "ok" and not row.warmup and row.prefix_role != "seed"
            and (sweep is None or row.sweep == sweep)]


def load_run(path: str | Path) -> RunData:
    """Read the raw files of a run directory; only a missing directory is an error.

    Raises NinferkitError when `path` is not a directory.
    Example: ``load_run("runs/20261130-110000-local-cpu").measured("context")``.
    """
    run_dir = RunDir(Path(path).resolve())
    if not run_dir.path.is_dir():
        raise NinferkitError(f"{path} is not a run directory; give the folder `ninferkit run` wrote "
                             "(it holds manifest.json)")
    if not run_dir.manifest.exists() and not run_dir.requests.exists():
        raise BadInput(f"{path} holds no run: neither manifest.json nor requests.jsonl; give the folder "
                       "`ninferkit run` or `ninferkit import` wrote")
    data = RunData(run_dir)
    data.manifest = _present(run_dir.read_manifest() if run_dir.manifest.exists() else None, run_dir.manifest,
                             data, "any step") or Manifest()
    _refuse_cut_import(run_dir, data.manifest)
    if data.manifest.profile:
        try:
            data.recorded = read_recorded(json_object(run_dir.manifest))
        except ProfileError as exc:
            data.profile_refused = str(exc)
    data.probe = _present(run_dir.read_probe(), run_dir.probe, data, "setup")
    data.artifact = _present(run_dir.read_artifact(), run_dir.artifact, data, "verify")
    data.server = _present(run_dir.read_server(), run_dir.server, data, "launch")
    data.capacity = _present(run_dir.read_capacity(), run_dir.capacity, data, "capacity")
    rows = rows_with_server_truth(run_dir)
    outcomes = latest_outcomes(run_dir, run_servings(run_dir))
    data.counted = counted(run_dir, rows, outcomes)
    data.cells = demote_unmeasured(outcomes, measured_ok(data.counted.rows))  # done means measured
    data.requests = [row for row in data.counted.rows if not (row.cell or {}).get(VARIANT)]
    data.variant_requests = [row for row in data.counted.rows if (row.cell or {}).get(VARIANT)]
    data.superseded = data.counted.superseded
    if not rows:
        _missing(data, run_dir.name(run_dir.requests), "sweeps")
    data.telemetry = run_dir.read_telemetry()
    if not data.telemetry:
        _missing(data, run_dir.name(run_dir.telemetry), "sweeps")
    data.tables = _tables(data)
    if any(VARIANT in table for table in data.tables.values()):
        data.variant_tables = data.tables
        data.tables = {name: _base_only(table) for name, table in data.tables.items()}
    data.variants = _variants(run_dir, data.manifest)
    if not data.tables:
        _missing(data, run_dir.name(run_dir.tables) + "/", "sweeps")
    data.llama_bench = run_dir.read_llama_bench()  # optional: not listed as missing without it
    data.imported = run_dir.read_imported()  # only an imported run has it
    if run_dir.server_log.exists():
        data.server_log = read_log(run_dir.server_log, "reading the server log for the write-up")
    else:
        _missing(data, run_dir.name(run_dir.server_log), "launch")
    data.ledger, data.ledger_source = _ledger(data)
    return data


def _base_only(table: pd.DataFrame) -> pd.DataFrame:
    """A sweep table's rows of the profile's own serving, without the `variant` column."""
    if VARIANT not in table:
        return table
    return table[table[VARIANT] == BASE].drop(columns=[VARIANT]).reset_index(drop=True)


def _variants(run_dir: RunDir, manifest: Manifest) -> dict[str, tuple[VariantRecord | None, ServerRecord | None]]:
    """The recorded profile's variants with what their launches left (variant.json, server.json); a variant not
    launched yet has neither."""
    found: dict[str, tuple[VariantRecord | None, ServerRecord | None]] = {}
    for each in (manifest.profile or {}).get("variants") or []:
        name = str(each.get("name")) if isinstance(each, dict) else None
        if name:
            folder = run_dir.variant(name)
            found[name] = (folder.read_variant(), folder.read_server())
    return found


def _refuse_cut_import(run_dir: RunDir, manifest: Manifest) -> None:
    """BadInput for an import killed before its last row (interop/write_run.py marks `done` after it): its rows
    are a part of the tool's, and a write-up of them would read as the whole."""
    step = manifest.steps.get("import")
    if step is not None and step.status != "done":
        raise BadInput(f"{run_dir.path}: an import cut short (its manifest says import: {step.status}); its rows "
                       "are part of the file's: remove the folder and run `ninferkit import` again")


def _ledger(data: RunData) -> tuple[dict[str, Any], str]:
    """(ledger, where it was read): the engine adapter's reading of the server log, else server.json's."""
    recorded = data.server.ledger if data.server else {}
    adapter = data.adapter
    if data.server_log is None or adapter is None:
        return recorded, data.dir.name(data.dir.server)
    return adapter.parse_ledger(data.server_log), data.dir.name(data.dir.server_log)


Record = TypeVar("Record", bound=RunFile)


def _present(record: Record | None, path: Path, data: RunData, written_by: str) -> Record | None:
    """The record as read; a file that is not there is listed as missing, with the step that writes it."""
    if record is None:
        _missing(data, data.dir.name(path), written_by)
    return record


def _missing(data: RunData, name: str, step: str) -> None:
    """The file `name` listed as missing, with the label the run's runbook gives the step that writes it."""
    data.missing[name] = next((known.label for known in data.manifest.runbook if known.name == step), step)


def _tables(data: RunData) -> dict[str, pd.DataFrame]:
    """tables/<name>.csv (the parquet twin holds the same frame); the known sweeps first, then the rest. A
    table that cannot be read (empty, cut short, not text) is rebuilt from requests.jsonl and the ledger, as
    the sweeps step built it, and `rebuilt` says so; one that cannot be rebuilt is one clear error."""
    folder = data.dir.tables
    if not folder.is_dir():
        return {}
    found = {path.stem: path for path in folder.glob("*.csv")}
    known = sweep_names()
    order = [name for name in known if name in found] + sorted(set(found) - set(known))
    tables = {}
    for name in order:
        path = regular_file(found[name], TABLE_BYTES, "reading a sweep table")
        try:
            table = pd.read_csv(path)
        except (ValueError, pd.errors.ParserError) as exc:  # EmptyDataError and UnicodeDecodeError are ValueErrors
            damage: str | None = f"{type(exc).__name__}: {exc}".split("\n")[0]
        else:
            damage = _damage(data, name, path, table)
        tables[name] = table if damage is None else _rebuilt(data, name, path, damage)
    return tables


def _damage(data: RunData, name: str, path: Path, table: pd.DataFrame) -> str | None:
    """What is wrong with a table that parsed (None: nothing): pandas reads a file cut at any byte as the rows
    before the cut, so a table that does not end its last line, lacks the status column, or has fewer cells than
    the ledger is not shown as it is."""
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - 1))
        if handle.read(1) != b"\n":
            return "its last line is cut short"
    if "status" not in table.columns:
        return "it has no status column"
    expected = table_cells(name, data.cells)
    if expected and len(table) != expected:
        return f"it holds {len(table)} cells where sweeps/cells.jsonl has {expected}"
    return None


TABLE_BYTES = 256 * 1024 * 1024
"""A sweep table is a row per cell: kilobytes."""


def _rebuilt(data: RunData, name: str, path: Path, damage: str) -> pd.DataFrame:
    """The table `name` built again from the rows and the ledger (the sweeps step's own function); BadInput
    naming the file when the run lacks what it is built from."""
    from ninferkit.sweeps.kinds import find_kind

    cause = f"{data.dir.name(path)} cannot be read ({damage})"
    if find_kind(name) is None or not any(entry.sweep == name for entry in data.cells.values()):
        raise BadInput(f"{cause}, and the run has no ledger entry of a {name} sweep to build it again from: "
                       "run the sweeps step again (03_sweeps), or remove the file")
    profile = data.todays_profile
    if profile is None:
        raise BadInput(f"{cause}; rebuilding it needs the run's profile, which this ninferkit does not read: "
                       f"{data.profile_refused or 'the manifest records none'}".split("\n")[0])
    targets = Targets(**profile.sweeps.rate.slo.model_dump())
    data.rebuilt[data.dir.name(path)] = damage
    telemetry = data.telemetry if data.dir.telemetry.exists() else None
    return sweep_table(name, data.requests, data.cells, telemetry, profile.serve.speculation()[0],
                       targets)


def ordered_steps(manifest: Manifest) -> list[tuple[str, StepEntry]]:
    """The manifest's steps in the order of the run's runbook (setup ... writeup), then any others by name."""
    steps = manifest.steps
    known = [step.name for step in manifest.runbook if step.name in steps]
    return [(name, steps[name]) for name in known + sorted(set(steps) - set(known))]
