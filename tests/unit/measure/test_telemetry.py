"""Telemetry: NVML (or its absence, said once), the engine's throughput lines, /metrics, on one clock.

tests/data/metrics_llama_server.txt is `curl -s /metrics` from the embedded llama-server (launched
with --metrics) after a few requests. The NInfer throughput lines are quoted from
reference/ninfer-interface.md sections 2.2 (G1, request_log.cpp format_throughput) and 2.4 (G3,
operational_log.cpp render_throughput); NInfer cannot run here.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ninferkit.engines import get_adapter
from ninferkit.errors import BadInput
from ninferkit.measure.telemetry import Telemetry, parse_prometheus, throttle_names, window_summary
from ninferkit.rundir.records import TelemetrySample
from ninferkit.rundir.runs import read_jsonl
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
    # llama.cpp types it a counter without the suffix; the parser names counters' samples as OpenMetrics does
    assert values["llamacpp:n_tokens_max_total"] == 2097 and "llamacpp:n_tokens_max" not in values


def test_label_values_with_a_brace_or_an_escaped_quote_are_read_whole() -> None:
    """The hand-written matcher ended a sample's labels at the first `}`, so it matched nothing on this line and
    dropped the sample without a word."""
    text = ('# TYPE vllm:requests counter\n'
            'vllm:requests_total{model_name="org/m{1}",note="say \\"hi\\""} 3\nvllm:up NaN\n')
    values = parse_prometheus(text)
    assert values['vllm:requests_total{model_name="org/m{1}",note="say \\"hi\\""}'] == 3
    assert math.isnan(values["vllm:up"])


def test_a_line_the_parser_cannot_read_is_an_error_not_a_missing_number() -> None:
    with pytest.raises(BadInput, match=r"^/metrics is not Prometheus text that prometheus_client's parser reads: "):
        parse_prometheus("llamacpp:prompt_tokens_total 55927\nllamacpp:prompt_seconds_total 22.9s\n")


def test_telemetry_stops_scraping_metrics_it_cannot_read(tmp_path: Path) -> None:
    """A real HTTP server on loopback answers /metrics with a sample whose value is not a number."""
    body = b"llamacpp:prompt_tokens_total 55927\nllamacpp:requests_processing one\n"

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    engine = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    out = tmp_path / "telemetry.jsonl"
    try:
        telemetry = Telemetry(out, get_adapter("llama_server"), None, f"http://127.0.0.1:{engine.server_port}")
        with telemetry:
            deadline = time.monotonic() + 20
            while not telemetry.metrics_status.startswith("not read") and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        engine.shutdown()
        engine.server_close()
    assert telemetry.metrics_status == ("not read: /metrics is not Prometheus text that prometheus_client's parser "
                                        "reads: could not convert string to float: 'one'")
    assert not out.exists() or not [row for row in read_jsonl(out) if row["source"] == "metrics"]


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


def test_a_host_without_nvidia_driver_is_no_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """On a CPU host NVML does not start: the status says why and nothing is logged as a warning (a warning was a
    red stderr box in every notebook there; the sweeps step says it as a note, issue 44)."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("NVML starts on this host: it has an NVIDIA driver")
    with caplog.at_level(logging.INFO), Telemetry(tmp_path / "t.jsonl", get_adapter("ninfer"), None, None) as seen:
        assert seen.without_gpu and seen.nvml_status.startswith("unavailable: NVMLError")
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert any("NVML telemetry off" in record.getMessage() for record in caplog.records)
