"""The peer tools' own files against ninferkit's exports and imports.

The fixtures under tests/data/peers/ are what AIPerf 0.13.0 and GuideLLM 0.8.1 wrote when run against the
embedded llama-server on loopback, and a ninferkit concurrency sweep of that same server (scripts/capture-peers;
CAPTURE.txt and README.md there give the commands, versions and date). Three kinds of test:

- imports of the real files (always run);
- the exports' shape against the real files: the keys and units the tools wrote are the ones ninferkit writes
  (always run);
- the exports loaded by the tool's own loader (AIPerf's pydantic models, GuideLLM's report model and its
  `guidellm export` command), in the venvs scripts/peers makes; skipped, saying how to get them, where absent.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ninferkit.cache import cache_dir
from ninferkit.cli import main
from ninferkit.report import compare_runs
from ninferkit.rundir.runs import RunDir
from tests.conftest import DATA

PEERS_DATA = DATA / "peers"
AIPERF = PEERS_DATA / "aiperf-0.13.0"
GUIDELLM = PEERS_DATA / "guidellm-0.8.1" / "benchmarks.json"
NINFERKIT = PEERS_DATA / "ninferkit-local-cpu"


def peer_python(tool: str) -> Path:
    """The Python of the venv scripts/peers made for `tool`; the test is skipped, saying how, without it."""
    python = Path(os.environ.get("NINFERKIT_PEERS", cache_dir() / "peers")) / tool / "bin" / "python"
    if not python.is_file():
        pytest.skip(f"{tool} is not installed at {python}: run scripts/peers (or set NINFERKIT_PEERS)")
    return python


def aiperf_records() -> list[dict]:
    return [json.loads(line) for line in (AIPERF / "profile_export.jsonl").read_text().splitlines() if line.strip()]


def test_aiperf_import_has_a_row_per_profiling_record(tmp_path: Path) -> None:
    assert main(["import", str(AIPERF), "--format", "aiperf", "-o", str(tmp_path / "run")]) == 0
    run = RunDir(tmp_path / "run")
    rows = run.read_requests()
    profiling = [r for r in aiperf_records() if r["metadata"]["benchmark_phase"] == "profiling"]
    assert len(rows) == len(profiling) > 0
    by_id = {r["metadata"]["x_request_id"]: r["metrics"] for r in profiling}
    for row in rows:
        metrics = by_id[row.server_request_id]
        assert row.ttft_client_s == pytest.approx(metrics["time_to_first_token"]["value"] / 1000)
        assert row.tpot_client_s == pytest.approx(metrics["inter_token_latency"]["value"] / 1000)
        assert row.completion_tokens == metrics["output_sequence_length"]["value"]
        assert row.cell == {"concurrency": 2}
    summary = json.loads((AIPERF / "profile_export_aiperf.json").read_text())
    record = run.read_imported()
    assert record is not None and record.version == summary["aiperf_version"] == "0.13.0"
    mean_ttft = next(a for a in record.aggregates if a["theirs"] == "time_to_first_token.avg")
    assert mean_ttft["value"] == summary["time_to_first_token"]["avg"] and mean_ttft["unit"] == "ms"
    assert mean_ttft["metric"] == "ttft_client_s" and mean_ttft["stat"] == "mean"


def test_aiperf_aggregate_alone_makes_no_rows(tmp_path: Path) -> None:
    alone = tmp_path / "artifacts"
    alone.mkdir()
    (alone / "profile_export_aiperf.json").write_bytes((AIPERF / "profile_export_aiperf.json").read_bytes())
    assert main(["import", str(alone), "--format", "aiperf", "-o", str(tmp_path / "run")]) == 0
    run = RunDir(tmp_path / "run")
    assert run.read_requests() == []
    record = run.read_imported()
    assert record is not None and not record.per_request and record.aggregates
    assert "no request rows are made" in record.notes[0]
    assert main(["export", str(tmp_path / "run"), "--format", "csv", "-o", str(tmp_path / "x.csv")]) == 2
    assert not (tmp_path / "x.csv").exists()


def test_guidellm_import_has_a_row_per_request_it_kept(tmp_path: Path) -> None:
    assert main(["import", str(GUIDELLM), "--format", "guidellm", "-o", str(tmp_path / "run")]) == 0
    run = RunDir(tmp_path / "run")
    rows = run.read_requests()
    report = json.loads(GUIDELLM.read_text())
    kept = report["benchmarks"][0]["requests"]["successful"]
    assert len([r for r in rows if r.status == "ok"]) == len(kept) > 0
    by_id = {r["request_id"]: r for r in kept}
    for row in rows:
        theirs = by_id[row.server_request_id]
        assert row.ttft_client_s == pytest.approx(theirs["time_to_first_token_ms"] / 1000)
        assert row.tpot_client_s == pytest.approx(theirs["inter_token_latency_ms"] / 1000)
        assert row.cell == {"concurrency": 2}
    record = run.read_imported()
    assert record is not None and record.version == "0.8.1"
    mean = next(a for a in record.aggregates if a["theirs"] == "time_to_first_token_ms.successful.mean")
    assert mean["value"] == report["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"]["mean"]


def test_the_two_tools_runs_of_one_load_pair_in_compare(tmp_path: Path) -> None:
    main(["import", str(AIPERF), "--format", "aiperf", "-o", str(tmp_path / "aiperf")])
    main(["import", str(GUIDELLM), "--format", "guidellm", "-o", str(tmp_path / "guidellm")])
    table = compare_runs([tmp_path / "aiperf", tmp_path / "guidellm"]).table
    assert list(table["cell"]) == ["concurrency=2"] and list(table["metric"]) == ["ttft_client_s"]
    aiperf_ttft = [r["metrics"]["time_to_first_token"]["value"] / 1000 for r in aiperf_records()
                   if r["metadata"]["benchmark_phase"] == "profiling"]
    assert table["median_a"].iloc[0] == pytest.approx(float(np.median(aiperf_ttft)))


def test_aiperf_export_has_the_keys_and_units_aiperf_writes(tmp_path: Path) -> None:
    main(["export", str(NINFERKIT), "--format", "aiperf", "-o", str(tmp_path / "out")])
    theirs = next(r for r in aiperf_records() if r["metadata"]["benchmark_phase"] == "profiling")
    summary = json.loads((AIPERF / "profile_export_aiperf.json").read_text())
    for folder in (tmp_path / "out").iterdir():
        ours = json.loads((folder / "profile_export.jsonl").read_text().splitlines()[0])
        assert set(ours) <= set(theirs) and set(ours["metadata"]) <= set(theirs["metadata"])
        for tag, value in ours["metrics"].items():
            assert value["unit"] == theirs["metrics"][tag]["unit"], tag
        aggregate = json.loads((folder / "profile_export_aiperf.json").read_text())
        for tag, value in aggregate.items():
            if isinstance(value, dict) and "unit" in value:
                assert value["unit"] == summary[tag]["unit"], tag
                assert set(value) <= set(summary[tag]), tag


def test_guidellm_export_has_the_keys_guidellm_writes(tmp_path: Path) -> None:
    main(["export", str(NINFERKIT), "--format", "guidellm", "-o", str(tmp_path / "b.json")])
    ours = json.loads((tmp_path / "b.json").read_text())
    theirs = json.loads(GUIDELLM.read_text())
    assert set(ours) == set(theirs)
    ours_b, theirs_b = ours["benchmarks"][0], theirs["benchmarks"][0]
    assert set(ours_b) <= set(theirs_b) and set(ours_b["metrics"]) <= set(theirs_b["metrics"])
    assert set(ours_b["scheduler_metrics"]) <= set(theirs_b["scheduler_metrics"])
    summary_keys = set(theirs_b["metrics"]["time_to_first_token_ms"]["successful"])
    assert set(ours_b["metrics"]["time_to_first_token_ms"]["successful"]) <= summary_keys
    request, their_request = ours_b["requests"]["successful"][0], theirs_b["requests"]["successful"][0]
    assert set(request["info"]["timings"]) <= set(their_request["info"]["timings"])


def test_aiperf_reads_the_export_with_its_own_models(tmp_path: Path) -> None:
    python = peer_python("aiperf")
    main(["export", str(NINFERKIT), "--format", "aiperf", "-o", str(tmp_path / "out")])
    check = """
import json, pathlib, sys
from aiperf.common.models.export_models import JsonExportData
from aiperf.common.models.record_models import MetricRecordInfo
out = {}
for folder in sorted(pathlib.Path(sys.argv[1]).iterdir()):
    lines = (folder / "profile_export.jsonl").read_text().splitlines()
    records = [MetricRecordInfo.model_validate_json(line) for line in lines]
    summary = JsonExportData.model_validate_json((folder / "profile_export_aiperf.json").read_text())
    out[folder.name] = {"records": len(records), "ttft": [r.metrics["time_to_first_token"].value for r in records
                        if "time_to_first_token" in r.metrics], "avg": summary.time_to_first_token.avg}
print(json.dumps(out))
"""
    done = subprocess.run([str(python), "-c", check, str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=300, check=True)
    read = json.loads(done.stdout.splitlines()[-1])
    rows = [json.loads(line) for line in (NINFERKIT / "requests.jsonl").read_text().splitlines()]
    for name, found in read.items():
        cell_id = name.rsplit("-", 1)[1]
        ttft = [r["ttft_client_s"] * 1000 for r in rows if r["cell_id"] == cell_id and r["status"] == "ok"
                and not r.get("warmup")]
        assert sorted(found["ttft"]) == pytest.approx(sorted(ttft))
        assert found["avg"] == pytest.approx(float(np.mean(ttft)))


def test_guidellm_reads_the_export_with_its_own_report_model(tmp_path: Path) -> None:
    python = peer_python("guidellm")
    out = tmp_path / "benchmarks.json"
    main(["export", str(NINFERKIT), "--format", "guidellm", "-o", str(out)])
    check = """
import json, sys
KEYS = {"mean", "median", "mode", "variance", "count", "min", "max", "percentiles"}
from guidellm.benchmark.schemas.report import GenerativeBenchmarksReport
from guidellm.schemas.base.statistics import DistributionSummary
report = GenerativeBenchmarksReport.load_file(sys.argv[1])
out = []
for b in report.benchmarks:
    ok = b.requests.successful
    theirs = {  # GuideLLM's own summaries of the exported requests, weighted as its metrics.py weighs them
        "time_to_first_token_ms": DistributionSummary.from_values([r.time_to_first_token_ms for r in ok]),
        "inter_token_latency_ms": DistributionSummary.from_values(
            [(r.inter_token_latency_ms, r.output_tokens - 1) for r in ok]),
        "time_per_output_token_ms": DistributionSummary.from_values(
            [(r.time_per_output_token_ms, r.output_tokens) for r in ok])}
    out.append({"streams": b.config.strategy.streams, "requests": len(ok),
                "ttft_ms": [r.time_to_first_token_ms for r in ok],
                "mean_ttft_ms": b.metrics.time_to_first_token_ms.successful.mean,
                "summaries": {name: [getattr(b.metrics, name).successful.model_dump(include=KEYS),
                                     summary.model_dump(include=KEYS)] for name, summary in theirs.items()}})
print(json.dumps(out))
"""
    done = subprocess.run([str(python), "-c", check, str(out)], capture_output=True, text=True, timeout=300,
                          check=True)
    read = json.loads(done.stdout.splitlines()[-1])
    rows = [json.loads(line) for line in (NINFERKIT / "requests.jsonl").read_text().splitlines()]
    levels = sorted({r["cell"]["concurrency"] for r in rows if not r.get("warmup")})
    assert [b["streams"] for b in read] == levels
    for found in read:
        ttft = [r["ttft_client_s"] * 1000 for r in rows if r["cell"]["concurrency"] == found["streams"]
                and r["status"] == "ok" and not r.get("warmup")]
        # GuideLLM recomputes TTFT from the wall-clock timings the export wrote (about 1.8e9 s, so a float keeps
        # them to about 0.24 us): equal to ninferkit's own TTFT within a microsecond.
        assert sorted(found["ttft_ms"]) == pytest.approx(sorted(ttft), abs=1e-3)
        assert found["mean_ttft_ms"] == pytest.approx(float(np.mean(ttft)), abs=1e-3)
        for name, (exported, recomputed) in found["summaries"].items():
            assert exported.pop("percentiles") == pytest.approx(recomputed.pop("percentiles"), rel=1e-9), name
            assert exported == pytest.approx(recomputed, rel=1e-9), name
    shown = subprocess.run([str(python.parent / "guidellm"), "export", str(out), "--output", "kind=console"],
                           capture_output=True, text=True, timeout=300, env=os.environ | {"COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert f"loaded {len(levels)} benchmark(s)" in shown.stdout


def test_aiperf_export_of_aiperfs_own_records_gives_back_its_aggregates(tmp_path: Path) -> None:
    """The export's statistics are AIPerf's: imported and exported again, AIPerf's own records summarise to the
    figures AIPerf wrote in profile_export_aiperf.json (numpy's linear percentiles, population std)."""
    main(["import", str(AIPERF), "--format", "aiperf", "-o", str(tmp_path / "run")])
    main(["export", str(tmp_path / "run"), "--format", "aiperf", "-o", str(tmp_path / "out")])
    ours = json.loads((tmp_path / "out" / "profile_export_aiperf.json").read_text())
    theirs = json.loads((AIPERF / "profile_export_aiperf.json").read_text())
    for tag in ("time_to_first_token", "inter_token_latency", "request_latency", "inter_chunk_latency"):
        for stat in ("avg", "p1", "p25", "p50", "p90", "p99", "min", "max", "std", "count"):
            # request_latency goes through t_send and t_last_token on the wall clock (about 1.8e9 s: a float keeps
            # a quarter of a microsecond), so within a microsecond; the rest are carried as they were written
            assert ours[tag][stat] == pytest.approx(theirs[tag][stat], rel=1e-9, abs=1e-3), (tag, stat)


def test_guidellm_export_of_guidellms_own_requests_gives_back_its_metrics(tmp_path: Path) -> None:
    """The export's per-request summaries are GuideLLM's: its own requests, imported and exported again,
    summarise to the distributions GuideLLM wrote (first-reaching percentiles, TPOT and ITL token-weighted)."""
    main(["import", str(GUIDELLM), "--format", "guidellm", "-o", str(tmp_path / "run")])
    main(["export", str(tmp_path / "run"), "--format", "guidellm", "-o", str(tmp_path / "b.json")])
    ours = json.loads((tmp_path / "b.json").read_text())["benchmarks"][0]["metrics"]
    theirs = json.loads(GUIDELLM.read_text())["benchmarks"][0]["metrics"]
    for name in ("time_to_first_token_ms", "inter_token_latency_ms", "time_per_output_token_ms", "request_latency",
                 "prompt_token_count", "output_token_count"):
        mine, guidellm = ours[name]["successful"], theirs[name]["successful"]
        for stat in ("mean", "median", "mode", "variance", "min", "max", "count"):
            assert mine[stat] == pytest.approx(guidellm[stat], rel=1e-6), (name, stat)
        assert mine["percentiles"] == pytest.approx(guidellm["percentiles"], rel=1e-6), name


def test_the_write_up_of_an_imported_run_says_where_it_came_from(tmp_path: Path) -> None:
    from ninferkit.report.fmt import number

    main(["import", str(AIPERF), "--format", "aiperf", "-o", str(tmp_path / "run")])
    assert main(["report", str(tmp_path / "run")]) == 0
    text = (tmp_path / "run" / "report" / "index.md").read_text()
    section = text.split("## Imported results", 1)[1].split("\n## ", 1)[0]
    digest = hashlib.sha256((AIPERF / "profile_export.jsonl").read_bytes()).hexdigest()
    assert f"aiperf 0.13.0's profile_export.jsonl (sha256 {digest})" in section
    ttft = [r["metrics"]["time_to_first_token"]["value"] for r in aiperf_records()
            if r["metadata"]["benchmark_phase"] == "profiling"]
    assert f'| {{"concurrency": 2}} | TTFT | {len(ttft)} | {number(float(np.mean(ttft)))} |' in section
    assert "| — | time_to_first_token.avg | ttft_client_s | mean |" in section
