"""The write-up of a run: headline numbers recomputed from the raw rows, gaps named, reruns identical.

Data: tests/data/run_dirs/ (see its README): real `ninferkit run params/local-cpu.yaml` runs of the embedded
default, recorded on the 2-core development VM.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
from pathlib import Path

import pandas as pd
import pytest

from ninferkit.cli import main as cli_main
from ninferkit.errors import BadInput, NinferkitError
from ninferkit.report import headline, load_run, renderers, write_report
from ninferkit.report.caveats import caveats
from ninferkit.report.data import RunData
from ninferkit.report.fmt import number
from ninferkit.report.recipe import launch_flags
from ninferkit.rundir.records import Manifest, ProbeRecord, RequestRow, ServerRecord, TelemetrySample
from ninferkit.rundir.runs import RunDir, open_run
from ninferkit.sweeps.tables import save_tables
from tests.conftest import DATA, LOCAL_CPU, REPO, whole

RUNS = DATA / "run_dirs"
RUN_A, RUN_B = "embedded-1", "embedded-2"


def copy_run(name: str, where: Path) -> Path:
    """A writable copy of a recorded run, its manifest pointing at the profile it was made with (the embedded
    default of its day, kept as tests/data/profiles/generated-cpu.yaml)."""
    target = where / name
    shutil.copytree(RUNS / name, target)
    manifest_path = target / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["profile_source"] = str(REPO / "tests" / "data" / "profiles" / "generated-cpu.yaml")  # made with it
    manifest_path.write_text(json.dumps(manifest))
    return target


def markdown_table(text: str, heading: str, index: int = 0) -> list[dict[str, str]]:
    """The index-th pipe table after `## heading` in a Markdown file, as dicts."""
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    tables = [block.splitlines() for block in re.findall(r"(?m)(?:^\|.*\n?)+", section)]
    lines = tables[index]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
            for line in lines[2:]]


BY_LENGTH = "Appendix: headline figures by prompt length"
SOURCES = "Appendix: headline figures and their sources"
"""The appendix that holds every headline figure with its samples, where and source."""


def counted_rows(run_dir: Path) -> list[dict]:
    """The run's request rows the sweep tables count: per cell, the attempt its last ledger entry names."""
    latest = {}
    for line in (run_dir / "sweeps" / "cells.jsonl").read_text().splitlines():
        entry = json.loads(line)
        latest[entry["cell_id"]] = entry["attempt"]
    rows = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    return [r for r in rows if latest.get(r["cell_id"]) == r["attempt"]]


def test_each_headline_number_equals_the_value_recomputed_from_requests(tmp_path: Path) -> None:
    run_dir = copy_run(RUN_A, tmp_path)
    report = write_report(run_dir)
    text = whole(report)
    by_length = {row["prompt tokens"]: row for row in markdown_table(text, BY_LENGTH)}
    table = {row["metric"]: row for row in markdown_table(text, SOURCES)}

    rows = counted_rows(run_dir)
    context = [r for r in rows if r["sweep"] == "context" and r["status"] == "ok" and not r["warmup"]]
    lengths = sorted({r["cell"]["target_prompt_tokens"] for r in context})
    assert list(by_length) == [number(n) for n in lengths]  # one line per prompt length, never one range over all
    for length in lengths:
        group = [r for r in context if r["cell"]["target_prompt_tokens"] == length]
        line = by_length[number(length)]
        for column, name in (("Decode (server), tok/s", "decode_tok_s_server"),
                             ("Prefill (server), tok/s", "prefill_tok_s_server"),
                             ("TTFT (client), s", "ttft_client_s")):  # 2 repetitions: no p90 or p99 of two
            values = [r[name] for r in group]
            low, high = min(values), max(values)
            same = number(low) == number(high)
            shown = number(statistics.median(values)) + ("" if same else f" ({number(low)} – {number(high)})")
            assert line[column] == shown, (length, column)
        assert line["requests"] == str(len(group)) == "2"
    cells: dict[str, list[dict]] = {}
    for r in rows:
        if r["sweep"] == "concurrency" and r["status"] == "ok" and not r["warmup"]:
            cells.setdefault(r["cell_id"], []).append(r)
    aggregate = [sum(r["completion_tokens"] for r in c) / (max(r["t_done"] for r in c) - min(r["t_send"] for r in c))
                 for c in cells.values()]
    kv_gib = json.loads((run_dir / "server.json").read_text())["ledger"]["kv_cache_bytes"] / 1024**3

    assert len(context) == 8 and len(cells) == 3  # 4 prompt lengths x 2 repetitions; levels 1, 2, 4
    concurrency = table["Concurrency: aggregate output (client)"]
    assert concurrency["best"] == number(max(aggregate))
    assert concurrency["range"] == f"{number(min(aggregate))} – {number(max(aggregate))}"
    assert float(concurrency["best"].replace(",", "")) == pytest.approx(max(aggregate), rel=0.01)
    assert table["Memory: KV cache at startup (server ledger)"]["best"] == number(kv_gib)
    capacity = json.loads((run_dir / "capacity.json").read_text())
    pool = table["Memory: largest KV pool (capacity fit)"]
    assert pool["best"] == number(capacity["max_kv_tokens"])
    assert pool["range"] == " – ".join(number(v) for v in capacity["max_kv_tokens_interval"])
    free = table["Memory: free after weights (capacity fit)"]
    assert free["range"] == " – ".join(number(v / 1024**3) for v in capacity["free_after_weights_bytes"])


def test_headline_function_and_report_agree(tmp_path: Path) -> None:
    run_dir = copy_run(RUN_A, tmp_path)
    report = write_report(run_dir)
    text = whole(report)
    rows = headline(load_run(run_dir))
    whole_run = [row for row in rows if row.prompt_tokens is None]
    assert [row["best"] for row in markdown_table(text, SOURCES)] == [number(row.best) for row in whole_run]
    decode = {row.prompt_tokens: row for row in rows if row.metric == "Decode (server)"}
    for line in markdown_table(text, BY_LENGTH):
        found = decode[int(line["prompt tokens"].replace(",", ""))]
        assert line["Decode (server), tok/s"].startswith(number(found.p50))


def test_the_write_up_opens_with_its_source_and_contents_and_links_every_section(tmp_path: Path) -> None:
    run_dir = copy_run(RUN_A, tmp_path)
    text = write_report(run_dir).markdown.read_text()
    lines = text.splitlines()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert lines[2].endswith(f"from the run directory {RUN_A} (run id \"{manifest['run_id']}\", made "
                             f"{manifest['created']}).")
    headings = re.findall(r"(?m)^## (.+)$", text)
    links = re.findall(r"\[([^\]]+)\]\(#([a-z0-9-]+)\)", lines[4])
    assert lines[4].startswith("Contents: ") and [title for title, _ in links] == headings
    assert links[headings.index("Run conditions")][1] == "run-conditions"
    assert lines[6] == "[Appendix: the raw detail](appendix.md)"  # the raw detail, one click away
    html = (run_dir / "report" / "index.html").read_text()
    for _, anchor in links:  # the same anchors, on the HTML headings
        assert f'<h2 id="{anchor}">' in html and f'href="#{anchor}"' in html
    assert '<a href="appendix.html">' in html
    detail = (run_dir / "report" / "appendix.md").read_text()
    links = re.findall(r"\[([^\]]+)\]\(#([a-z0-9-]+)\)", detail.splitlines()[4])
    assert links[re.findall(r"(?m)^## (.+)$", detail).index("Appendix: steps and data")][1] == \
        "appendix-steps-and-data"
    assert "[The post](index.md)" in detail


def test_provenance_names_the_ninferkit_that_made_the_run(tmp_path: Path) -> None:
    run_dir = copy_run(RUN_A, tmp_path)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    table = {row["item"]: row["value"] for row in markdown_table(whole(write_report(run_dir)), "Provenance")}
    made = table["ninferkit that made the run"]
    version = manifest["packages"]["ninferkit"]
    assert made.startswith(f"version {version}" if version else "version not recorded")
    assert manifest["git"]["commit"] in made
    manifest["packages"]["ninferkit"] = "0.1.0"  # as runs record it since ninferkit reads its own version
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    table = {row["item"]: row["value"] for row in markdown_table(whole(write_report(run_dir)), "Provenance")}
    assert table["ninferkit that made the run"].startswith("version 0.1.0, commit ")


def test_rerun_is_byte_identical_apart_from_the_timestamp_line(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = copy_run(RUN_A, tmp_path)
    assert cli_main(["report", str(run_dir)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(run_dir / "report" / name) for name in ("index.md", "index.html", "appendix.md",
                                                                   "appendix.html")]
    first = {p.relative_to(run_dir): p.read_bytes() for p in sorted((run_dir / "report").rglob("*")) if p.is_file()}
    assert cli_main(["report", str(run_dir)]) == 0
    second = {p.relative_to(run_dir): p.read_bytes() for p in sorted((run_dir / "report").rglob("*")) if p.is_file()}
    assert first.keys() == second.keys()
    assert {p.name for p in first if p.suffix == ".png"} == {
        "context_speed.png", "context_ttft.png", "concurrency_scaling.png", "prefix_reuse_ttft.png"}
    for path, content in first.items():
        if path.suffix == ".png":
            assert content == second[path], path
            continue
        old, new = content.decode().splitlines(), second[path].decode().splitlines()
        assert len(old) == len(new), path
        differing = [(a, b) for a, b in zip(old, new, strict=True) if a != b]
        assert len(differing) <= 1, path
        assert all("Generated at " in a and "Generated at " in b for a, b in differing), path


def test_a_run_with_gaps_names_the_steps_that_produced_no_data(tmp_path: Path) -> None:
    report = write_report(copy_run("launch-only", tmp_path))
    text = whole(report)
    for name, step in (("requests.jsonl", "03_sweeps"), ("capacity.json", "04_capacity_fit"),
                       ("artifact.json", "01_artifact_verify")):
        assert re.search(rf"`{re.escape(name)}` — written by .*{step}", text), name
    assert "no data: the context sweep recorded no value" in text
    assert "no data: no capacity.json (04_capacity_fit)" in text
    assert "no GPU (CPU run)" in text
    assert "CPU run: no GPU power, clock or throttling was recorded" in text
    assert report.figures == []
    assert not list((report.folder / "figures").glob("*.png"))


def test_a_run_with_only_its_manifest_still_gets_a_write_up_and_an_empty_folder_is_refused(tmp_path: Path) -> None:
    run = open_run(LOCAL_CPU, tmp_path / "run")
    text = write_report(run.dir.path).markdown.read_text()
    assert "No request was measured" in text and "no artifact.json" in text and "No server.json" in text
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInput, match="holds no run"):  # issue 40: a folder that is no run is not written up
        write_report(tmp_path / "empty")


def test_missing_run_dir_and_unknown_renderer_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(NinferkitError, match="not a run directory"):
        write_report(tmp_path / "nope")
    with pytest.raises(NinferkitError, match="registered: html, markdown"):
        write_report(copy_run("launch-only", tmp_path), ["pdf"])
    assert not (tmp_path / "launch-only" / "report").exists()  # failed before writing anything
    assert renderers() == ["html", "markdown"]


def test_launch_flags_carry_the_reasons_written_in_the_profile(tmp_path: Path) -> None:
    flags = {flag.flag: flag for flag in launch_flags(load_run(copy_run(RUN_A, tmp_path)))}
    assert flags["-np"].key == "serve.max_concurrency"
    assert flags["-np"].reason == "two slots, so the concurrency sweep sees batching"
    assert flags["-ctk"].key == "serve.kv.dtype" and "default cache type" in (flags["-ctk"].reason or "")
    assert flags["--host"].key == "serve.host"
    assert flags["-c"].key is None  # derived by the adapter (max_context x max_concurrency)


def test_acceptance_and_throttle_caveats() -> None:
    # Decode and acceptance per task as published in the field reports (reference/field-reports.md,
    # section 2.6): coding 93.4 tok/s at 91 %, fiction 44.9 tok/s at 26 %.
    rows = [RequestRow.model_validate(row) for row in (
        {"sweep": "tasks", "cell": {"task": "coding"}, "status": "ok", "warmup": False,
         "decode_tok_s_server": 93.4, "drafted_tokens_server": 100, "accepted_tokens_server": 91},
        {"sweep": "tasks", "cell": {"task": "fiction"}, "status": "ok", "warmup": False,
         "decode_tok_s_server": 44.9, "drafted_tokens_server": 100, "accepted_tokens_server": 26},
    )]
    gpu = ProbeRecord(facts={"gpu": {"available": True, "gpus": [{"index": 0, "power_limit_w": 250.0}]}})
    # Telemetry rows shaped like the sampler's; the values exercise the rule, they are not a measurement.
    telemetry = [{"source": "nvml", "gpu": 0, "t_mono": 1.0, "power_w": 200.0, "sm_clock_mhz": 1380,
                  "throttled": True, "throttle_reasons": ["sw_power_cap"]},
                 {"source": "nvml", "gpu": 0, "t_mono": 2.0, "power_w": 150.0, "sm_clock_mhz": 1530,
                  "throttled": False, "throttle_reasons": []}]
    samples = [TelemetrySample.model_validate(row) for row in telemetry]
    notes = caveats(RunData(RunDir(Path("x")), probe=gpu, requests=rows, telemetry=samples))
    assert any("acceptance differs between cells (26% – 91%)" in note for note in notes)
    # the power cap alone is the card at its limit, not a card running below what it can
    assert any("GPU 0 was held at its power limit (250 W) in 50% of 2 samples (sw_power_cap): these are its "
               "speeds at that limit" in note for note in notes)
    assert not any("CPU run" in note or "understate" in note for note in notes)
    hot = [TelemetrySample.model_validate(dict(telemetry[0], throttle_reasons=["sw_power_cap", "hw_thermal_slowdown"])),
           samples[1]]
    notes = caveats(RunData(RunDir(Path("x")), probe=gpu, requests=rows, telemetry=hot))
    assert any("GPU 0 throttled in 50% of 2 samples (hw_thermal_slowdown, sw_power_cap): speeds from this run "
               "understate the unthrottled card" in note for note in notes)
    same = [rows[0], rows[0].model_copy(update={"cell": {"task": "json"}})]
    assert not any("acceptance" in note for note in caveats(RunData(RunDir(Path("x")), probe=gpu, requests=same)))


def test_cpu_run_caveats_come_from_the_recorded_rows(tmp_path: Path) -> None:
    run = load_run(copy_run(RUN_A, tmp_path))
    notes = caveats(run)
    assert notes[0].startswith("CPU run (no GPU)")
    gaps = [r.ttft_client_s - r.prompt_s_server for r in run.measured()
            if r.ttft_client_s is not None and r.prompt_s_server is not None]
    assert len(gaps) > 20
    assert any(f"median of {number(statistics.median(gaps))} s" in note for note in notes)


def test_ninfer_launch_flags_map_to_profile_keys_and_their_comments() -> None:
    # The real argv the ninfer adapter builds for a seed profile (as `ninferkit launch --dry-run` prints
    # it; the revision override only fills the one pin the reference does not print).
    from ninferkit.params import load_profile
    from ninferkit.server.process import planned_argv

    source = REPO / "params" / "ninfer-v100-pcie-nvfp4.yaml"
    loaded = load_profile(source, ["artifact.revision=" + "ab" * 20])
    run = RunData(RunDir(Path("unused")), server=ServerRecord(argv=planned_argv(loaded.profile)),
                  manifest=Manifest(profile=loaded.profile.model_dump(mode="json"), profile_source=str(source)))
    flags = {flag.flag: flag for flag in launch_flags(run)}
    for flag, key in (("--max-context", "serve.max_context"), ("--kv-capacity", "serve.kv.capacity"),
                      ("--kv-dtype", "serve.kv.dtype"), ("--pending-timeout-ms", "serve.pending_timeout_ms"),
                      ("--spec", "serve.spec.method"), ("--draft-tokens", "serve.spec.draft_tokens"),
                      ("--lm-head-draft", "serve.spec.lm_head_draft")):
        assert flags[flag].key == key, flag
        assert flags[flag].reason == loaded.comments[key], flag
    assert "request_queue_timeout" in (flags["--pending-timeout-ms"].reason or "")


def test_ninfer_flags_whose_names_differ_from_their_fields_come_from_the_flag_table() -> None:
    # --tp, --devices, --vision-max-tokens: no profile key is named after them, and the values (2, "0,1",
    # 2048) prove nothing by themselves; the engine's flag table says where each comes from.
    import warnings

    from ninferkit.params import load_profile
    from ninferkit.server.process import planned_argv

    source = REPO / "params" / "ninfer-2xv100-sxm2-tp2.yaml"
    loaded = load_profile(source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the report's own 30 s queue-timeout trap, asserted elsewhere
        argv = planned_argv(loaded.profile)
    run = RunData(RunDir(Path("unused")), server=ServerRecord(argv=argv, engine="ninfer"),
                  manifest=Manifest(profile=loaded.profile.model_dump(mode="json"), profile_source=str(source)))
    flags = {flag.flag: flag for flag in launch_flags(run)}
    assert flags["--tp"].key == "serve.tensor_parallel" and flags["--devices"].key == "serve.gpu_devices"
    assert flags["--vision-max-tokens"].key == "serve.vision_max_tokens"
    assert flags["--vision-max-tokens"].reason == loaded.comments["serve.vision_max_tokens"]


def test_decode_falls_back_to_the_client_figure_when_the_engine_reports_none(tmp_path: Path) -> None:
    # The recorded rows with the server's decode field removed, as an engine without per-request
    # accounting (vLLM) writes them: the headline says it is the client's figure.
    run = load_run(copy_run(RUN_A, tmp_path))
    run.requests = [RequestRow.model_validate({k: v for k, v in row.as_dict().items() if k != "decode_tok_s_server"})
                    for row in run.requests]
    first = headline(run)[0]
    client = [r.decode_tok_s_client for r in run.measured("context")
              if (r.cell or {})["target_prompt_tokens"] == first.prompt_tokens]
    assert (first.metric, first.best, first.low) == ("Decode (client)", max(client), min(client))


def test_a_sweep_that_planned_no_cell_has_no_table_and_the_write_up_reads_the_rest(tmp_path: Path) -> None:
    """The rate sweep is off by default, so its table has no cell: an empty frame, without columns, whose CSV
    stopped the runbook's 05_writeup with pandas' EmptyDataError on 2026-12-01. It is not written, and the file
    such a build left is removed."""
    run_dir = RunDir(copy_run(RUN_A, tmp_path))
    tables = {"context": load_run(run_dir.path).tables["context"], "rate": pd.DataFrame([])}
    run_dir.table("rate").write_text("\n")  # what that build wrote
    written = save_tables(run_dir, tables)
    assert list(written) == ["context"] and not run_dir.table("rate").exists()
    assert "## Appendix: latency" in whole(write_report(run_dir.path))
