"""Telemetry: NVML (or its absence, said once), the engine's throughput lines, /metrics, on one clock.

tests/data/metrics_llama_server.txt is `curl -s /metrics` from the embedded llama-server (launched
with --metrics) after a few requests. The NInfer throughput lines are quoted from
reference/ninfer-interface.md sections 2.2 (G1, request_log.cpp format_throughput) and 2.4 (G3,
operational_log.cpp render_throughput); NInfer cannot run here.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pynvml
import pytest

from ninferkit.engines import get_adapter
from ninferkit.measure.telemetry import Telemetry
from ninferkit.rundir.runs import Run, read_jsonl


def nvml_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def test_live_metrics_and_nvml(live_run: Run, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "telemetry.jsonl"
    url = f"http://127.0.0.1:{live_run.profile.serve.port}"
    with caplog.at_level(logging.INFO, logger="ninferkit.measure.telemetry"):
        with Telemetry(out, get_adapter("llama_server"), None, url, hz=10) as telemetry:
            started = time.monotonic()
            time.sleep(1.6)  # the samplers' own pace: 1 s for /metrics, 0.1 s for NVML
            ended = time.monotonic()
    rows = list(read_jsonl(out))
    metrics = [r for r in rows if r["source"] == "metrics"]
    assert len(metrics) >= 2 and "llamacpp:tokens_predicted_total" in metrics[0]["values"]
    # later rows hold only the series that changed (an idle server's counters do not): the state carries forward
    assert all(metrics[0]["values"].get(name) != value for name, value in metrics[1]["values"].items())
    assert len(metrics[1]["values"]) < len(metrics[0]["values"])
    assert all(started - 0.5 <= r["t_mono"] <= ended + 0.5 for r in rows)  # the requests' clock
    nvml = [r for r in rows if r["source"] == "nvml"]
    if nvml_present():
        assert len(nvml) >= 5 and {"power_w", "sm_clock_mhz", "throttle_reasons"} <= set(nvml[0])
    else:
        assert nvml == [] and telemetry.nvml_status.startswith("unavailable")
        said = [r for r in caplog.records if "NVML telemetry off" in r.getMessage()]
        assert [r.levelno for r in said] == [logging.INFO]  # a note on a CPU host, not a warning (issue 44)
