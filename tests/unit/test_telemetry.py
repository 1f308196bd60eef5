"""Telemetry: NVML (or its absence, said once), the engine's throughput lines, /metrics, on one clock.

tests/data/metrics_llama_server.txt is `curl -s /metrics` from the embedded llama-server (launched
with --metrics) after a few requests. The NInfer throughput lines are quoted from
reference/ninfer-interface.md sections 2.2 (G1, request_log.cpp format_throughput) and 2.4 (G3,
operational_log.cpp render_throughput); NInfer cannot run here.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from ninferkit.engines import get_adapter
from ninferkit.records import TelemetrySample
from ninferkit.runs import read_jsonl
from ninferkit.telemetry import Telemetry, parse_prometheus, throttle_names, window_summary
from tests.conftest import DATA

G1_LINE = ("[2025-09-01 12:00:05.002] [info] ninfer-serve: throughput interval=5.002s prefill=0.0tok/s "
           "decode=71.2tok/s running=1 prefilling=0 decode_ready=1 waiting=0 avg_decode_batch=1.00")
G3_LINE = ("throughput | 5.0s | prefill 2.34k tok/s (11,712 tok) | decode 71.2 tok/s (356 tok) | running 1 "
           "(decode-ready 1) | waiting 2 | batch 1.00 | host 3.1% (155 ms)")


def test_prometheus_text_from_llama_server() -> None:
    values = parse_prometheus((DATA / "metrics_llama_server.txt").read_text())
    assert values["llamacpp:prompt_tokens_total"] == 55927
    assert values["llamacpp:prompt_seconds_total"] == 22.9057
    assert values["llamacpp:tokens_predicted_total"] == 1706
    assert not any(name.startswith("#") for name in values)


def test_throttle_reason_bits() -> None:
    assert throttle_names(0x1 | 0x4 | 0x40) == ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]
    assert throttle_names(0) == []


def test_window_summary_medians_and_throttle_flag() -> None:
    rows = [TelemetrySample(source="nvml", t_mono=t, power_w=p, sm_clock_mhz=c, throttle_reasons=r, throttled=th)
            for t, p, c, r, th in [(1.0, 100.0, 1800, [], False), (1.1, 250.0, 1700, ["sw_power_cap"], True),
                                   (1.2, 200.0, 1750, ["gpu_idle"], False), (5.0, 999.0, 99, [], False)]]
    rows.append(TelemetrySample(source="metrics", t_mono=1.1, values={}))
    summary = window_summary(rows, 0.9, 1.3)
    assert summary["power_w_median"] == 200.0 and summary["power_w_max"] == 250.0
    assert summary["sm_clock_mhz_median"] == 1750 and summary["sm_clock_mhz_max"] == 1800
    assert summary["throttled"] is True and summary["throttle_reasons"] == ["sw_power_cap"]
    assert window_summary(rows, 2.0, 3.0)["throttled"] is None


def test_engine_throughput_lines_are_tailed(tmp_path: Path) -> None:
    log_path = tmp_path / "server.log"
    log_path.write_text("a line from before the sampler started\n")
    out = tmp_path / "telemetry.jsonl"
    with Telemetry(out, get_adapter("ninfer"), log_path, None, hz=10):
        started = time.monotonic()
        with log_path.open("a") as log:
            log.write("some other line\n" + G1_LINE + "\n" + G3_LINE + "\n")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len([r for r in read_jsonl(out) if r["source"] == "engine_log"]) < 2:
            time.sleep(0.05)
    lines = [r for r in read_jsonl(out) if r["source"] == "engine_log"]
    assert [r["decode_tok_s"] for r in lines] == [71.2, 71.2]
    assert lines[1]["waiting"] == 2 and all(r["t_mono"] >= started for r in lines)


def test_a_full_disk_stops_the_sampling_with_its_reason_and_no_thread_traceback(tmp_path: Path) -> None:
    # /dev/full answers every write with the kernel's own ENOSPC: telemetry.jsonl on a disk that filled up.
    log_path = tmp_path / "server.log"
    log_path.write_text("")
    full = tmp_path / "telemetry.jsonl"
    full.symlink_to("/dev/full")
    failures: list[BaseException] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: failures.append(args.exc_value)  # type: ignore[assignment]
    try:
        telemetry = Telemetry(full, get_adapter("ninfer"), log_path, None, hz=10)
        with telemetry:
            with log_path.open("a") as log:
                log.write(G1_LINE + "\n")
            deadline = time.monotonic() + 5
            while telemetry.failure is None and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        threading.excepthook = previous
    assert telemetry.failure is not None and "telemetry stopped" in telemetry.failure
    assert failures == []
