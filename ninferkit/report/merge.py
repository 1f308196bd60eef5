"""One write-up from several hosts' run directories (`ninferkit merge RUN_DIR... -o OUT`).

Every number is recomputed from the raw requests.jsonl rows, never from a run's tables: a cell measured on
several hosts gets its percentiles over the union of their rows (percentiles of parts cannot be averaged), and
each host's own beside them. Rows are comparable when they were measured under the same serving (engine and
build, model bytes, the serve options that change behaviour: rundir/identity.py; never the port or the host)
in the same cell (sweep and parameters; a repeat is the same cell); a cell only one run measured is shown
apart, with why (another serving's differences named: "kv: f16 vs q8_0"). `--same-serving` pools runs the rule
cannot prove alike, and the write-up says the user stated it. Every latency is one row's own: the client's
stamps of one request on one host's monotonic clock, so no difference between hosts' clocks enters any number
(the merge computes no rate over several hosts' time spans).

A run's variants (issue 39) are merged as its base is: a variant's rows are its own serving, so a cell of variant
`ub32` pools only with other runs' `ub32` cells that serve alike; every merged row, cell and table row names its
variant (`base`: the profile's own serving).

Each merged row (OUT/requests.jsonl) keeps its host (the fleet's name for it, else the machine's), where the fleet
task's attempts ran (nodes, Slurm job ids, GRES: those known), GPU, engine build, profile hash and serving
(`serving_id`, its fields, and whether the user stated it). A run whose planned steps did not all finish is
marked incomplete, with what it lacks; its measured rows still count (every row is a finished request).
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
from ninferkit.params.variants import BASE
from ninferkit.report.document import Document, Paragraph, Section, Table, table_from_frame
from ninferkit.report.render import render_html, render_markdown
from ninferkit.rundir.identity import ServingIdentity, same_serving
from ninferkit.rundir.records import RequestRow
from ninferkit.rundir.runs import RunDir, utc_now, write_text_atomic
from ninferkit.rundir.servings import launch_name, run_servings
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
    servings: dict[str, ServingIdentity] = field(default_factory=dict)
    """The serving of each row, by the row's request_uid (rundir/servings.py: migrated for older rows)."""
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
    servings = run_servings(run_dir)
    rows = [row for row in counted_rows(run_dir, latest_outcomes(run_dir, servings))
            if row.status == "ok" and not row.warmup and row.prefix_role != "seed"]
    identities = {str(row.request_uid): servings.identity(servings.of_line(row.as_dict()))
                  or servings.for_cell(row.cell) for row in rows}
    model = next((row.artifact_sha256 for row in rows if row.artifact_sha256), None) or _model_of(run_dir)
    return MergedRun(path=run_dir.path, host=(task.host if task and task.host else manifest.host or path.name),
                     gpu=gpu, engine_build=f"{engine.get('kind', '?')} {build}{binary}",
                     profile_hash=manifest.profile_hash or "?", profile_name=manifest.profile_name or "?",
                     model=model[:12] if len(model) == 64 else model, missing=missing, rows=rows,
                     max_kv_tokens=capacity.max_kv_tokens if capacity is not None else None,
                     tokens_per_joule=_tokens_per_joule(run_dir, rows), servings=identities,
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


def refuse_copies(runs: Sequence[MergedRun], given: Sequence[Path]) -> None:
    """BadInput, before anything is written, when two inputs hold the same requests: a run and its copy under
    another folder (or one folder reached by two paths) would count every shared request twice (issue 40).
    Known by the rows' request ids (a fresh uuid per request measured), not by path or name: two hosts' runs
    may share a folder name, a copy never shares none of its rows."""
    owner: dict[str, int] = {}
    for place, run in enumerate(runs):
        shared: dict[int, int] = defaultdict(int)
        for row in run.rows:
            if row.request_uid is None:
                continue  # an older row without an id proves nothing
            first = owner.setdefault(str(row.request_uid), place)
            if first != place:
                shared[first] += 1
        if shared:
            first, count = next(iter(shared.items()))
            raise BadInput(f"{given[first]} and {given[place]} are the same run: {count} of {len(run.rows)} "
                           f"measured requests of {given[place]} are also {given[first]}'s (the same request ids); "
                           "a copy merged with its original would count them twice: give each run once")


def cell_key(group: int, row: RequestRow) -> str:
    """What makes rows comparable: one serving (the group of identities that pool, `pool_groups`), the sweep and
    the cell's parameters (a repeat is the same cell)."""
    return json.dumps({"serving": group, **_cell_of(row)}, sort_keys=True)


def _cell_of(row: RequestRow) -> dict[str, Any]:
    return {"sweep": row.sweep, "cell": {k: v for k, v in (row.cell or {}).items() if k != "repeat"}}


def variant_of(row: RequestRow) -> str:
    """The launch that measured the row: a variant's name, else `base`."""
    return launch_name(row.cell)


def cell_label(row: RequestRow) -> str:
    params = row.cell or {}
    shown = {k: v for k, v in params.items() if k in ("target_prompt_tokens", "task", "clients", "concurrency",
                                                     "rate", "api",
                                                     "output_tokens", "depth", "variant", "speculation")}
    shown = shown or {k: v for k, v in params.items() if k != "repeat"}  # an imported cell names its own
    return f"{row.sweep} " + " ".join(f"{k}={v}" for k, v in shown.items())


@dataclass
class ServingGroup:
    """Serving identities whose rows pool: each is the same serving as every other (or the user said so)."""

    members: list[ServingIdentity]
    hosts: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return " = ".join(identity.id for identity in self.members)


def pool_groups(identities: Sequence[ServingIdentity], stated: bool = False) -> list[ServingGroup]:
    """Group the identities greedily: one joins a group only when it is the same serving as every member, so an
    identity that knows less (a --url run without a version) never bridges two that differ. `stated`: the user
    said every run serves one configuration (`--same-serving`): one group."""
    groups: list[ServingGroup] = []
    for identity in identities:
        home = next((group for group in groups
                     if all(same_serving(member, identity, stated=stated)[0] for member in group.members)), None)
        if home is None:
            groups.append(ServingGroup([identity]))
        elif identity.id not in {member.id for member in home.members}:
            home.members.append(identity)
    return groups


def serving_lines(groups: Sequence[ServingGroup], stated: bool) -> list[str]:
    """What the write-up and the command say about the servings: each group, what its members differ in or do
    not know, and why groups were not pooled."""
    lines = []
    for index, group in enumerate(groups, 1):
        first = group.members[0]
        lines.append(f"Serving {index} ({', '.join(group.hosts)}): {first.describe()}")
        for member in group.members[1:]:
            differing, unknown = first.differences(member), first.unknown_in(member)
            if differing and stated:
                lines.append(f"  pooled on the user's word (--same-serving) with serving {member.id}; they differ in "
                             + "; ".join(differing))
            if unknown:
                lines.append(f"  serving {member.id} ({member.source}) is compared on what both know; unknown: "
                             + ", ".join(unknown))
    for index, group in enumerate(groups, 1):
        for later, other in enumerate(groups[index:], index + 1):
            mine, theirs = group.members[0], other.members[0]
            lines.append(f"Not pooled: serving {index} and serving {later} " + _apart_words(mine, theirs))
    return lines


def _apart_words(mine: ServingIdentity, theirs: ServingIdentity) -> str:
    """Why two servings do not pool: what differs, else what one side does not know."""
    differing, unknown = mine.differences(theirs), mine.unknown_in(theirs)
    if differing:
        return "differ in " + "; ".join(differing)
    if unknown:
        return "cannot be shown alike: unknown on one side: " + ", ".join(unknown)
    return ("cannot be shown alike: neither states its serving (an import, or a profile this ninferkit no longer "
            "reads); --same-serving pools them on your word")


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
    servings: list[ServingGroup] = field(default_factory=list)
    """The servings whose rows pooled, in order (a cell's `serving` names its group's ids)."""
    stated: bool = False
    """The user said every run serves one configuration (`--same-serving`)."""


def merge(paths: Sequence[Path], out: Path, same_serving_stated: bool = False) -> Merged:
    """Merge the run directories into `out`: requests.jsonl (every counted row, with host, GPU, engine build,
    profile hash and serving), cells.csv, gpus.csv, and the write-up report/index.md and index.html. Rows pool
    only within one serving (`pool_groups`); `same_serving_stated`: the user says every run serves one
    configuration (`--same-serving`), and the write-up says they did, with what differs."""
    if not paths:
        raise BadInput("merge needs at least one run directory")
    runs = [read_run(Path(path)) for path in paths]
    refuse_copies(runs, [Path(path) for path in paths])
    hosts = [run.host for run in runs]
    if len(set(hosts)) < len(hosts):  # two runs of one host stay two: name them by their folder too
        for run in runs:
            run.host = f"{run.host}/{run.path.name}" if hosts.count(run.host) > 1 else run.host
    identities = list({identity.id: identity for run in runs for identity in run.servings.values()}.values())
    pooled = pool_groups(identities, same_serving_stated)
    group_of = {identity.id: index for index, group in enumerate(pooled) for identity in group.members}
    groups: dict[str, list[tuple[MergedRun, RequestRow]]] = defaultdict(list)
    for run in runs:
        for row in run.rows:
            group = group_of[run.servings[str(row.request_uid)].id]
            groups[cell_key(group, row)].append((run, row))
            if run.host not in pooled[group].hosts:
                pooled[group].hosts.append(run.host)
    cells, apart = [], []
    for key, members in groups.items():
        owners = list(dict.fromkeys(run.host for run, _ in members))
        first_run, first = members[0]
        label, group = cell_label(first), json.loads(key)["serving"]
        serving = pooled[group].label
        variant = variant_of(first)
        if len(owners) < 2:
            apart.append({"cell": label, "variant": variant, "host": owners[0], "model": first_run.model,
                          "serving": serving, "why": _why_apart(first_run, first, group, runs, pooled, groups),
                          **statistics([row for _, row in members])})
            continue
        cells.append({"cell": label, "variant": variant, "hosts": "all: " + ", ".join(owners),
                      "model": first_run.model, "serving": serving, **statistics([row for _, row in members])})
        for host in owners:
            cells.append({"cell": label, "variant": variant, "hosts": host, "model": first_run.model,
                          "serving": serving, **statistics([row for run, row in members if run.host == host])})
    gpu_rows = []
    for run in runs:
        by_context: dict[tuple[str, int], list[RequestRow]] = defaultdict(list)
        for row in run.rows:  # each launch apart: a variant's context cells are not the base's
            if row.sweep == "context" and (row.cell or {}).get("target_prompt_tokens") is not None:
                by_context[(variant_of(row), int((row.cell or {})["target_prompt_tokens"]))].append(row)
        for (variant, context), rows in sorted(by_context.items(), key=lambda item: (item[0][0] != BASE, item[0])):
            stats = statistics(rows)
            gpu_rows.append({"host": run.host, "gpu": run.gpu, "variant": variant, "context": context,
                             "requests": len(rows),
                             "decode_tok_s_server_p50": stats["decode_tok_s_server_p50"],
                             "prefill_tok_s_server_p50": stats["prefill_tok_s_server_p50"],
                             "ttft_client_s_p50": stats["ttft_client_s_p50"],
                             "ttft_client_s_p90": stats["ttft_client_s_p90"],
                             "ttft_client_s_p99": stats["ttft_client_s_p99"]})
    merged = Merged(runs, pd.DataFrame(cells), pd.DataFrame(apart), pd.DataFrame(gpu_rows), out, pooled,
                    same_serving_stated)
    _write(merged)
    return merged


def _why_apart(run: MergedRun, row: RequestRow, group: int, runs: Sequence[MergedRun], pooled: list[ServingGroup],
               groups: dict[str, list[tuple[MergedRun, RequestRow]]]) -> str:
    """Why a cell only one run measured joins no other run's rows: another serving measured it (what differs),
    or no other run's plan has it."""
    if len(runs) < 2:
        return "the only run"
    for other in range(len(pooled)):
        if other != group and cell_key(other, row) in groups:
            return "another serving measured it, which " + _apart_words(pooled[group].members[0],
                                                                          pooled[other].members[0])
    if all(other.model != run.model for other in runs if other is not run):
        return "no other run measured this model"
    variant = variant_of(row)
    if variant != BASE and not any(variant_of(each) == variant for other in runs if other is not run
                                   for each in other.rows):
        return f"no other run has variant {variant}"
    return "no other run's plan has this cell"


def _write(merged: Merged) -> None:
    out = merged.folder
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for run in merged.runs:
        for row in run.rows:
            serving = run.servings[str(row.request_uid)]
            lines.append(json.dumps({**row.model_dump(mode="json", exclude_unset=True), "variant": variant_of(row),
                                     "host": run.host,
                                     "gpu": run.gpu, "engine_build": run.engine_build,
                                     "profile_hash": run.profile_hash, "run_dir": str(run.path),
                                     "serving_id": serving.id, "serving": serving.fields,
                                     "serving_stated": merged.stated, **run.ran_on}, sort_keys=True))
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
    said = serving_lines(merged.servings, merged.stated)
    sections.append(Section("Serving", [Paragraph(
        "Rows pool only where the serving is the same: the engine and its build, the model's bytes and the serve "
        "options that change behaviour (never the port, the host or a path)."
        + (" The user stated that these runs serve one configuration (--same-serving), so they pooled as one; "
           "what differs is named below." if merged.stated else "")),
        Table(("serving",), tuple((line,) for line in said))]))
    if not merged.gpus.empty:
        sections.append(Section("Across GPUs", [table_from_frame(
            merged.gpus, "The context sweep per host and launch (the base, then each variant): server decode and "
                         "prefill rates (medians) and client TTFT percentiles, each host's own rows.")]))
    sections.append(Section("Comparable cells", [table_from_frame(
        merged.cells, "Cells measured by several runs of one serving: the union of their rows ('all:'), then each "
                      "host's; percentiles recomputed over the rows, never averaged.") if not merged.cells.empty
        else Table(("cell",), (("no cell was measured by two runs",),))]))
    if not merged.apart.empty:
        sections.append(Section("Not comparable", [table_from_frame(
            merged.apart, "Cells only one run measured, shown apart: the column 'why' says why no other run's rows "
                          "join them.")]))
    sections.append(Section("How the numbers were made", [Paragraph(
        "Every latency is one request's, from the client's stamps on one host's monotonic clock, so clock offsets "
        "between hosts never enter a number; no rate over several hosts' time spans is computed. Rows are "
        "comparable when they share the serving (section Serving) and the cell (sweep and parameters). The merged "
        "rows are requests.jsonl beside this report, each with its host, GPU, engine build, profile hash and "
        "serving.")]))
    stated = " Pooled on the user's word (--same-serving)." if merged.stated else ""
    return Document(f"Fleet: {len(merged.runs)} runs on {len({run.host for run in merged.runs})} hosts",
                    f"Merged {utc_now()} from " + ", ".join(str(run.path) for run in merged.runs) + "." + stated,
                    sections)
