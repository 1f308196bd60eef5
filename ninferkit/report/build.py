"""Build the write-up of one run directory and write it with every configured renderer.

Sections follow the field reports' posts: headline, environment, pinned recipe, acceptance checks (which say
so where the run met no error), errors met (where it met any), benchmarks, latency, capacity, run conditions,
method and caveats, provenance; the renderers put a table of contents before them. Tables are compact views that
fit the page (report/views.py); the CSV files hold every column. A section whose step produced no data says which
step that was; nothing here fails because a file is missing.
"""

from __future__ import annotations

import base64
import re
import shlex
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from ninferkit.deploy.service import command, plan
from ninferkit.engines import get_adapter
from ninferkit.errors import NinferkitError
from ninferkit.host.findings import environment_rows, topology_pairs
from ninferkit.host.gpu import power_limit_words
from ninferkit.host.machine import form
from ninferkit.host.mounts import disk_room
from ninferkit.measure.latency import recorded_itl
from ninferkit.os_errors import recorded_bare
from ninferkit.params.kinds import KINDS, has_build
from ninferkit.report import caveats as caveat_rules
from ninferkit.report import field_tables, imported, not_reproduced, objective, speculation, variants
from ninferkit.report.conditions import GpuConditions, gpu_conditions, memory_row
from ninferkit.report.data import RunData, load_run, ordered_steps
from ninferkit.report.derive import DERIVED, UNRECORDED
from ninferkit.report.document import (
    EMPTY,
    Block,
    Bullets,
    Code,
    Document,
    Figure,
    Note,
    Paragraph,
    Section,
    Table,
    gather_notes,
    map_text,
    post_and_appendix,
    texts,
)
from ninferkit.report.figures import write_figures
from ninferkit.report.fmt import gib, number, span
from ninferkit.report.headline import HeadlineRow, headline
from ninferkit.report.lead import artifact_named, lead_figures, post_title, prefill_is_overhead
from ninferkit.report.memory import capacity_blocks
from ninferkit.report.paths import machine_paths
from ninferkit.report.paths import note as paths_note
from ninferkit.report.recipe import artifact_fetched, launch_flags, profile_comments
from ninferkit.report.render import get_renderer
from ninferkit.report.views import detail_view, latency_view, sweep_view, what_fits
from ninferkit.rundir.records import ArtifactRecord, BenchComparison, CellEntry, Manifest, ServerRecord, StepEntry
from ninferkit.rundir.runs import json_object, utc_now
from ninferkit.sweeps.plan import sweep_names
from ninferkit.version import __version__

GENERATED_PREFIX = "Generated at "


@dataclass(frozen=True)
class Report:
    """Where a write-up was written: the report folder and one file per renderer."""

    folder: Path
    files: dict[str, Path]
    figures: list[Path]
    appendix: dict[str, Path] = field(default_factory=dict)
    """Per renderer, the file of the raw detail the post links to (appendix.md, appendix.html)."""

    @property
    def markdown(self) -> Path:
        if "markdown" not in self.files:
            raise NinferkitError("this report was written without the markdown renderer; add 'markdown' to "
                                 "report.formats (or --format markdown)")
        return self.files["markdown"]

    def inline_markdown(self) -> str:
        """index.md with each figure embedded as a data: URI, for showing the write-up inside a notebook."""
        def embed(match: re.Match[str]) -> str:
            data = base64.b64encode((self.folder / match[2]).read_bytes()).decode("ascii")
            return f"![{match[1]}](data:image/png;base64,{data})"

        return re.sub(r"!\[([^\]]*)\]\((figures/[^)]+\.png)\)", embed, self.markdown.read_text())


def write_report(run_dir: str | Path, formats: list[str] | None = None) -> Report:
    """Regenerate run_dir/report/ (index.md, index.html, their appendix.md and appendix.html, figures/*.png) from
    the raw files only: index is the post a person publishes, the appendix the raw detail it links to.

    formats: renderer names (default: the run's `report.formats`). Rerunning on the same files gives
    byte-identical output except the one "Generated at" line. Raises NinferkitError when run_dir is not
    a directory or a format is not a registered renderer.
    Example: ``write_report("runs/20261130-110000-local-cpu").markdown``.
    """
    run = load_run(run_dir)
    chosen = formats if formats is not None else run.settings.formats
    renderers = {name: get_renderer(name) for name in chosen}  # unknown names fail before any write
    folder = run.dir.report
    folder.mkdir(parents=True, exist_ok=True)
    figures = write_figures(run, run.dir.report_figures, run.settings.figure_dpi)
    post, detail = post_and_appendix(build_document(run, figures))
    files = {name: render(post, folder) for name, render in renderers.items()}
    appendix = {name: render(detail, folder) for name, render in renderers.items()} if detail else {}
    return Report(folder, files, [figure.path for figure in figures.values()], appendix)


def build_document(run: RunData, figures: dict[str, Figure]) -> Document:
    """The write-up's content for one run; `figures` are the PNGs already drawn for it. Every text names the
    machine's folders as report/paths.py writes them, since the write-up is meant to be published."""
    paths = machine_paths(run)
    errors = _errors(run)
    sections = [
        *_headline(run),
        *imported.sections(run),
        _environment(run),
        *_recipe(run),
        *_acceptance(run, clean=not errors),
        *([Section("Errors met", [Table(("where", "error", "fix", "source"), tuple(errors))])] if errors else []),
        *_benchmarks(run, figures),
        *filter(None, [variants.section(run), objective.section(run)]),
        *field_tables.sections(run),
        *filter(None, [not_reproduced.section(run)]),
        _latency(run),
        _speculation(run),
        *_capacity(run),
        _conditions(run, figures),
        Section("Method", [Bullets(tuple(caveat_rules.method(run)))]),
        _caveats(run),
        _headline_sources(run),
        _steps(run),
    ]
    sections = gather_notes(sections, "Appendix: to fill the missing tables")
    document = Document(post_title(run), f"{GENERATED_PREFIX}{utc_now()} by ninferkit {__version__} {_source(run)}.",
                        sections)
    sections.append(_provenance(run, paths_note(paths.kinds_in(texts(document)))))
    return map_text(document, paths.shorten)


def _source(run: RunData) -> str:
    """Which run the write-up is of: its directory, and its own id and start where they say more."""
    name = run.dir.path.name
    made = f"made {run.manifest.created}" if run.manifest.created else ""
    called = f'run id "{run.run_id}"' if run.run_id != name else ""
    details = ", ".join(part for part in (called, made) if part)
    return f"from the run directory {name}" + (f" ({details})" if details else "")


def _headline(run: RunData) -> list[Section]:
    found = headline(run)
    lead = lead_figures(run)
    blocks: list[Any] = []
    if lead.lines:
        single = any(line.metric.startswith(("decode", "prefill", "TTFT")) for line in lead.lines)
        blocks.append(Table(("figure", "best (conditions)", "range"),
                            tuple((line.metric, line.best, line.spread) for line in lead.lines),
                            ("Decode, prefill and TTFT: one request at a time, the engine's own figures where it "
                             "reports them. Prefill and the TTFT range: the context sweep (prefix cache defeated); "
                             "decode's best and range: the context and tasks sweeps; TTFT's best: the lower of the "
                             "context sweep's and the prefix-reuse scenarios the cache served, each with its "
                             "conditions. " if single else "No request of this run was measured alone (no context "
                             "or tasks sweep): the figures are the concurrency sweep's and the startup's. ")
                            + "The file and field of each, with its sample count: the appendix of headline figures "
                            "and their sources."))
    overhead = prefill_is_overhead(run.measured("context")) is not None  # its rates are no prefill rate
    by_length = [row for row in found if row.prompt_tokens is not None and row.best is not None
                 and not (overhead and row.metric.startswith("Prefill"))]
    if not blocks:
        blocks.append(Paragraph("No request was measured and the server printed no memory figure."))
    return [Section("Headline", blocks), *([Section("Appendix: headline figures by prompt length", [
        _by_prompt_length(by_length)], appendix=True)] if by_length else [])]


def _headline_sources(run: RunData) -> Section:
    """The headline's figures with their sample counts and the file and field each comes from, and why a figure
    the run has no data for is absent (an appendix: the raw detail one click from the lead table)."""
    rest = [row for row in headline(run) if row.prompt_tokens is None]
    return Section("Appendix: headline figures and their sources", appendix=True, blocks=[Table(
        ("metric", "unit", "best", "range", "samples", "where", "source"), tuple(
            (row.metric, row.unit, number(row.best), span(row.low, row.high), str(row.samples), row.where,
             row.source) for row in rest),
        "Best is the highest speed or the lowest time; the range spans every measured request (or group) of that "
        "figure; warm-up requests are excluded.")])


def _by_prompt_length(rows: list[HeadlineRow]) -> Table:
    """The context sweep's rows as one line per prompt length: each figure's median, its range where it has more
    than one request."""
    lengths = sorted({row.prompt_tokens for row in rows if row.prompt_tokens is not None})
    metrics = list(dict.fromkeys(row.metric for row in rows))
    cells = {(row.prompt_tokens, row.metric): row for row in rows}
    lines = []
    for length in lengths:
        found = [cells.get((length, metric)) for metric in metrics]
        shown = [_headline_cell(row) for row in found]
        samples = max((row.samples for row in found if row is not None), default=0)
        lines.append((number(length), *shown, str(samples)))
    units = {row.metric: row.unit for row in rows}
    headers = [f"{metric}, {units[metric]}" for metric in metrics]
    sources = "; ".join(dict.fromkeys(row.source.rsplit(", ", 1)[-1] for row in rows))
    return Table(("prompt tokens", *headers, "requests"), tuple(lines),
                 f"Per prompt length, the median with the range in brackets where a length has more than one "
                 f"request; from requests.jsonl ({sources}).")


def _headline_cell(row: HeadlineRow | None) -> str:
    if row is None or row.best is None:
        return "—"
    spread = span(row.low, row.high)
    return number(row.p50) if number(row.low) == number(row.high) else f"{number(row.p50)} ({spread})"


def _steps(run: RunData) -> Section:
    steps = ordered_steps(run.manifest)
    blocks: list[Any] = []
    if steps:
        rows = tuple((name, _status(info), number(info.seconds), str(info.error or ""))
                     for name, info in steps)
        blocks.append(Table(("step", "status", "seconds", "error"), rows))
    missing = [f"`{name}` — written by {step}" for name, step in run.missing.items()]
    if missing:
        blocks.append(Paragraph("Files this run has no data in (their sections below say so):"))
        blocks.append(Bullets(tuple(missing)))
    else:
        blocks.append(Paragraph("Every step of the runbook produced its data file."))
    return Section("Appendix: steps and data", blocks, appendix=True)


def _status(info: StepEntry) -> str:
    status = str(info.status)
    return "running when this write-up was generated" if status == "running" else status


def _environment(run: RunData) -> Section:
    if run.probe is None:
        return Section("Environment", [Note("No probe.json: the setup step (00_setup) produced no data.")])
    facts = run.probe.facts
    gpu, module, cpu = facts.gpu, facts.kernel_module, facts.cpu
    rows: list[tuple[str, str]] = []
    if gpu.available:
        for item in gpu.gpus:
            rows.append((f"GPU {item.index}", f"{item.name} ({item.arch}), {gib(item.memory_total_bytes)}, power "
                         f"limit {power_limit_words(item)}, PCIe gen {item.pcie_gen} x{item.pcie_width}"))
        rows.append(("driver", f"{gpu.driver_version} ({module.flavour or 'module flavour unknown'} kernel module)"))
        rows.append(("CUDA (driver)", str(gpu.cuda_driver_version)))
    else:
        rows.append(("GPU", f"no GPU (CPU run): {gpu.reason or 'none found'}"))
    rows.append(("CUDA toolkit (nvcc)", str(facts.cuda_toolkit.version or "not installed")))
    amx = f", AMX {', '.join(cpu.amx) or 'no'}" if cpu.amx is not None else ""  # probes before issue 18 have none
    rows.append(("CPU", f"{cpu.model}, {cpu.cores} cores, AVX-512 {'yes' if cpu.avx512f else 'no'}{amx}"))
    rows += environment_rows(facts)
    rows += filter(None, [memory_row(run)])
    host = facts.host
    if host.memory_total_bytes is not None or host.source is not None:  # probes before ninferkit read them: no row
        rows.append(("host", f"{form(host)}; memory {gib(host.memory_total_bytes)}" + (
            f"; system disk (/) {gib(host.system_disk_total_bytes)}, {gib(host.system_disk_free_bytes)} free"
            if host.system_disk_total_bytes is not None else "")))
    room = disk_room(facts.disk)
    rows += [("artifact folder's disk", room)] if room else []
    rows.append(("platform", str(run.manifest.platform)))
    findings = [f"{f.severity}: {f.message}" + (f" Fix: {f.fix}" if f.fix else "")
                for f in (run.probe.findings if run.probe else [])]
    blocks: list[Any] = [Table(("fact", "value"), tuple(rows))]
    if topology_pairs(facts):
        blocks += [Paragraph("`nvidia-smi topo -m`, as it printed the GPUs:"),
                   Code("\n".join(facts.gpu_topology.lines))]
    if findings:
        blocks += [Paragraph("Setup findings:"), Bullets(tuple(findings))]
    return Section("Environment", blocks)


def _build_banner(run: RunData) -> str | None:
    adapter = run.adapter
    return adapter.build_banner(run.server_log) if adapter and run.server_log else None


def _recipe(run: RunData) -> list[Section]:
    if run.server and run.server.external:
        return [_external_server(run.server)]
    profile = run.profile
    engine = profile.get("engine") or {}
    built = _has_build(engine)
    build = (engine.get("build") or {}) if built else {}
    artifact = profile.get("artifact") or {}
    rows = [
        ("engine", f"{run.adapter.name if run.adapter else engine.get('kind')} {engine.get('version') or ''}".strip()),
        ("engine source", str(build.get("source") or (
            "not pinned (engine.build.source is empty)" if built
            else f"the installed {engine.get('kind')} {engine.get('version') or '(engine.version unset)'}"))),
        ("engine commit", str(build.get("commit") or "—")),
        *((("engine build (as its log names it)", banner),) if (banner := _build_banner(run)) else ()),
        ("engine tarball sha256", str(build.get("tarball_sha256") or "—")),
        ("engine binary sha256", ", ".join(f"{k}: {v}" for k, v in sorted((build.get("binary_sha256") or {}).items()))
         or (f"{run.server.binary}: {run.server.binary_sha256} (hashed at launch)"
             if run.server and run.server.binary_sha256 else "not recorded (engine.build.binary_sha256 is empty)")),
        ("engine backend", _backend(engine, build) if built
         else f"none: {engine.get('kind')} runs as installed (engine.binary), its own kernels"),
        ("container base", str(engine.get("docker_image") or "none: the server runs as a native process")),
    ]
    if artifact.get("generate"):
        params = ", ".join(f"{k}={v}" for k, v in sorted(artifact["generate"].items()) if v is not None)
        rows.append(("artifact", f"generated locally, deterministically: {params}"))
    elif artifact.get("package"):
        rows += [("artifact package", f"{artifact['package']} (fetched with pip, its sha256 required)"),
                 ("artifact package sha256 (pinned)", str(artifact.get("package_sha256"))),
                 ("artifact file (inside the package)", str(artifact.get("filename"))),
                 ("artifact sha256 (pinned)", str(artifact.get("sha256") or "not pinned")),
                 ("artifact size (pinned)", _bytes(artifact.get("size_bytes")))]
    else:
        rows += [("artifact repo", str(artifact.get("repo") or artifact.get("url")
                                       or f"none: a local file or folder ({artifact.get('local_dir') or 'models/'})")),
                 ("artifact revision", str(artifact.get("revision") or "—")),
                 ("artifact file", str(artifact.get("filename"))),
                 ("artifact sha256 (pinned)", str(artifact.get("sha256") or "not pinned")),
                 ("artifact size (pinned)", _bytes(artifact.get("size_bytes")))]
    rows += _verified_artifact(run.artifact) + artifact_fetched(run)
    blocks: list[Any] = [Table(("item", "value"), tuple(row for row in rows if row[1] not in EMPTY))]
    argv = list(run.server.argv) if run.server else []
    if not argv:
        blocks.append(Paragraph("No server.json: the launch step (02_launch) produced no data, so there is no argv."))
        return [Section("Pinned recipe", blocks)]
    _, source = profile_comments(run)
    flags = launch_flags(run)
    blocks += [Paragraph("Launch command (as run; secrets redacted; paths shortened as the appendix's Provenance "
                         "says; the appendix names each flag's profile key and reason):"),
               Code(shlex.join(argv))]
    return [Section("Pinned recipe", [*blocks, *_stays_running(run)]),
            Section("Appendix: the launch flags", [Table(
                ("flag", "value", "profile key", "reason"),
                tuple((f.flag, f.value or "", f.key or "none: set by ninferkit's engine adapter", f.reason or "—")
                      for f in flags),
                f"Each flag with the profile key it comes from and the reason written beside that key ({source}).")],
                appendix=True)]


def _bare(item: str) -> str:
    """An absolute path of the deployment's command as its file name: the plan places the model where this
    machine's cache would, which names neither the run's machine nor the reader's."""
    return Path(item).name if item.startswith("/") else item


def _stays_running(run: RunData) -> list[Block]:
    """The deployment that stays up (seed 000 §3's `docker run -d --restart unless-stopped ...`), as `ninferkit
    deploy --dry-run` plans it from the run's profile: the launch above is the measuring one, on loopback and
    stopped at the end of the run."""
    name = run.manifest.profile_name or "PROFILE"
    profile = run.todays_profile
    why = "a field of its recorded profile cannot be read by today's schema" if profile is None else ""
    if profile is not None:
        try:
            mode, planned = plan(profile)
        except NinferkitError as exc:
            why = str(exc).split("\n")[0]
        else:
            return [Paragraph(f"What stays running (`ninferkit deploy {name} --dry-run` prints it with the files it "
                              f"writes; `ninferkit deploy {name}` starts it and waits until it is healthy and "
                              "passes the checks above); the launch above measured, on loopback, and was stopped:"),
                    Code(command(mode, replace(planned, argv=[_bare(item) for item in planned.argv])))]
    return [Note(f"The deployment that stays running: `ninferkit deploy {name} --dry-run` prints its command "
                 f"(this write-up could not plan it: {why}).")]


def _external_server(record: ServerRecord) -> Section:
    """In place of the recipe: a server someone else started has no command line, binary or artifact to pin."""
    signs = "; ".join(f"{kind}: {', '.join(phrases)}" for kind, phrases in record.engine_signs.items())
    found_by = "named by --engine" + (f" (the server's answers: {signs})" if signs else "") if record.engine_given \
        else f"read from the server's answers: {signs or 'none recorded'}"
    models = next((check.detail for check in record.checks if check.name == "models"), {})
    rows = (("server", str(record.url)),
            ("engine", f"{record.engine} ({found_by})"),
            ("engine build (as the server reports it)", record.engine_version or "not reported"),
            ("model id", str(record.model_id or "—")),
            ("context per request (as the server reports it)", number(models.get("context_reported"))),
            ("server log", "given (--log): the ledger and the engine's request record are read from it"
             if record.log else "not given: no startup ledger, and only what the answers carry of the engine's side"),
            ("attached", str(record.started or "—")))
    return Section("Pinned recipe", [
        Paragraph(f"ninferkit did not start this server: it measured the one already running at {record.url}. "
                  "There was no launch step and there is no launch command, binary or model file to pin here; "
                  "ninferkit never stopped or signalled it. How its owner started it decides what these "
                  "numbers mean."),
        Table(("item", "value"), rows)])


def _has_build(engine: dict[str, Any]) -> bool:
    """Whether the run's engine has an engine.build, as today's profile schema says (an older ninferkit recorded
    vLLM's unused default build, backend 'cpu', which is not written up); an unknown engine is read as one that does."""
    kind = engine.get("kind")
    return kind not in KINDS or has_build(kind)


def _backend(engine: dict[str, Any], build: dict[str, Any]) -> str:
    return str(build.get("backend")) + (f", sm_{build['cuda_arch']}" if build.get("cuda_arch") else "")


def _bytes(size: Any) -> str:
    """A byte count with its unit ("98,362,432 bytes"); "—" where the profile pins none."""
    return f"{number(size)} bytes" if size is not None else "—"


def _verified_artifact(record: ArtifactRecord | None) -> list[tuple[str, str]]:
    """What the verify step measured (artifact.json), beside what the profile pins."""
    if record is None:
        return [("artifact verification", "no artifact.json: the verify step (01_artifact_verify) produced no data")]
    problems = "; ".join(str(p) for p in record.problems) or "none"
    measured = record.sha256 or (f"per file ({len(record.files)} files, artifact.json)" if record.files
                                 else "not recorded")
    rows = [("artifact sha256 (measured)", measured),
            ("artifact size (measured)", f"{number(record.size_bytes)} bytes"),
            ("artifact container version", str(record.container_version or "—")),
            *((("model (as the artifact names itself)", named),)
              if (named := artifact_named(record.container)) else ()),
            ("artifact verified", f"{'yes' if record.ok else 'NO'} (problems: {problems})")]
    for binary in record.binaries:
        fields = ", ".join(f"{k}={v}" for k, v in sorted(binary.items()) if not isinstance(v, (dict, list)))
        rows.append(("engine binary (verified)", fields))
    return rows


CLEAN = "No step failed, the server log holds no known failure, and no request failed."
"""What the post says where a run met no error, in place of an "Errors met" section of one line."""


def _acceptance(run: RunData, clean: bool) -> list[Section]:
    """The server's state and its checks; `clean`: the run met no error (`_errors`), said here."""
    if run.server is None:
        return [Section("Acceptance checks",
                        [Note("No server.json: the launch step (02_launch) produced no data.")])]
    rows = tuple((str(c.name), "pass" if c.ok else "FAIL", number(c.seconds)) for c in run.server.checks)
    details = tuple((str(c.name), _detail(c.detail)) for c in run.server.checks)
    blocks: list[Any] = [Paragraph((
        f"Server state {run.server.state} at {run.server.url}, checked when the run attached to it (not started by "
        "ninferkit)." if run.server.external
        else f"Server state {run.server.state}, ready after {number(run.server.ready_s)} s.")
        + (f" {CLEAN}" if clean else ""))]
    blocks.append(Table(("check", "result", "seconds"), rows, "What each check saw: the appendix.") if rows
                  else Paragraph("The server recorded no acceptance checks."))
    appendices = [Section("Appendix: the acceptance checks' answers", [Table(("check", "detail"), details)],
                      appendix=True)] if details else []
    appendices += [Section("Appendix: the startup ledger", [Table(
        ("startup ledger", "value"), _ledger_rows(run.ledger),
        f"Numbers the server printed while starting (memory in MiB/GiB; a resolution is how finely the printed "
        f"figures pin a value), read from {run.ledger_source}.")], appendix=True)] if run.ledger else []
    return [Section("Acceptance checks", blocks), *appendices]


def _ledger_rows(ledger: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """One row per ledger value in plain words, its resolution beside it rather than on a row of its own."""
    suffix = "_resolution_bytes"
    rows = []
    for key, value in sorted(ledger.items()):
        if key.endswith(suffix) and key.removesuffix(suffix) in ledger:
            continue
        shown = gib(value) if key.endswith("_bytes") else number(value) + (" s" if key.endswith("_s") else "")
        resolution = ledger.get(key + suffix)
        rows.append((_plain_key(key), shown + (f" (to within {gib(resolution)})" if resolution else "")))
    return tuple(rows)


def _plain_key(key: str) -> str:
    """A ledger key as words: `free_after_startup_bytes` -> "free after startup", `kv_pages` -> "KV pages"."""
    words = key.removesuffix("_bytes").removesuffix("_s").split("_")
    return " ".join(word.upper() if word in ("kv", "url", "id", "gpu", "mtp") else word for word in words)


def _detail(detail: dict[str, Any]) -> str:
    parts = []
    for key in sorted(detail):
        value = detail[key]
        if isinstance(value, dict):
            value = ", ".join(f"{k.replace('_', ' ')} {_nested(v)}" for k, v in sorted(value.items())) or "none"
        elif isinstance(value, list):
            value = ", ".join(str(v) for v in value) or "none"
        elif value is None:
            value = "not reported"
        parts.append(f"{key.replace('_', ' ')}: {value}")
    return "; ".join(parts)


def _nested(value: Any) -> str:
    """A value inside a check's detail in words: a nested object's fields (usage's `prompt_tokens_details`) as
    "name value", never a Python dict."""
    if isinstance(value, dict):
        return "(" + (", ".join(f"{k.replace('_', ' ')} {_nested(v)}" for k, v in sorted(value.items())) or "none") \
            + ")"
    return number(value) if isinstance(value, (int, float, bool)) or value is None else str(value)


def _errors(run: RunData) -> list[tuple[str, str, str, str]]:
    """What went wrong, one row each (where, error, fix, source): failed steps, the launch's error, what the server
    log's diagnosis found, failed requests by cell; none for a clean run."""
    rows: list[tuple[str, str, str, str]] = []
    for name, info in ordered_steps(run.manifest):
        if info.status in ("failed", "interrupted"):
            error = str(info.error or info.status)
            planned = run.manifest.planned_steps or []
            left = ",".join(planned[planned.index(name):] if name in planned else [name])
            words, fix = recorded_bare(error, left, run.dir.path.name) or (error.split("\n")[0], _fix_in(error))
            rows.append((f"step {name}", words, fix, f"{run.dir.name(run.dir.manifest)} (steps.{name}.error)"))
    if run.server and run.server.error:
        error = run.server.error
        rows.append(("launch", error.split("\n")[0], _fix_in(error), run.dir.name(run.dir.server)))
    if run.server_log and run.server and run.server.engine:
        try:
            diagnosis = get_adapter(run.server.engine).diagnose(run.server_log)
        except NinferkitError:
            diagnosis = None
        if diagnosis is not None:
            profile = run.todays_profile  # the run's profile names what to pin (a revision, the GPUs)
            fix = diagnosis.fix if profile is None or run.adapter is None else run.adapter.advise(
                diagnosis.code, diagnosis.fix, profile)
            rows.append((f"server log: {diagnosis.code}", diagnosis.cause, fix, run.dir.name(run.dir.server_log)))
    failed = Counter((str(r.sweep), r.status, str(r.http_status), str(r.error or "").split("\n")[0], str(r.cell_id))
                     for r in run.requests if r.status != "ok")
    for (sweep, status, http_status, error, cell_id), count in sorted(failed.items()):
        rows.append((f"{count} {status} request(s), {sweep} sweep", f"HTTP {http_status}: {error}",
                     _cell_outcome(run.cells.get(cell_id)), "requests.jsonl, sweeps/cells.jsonl"))
    return rows


def _cell_outcome(entry: CellEntry | None) -> str:
    """What the sweeps step did about a cell whose requests failed: its diagnosis, or its final status."""
    if entry is None:
        return "—"
    if entry.diagnosis:
        return str(entry.diagnosis.get("fix") or entry.diagnosis)
    return f"cell {entry.status}" + (f": {entry.reason}" if entry.reason else "")


def _fix_in(text: str) -> str:
    _, found, fix = text.partition("Fix: ")
    return fix.split("\n")[0] if found else "—"


IN_FIELD_TABLES = ("tasks",)
"""Sweeps the post shows in the reports' own layouts (report/field_tables.py, the speculation table): their
every-column view is raw detail, in the appendix."""


def _benchmarks(run: RunData, figures: dict[str, Figure]) -> list[Section]:
    blocks: list[Any] = []
    detail: list[Block] = []
    flat = prefill_is_overhead(run.measured("context"))
    for name, frame in run.tables.items():
        if name == "context" and flat is not None:  # the headline's rule: tokens over a fixed overhead is no rate
            frame = frame.drop(columns=[column for column in frame if column.startswith("prefill_tok_s")])
        views = [*sweep_view(name, frame, run.settings.acceptance_gap_pct),
                 *filter(None, [detail_view(name, run.requests)])]
        if name == "context" and flat is not None:
            views.append(Note(f"No prefill rate: the engine's prompt time stays between {number(flat[0] * 1000)} "
                              f"and {number(flat[1] * 1000)} ms over these prompt lengths, a fixed overhead; tokens "
                              "over it would read as a rate it is not (tables/context.csv keeps the division)."))
        if name in IN_FIELD_TABLES:
            detail += views
        else:
            blocks += views
    if (windows := _engine_windows_note(run.tables)) is not None:
        blocks.append(Paragraph(windows))
    if not run.tables:
        blocks.append(Note("No tables/: the sweeps step (03_sweeps) produced no sweep table."))
    comparison = run.llama_bench.comparison if run.llama_bench else []
    if comparison:
        columns = tuple(BenchComparison.model_fields)
        blocks.append(Table(tuple(BENCH_COLUMNS.get(c, c.replace("_", " ")) for c in columns),
                            tuple(tuple(_value(c, getattr(row, c)) for c in columns) for row in comparison),
                            "The server's context-sweep medians against llama-bench on the same build, model and "
                            "GPU (pp at the prompt length; tg at that depth); llama_bench.json, written by "
                            "benchmarks/bench_llama_bench.py."))
    for key in ("context_speed", "context_ttft", "tasks_acceptance", "concurrency_scaling", "prefix_reuse_ttft"):
        if key in figures:
            blocks.append(figures[key])
    return [Section("Benchmarks", blocks),
            *([Section("Appendix: the tasks sweep, every column", detail, appendix=True)] if detail else [])]


BENCH_COLUMNS = {"prompt_tokens": "prompt tokens", "prefill_tok_s_server": "prefill, tok/s (server)",
                 "prefill_tok_s_llama_bench": "prefill, tok/s (llama-bench)",
                 "prefill_ratio": "prefill ÷ llama-bench", "decode_tok_s_server": "decode, tok/s (server)",
                 "decode_tok_s_llama_bench": "decode, tok/s (llama-bench)", "decode_ratio": "decode ÷ llama-bench"}
"""llama_bench.json's comparison fields in words."""


def _engine_windows_note(tables: dict[str, pd.DataFrame]) -> str | None:
    """What the engine decode windows column is (seed 004's table: average decode beside the 5-second peak), or why
    it holds no rate; None where the engine printed no window during any cell (nothing to explain)."""
    if not any("decode_tok_s_engine_peak" in frame.columns for frame in tables.values()):
        return None
    lengths = pd.to_numeric(pd.concat([frame["engine_window_s"] for frame in tables.values()
                                       if "engine_window_s" in frame.columns]), errors="coerce").dropna()
    window = lengths.median() if len(lengths) else None  # none measured: no median of nothing (numpy warns)
    length = f"{window:g} s " if window is not None else ""
    mixed = sum(int(pd.to_numeric(frame["engine_windows_mixed"], errors="coerce").fillna(0).sum())
                for frame in tables.values() if "engine_windows_mixed" in frame.columns)
    alone = sum(int(pd.to_numeric(frame["engine_windows"], errors="coerce").fillna(0).sum())
                for frame in tables.values() if "engine_windows" in frame.columns)
    peaks = any(frame["decode_tok_s_engine_peak"].notna().any() for frame in tables.values()
                if "decode_tok_s_engine_peak" in frame.columns)
    if not (peaks or mixed or alone):
        return None
    counted = (f" Over the cells, {alone} windows only decoded and {mixed} decoded beside a prefill"
               + (": no engine mean or peak is shown, since every window that decoded also prefilled (outputs too "
                  "short to fill one; the tables' engine_decode_note says how short)." if mixed and not alone else
                  ".") if mixed or alone else "")
    return (f"Engine decode windows: the engine's own throughput lines during the cell, the mean over the "
            f"{length}windows in which the engine says only decode ran (no prefill) and the best single one (seed "
            f"004's average decode and 5-second peak); a window that mixed a prefill with a decode is counted, "
            f"never averaged in.{counted}")


def _latency(run: RunData) -> Section:
    """Per-cell latency distributions of every sweep, recomputed from the request rows."""
    tables = [table for name in sweep_names() if (table := latency_view(name, run.cell_rows(name))) is not None]
    if not tables:
        return Section("Appendix: latency", appendix=True,
                       blocks=[Note("No measured request: the sweeps step (03_sweeps) produced no data.")])
    unrecorded = (" Rows recorded before ninferkit stamped every text event have no ITL (their TPOT comes from "
                  "their first and last token's times)." if not recorded_itl(run.measured()) else "")
    return Section("Appendix: latency", appendix=True, blocks=[Paragraph(
        "Per cell, in milliseconds, over its measured requests (warm-ups left out), from requests.jsonl. TTFT: send "
        "to the first event carrying text. TPOT: time per output token after the first, (last token - first "
        "token) / (output tokens - 1), the tokens from the server's usage (vLLM's TPOT; AIPerf and GuideLLM call "
        "it ITL). ITL: the gaps between consecutive text events, pooled over the requests (vLLM's ITL; AIPerf's "
        "ICL); with speculative decoding an event can carry several tokens, so ITL can exceed TPOT. End to end: "
        "send to the last byte. p50/p90/p99 interpolate linearly and sd is the population standard deviation "
        "(as vLLM); requests/s are the finished requests over first send to last end." + unrecorded), *tables])


def _speculation(run: RunData) -> Section:
    title = "Speculative decoding, task by task"
    tasks = run.tables.get("tasks")
    method = ((run.profile.get("serve") or {}).get("spec") or {}).get("method")
    found = speculation.task_speculation(tasks if tasks is not None else pd.DataFrame(), method)
    if not found:
        return Section(title, [Note("No task was measured with speculative decoding (no tasks table, or "
                                         "serve.spec sets no method).")])
    both = speculation.measured_without(found)
    caption = ("tables/tasks.csv: per task, the server's drafted and accepted tokens and decode rate with the "
               "profile's speculation" + (
                   ", and the same task's decode rate on a server with speculation off, measured right after it "
                   "(sweeps.tasks.speculation_ab; its server is sweeps/speculation-off/). A task gained or lost when "
                   f"one rate beats the other by more than {100 * speculation.GAIN:.0f}%. Each side generates at the "
                   "task's natural length, so their texts can differ" if both else
                   " (no task was measured with speculation off: sweeps.tasks.speculation_ab adds that side)") +
               ". The output tokens and how each ended (stop: the model's own end; length: the task's maximum) are "
               "beside them. Expected character: a repetitive answer copies text the prompt or the answer so far "
               "already holds, which any drafter predicts well; a creative one writes text found in neither.")
    missed = speculation.not_measured(tasks) if tasks is not None else None
    return Section(title, [Table(speculation.COLUMNS, speculation.table_rows(found), caption),
                           (Paragraph if any(item.ratio is not None for item in found) else Note)(
                               speculation.summary(found)), *([Note(missed)] if missed else [])])


def _capacity(run: RunData) -> list[Section]:
    capacity = run.capacity
    if capacity is None:
        return [Section("Capacity",
                        [Note("No capacity.json: the capacity step (04_capacity_fit) produced no data.")])]
    terms: list[Block] = [Code(capacity.formula)] if capacity.formula else []
    terms.append(Table(("term", "value"), (
        ("bytes per pool token", _value("bytes_per_token", capacity.bytes_per_token)),
        ("fixed part (interval)", _value("fixed_bytes", capacity.fixed_bytes)),
        ("free after weights (interval)", _value("free_after_weights_bytes", capacity.free_after_weights_bytes)),
        ("taken at first use, U (interval)", _value("first_use_bytes", capacity.first_use_bytes)),
        ("largest KV pool, tokens", _value("max_kv_tokens", capacity.max_kv_tokens)),
        ("largest KV pool, tokens (interval)", _value("max_kv_tokens_interval", capacity.max_kv_tokens_interval)),
        ("largest KV pool, bounded by", _value("max_kv_tokens_note", capacity.max_kv_tokens_note
                                               or capacity.max_kv_tokens_bounded_by)),
        ("terms not pinned", ", ".join(map(str, capacity.terms_unpinned)) or "—"),
        ("observations", number(len(capacity.observations))),
        ("search launches", _value("launches", capacity.search_launches)),
    )))
    pinned = [str(term) for term in capacity.terms_pinned]
    if pinned:
        terms += [Paragraph("Terms the launches pinned:"), Bullets(tuple(pinned))]
    blocks: list[Any] = []
    searches = capacity.searches
    if searches:
        columns = tuple(SEARCH_COLUMNS)
        blocks.append(Table(tuple(SEARCH_COLUMNS.values()), tuple(
            tuple(_value(c, getattr(found.setting if c in ("kv_dtype", "concurrency") else found, c)) for c in columns)
            for found in searches),
            "The searches: the largest KV pool that started and served a request at each concurrency and KV dtype, "
            "the cells the server's own KV line reported at it, the launches each search took, and what set the "
            "answer: memory, or the engine's own rule (then with what memory alone would allow)."))
    blocks += capacity_blocks(run) if capacity.answers else [Note(
        "This capacity.json has no per-answer table (seed 000 §2.5: weights, free after weights, auto, the largest "
        "pool, each lane's share, the what-if rows): it was written before the capacity step recorded its answers. "
        "`ninferkit capacity fit` on this run's saved startup logs writes them without launching anything.")]
    decisions = capacity.decision_table
    if decisions:
        blocks.append(what_fits(decisions, searches))
    notes = [str(note) for note in [*capacity.conflicts, *capacity.notes]]
    if notes:
        blocks.append(Bullets(tuple(notes)))
    return [Section("Capacity", blocks), Section("Appendix: capacity's fitted terms", terms, appendix=True)]


SEARCH_COLUMNS = {"kv_dtype": "KV dtype", "concurrency": "slots", "answer_kv_tokens": "largest pool, tokens",
                  "answer_context_per_slot": "context per slot", "server_kv_tokens": "pool the server reported",
                  "verified_by_request": "served a request", "launches": "launches", "bounded_by": "bounded by",
                  "note": "note"}
"""capacity.json's search fields and the words the post heads them with."""


def _value(key: str, value: Any) -> str:
    """A capacity value: bytes as MiB/GiB, [low, high] pairs as an interval, the rest as numbers."""
    if isinstance(value, list):
        return " – ".join(_value(key, item) for item in value) if any(v is not None for v in value) else "—"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_value(k, v)}" for k, v in sorted(value.items()))
    if key.endswith("_bytes") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return gib(value)
    return number(value) if isinstance(value, (int, float, bool)) or value is None else str(value)


def _conditions(run: RunData, figures: dict[str, Figure]) -> Section:
    gpus = gpu_conditions(run)
    other = Counter(row.source for row in run.telemetry if row.source != "nvml")
    blocks: list[Any] = []
    if gpus:
        blocks.append(Table(("GPU", "samples", "window", "power median, W", "power max, W", "SM clock median, MHz",
                             "SM clock max, MHz", "temperature max, °C", "throttled", "throttle reasons",
                             "idle: temperature, °C / power median, W"),
                            tuple((g.gpu, str(g.samples), g.window, number(g.power_median_w), number(g.power_max_w),
                                   number(g.sm_clock_median_mhz), number(g.sm_clock_max_mhz),
                                   number(g.temperature_max_c), f"{100 * g.throttled_fraction:.0f}%",
                                   ", ".join(g.throttle_reasons) or "none", _idle(g)) for g in gpus),
                            "NVML samples; idle is the samples while no request was in flight (seed 000 §2.7's "
                            "空载 beside the load figures)."))
    elif run.gpu_available:
        blocks.append(Paragraph("No NVML samples in telemetry.jsonl: power, clocks and throttling were not recorded."))
    else:
        blocks.append(Paragraph("CPU run: no GPU power, clock or throttling was recorded (there is no GPU)."))
    if other:
        counts = ", ".join(f"{n} {TELEMETRY_WORDS.get(source, source)}" for source, n in sorted(other.items()))
        blocks.append(Paragraph(f"Also sampled (telemetry.jsonl): {counts}."))
    if "telemetry_timeline" in figures:
        blocks.append(figures["telemetry_timeline"])
    return Section("Run conditions", blocks)


TELEMETRY_WORDS = {"engine_log": "of the engine's own throughput lines", "metrics": "scrapes of the engine's /metrics"}
"""telemetry.jsonl's other sources in words."""


def _idle(conditions: GpuConditions) -> str:
    if not conditions.idle_samples:
        return "no sample while idle (telemetry ran only while requests were in flight)"
    low_high = conditions.idle_temperature_c
    temperature = "—" if low_high is None else span(*low_high)
    return f"{temperature} / {number(conditions.idle_power_median_w)} ({conditions.idle_samples} samples)"


def _caveats(run: RunData) -> Section:
    notes = caveat_rules.caveats(run)
    return Section("Caveats", [Bullets(tuple(notes)) if notes else Paragraph("None found in the data.")])


def _provenance(run: RunData, paths: str) -> Section:
    manifest = run.manifest
    rows = [("run directory", run.dir.path.name), ("run id", run.run_id),
            ("schema version", str(manifest.schema_version)),
            ("ninferkit that made the run", _maker(manifest)), ("python", str(manifest.python)),
            ("packages", ", ".join(f"{name} {version}" for name, version in sorted(manifest.packages.items())
                                   if name != "ninferkit" and version) or "not recorded"),
            ("platform", str(manifest.platform)),
            ("profile", f"{manifest.profile_name} (hash {manifest.profile_hash})"),
            ("profile overrides", ", ".join(manifest.profile_overrides) or "none"),
            ("engine version", _distinct(run, "engine_version")),
            ("artifact sha256", _distinct(run, "artifact_sha256")),
            ("run created", str(manifest.created)),
            ("write-up generated by", f"ninferkit {__version__}"),
            ("derived files made by", _derived_by(run)),
            *_profile_read(run),
            ("paths", paths)]
    return Section("Provenance", appendix=True, blocks=[Table(("item", "value"), tuple(rows),
                                        "What this write-up was generated from; every number traces to these files.")])


def _derived_by(run: RunData) -> str:
    """Which ninferkit version made the files this post reads that are not raw (the join, the tables, capacity's
    answer: derived.json), so a published post names the version that derived it; the commit stays in
    derived.json, as the post would otherwise change with every commit that re-derives it."""
    files = json_object(run.dir.path / DERIVED).get("files") or {}
    return "; ".join(f"{name}: ninferkit {(made.get('by') or {}).get('ninferkit', '?')}"
                     for name, made in sorted(files.items()) if isinstance(made, dict)) or f"as recorded: {UNRECORDED}"


def _profile_read(run: RunData) -> list[tuple[str, str]]:
    """How the recorded profile was read, where an older ninferkit recorded fields today's schema no longer has
    (rundir/recorded.py): who recorded it and each field upgraded, or the field that cannot be."""
    if run.profile_refused:
        return [("profile read", "not by this ninferkit (the derived files are as recorded): "
                 + " ".join(run.profile_refused.split()))]
    if run.recorded is None or not run.recorded.upgraded.read:
        return []
    return [("profile read", run.recorded.line().removeprefix("profile read "))]


def _maker(manifest: Manifest) -> str:
    """ninferkit's version and commit as the manifest recorded them; a run made before ninferkit recorded its
    own version (it read installed metadata, absent from a checkout never pip-installed) says so."""
    version = manifest.packages.get("ninferkit")
    shown = (f"version {version}" if version else
             "version not recorded (this run predates ninferkit recording its own version: the commit names it)")
    commit = manifest.git.commit
    if commit:
        shown += f", commit {commit}" + (" with uncommitted changes" if manifest.git.dirty else "")
    return shown


def _distinct(run: RunData, name: str) -> str:
    """The values a text field of RequestRow takes over the run's rows."""
    values = sorted({str(value) for row in run.requests if (value := getattr(row, name)) is not None})
    return ", ".join(values) or "not recorded in requests.jsonl"
