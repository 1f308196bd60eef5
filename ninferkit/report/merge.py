"""One write-up from several hosts' run directories (`ninferkit merge RUN_DIR... -o OUT`).

Every number is recomputed from the raw requests.jsonl rows, never from a run's tables: a cell measured on
several hosts gets its percentiles over the union of their rows (percentiles of parts cannot be averaged), and
each host's own beside them. Rows are comparable when they measured the same model (artifact sha256) in the
same cell (sweep and parameters; a repeat is the same cell); a cell only one run measured is shown apart, with
why. Every latency is one row's own: the client's stamps of one request on one host's monotonic clock, so no
difference between hosts' clocks enters any number (the merge computes no rate over several hosts' time spans).

Each merged row (OUT/requests.jsonl) keeps its host (the fleet's name for it, else the machine's), where the fleet
task's attempts ran (nodes, Slurm job ids, GRES: those known), GPU, engine
build and profile hash. A run whose planned steps did not all finish is marked incomplete, with what it lacks;
its measured rows still count (every row is a finished request).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ninferkit.errors import BadInput
from ninferkit.measure.latency import distribution, samples
from ninferkit.report.document import Document, Paragraph, Section, Table, table_from_frame
from ninferkit.report.render import render_html, render_markdown
from ninferkit.rundir.records import RequestRow
from ninferkit.rundir.runs import RunDir, utc_now, write_text_atomic
from ninferkit.sweeps.tables import counted_rows, latest_outcomes

LATENCIES = ("ttft_client_s", "tpot_client_s", "e2e_client_s")
RATES = ("decode_tok_s_server", "prefill_tok_s_server")


@dataclass
class MergedRun:
    """One run directory as the merge sees it."""

    path: Path
    host: str
    gpu: str
    engine_build: str
    profile_hash: str
    profile_name: str
    model: str
    missing: list[str]
    """Planned steps that did not finish ok (empty: complete)."""
    rows: list[RequestRow] = field(default_factory=list)
    max_kv_tokens: int | None = None
    tokens_per_joule: float | None = None
    ran_on: dict[str, Any] = field(default_factory=dict)
    """Where a fleet task's attempts ran (fleet-task.json): nodes, Slurm job ids, the GRES asked for; only what
    is known. A run resumed by a second job names both: the rows are the run's, not one attempt's."""

    @property
    def label(self) -> str:
        return f"{self.host} ({self.gpu})"


def read_run(path: Path) -> MergedRun:
    """A run directory's facts and its counted, measured rows; BadInput when it is no run directory."""
    run_dir = RunDir(path.resolve())
    if not run_dir.manifest.exists():
        raise BadInput(f"{path} is not a run directory (no manifest.json)")
    manifest = run_dir.read_manifest()
    task = run_dir.read_fleet_task()
    probe, server, capacity = run_dir.read_probe(), run_dir.read_server(), run_dir.read_capacity()
    gpus = probe.gpus if probe is not None else []
    if gpus:
        names = [gpu.name or "unnamed GPU" for gpu in gpus]
        gpu = " + ".join(f"{count} x {name}" for name, count in pd.Series(names).value_counts().items())
    elif probe is not None and probe.facts.cpu.model:
        gpu = f"CPU: {probe.facts.cpu.model}"
    else:
        gpu = "unknown (no probe.json)"
    engine = manifest.profile.get("engine", {})
    build = engine.get("version") or engine.get("fork") or (engine.get("build") or {}).get("source") or "unpinned"
    binary = f", binary sha256 {server.binary_sha256[:12]}" if server is not None and server.binary_sha256 else ""
    planned = manifest.planned_steps or list(manifest.steps)
    missing = [f"{step} ({manifest.steps[step].status})" if step in manifest.steps else f"{step} (not run)"
               for step in planned if step not in manifest.steps or manifest.steps[step].status != "ok"]
    rows = [row for row in counted_rows(run_dir, latest_outcomes(run_dir, manifest.profile_hash))
            if row.status == "ok" and not row.warmup and row.prefix_role != "seed"]
    model = next((row.artifact_sha256 for row in rows if row.artifact_sha256), None) or _model_of(run_dir)
    return MergedRun(path=run_dir.path, host=(task.host if task and task.host else manifest.host or path.name),
                     gpu=gpu, engine_build=f"{engine.get('kind', '?')} {build}{binary}",
                     profile_hash=manifest.profile_hash or "?", profile_name=manifest.profile_name or "?",
                     model=model[:12] if len(model) == 64 else model, missing=missing, rows=rows,
                     max_kv_tokens=capacity.max_kv_tokens if capacity is not None else None,
                     tokens_per_joule=_tokens_per_joule(run_dir, rows),
                     ran_on={key: value for key in ("nodes", "jobs", "gres")
                             if task is not None and (value := getattr(task, key))})


def _model_of(run_dir: RunDir) -> str:
    """The model a run's rows do not name (a checkpoint folder has no one sha256): the artifact's hash, else the
    hub repository and revision its profile pins, else 'unknown' (comparable with nothing)."""
    artifact = run_dir.read_artifact()
    if artifact is not None and artifact.sha256:
        return artifact.sha256
    pinned = run_dir.read_manifest().profile.get("artifact", {})
    if pinned.get("repo") and pinned.get("revision"):
        return f"{pinned['repo']}@{pinned['revision']}"
    return f"unknown ({run_dir.path.name})"


def _tokens_per_joule(run_dir: RunDir, rows: Sequence[RequestRow]) -> float | None:
    """Generated tokens over the energy NVML's power samples integrate to across the sweeps (all GPUs);
    None where NVML did not run."""
    samples_by_gpu: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for sample in run_dir.read_telemetry():
        if sample.source == "nvml" and sample.power_w is not None:
            samples_by_gpu[sample.gpu or 0].append((float(sample.t_mono), float(sample.power_w)))
    joules = 0.0
    for points in samples_by_gpu.values():
        points.sort()
        joules += sum((t2 - t1) * (p1 + p2) / 2 for (t1, p1), (t2, p2) in zip(points, points[1:], strict=False))
    tokens = sum(row.completion_tokens or 0 for row in rows)
    return tokens / joules if joules > 0 and tokens else None


def cell_key(run: MergedRun, row: RequestRow) -> str:
    """What makes rows comparable: the model, the sweep and the cell's parameters (a repeat is the same cell)."""
    params = {k: v for k, v in (row.cell or {}).items() if k != "repeat"}
    return json.dumps({"model": run.model, "sweep": row.sweep, "cell": params}, sort_keys=True)


def cell_label(row: RequestRow) -> str:
    params = row.cell or {}
    shown = {k: v for k, v in params.items() if k in ("target_prompt_tokens", "task", "clients", "rate", "api",
                                                     "output_tokens", "depth", "variant", "speculation")}
    return f"{row.sweep} " + " ".join(f"{k}={v}" for k, v in shown.items())


def statistics(rows: Sequence[RequestRow]) -> dict[str, Any]:
    """Percentiles of the latencies and medians of the server's rates over exactly these rows."""
    out: dict[str, Any] = {"requests": len(rows)}
    for metric in LATENCIES:
        spread = distribution(samples(rows, metric))
        out |= {f"{metric}_p50": spread.p50, f"{metric}_p90": spread.p90, f"{metric}_p99": spread.p99}
    for metric in RATES:
        values = samples(rows, metric)
        out[f"{metric}_p50"] = distribution(values).p50
    return out


@dataclass
class Merged:
    runs: list[MergedRun]
    cells: pd.DataFrame
    """Comparable cells: one row per cell for the union and one per host."""
    apart: pd.DataFrame
    """Cells only one run measured, and why."""
    gpus: pd.DataFrame
    folder: Path


def merge(paths: Sequence[Path], out: Path) -> Merged:
    """Merge the run directories into `out`: requests.jsonl (every counted row, with host, GPU, engine build and
    profile hash), cells.csv, gpus.csv, and the write-up report/index.md and index.html."""
    if not paths:
        raise BadInput("merge needs at least one run directory")
    runs = [read_run(Path(path)) for path in paths]
    hosts = [run.host for run in runs]
    if len(set(hosts)) < len(hosts):  # two runs of one host stay two: name them by their folder too
        for run in runs:
            run.host = f"{run.host}/{run.path.name}" if hosts.count(run.host) > 1 else run.host
    groups: dict[str, list[tuple[MergedRun, RequestRow]]] = defaultdict(list)
    for run in runs:
        for row in run.rows:
            groups[cell_key(run, row)].append((run, row))
    cells, apart = [], []
    for members in groups.values():
        owners = list(dict.fromkeys(run.host for run, _ in members))
        first_run, first = members[0]
        label = cell_label(first)
        if len(owners) < 2:
            others = [run for run in runs if run is not first_run]
            why = ("no other run measured this model" if all(run.model != first_run.model for run in others)
                   else "no other run's plan has this cell") if others else "the only run"
            apart.append({"cell": label, "host": owners[0], "model": first_run.model, "why": why,
                          **statistics([row for _, row in members])})
            continue
        cells.append({"cell": label, "hosts": "all: " + ", ".join(owners), "model": first_run.model,
                      **statistics([row for _, row in members])})
        for host in owners:
            cells.append({"cell": label, "hosts": host, "model": first_run.model,
                          **statistics([row for run, row in members if run.host == host])})
    gpu_rows = []
    for run in runs:
        by_context: dict[int, list[RequestRow]] = defaultdict(list)
        for row in run.rows:
            if row.sweep == "context" and (row.cell or {}).get("target_prompt_tokens") is not None:
                by_context[int((row.cell or {})["target_prompt_tokens"])].append(row)
        for context, rows in sorted(by_context.items()):
            stats = statistics(rows)
            gpu_rows.append({"host": run.host, "gpu": run.gpu, "context": context, "requests": len(rows),
                             "decode_tok_s_server_p50": stats["decode_tok_s_server_p50"],
                             "prefill_tok_s_server_p50": stats["prefill_tok_s_server_p50"],
                             "ttft_client_s_p50": stats["ttft_client_s_p50"],
                             "ttft_client_s_p90": stats["ttft_client_s_p90"],
                             "ttft_client_s_p99": stats["ttft_client_s_p99"]})
    merged = Merged(runs, pd.DataFrame(cells), pd.DataFrame(apart), pd.DataFrame(gpu_rows), out)
    _write(merged)
    return merged


def _write(merged: Merged) -> None:
    out = merged.folder
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for run in merged.runs:
        for row in run.rows:
            lines.append(json.dumps({**row.model_dump(mode="json", exclude_unset=True), "host": run.host,
                                     "gpu": run.gpu, "engine_build": run.engine_build,
                                     "profile_hash": run.profile_hash, "run_dir": str(run.path), **run.ran_on},
                                    sort_keys=True))
    write_text_atomic(out / "requests.jsonl", "\n".join(lines) + ("\n" if lines else ""))
    merged.cells.to_csv(out / "cells.csv", index=False)
    merged.gpus.to_csv(out / "gpus.csv", index=False)
    document = _document(merged)
    report = out / "report"
    report.mkdir(exist_ok=True)
    render_markdown(document, report)
    render_html(document, report)


def _document(merged: Merged) -> Document:
    runs = pd.DataFrame([{"host": run.host, "gpu": run.gpu, "engine build": run.engine_build,
                          "profile": f"{run.profile_name} ({run.profile_hash})", "model sha256": run.model,
                          "rows": len(run.rows), "largest KV pool (tokens)": run.max_kv_tokens,
                          "tokens per joule": run.tokens_per_joule,
                          "state": "complete" if not run.missing else "incomplete: " + ", ".join(run.missing)}
                         for run in merged.runs])
    incomplete = [run.host for run in merged.runs if run.missing]
    sections = [Section("Hosts", [
        table_from_frame(runs, "Each run: its host, GPU, engine build and profile. The largest KV pool is the host's "
                               "capacity fit (— where capacity did not run); tokens per joule integrate NVML's power "
                               "samples over the sweeps (— where NVML did not run)."),
        Paragraph("Incomplete runs: " + ", ".join(incomplete) + ". Their finished requests are counted; what they "
                  "lack is listed above, and `ninferkit fleet submit` again resumes only that." if incomplete
                  else "Every run finished its planned steps.")])]
    if not merged.gpus.empty:
        sections.append(Section("Across GPUs", [table_from_frame(
            merged.gpus, "The context sweep per host: server decode and prefill rates (medians) and client TTFT "
                         "percentiles, each host's own rows.")]))
    sections.append(Section("Comparable cells", [table_from_frame(
        merged.cells, "Cells measured by several runs of one model: the union of their rows ('all:'), then each "
                      "host's; percentiles recomputed over the rows, never averaged.") if not merged.cells.empty
        else Table(("cell",), (("no cell was measured by two runs",),))]))
    if not merged.apart.empty:
        sections.append(Section("Not comparable", [table_from_frame(
            merged.apart, "Cells only one run measured, shown apart: the column 'why' says why no other run's rows "
                          "join them.")]))
    sections.append(Section("How the numbers were made", [Paragraph(
        "Every latency is one request's, from the client's stamps on one host's monotonic clock, so clock offsets "
        "between hosts never enter a number; no rate over several hosts' time spans is computed. Rows are "
        "comparable when they share the model (artifact sha256) and the cell (sweep and parameters). The merged "
        "rows are requests.jsonl beside this report, each with its host, GPU, engine build and profile hash.")]))
    return Document(f"Fleet: {len(merged.runs)} runs on {len({run.host for run in merged.runs})} hosts",
                    f"Merged {utc_now()} from " + ", ".join(str(run.path) for run in merged.runs), sections)
