"""A/B comparison of runs: per-cell deltas against the run-to-run spread, with the same caveats.

Cells are paired by sweep and cell parameters (what `cell_id` hashes), so the same measurement is
compared across runs and nothing else. A run's variants (issue 39) are compared too: a variant's cell pairs with
the cell of the variant of the same name in the other run (the Serving section says whether the two variants serve
alike), and a variant only one run has is named as such, its cells paired with nothing. Within a pair, repetitions
with the same number are paired too (the paired delta), beside the difference of the medians. A delta no larger
than the spread of either run is reported as "within spread", never as a speed-up.

Where both runs ran a cell more than once (`sweeps.repeats`), each repeat is one value (the median of its
requests), the medians compared are the medians of those, and the comparison adds the seeded bootstrap
interval of the difference (ninferkit/measure/confidence.py) and whether it leaves out zero (`outside_interval`):
a difference outside it is one the repeats did not produce by chance at that level. `regressions` are the
metrics that got worse by more than a percentage and outside the interval: what `--fail-on-regression` gates.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ninferkit.errors import BadInput, NinferkitError
from ninferkit.measure.confidence import Interval, difference_interval
from ninferkit.params.variants import BASE
from ninferkit.report.caveats import comparison_caveats
from ninferkit.report.data import RunData, load_run
from ninferkit.report.document import Block, Bullets, Document, Paragraph, Section, Table, table_from_frame
from ninferkit.report.fmt import number
from ninferkit.report.headline import params_label
from ninferkit.report.lead import prefill_is_overhead
from ninferkit.report.recipe import artifact_fetched
from ninferkit.report.render import get_renderer
from ninferkit.rundir.identity import ServingIdentity, same_serving
from ninferkit.rundir.records import RequestRow
from ninferkit.rundir.runs import utc_now, write_text_atomic
from ninferkit.rundir.servings import launch_name, run_servings
from ninferkit.sweeps.cell import repeat_of, without_repeat
from ninferkit.sweeps.metrics import cached_share, rows_acceptance

#: metric -> True when higher is better
METRICS: dict[str, bool] = {"decode_tok_s_server": True, "prefill_tok_s_server": True, "ttft_client_s": False}
OVERHEAD = "prompt time is a fixed overhead: no prefill rate"
"""The verdict of a cell's prefill where either run's prompt time stays flat as its context prompts grow (the post's
rule, report/lead.py): tokens over that time would compare two overheads as rates, in any sweep's cells."""
RUN_TO_RUN_PCT = 3.0
"""Seed 000 §2.2's run-to-run spread (the same artifact rerun: ±3%): the yardstick where a cell has one
repetition per run, so its own spread is unknown."""
CACHED = "prompt mostly from the cache: no prefill rate"
"""The verdict of a cell's prefill where either run's engine served more than `CACHED_SHARE` of its prompt from the
prefix cache (prefix reuse's resends): the prompt time is then over the few tokens left (identical_resend: 1 of
2,078 in about 2 ms), an overhead, so tokens over it compare no prefill rates (the same rule as `OVERHEAD`)."""
CACHED_SHARE = 0.5
SHAPE_METRICS = ("prefill_tok_s_server", "decode_tok_s_server")

CellKey = tuple[str, str]


@dataclass
class Comparison:
    """The result of comparing runs against the first (the baseline)."""

    run_ids: list[str]
    table: pd.DataFrame
    unpaired: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)
    serving: list[str] = field(default_factory=list)
    """Per candidate, how its serving differs from the baseline's (rundir/identity.py), or that it is the same."""
    cuda_graphs: list[str | None] = field(default_factory=list)
    """Per run, CUDA graphs as its server log says (the ledger's cuda_graphs; None: the log does not say)."""
    startup: list[str] = field(default_factory=list)
    """Per run, how its artifact reached the engine and how long the engine took to load and serve it."""

    def document(self) -> Document:
        title = f"A/B: {' vs '.join(self.run_ids)}" + graphs_words(self.cuda_graphs)
        sections = [Section("Serving", [Bullets(tuple(self.serving))]),
                    *([Section("Start-up", [Bullets(tuple(self.startup))])] if self.startup else []),
                    Section("Side by side", side_by_side(self.run_ids, self.table)), Section("Per-cell deltas", [
            Paragraph(f"Baseline {self.run_ids[0]}. delta = median(candidate) - median(baseline); paired delta = "
                      "median over repetitions present in both runs; spread = standard deviation over mean of "
                      "each run's repetitions." + _interval_words(self.table)),
            table_from_frame(_shown(self.table)) if not self.table.empty
            else Paragraph("No cell appears in both runs."),
        ])]
        if self.unpaired:
            sections.append(Section("Cells in only one run", [Bullets(tuple(self.unpaired))]))
        sections.append(Section("Caveats", [Bullets(tuple(self.caveats)) if self.caveats
                                            else Paragraph("None found in the data.")]))
        return Document(title, f"Generated at {utc_now()} by ninferkit compare.", sections)

    def write(self, folder: Path, formats: Sequence[str] = ("markdown", "html")) -> dict[str, Path]:
        """Write the comparison (index.md, index.html, table.csv) into folder."""
        folder.mkdir(parents=True, exist_ok=True)
        document = self.document()
        files = {name: get_renderer(name)(document, folder) for name in formats}
        csv = folder / "table.csv"
        write_text_atomic(csv, self.table.to_csv(index=False))
        files["csv"] = csv
        return files


def _shown(table: pd.DataFrame) -> pd.DataFrame:
    """The per-cell table as the reader sees it: without the variant column where every row is a base serving's
    (runs without variants; table.csv keeps the column, so its shape does not depend on the runs), and without the
    figures of a prefill that is no rate (`OVERHEAD`, `CACHED`: table.csv keeps the division)."""
    shown = table.drop(columns="variant") if "variant" in table and (table["variant"] == BASE).all() else table
    no_rate = shown["verdict"].isin((OVERHEAD, CACHED))
    if not no_rate.any():
        return shown
    shown = shown.astype({name: object for name in NO_RATE_FIGURES if name in shown})
    shown.loc[no_rate, [name for name in NO_RATE_FIGURES if name in shown]] = None
    return shown


NO_RATE_FIGURES = ("median_a", "median_b", "delta", "delta_pct", "paired_delta", "spread_a_pct", "spread_b_pct",
                   "interval_low", "interval_high")
"""The per-cell columns that hold a prefill's rate or its move."""


def graphs_words(values: Sequence[str | None]) -> str:
    """" (CUDA graphs: built in (USE_GRAPHS = 1) vs off (--enforce-eager))" where the runs differ in them, for the
    headline: a decode step of a small model is mostly kernel launches, which CUDA graphs remove, so an A/B of an
    eager server against one with graphs measures that as much as the engines ("" where they do not differ)."""
    if len(set(values)) < 2 or all(value is None for value in values):
        return ""
    return f" (CUDA graphs: {' vs '.join(value or 'not stated in its log' for value in values)})"


def _interval_words(table: pd.DataFrame) -> str:
    """What the interval columns are, where a cell had repeats in both runs."""
    if "interval_method" not in table or not table["interval_method"].notna().any():
        return ""
    method = table["interval_method"].dropna().iloc[0]
    return (" Where both runs repeated a cell (sweeps.repeats), each repeat is one value, the medians are "
            "the medians of the repeats, and interval_low / interval_high bound the difference of the medians "
            f"({method}); outside_interval: the "
            "interval leaves out zero.")


@dataclass(frozen=True)
class Regression:
    """A metric that got worse by more than the gate's percentage and outside the interval."""

    candidate: str
    sweep: str
    cell: str
    metric: str
    baseline: float
    value: float
    delta_pct: float
    interval: tuple[float, float]

    def line(self) -> str:
        low, high = self.interval
        return (f"regression: {self.metric} in {self.sweep} {self.cell} of {self.candidate}: {number(self.baseline)} "
                f"-> {number(self.value)} ({self.delta_pct:+.1f}%), outside the interval of the difference "
                f"[{number(low)}, {number(high)}]")


def regressions(comparison: Comparison, pct: float) -> tuple[list[Regression], list[str]]:
    """The metrics worse by more than `pct` percent and outside the interval, and a line for each metric worse
    by more than `pct` that could not be gated (a cell with one repeat in a run has no interval). Raises
    BadInput when no compared cell has an interval at all: the gate would pass whatever the runs measured."""
    table = comparison.table
    if "outside_interval" not in table or not table["outside_interval"].notna().any():
        raise BadInput(f"--fail-on-regression: no cell of {', '.join(comparison.run_ids)} was run more than once in "
                       "both runs, so no difference has an interval; set sweeps.repeats: N (N >= 2) in the "
                       "profiles and run the sweeps again")
    found, ungated = [], []
    for _, row in table.iterrows():
        pct_value = row["delta_pct"]
        if pct_value is None or pd.isna(pct_value):
            continue
        worse = -pct_value if METRICS[row["metric"]] else pct_value
        if worse <= pct:
            continue
        if pd.isna(row["outside_interval"]):
            ungated.append(f"not gated: {row['metric']} in {row['sweep']} {row['cell']} of {row['candidate']} is "
                           f"{abs(pct_value):.1f}% worse, but a run has one repeat of it (no interval)")
        elif bool(row["outside_interval"]):
            found.append(Regression(str(row["candidate"]), str(row["sweep"]), str(row["cell"]), str(row["metric"]),
                                    float(row["median_a"]), float(row["median_b"]), float(pct_value),
                                    (float(row["interval_low"]), float(row["interval_high"]))))
    return found, ungated


def side_by_side(run_ids: Sequence[str], table: pd.DataFrame) -> list[Block]:
    """Seed 000 §2.2: one row per shape (sweep cell), each run's prefill / decode / acceptance beside the
    other's, and whether each move is inside the run-to-run spread (the runs' own where they repeated a
    cell, else the report's ±3%)."""
    if table.empty:
        return [Paragraph("No cell appears in both runs.")]
    lines = []
    groups = sorted(table.groupby(["candidate", "sweep", "cell"], sort=False),
                    key=lambda item: (item[0][0], item[0][1], _natural(str(item[0][2]))))
    for (_, sweep, cell), group in groups:
        by_metric = {row["metric"]: row for _, row in group.iterrows()}
        first = group.iloc[0]
        sides = [" / ".join(_median(by_metric.get(m), side) for m in SHAPE_METRICS)
                 + f" / {_share(first[f'acceptance_{side}'])}" for side in ("a", "b")]
        moves = [move_words(m, by_metric[m]) for m in SHAPE_METRICS if m in by_metric]
        lines.append((f"{sweep}: {cell}", *sides, "; ".join(moves)))
    baseline, candidates = run_ids[0], ", ".join(run_ids[1:])
    shown = "prefill / decode / acceptance"
    return [Table(("shape", f"{baseline}: {shown}", f"{candidates}: {shown}",
                   "difference"), tuple(lines),
                  "Server-side medians (tok/s) and acceptance per cell, baseline first. A move no larger than the "
                  f"spread of either run (or, with one repetition, the ±{RUN_TO_RUN_PCT:g}% a rerun of the same "
                  "setup moves by: seed 000 §2.2) is inside run-to-run spread, never a speed-up. Decode rates at "
                  "different acceptance are not comparable (the Caveats say where).")]


def _median(row: Any, side: str) -> str:
    """One side's median of a metric; none where the run's prompt time is a fixed overhead (`OVERHEAD`) or the cell's
    prompt came mostly from its cache (`CACHED`): the division is kept in table.csv, not shown as a rate."""
    if row is None:
        return "—"
    if row.get(f"from_cache_{side}") is True:
        return "— (cache hit)"
    return "— (overhead)" if row.get(f"overhead_{side}") is True else number(row[f"median_{side}"])


def _natural(text: str) -> list[Any]:
    """A cell label's sort key, its numbers as numbers (4096 before 16384)."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text)]


def _share(value: Any) -> str:
    return "—" if value is None or pd.isna(value) else f"{100 * float(value):.0f}%"


def move_words(metric: str, row: Any) -> str:
    """A metric's move in words, as `delta` judged it: the change and whether it is inside run-to-run spread."""
    name = metric.split("_")[0]
    pct = row["delta_pct"]
    if pct is None or pd.isna(pct):
        return f"{name}: —"
    outside = row.get("outside_interval")
    if outside is not None and not pd.isna(outside):
        said = ("outside" if bool(outside) else "inside") + " the interval of the repeats"
    elif row["verdict"] == "spread unknown (one repetition)":
        said = f"inside the ±{RUN_TO_RUN_PCT:g}% run-to-run spread" if abs(pct) <= RUN_TO_RUN_PCT else \
            f"beyond the ±{RUN_TO_RUN_PCT:g}% run-to-run spread"
    else:
        said = "inside run-to-run spread" if row["verdict"] == "within spread" else f"{row['verdict']}, beyond spread"
    if row["verdict"] in (OVERHEAD, CACHED):
        return f"{name}: not comparable ({row['verdict']})"
    caveat = "" if row.get("comparable", True) else ", acceptance differs: not comparable"
    return f"{name} {pct:+.1f}% ({said}{caveat})"


def compare_runs(run_dirs: Sequence[str | Path], same_serving_stated: bool = False) -> Comparison:
    """Compare the second and later runs with the first, cell by cell, for each metric in METRICS. Each run's
    cells are those of its current serving; the Serving section names what differs between the runs' servings
    (`same_serving_stated`: the user said they serve one configuration, `--same-serving`, and it says so).

    Raises NinferkitError for fewer than two runs or a run with no measured request.
    Example: ``compare_runs(["runs/a", "runs/b"]).table``.
    """
    if len(run_dirs) < 2:
        raise NinferkitError("compare needs at least two run directories: ninferkit compare RUN_A RUN_B")
    runs = [load_run(path) for path in run_dirs]
    for run in runs:
        if not run.measured():
            raise NinferkitError(f"{run.dir.path} has no measured request (requests.jsonl missing or empty); "
                                 "run its sweeps step (03_sweeps) first")
    base = runs[0]
    flat = {run.run_id: prefill_is_overhead(run.measured("context")) is not None for run in runs}
    base_cells = _cells(base)
    rows: list[dict[str, Any]] = []
    unpaired: list[str] = []
    for other in runs[1:]:
        cells = _cells(other)
        for key in sorted(set(base_cells) | set(cells)):
            if key not in base_cells or key not in cells:
                unpaired.append(_unpaired(key, base, other, key in cells))
                continue
            for metric, higher_better in METRICS.items():
                row = delta(base_cells[key], cells[key], metric, higher_better)
                if row is None:
                    continue
                accept_a, accept_b = _acceptance(base_cells[key]), _acceptance(cells[key])
                comparable = not (metric.startswith("decode")
                                  and acceptance_differs(accept_a, accept_b, base.settings.acceptance_gap_pct))
                cached = (from_cache(base_cells[key]), from_cache(cells[key]))
                if metric.startswith("prefill") and (flat[base.run_id] or flat[other.run_id] or any(cached)):
                    # the post's rule: tokens over a fixed overhead (or over the few a cache left) is no prefill rate
                    row["verdict"] = CACHED if any(cached) else OVERHEAD
                    row.update(overhead_a=flat[base.run_id], overhead_b=flat[other.run_id],
                               from_cache_a=cached[0], from_cache_b=cached[1])
                    comparable = False
                rows.append({"candidate": other.run_id, "sweep": key[0], "variant": _variant(key), "cell": _label(key),
                             "cell_id": base_cells[key][0].cell_id, "metric": metric,
                             **row, "acceptance_a": accept_a, "acceptance_b": accept_b, "comparable": comparable})
    return Comparison([run.run_id for run in runs], pd.DataFrame(rows), unpaired, comparison_caveats(runs),
                      serving_words(runs, same_serving_stated), [run.ledger.get("cuda_graphs") for run in runs],
                      startup_words(runs))


def startup_words(runs: Sequence[RunData]) -> list[str]:
    """Per run, the recipe's rows of how the artifact reached the engine (the download's rate, the file system of
    its folder with the weights' load and the ready time), where it recorded them: two runs of one profile with the
    artifact on a local disk and on NFS are seed 000 §1.4's "本地盘加载 18.2 s，走 NFS 是 52–59 s", side by side.
    None where no run recorded any."""
    said = [(run.run_id, artifact_fetched(run)) for run in runs]
    if not any(rows for _, rows in said):
        return []
    return [f"{run_id}: " + ("; ".join(f"{name} {value}" for name, value in rows) if rows else "not recorded")
            for run_id, rows in said]


def serving_words(runs: Sequence[RunData], stated: bool) -> list[str]:
    """Per candidate: what its serving changes against the baseline's ("kv: f16 vs q8_0"), or "same serving",
    with the fields one side does not know; and the user's statement where they made one."""
    first = run_servings(runs[0].dir)
    base = first.main
    lines = [f"Baseline {runs[0].run_id}: {base.describe()}."]
    for other in runs[1:]:
        servings = run_servings(other.dir)
        lines.append(f"{other.run_id}: {_alike(base, servings.main)}.")
        for name in dict.fromkeys([*first.variants, *servings.variants]):
            mine, theirs = first.variants.get(name), servings.variants.get(name)
            if mine is None or theirs is None:
                has, lacks = (runs[0], other) if theirs is None else (other, runs[0])
                lines.append(f"{other.run_id}: variant {name} only in {has.run_id} ({lacks.run_id} has no variant of "
                             "that name): its cells are not compared.")
            else:
                lines.append(f"{other.run_id}: variant {name} against the baseline's: {_alike(mine, theirs)}.")
    if stated:
        lines.append("The user stated that these runs serve one configuration (--same-serving); what differs is "
                     "named above.")
    return lines


def _alike(mine: ServingIdentity, theirs: ServingIdentity) -> str:
    """Whether two servings are the same, else what differs, and what one side does not know."""
    pooled, differing, unknown = same_serving(mine, theirs)
    said = "same serving" if pooled else "differs in " + ("; ".join(differing) or "what one side does not know")
    return said + (f"; unknown on one side: {', '.join(unknown)}" if unknown else "")


def _measured(run: RunData) -> list[RequestRow]:
    """Every launch's measured rows: the base's, then its variants'."""
    return [*run.measured(), *run.measured_variants()]


def _unpaired(key: CellKey, base: RunData, other: RunData, in_other: bool) -> str:
    """Why a cell pairs with nothing: the other run has no such cell, or no variant of its name at all."""
    has, lacks = (other, base) if in_other else (base, other)
    variant = _variant(key)
    if variant != BASE and variant not in lacks.variants:
        return (f"{key[0]} / {_label(key)}: only in {has.run_id}, whose variant {variant} {lacks.run_id} does not "
                "have")
    return f"{key[0]} / {_label(key)}: only in {has.run_id}"


def _acceptance(rows: Sequence[RequestRow]) -> float | None:
    """A cell's acceptance as the post gives it (sweeps/metrics.rows_acceptance), the cell as `_cells` keys it: a
    variant's rows apart from the base's of the same parameters (keyed by label alone, the two were pooled into one
    figure)."""
    return rows_acceptance(rows)


def from_cache(rows: Sequence[RequestRow]) -> bool:
    """Whether the engine served more than `CACHED_SHARE` of a cell's prompt from its prefix cache
    (sweeps/metrics.cached_share), so its prompt time is no prefill's."""
    share = cached_share(rows)
    return share is not None and share > CACHED_SHARE


def _cells(run: RunData) -> dict[CellKey, list[RequestRow]]:
    cells: dict[CellKey, list[RequestRow]] = defaultdict(list)
    for row in _measured(run):
        key = json.dumps(without_repeat(row.cell), sort_keys=True) if row.cell else f"cell_id={row.cell_id}"
        cells[(str(row.sweep), key)].append(row)
    return cells


def _variant(key: CellKey) -> str:
    """The variant a cell key names (`base`: the profile's own serving)."""
    return BASE if key[1].startswith("cell_id=") else launch_name(json.loads(key[1]))


def _label(key: CellKey) -> str:
    if key[1].startswith("cell_id="):
        return key[1]
    variant = _variant(key)
    return (f"variant {variant}: " if variant != BASE else "") + params_label(json.loads(key[1]))


def _per_repetition(rows: list[RequestRow], metric: str) -> dict[tuple[int, int], float]:
    """(repeat, repetition) -> the median of the metric there."""
    found: dict[tuple[int, int], list[float]] = defaultdict(list)
    for row in rows:
        value = getattr(row, metric)
        if value is not None:
            found[(repeat_of(row.cell or {}), row.repetition or 0)].append(float(value))
    return {rep: statistics.median(values) for rep, values in found.items()}


def _per_repeat(values: dict[tuple[int, int], float]) -> list[float]:
    """Each repeat's median over its repetitions."""
    found: dict[int, list[float]] = defaultdict(list)
    for (repeat, _), value in values.items():
        found[repeat].append(value)
    return [statistics.median(found[repeat]) for repeat in sorted(found)]


def _spread_pct(values: list[float]) -> float | None:
    if len(values) < 2 or statistics.mean(values) == 0:
        return None
    return 100 * statistics.stdev(values) / statistics.mean(values)


def delta(rows_a: list[RequestRow], rows_b: list[RequestRow], metric: str,
          higher_better: bool) -> dict[str, Any] | None:
    """The move of `metric` from cell rows `rows_a` to `rows_b` against either side's spread (and, where both
    repeated the cell, the interval of the difference); None where a side has no value."""
    a, b = _per_repetition(rows_a, metric), _per_repetition(rows_b, metric)
    if not a or not b:
        return None
    repeats_a, repeats_b = _per_repeat(a), _per_repeat(b)
    interval = difference_interval(repeats_a, repeats_b)
    if interval is not None:
        median_a, median_b = statistics.median(repeats_a), statistics.median(repeats_b)
    else:
        median_a, median_b = statistics.median(a.values()), statistics.median(b.values())
    delta = median_b - median_a
    delta_pct = 100 * delta / median_a if median_a else None
    spread_a, spread_b = _spread_pct(list(a.values())), _spread_pct(list(b.values()))
    paired = [b[rep] - a[rep] for rep in sorted(set(a) & set(b))]
    spreads = [s for s in (spread_a, spread_b) if s is not None]
    if delta_pct is None or not spreads:
        verdict = "spread unknown (one repetition)"
    elif abs(delta_pct) <= max(spreads):
        verdict = "within spread"
    else:
        verdict = "better" if (delta > 0) == higher_better else "worse"
    return {"n_a": len(a), "n_b": len(b), "median_a": median_a, "median_b": median_b, "delta": delta,
            "delta_pct": delta_pct, "paired_delta": statistics.median(paired) if paired else None,
            "pairs": len(paired), "spread_a_pct": spread_a, "spread_b_pct": spread_b, "verdict": verdict,
            **_interval_columns(interval)}


def _interval_columns(interval: Interval | None) -> dict[str, Any]:
    """The interval of the difference, where both runs repeated the cell; no column otherwise (a comparison of
    runs without repeats reads as it did before repeats)."""
    if interval is None:
        return {}
    return {"repeats_a": interval.n[0], "repeats_b": interval.n[1], "interval_low": interval.low,
            "interval_high": interval.high, "outside_interval": not interval.holds(0.0),
            "interval_method": interval.describe()}


def acceptance_differs(a: float | None, b: float | None, gap_pct: float) -> bool:
    """Whether two acceptance rates (shares) differ by more than `gap_pct` percentage points
    (report.acceptance_gap_pct): decode at different acceptance is not comparable (seed 000 §2.2: other text, other
    drafts accepted), so an A/B says so beside the decode move. A side with no acceptance is no difference: nothing
    was drafted there to compare."""
    return a is not None and b is not None and 100 * abs(a - b) > gap_pct
