"""The write-up of two real NInfer runs: the KV pool and the weights from the engine's own ledger lines.

Data: tests/data/ninfer_live/ (its README.md): whole `ninferkit run`s of the G1 fork
ziworkslab/ninfer-3090-ubuntu on an H200. g1-h200/run/ names no model layout (capacity.model null);
g1-h200-v100flags/ names qwen3.6-27b with int8 KV and MTP. Both folders lack their Parquet tables and
their report. NInfer prints its pool in tokens and pages, not bytes
(`KV capacity explicit resolved=131072 tokens pages=2048/2048 …`), and its weights on its
`load … weights` progress lines. Each folder is copied to tmp_path and its report written there.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from ninferkit.report import write_report
from ninferkit.report.fmt import number
from ninferkit.rundir.runs import RunDir
from ninferkit.rundir.servings import run_servings
from ninferkit.sweeps.tables import counted_rows, latest_outcomes, save_tables, sweep_table
from tests.conftest import DATA, whole
from tests.unit.report.test_report import SOURCES, markdown_table

LIVE = DATA / "ninfer_live"
GIB = 2**30


def written(run: Path, where: Path) -> tuple[dict[str, dict[str, str]], str]:
    """(headline rows by metric, index.md) of the report written on a copy of `run`."""
    copy = where / run.name
    shutil.copytree(run, copy)
    assert not (copy / "report").exists() and not list(copy.glob("tables/*.parquet"))  # as captured
    report = write_report(copy)
    text = whole(report)
    assert set(report.files) == {"markdown", "html"} and "*tables/context.csv" in text
    return {row["metric"]: row for row in markdown_table(text, SOURCES)}, text


def log_figures(run: Path) -> tuple[float, int, int]:
    """(weights GiB, pool tokens, pages) as the server printed them, read here with plain patterns."""
    log = (run / "logs" / "server.log").read_text()
    (weights,) = set(re.findall(r"load\s+weights\s+100\.00%\s+([\d.]+) GiB /", log))
    (tokens, pages), = set(re.findall(r"KV capacity \w+ resolved=(\d+) tokens pages=(\d+)/\d+", log))
    return float(weights), int(tokens), int(pages)


@pytest.mark.parametrize("name", ["g1-h200/run", "g1-h200-v100flags"])
def test_weights_and_pool_come_from_the_ledger_lines(tmp_path: Path, name: str) -> None:
    rows, _ = written(LIVE / name, tmp_path)
    weights, tokens, pages = log_figures(LIVE / name)
    assert rows["Memory: weights (server ledger)"]["best"] == number(weights)
    assert rows["Memory: weights (server ledger)"]["source"] == "logs/server.log weights_bytes"
    pool = rows["Memory: KV pool at startup (server ledger)"]
    assert pool["best"] == number(tokens) and pool["where"] == f"{pages:,} of {pages:,} pages of 64 tokens"
    assert not any(row["where"].startswith("no data") for metric, row in rows.items() if metric.startswith("Memory"))


def test_the_pool_in_bytes_from_the_models_layout(tmp_path: Path) -> None:
    """qwen3.6-27b, int8 KV with MTP: 16 full-attention layers + 1 MTP layer x 4 KV heads x (264 + 264) B
    = 35,904 B per token (seed 000 §2.5 fits its V100 failures to the same 35,904 B)."""
    rows, text = written(LIVE / "g1-h200-v100flags", tmp_path)
    _, tokens, pages = log_figures(LIVE / "g1-h200-v100flags")
    assert pages * 64 == tokens == 262_144
    kv = rows["Memory: KV cache at startup (server ledger)"]
    assert kv["best"] == number(pages * 64 * 35_904 / GIB) == "8.77"
    assert kv["where"].startswith("4,096 pages x 64 tokens x 35,904 B/token (16 full-attention layers x 4 KV heads")
    assert kv["source"] == "logs/server.log kv_pages x capacity.json bytes_per_token"


def test_without_the_models_layout_the_pool_stays_in_tokens_and_says_why(tmp_path: Path) -> None:
    rows, text = written(LIVE / "g1-h200" / "run", tmp_path)
    kv = rows["Memory: KV cache at startup (server ledger)"]
    assert kv["best"] == "—" and kv["samples"] == "0"
    assert kv["where"].startswith("no bytes: capacity.model is null, so the model's KV layout is unknown; the "
                                  "capacity fit bounds bytes per pool token only to [0, ")
    assert rows["Memory: KV pool at startup (server ledger)"]["best"] == "131,072"
    # the startup ledger of the acceptance section is read from the log too
    assert "| KV pages | 2,048 |" in text and "| weights | 15.67 GiB (to within 10.2 MiB) |" in text


def table_after(text: str, caption: str) -> list[dict[str, str]]:
    """The pipe table that follows the caption line starting with `caption`, as dicts."""
    lines = text.split(f"\n{caption}", 1)[1].split("\n\n", 2)[1].splitlines()
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True)) for line in lines[2:]]


def test_windows_that_mixed_prefill_with_decode_print_no_engine_rate(tmp_path: Path) -> None:
    """The V100 flags' run logged throughput every 5 s (--log-stats-interval-ms 5000), with 32-token outputs:
    every window that decoded also prefilled, so the engine's windows say nothing about a request's decode
    rate. The post printed "1.40 / 1.40" beside 33.7 tok/s for the 126,976-token cell before; now it prints no
    engine rate and says why. Its tables/ predate those columns, so they are built again here by the sweeps
    step's own table code from the run's requests, ledger and telemetry, then the write-up is regenerated."""
    run_dir = tmp_path / "run"
    shutil.copytree(LIVE / "g1-h200-v100flags", run_dir)
    folder = RunDir(run_dir)
    outcomes = latest_outcomes(folder, run_servings(folder))
    rows, telemetry = counted_rows(folder, outcomes), folder.read_telemetry()
    save_tables(folder, {kind: sweep_table(kind, rows, outcomes, telemetry) for kind in ("context", "concurrency")})
    text = whole(write_report(run_dir))
    mixed = [line for line in (run_dir / "logs" / "server.log").read_text().splitlines()
             if re.search(r" decode=(?!0\.0tok)[\d.]+tok/s", line) and not re.search(r" prefill=0\.0tok/s", line)]
    assert mixed  # the log has windows that decoded beside a prefill
    assert "windows in which the engine says only decode ran (no prefill)" in text
    assert "0 windows only decoded and 8 decoded beside a prefill: no engine mean or peak is shown" in text
    assert "1.40 / 1.40" not in text
    for name in ("context", "concurrency"):
        columns = list(table_after(text, f"*tables/{name}.csv")[0])
        assert "engine decode windows, mean / peak tok/s" not in columns  # no value in any cell
