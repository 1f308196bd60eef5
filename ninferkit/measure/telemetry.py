"""Telemetry on the requests' clock: GPU samples, the engine's throughput lines and /metrics.

Three background threads write `telemetry.jsonl` rows stamped with `time.monotonic()` (the clock of
`requests.jsonl`), so each sweep cell can be matched to the power and clocks it ran under:

- NVML (nvidia-ml-py's `pynvml`) at `hz` samples per second: power, SM and memory clocks,
  temperature, utilization, memory used and throttle reasons. With no NVIDIA driver it records
  nothing and says so once (a log warning and `Telemetry.nvml_status`).
- The server log, tailed from where it stood at start, through the adapter's `parse_throughput`.
- The engine's Prometheus `/metrics`, once a second, where the engine serves it: each row holds the series that
  changed since the row before it (the first row all of them), so a row's state is the rows up to it carried
  forward. vLLM 0.26.0 serves 480 series a scrape; written whole, one sample a second came to 12 MB in a
  9-minute run on the H200, and 1.8 MB as changes.

    with Telemetry(run.dir.telemetry, adapter, log_path, url):
        ...  # run requests
"""

from __future__ import annotations

import datetime as dt
import logging
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import httpx
import pynvml

from ninferkit import bounded
from ninferkit.engines.log_reader import LogReader
from ninferkit.errors import BadInput, NinferkitError
from ninferkit.prometheus_text import sample_key, samples
from ninferkit.rundir.records import TelemetrySample
from ninferkit.rundir.runs import append_jsonl
from ninferkit.transports import uses_proxy

log = logging.getLogger(__name__)

# NVML clocks-event (throttle) reason bits, from nvml.h (nvmlClocksEventReason*).
THROTTLE_BITS: dict[int, str] = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}
THROTTLING = frozenset({"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                        "hw_power_brake_slowdown"})
"""Reasons that mean the GPU ran slower than it would have (idle or a set clock is not throttling)."""

METRICS_INTERVAL_S = 1.0
LOG_POLL_S = 0.25


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_BITS.items() if mask & bit]


def parse_prometheus(text: str) -> dict[str, float]:
    """Sample name (with labels) -> value, from Prometheus text exposition (prometheus_text); BadInput for a
    text its parser cannot read. A counter's samples end in `_total`, as the parser names them (llama.cpp's
    counter `llamacpp:n_tokens_max` is `llamacpp:n_tokens_max_total`)."""
    return {sample_key(sample): sample.value for sample in samples(text)}


class Telemetry:
    """Background samplers writing to one JSONL file; start/stop, or use as a context manager."""

    def __init__(self, path: Path, adapter: LogReader, log_path: Path | None, base_url: str | None, *,
                 headers: Mapping[str, str] | None = None, hz: float = 10.0) -> None:
        self.path = path
        self.adapter = adapter
        self.log_path = log_path
        self.base_url = base_url
        self.headers = dict(headers or {})
        self.interval_s = 1.0 / hz
        self.nvml_status = "not started"
        self.metrics_status = "not started"
        self.failure: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._log_position = 0

    def __enter__(self) -> Telemetry:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._stop.clear()
        # The log is read from where it stands now (before the threads run), so nothing written after
        # start() is missed and nothing from before is taken for this sweep's.
        self._log_position = self.log_path.stat().st_size if self.log_path and self.log_path.exists() else 0
        targets = [self._nvml_loop] if self._nvml_starts() else []
        if self.log_path is not None:
            targets.append(self._log_loop)
        if self.base_url is not None:
            targets.append(self._metrics_loop)
        self._threads = [threading.Thread(target=t, name=f"telemetry-{t.__name__}", daemon=True) for t in targets]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5.0)
        self._threads = []

    def _write(self, source: str, **fields: Any) -> None:
        """Append one row; a write that fails (a full disk) stops the sampling, with the reason in
        `failure`: telemetry is beside the measurement, and the sweep's own next write says the same."""
        row = {"t_mono": time.monotonic(), "t_utc": dt.datetime.now(dt.UTC).isoformat(), "source": source,
               **fields}
        with self._lock:
            if self.failure is not None:
                return
            try:
                append_jsonl(self.path, row)
            except (OSError, NinferkitError) as exc:
                self.failure = f"telemetry stopped: {exc}"
                log.warning("%s", self.failure)
                self._stop.set()

    def _nvml_starts(self) -> bool:
        """Whether NVML starts, before any thread does: where it does not (LibraryNotFound, DriverNotLoaded: no
        NVIDIA driver here), `nvml_status` says why, for the caller to tell the user in its own words (a CPU host
        is fine for the embedded default: a logged warning was a red box in every notebook there)."""
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            self.nvml_status = f"unavailable: {type(exc).__name__}: {exc}"
            log.info("NVML telemetry off (%s); no GPU samples will be recorded", self.nvml_status)
            return False
        return True

    @property
    def without_gpu(self) -> bool:
        """NVML did not start: no GPU sample is recorded."""
        return self.nvml_status.startswith("unavailable")

    def _nvml_loop(self) -> None:
        """Samples every GPU until stopped (NVML started by `_nvml_starts`; shut down here)."""
        try:
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self.nvml_status = f"sampling {len(handles)} GPU(s) at {1 / self.interval_s:.0f} Hz"
            while not self._stop.is_set():
                started = time.monotonic()
                for index, handle in enumerate(handles):
                    self._write("nvml", gpu=index, **_nvml_sample(handle))
                self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))
        finally:
            pynvml.nvmlShutdown()

    def _log_loop(self) -> None:
        assert self.log_path is not None
        position = self._log_position
        pending, skipping = b"", False
        while not self._stop.wait(LOG_POLL_S):
            if bounded.not_a_regular_file(self.log_path) is not None:
                continue  # not there yet, or not a log (a FIFO or a device named in server.json never ends)
            with self.log_path.open("rb") as handle:
                handle.seek(position)
                data = handle.read(bounded.LOG_POLL_BYTES)  # the rest next poll: a burst never grows the sweep
            position += len(data)
            *lines, pending = (pending + data).split(b"\n")
            if skipping:  # the rest of a line too long to be a throughput line: skipped up to its end
                skipping, lines, pending = not lines, lines[1:], pending if lines else b""
            if len(pending) > bounded.LOG_LINE_BYTES:
                skipping, pending = True, b""  # buffered no further
            for line in lines:
                parsed = self.adapter.parse_throughput(line.decode(errors="replace"))
                if parsed:
                    self._write("engine_log", **parsed)

    def _metrics_loop(self) -> None:
        """Scrape once a second, writing the series that changed; a body over bounded.METRICS_BYTES or still
        coming after 5 s is not read (metrics_status says so) and scraping stops: a body that never ends is
        cut, never grown."""
        last: dict[str, float] = {}
        url = self.base_url or ""
        with httpx.Client(base_url=url, headers=self.headers, timeout=5.0, trust_env=uses_proxy(url)) as client:
            while not self._stop.is_set():
                try:
                    status, body = bounded.get(client, "/metrics", bounded.METRICS_BYTES, deadline_s=5.0)
                except httpx.HTTPError as exc:
                    self.metrics_status = f"unreachable: {type(exc).__name__}"
                else:
                    if status != 200:
                        self.metrics_status = f"not served (HTTP {status})"
                        log.info("the engine serves no /metrics (HTTP %s); not scraping", status)
                        return
                    if body.cut:
                        self.metrics_status = f"not read: the /metrics body was {body.cut}"
                        log.warning("not scraping /metrics: its body was %s", body.cut)
                        return
                    try:
                        values = parse_prometheus(body.text())
                    except BadInput as error:
                        self.metrics_status = f"not read: {error}"
                        log.warning("not scraping /metrics: %s", error)
                        return
                    self.metrics_status = "scraping"
                    self._write("metrics", values={k: v for k, v in values.items() if last.get(k) != v})
                    last = values
                self._stop.wait(METRICS_INTERVAL_S)


def _nvml_read(call: Callable[[], Any]) -> Any:
    """One NVML query, None where this GPU or a virtualized driver does not support it, so one missing
    counter (temperature under some hypervisors, say) does not end the sampling of the others."""
    try:
        return call()
    except pynvml.NVMLError:
        return None


def _nvml_sample(handle: Any) -> dict[str, Any]:
    get_reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    mask = _nvml_read(lambda: get_reasons(handle))
    reasons = None if mask is None else throttle_names(int(mask))
    utilization = _nvml_read(lambda: pynvml.nvmlDeviceGetUtilizationRates(handle))
    power_mw = _nvml_read(lambda: pynvml.nvmlDeviceGetPowerUsage(handle))
    memory = _nvml_read(lambda: pynvml.nvmlDeviceGetMemoryInfo(handle))
    return {
        "power_w": None if power_mw is None else power_mw / 1000.0,
        "sm_clock_mhz": _nvml_read(lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
        "mem_clock_mhz": _nvml_read(lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)),
        "temperature_c": _nvml_read(lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
        "util_gpu_pct": None if utilization is None else utilization.gpu,
        "util_mem_pct": None if utilization is None else utilization.memory,
        "memory_used_bytes": None if memory is None else memory.used,
        "throttle_reasons": reasons,
        "throttled": None if reasons is None else bool(THROTTLING.intersection(reasons)),
    }


def window_summary(rows: Iterable[TelemetrySample], t_start: float, t_end: float) -> dict[str, Any]:
    """Median and max power and SM clock of the NVML rows in [t_start, t_end], and whether it throttled.

    All values are None when no GPU sample falls in the window (no driver, or a window shorter
    than the sampling interval).
    """
    samples = [r for r in rows if r.source == "nvml" and t_start <= r.t_mono <= t_end]
    if not samples:
        return {"power_w_median": None, "power_w_max": None, "sm_clock_mhz_median": None,
                "sm_clock_mhz_max": None, "throttled": None, "throttle_reasons": None, "gpu_samples": 0}
    power = [r.power_w for r in samples if r.power_w is not None]
    clock = [r.sm_clock_mhz for r in samples if r.sm_clock_mhz is not None]
    flags = [r.throttled for r in samples if r.throttled is not None]
    reasons = sorted({name for r in samples for name in r.throttle_reasons or () if name in THROTTLING})
    return {"power_w_median": statistics.median(power) if power else None, "power_w_max": max(power, default=None),
            "sm_clock_mhz_median": statistics.median(clock) if clock else None,
            "sm_clock_mhz_max": max(clock, default=None), "throttled": any(flags) if flags else None,
            "throttle_reasons": reasons if flags else None,
            "gpu_samples": len(samples)}


def engine_rates(lines: Iterable[Mapping[str, Any]], kind: str, *, alone: bool = False) -> dict[str, Any]:
    """The engine's own decode or prefill rate (`kind`) over its periodic throughput lines.

    The engine prints no line for an idle interval and leaves the clause out of an interval without
    that work, so the mean is over the windows that did some: tokens over their seconds (the printed
    token count where the line has one, else rate x interval), the rate while it was working (seed 004's
    "平均 decode"). The peak is the best single window (seed 004's "5 秒峰值" at the default 5 s). A line
    whose rate or interval was not read is counted in `not_read`, never as zero.

    With `alone`, a window counts only when the engine says the other work did not run in it (its rate
    read as 0): a window that mixed a long prefill with a short decode holds a decode rate far below what a
    request decodes at, and is counted in `mixed` instead (a window whose other rate was not read too).
    """
    lines = list(lines)
    rate_key, tokens_key = f"{kind}_tok_s", f"{kind}_tokens"
    other_key = "prefill_tok_s" if kind == "decode" else "decode_tok_s"
    usable = [r for r in lines if r.get(rate_key) is not None and r.get("interval_s")]
    active = [r for r in usable if r[rate_key] > 0]
    mixed = [r for r in active if r.get(other_key) != 0] if alone else []
    active = [r for r in active if r.get(other_key) == 0] if alone else active
    tokens = sum(float(r[tokens_key]) if r.get(tokens_key) is not None else float(r[rate_key]) * float(r["interval_s"])
                 for r in active)
    seconds = sum(float(r["interval_s"]) for r in active)
    peak = max(active, key=lambda r: float(r[rate_key]), default=None)
    return {"windows": len(active), "mixed": len(mixed), "not_read": len(lines) - len(usable), "tokens": tokens,
            "seconds": seconds, "mean_tok_s": tokens / seconds if seconds else None,
            "peak_tok_s": float(peak[rate_key]) if peak else None,
            "peak_interval_s": float(peak["interval_s"]) if peak else None}
