"""ninferkit export / import (ninferkit/interop/): the formats, the metric table, and the run directory an import
makes. The run exported is the published H200 example (docs/examples/h200-llamacpp, a real run); every expected
figure is computed here from its requests.jsonl with numpy, not by the code under test."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from ninferkit.cli import export as export_cli
from ninferkit.cli import import_run as import_cli
from ninferkit.cli import main
from ninferkit.interop import get_format, metrics, names
from ninferkit.report import compare_runs
from ninferkit.rundir.runs import RunDir
from tests.conftest import REPO

EXAMPLE = REPO / "docs" / "examples" / "h200-llamacpp"


def example_rows() -> list[dict]:
    return [json.loads(line) for line in (EXAMPLE / "requests.jsonl").read_text().splitlines() if line.strip()]


def measured(cell_id: str) -> list[dict]:
    return [row for row in example_rows() if row["cell_id"] == cell_id and row["status"] == "ok"
            and not row.get("warmup") and row.get("prefix_role") != "seed"]


def test_the_command_line_names_every_format_the_registry_has() -> None:
    assert set(export_cli.FORMATS) == set(names(exports=True))
    assert set(import_cli.FORMATS) == set(names(imports=True))


def test_docs_show_the_mapping_table_the_code_converts_by() -> None:
    assert metrics.markdown() in (REPO / "docs" / "interop.md").read_text()


def test_vllm_bench_export_has_one_result_per_cell_with_vllms_statistics(tmp_path: Path) -> None:
    out = tmp_path / "vllm.json"
    assert main(["export", str(EXAMPLE), "--format", "vllm-bench", "-o", str(out)]) == 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    cells = {row["cell_id"] for row in example_rows() if not row.get("warmup") and row.get("prefix_role") != "seed"}
    assert {r["ninferkit_cell_id"] for r in results} == cells
    first = results[0]
    rows = measured(first["ninferkit_cell_id"])
    ttft_ms = np.asarray([row["ttft_client_s"] for row in rows]) * 1000
    assert first["completed"] == len(rows)
    assert first["mean_ttft_ms"] == pytest.approx(ttft_ms.mean())
    assert first["median_ttft_ms"] == pytest.approx(np.median(ttft_ms))
    assert first["p99_ttft_ms"] == pytest.approx(np.percentile(ttft_ms, 99))
    tpot_ms = [(r["t_last_token"] - r["t_first_token"]) / (r["completion_tokens"] - 1) * 1000 for r in rows]
    assert first["mean_tpot_ms"] == pytest.approx(np.mean(tpot_ms))
    for key in ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors"):
        assert len(first[key]) == first["num_prompts"], key
    assert first["latencies"][0] == pytest.approx(rows[0]["t_last_token"] - rows[0]["t_send"])
    assert "generated_texts" not in first  # ninferkit keeps no text: left out, never written empty


def test_a_vllm_bench_file_imports_as_a_run_compare_reads(tmp_path: Path) -> None:
    exported = tmp_path / "vllm.json"
    main(["export", str(EXAMPLE), "--format", "vllm-bench", "-o", str(exported)])
    assert main(["import", str(exported), "--format", "vllm-bench", "-o", str(tmp_path / "a")]) == 0
    run = RunDir(tmp_path / "a")
    rows = run.read_requests()
    assert len(rows) == sum(len(json.loads(line)["ttfts"]) for line in exported.read_text().splitlines())
    source = sorted(row["ttft_client_s"] for row in example_rows() if row["status"] == "ok"
                    and not row.get("warmup") and row.get("prefix_role") != "seed")
    assert sorted(row.ttft_client_s for row in rows if row.ttft_client_s is not None) == pytest.approx(source)
    record = run.read_imported()
    assert record is not None and record.tool == "vllm-bench" and record.per_request
    assert any(a["theirs"] == "mean_ttft_ms" and a["stat"] == "mean" for a in record.aggregates)
    assert run.read_manifest().model_extra["imported_from"]["tool"] == "vllm-bench"
    main(["import", str(exported), "--format", "vllm-bench", "-o", str(tmp_path / "b")])
    table = compare_runs([tmp_path / "a", tmp_path / "b"]).table
    assert set(table["metric"]) == {"ttft_client_s"} and (table["delta"] == 0).all()


def test_a_vllm_result_saved_without_detail_keeps_only_its_aggregates(tmp_path: Path) -> None:
    exported = tmp_path / "vllm.json"
    main(["export", str(EXAMPLE), "--format", "vllm-bench", "-o", str(exported)])
    result = json.loads(exported.read_text().splitlines()[0])
    for key in ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors"):
        result.pop(key, None)  # what serve.py deletes when --save-detailed is not given
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(result))
    imported = get_format("vllm-bench").read(plain)  # type: ignore[misc]
    assert imported.rows == []
    assert {a.theirs for a in imported.aggregates} >= {"mean_ttft_ms", "p99_tpot_ms", "request_throughput"}
    assert "no per-request lists" in imported.notes[0]


def test_csv_has_milliseconds_and_leaves_a_missing_figure_empty(tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    assert main(["export", str(EXAMPLE), "--format", "csv", "-o", str(out)]) == 0
    import pandas as pd

    frame = pd.read_csv(out)
    rows = {row["request_uid"]: row for row in example_rows()}
    first = frame.iloc[0]
    assert first["ttft_ms"] == pytest.approx(rows[first["request_uid"]]["ttft_client_s"] * 1000)
    assert frame["itl_mean_ms"].isna().all()  # this run predates per-event gaps: empty, not 0


def test_summary_gives_each_cells_mean_in_milliseconds(tmp_path: Path) -> None:
    out = tmp_path / "s.csv"
    assert main(["export", str(EXAMPLE), "--format", "summary", "-o", str(out)]) == 0
    import pandas as pd

    frame = pd.read_csv(out)
    first = frame.iloc[0]
    ttft_ms = np.asarray([row["ttft_client_s"] for row in measured(first["cell_id"])]) * 1000
    assert first["ttft_mean_ms"] == pytest.approx(ttft_ms.mean())
    assert first["ttft_median_ms"] == pytest.approx(np.median(ttft_ms))


def test_bad_input_is_one_message_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(EXAMPLE), "--format", "parquet"]) == 2
    assert "allowed: vllm-bench, aiperf, guidellm, csv, summary" in capsys.readouterr().err
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    assert main(["import", str(junk), "--format", "vllm-bench", "-o", str(tmp_path / "out")]) == 2
    assert "not a vllm bench serve result" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("")
    exported = tmp_path / "vllm.json"
    main(["export", str(EXAMPLE), "--format", "vllm-bench", "-o", str(exported)])
    assert main(["import", str(exported), "--format", "vllm-bench", "-o", str(taken)]) == 2
    assert "exists and is not an empty folder" in capsys.readouterr().err


def test_a_loads_shape_becomes_the_peers_strategy() -> None:
    """A concurrency cell is GuideLLM's concurrent strategy and vLLM's max_concurrency; a rate cell (seeded
    Poisson arrivals) GuideLLM's poisson strategy and vLLM's request_rate; any other cell, sent one request at
    a time, synchronous and rate inf."""
    from ninferkit.interop import guidellm, vllm_bench
    from ninferkit.interop.base import Cell, Source
    from ninferkit.rundir.records import RequestRow

    rows = [RequestRow.model_validate(example_rows()[0])]
    source = Source("run", "model", "llama_server", None, [])
    concurrency = Cell("concurrency", "a", {"concurrency": 4}, rows)
    rate = Cell("rate", "b", {"rate_rps": 2.5, "arrival_seed": 7}, rows)
    context = Cell("context", "c", {"target_prompt_tokens": 1024}, rows)
    assert guidellm.strategy(concurrency)["streams"] == 4
    assert guidellm.strategy(rate) == {"type_": "poisson", "rate": 2.5, "random_seed": 7}
    assert guidellm.strategy(context)["type_"] == "synchronous"
    assert vllm_bench.result(source, concurrency)["max_concurrency"] == 4
    assert vllm_bench.result(source, rate)["request_rate"] == 2.5
    assert vllm_bench.result(source, context)["request_rate"] == "inf"


def test_dash_writes_one_file_formats_to_standard_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    monkeypatch.chdir(tmp_path)
    to_file = tmp_path / "s.csv"
    assert main(["export", str(EXAMPLE), "--format", "summary", "-o", str(to_file)]) == 0
    piped = subprocess.run([sys.executable, "-m", "ninferkit", "export", str(EXAMPLE), "--format", "summary", "-o",
                            "-"], capture_output=True, cwd=tmp_path, timeout=120)
    assert piped.returncode == 0 and piped.stdout == to_file.read_bytes()
    assert not (tmp_path / "-").exists()  # not a file named "-"
    folder = subprocess.run([sys.executable, "-m", "ninferkit", "export", str(EXAMPLE), "--format", "aiperf", "-o",
                             "-"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert folder.returncode == 2 and "give -o PATH" in folder.stderr and "Traceback" not in folder.stderr


def test_a_vllm_bench_round_trip_keeps_end_to_end_and_throughput(tmp_path: Path) -> None:
    """Exported, imported, summarised (issue 44): each cell's e2e mean is the exported E2EL mean, and its request
    and output token throughput are over the same requests (first send to the last text event), computed here."""
    exported = tmp_path / "vllm.json"
    main(["export", str(EXAMPLE), "--format", "vllm-bench", "-o", str(exported)])
    assert main(["import", str(exported), "--format", "vllm-bench", "-o", str(tmp_path / "run")]) == 0
    results = [json.loads(line) for line in exported.read_text().splitlines()]
    summary = tmp_path / "summary.csv"
    assert main(["export", str(tmp_path / "run"), "--format", "summary", "-o", str(summary)]) == 0
    with summary.open() as handle:
        cells = {json.loads(cell["cell"])["label"]: cell for cell in csv.DictReader(handle)}
    assert len(cells) == len(results)
    for found in results:
        cell = cells[found["label"]]
        if not found["completed"]:  # every request refused: no latency either side, and no throughput
            assert found["mean_e2el_ms"] is None and cell["e2e_mean_ms"] == cell["requests_per_s"] == ""
            continue
        assert float(cell["e2e_mean_ms"]) == pytest.approx(found["mean_e2el_ms"])
        ok = [i for i, error in enumerate(found["errors"]) if not error]
        ends = [found["start_times"][i] + found["latencies"][i] for i in ok]
        wall = max(ends) - min(found["start_times"])
        assert float(cell["requests_per_s"]) == pytest.approx(len(ok) / wall)
        assert float(cell["output_tok_s"]) == pytest.approx(sum(found["output_lens"][i] for i in ok) / wall)
    notes = json.loads((tmp_path / "run" / "imported.json").read_text())["notes"]
    assert any("E2EL" in note for note in notes)


PEERS = REPO / "tests" / "data" / "peers"


def test_the_guidellm_rates_are_guidellms_own_on_the_file_it_wrote() -> None:
    """GuideLLM 0.8.1's benchmarks.json (tests/data/peers, written by GuideLLM itself): its requests, through the
    export's rate code, give the requests and tokens per second GuideLLM wrote beside them, every figure of every
    status (issue 44: a ninferkit export left them empty, and GuideLLM's HTML showed RPS and tok/s blank)."""
    from ninferkit.interop.guidellm import RATES, _rates

    written = json.loads((PEERS / "guidellm-0.8.1" / "benchmarks.json").read_text())["benchmarks"][0]
    window = written["scheduler_metrics"]
    requests = {status: written["requests"].get(status) or [] for status in ("successful", "errored", "incomplete")}
    ours = _rates(requests, window["measure_start_time"], window["measure_end_time"])
    for name in RATES:
        for status in ("successful", "errored", "incomplete", "total"):
            theirs = written["metrics"][name][status]
            mine = ours[name][status]
            for key in ("mean", "median", "mode", "variance", "std_dev", "min", "max", "count", "total_sum"):
                assert mine[key] == pytest.approx(theirs[key], rel=1e-9, abs=1e-12), (name, status, key)
            assert mine["percentiles"] == pytest.approx(theirs["percentiles"], rel=1e-9, abs=1e-12), (name, status)


def test_the_guidellm_concurrency_is_guidellms_own_on_the_file_it_wrote() -> None:
    """The same file's requests in flight over the window (request_concurrency: the export left it empty), every
    figure of every status, from the requests' start and end as GuideLLM wrote them."""
    from ninferkit.interop.guidellm import _concurrency

    written = json.loads((PEERS / "guidellm-0.8.1" / "benchmarks.json").read_text())["benchmarks"][0]
    window = written["scheduler_metrics"]
    requests = {status: written["requests"].get(status) or [] for status in ("successful", "errored", "incomplete")}
    ours = _concurrency(requests, window["measure_start_time"], window["measure_end_time"])
    assert written["metrics"]["request_concurrency"]["successful"]["max"] == 2  # the file ran two at a time
    for status in ("successful", "errored", "incomplete", "total"):
        theirs, mine = written["metrics"]["request_concurrency"][status], ours[status]
        for key in ("mean", "median", "mode", "variance", "std_dev", "min", "max", "count", "total_sum"):
            assert mine[key] == pytest.approx(theirs[key], rel=1e-9, abs=1e-12), (status, key)
        assert mine["percentiles"] == pytest.approx(theirs["percentiles"], rel=1e-9, abs=1e-12), status


def test_a_guidellm_export_carries_the_rates_its_html_shows(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.json"
    assert main(["export", str(EXAMPLE), "--format", "guidellm", "-o", str(out)]) == 0
    for benchmark in json.loads(out.read_text())["benchmarks"]:
        metrics = benchmark["metrics"]
        ok = len(benchmark["requests"]["successful"])
        assert metrics["requests_per_second"]["successful"]["count"] == ok
        if ok:
            assert metrics["requests_per_second"]["successful"]["mean"] > 0
            assert metrics["output_tokens_per_second"]["successful"]["count"] == sum(
                request["output_metrics"]["text_tokens"] for request in benchmark["requests"]["successful"])
            in_flight = metrics["request_concurrency"]["successful"]
            assert in_flight["count"] == ok and 0 < in_flight["mean"] <= in_flight["max"]
            assert in_flight["max"] <= (benchmark["config"]["strategy"].get("max_concurrency") or ok)
