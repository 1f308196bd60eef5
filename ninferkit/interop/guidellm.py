"""GuideLLM 0.8.1's `benchmarks.json`: a `GenerativeBenchmarksReport`, one `GenerativeBenchmark` per strategy run
(synchronous, concurrent at N streams, constant or poisson at a rate, throughput), each with its metrics as
distributions over successful / errored / incomplete / total requests, and its requests as
`GenerativeRequestStats` (the request's timings, in seconds of time.time(), and its token counts).

The formulas are GuideLLM's (guidellm/schemas/base/request_stats.py): `time_to_first_token_ms` from the request's
start to the first token iteration, `inter_token_latency_ms` (last - first token) / (output tokens - 1) (our
TPOT), `time_per_output_token_ms` (last token - start) / output tokens (TTFT included: no ninferkit figure),
`request_latency` in seconds to the request's end (our e2e_client_s).

Read: one row per request GuideLLM kept (it samples requests when told `--sample-requests`; the import says how
many it kept of how many it made); each benchmark's metrics as aggregates.

Written: one benchmark per cell, its requests with their timings moved to the wall clock (`started_utc` less
the monotonic send), its per-request metrics (latency, TTFT, ITL, TPOT, token counts) computed from those
requests as GuideLLM computes them (`distribution`), its rates over the benchmark's window (requests, prompt,
output and total tokens per second: `rate`, what its HTML report shows as RPS and tok/s) and its requests in
flight over that window (`concurrency`). Absent (`{}`, null), never made up: the outputs' text, words and
characters, the stream iterations a run recorded before the client counted them, and the scheduler's own delays,
which GuideLLM's schema requires as numbers and this export writes as NaN (`json.loads` and GuideLLM's loader
read it; a strict JSON reader refuses it).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from ninferkit.errors import BadInput
from ninferkit.interop.base import Aggregate, Cell, Format, Imported, Source, load_json, number, seconds
from ninferkit.measure.latency import MS
from ninferkit.rundir.records import RequestRow
from ninferkit.rundir.runs import write_text_atomic

STATUSES = ("successful", "errored", "incomplete")
OURS = {"time_to_first_token_ms": "ttft_client_s", "inter_token_latency_ms": "tpot_client_s",
        "request_latency": "e2e_client_s", "prompt_token_count": "prompt_tokens",
        "output_token_count": "completion_tokens", "requests_per_second": "requests_per_s",
        "output_tokens_per_second": "output_tok_s", "request_concurrency": "in_flight"}
UNITS = {"request_latency": "s", "requests_per_second": "requests/s", "output_tokens_per_second": "tokens/s",
         "tokens_per_second": "tokens/s", "prompt_tokens_per_second": "tokens/s", "prompt_token_count": "tokens",
         "output_token_count": "tokens", "total_token_count": "tokens", "request_concurrency": "requests"}
STATS = ("mean", "median", "std_dev", "min", "max", "count")
PERCENTILES = ("p50", "p90", "p95", "p99")


def load(strategy: dict[str, Any]) -> dict[str, Any]:
    """A benchmark's load in ninferkit's words: `{"concurrency": N}` for concurrent (and 1 for synchronous),
    `{"request_rate": R}` for constant and poisson (with the arrival pattern), `{"load": "throughput"}`."""
    kind = strategy.get("type_")
    if kind == "synchronous":
        return {"concurrency": 1}
    if kind == "concurrent":
        return {"concurrency": strategy.get("streams")}
    if kind in ("constant", "poisson"):
        return {"request_rate": strategy.get("rate"), "arrivals": kind}
    return {"load": str(kind)}


def read(path: Path) -> Imported:
    file = path / "benchmarks.json" if path.is_dir() else path
    found = load_json(file, "GuideLLM benchmarks JSON")
    if not isinstance(found, dict) or not isinstance(found.get("benchmarks"), list) or "config" not in found:
        raise BadInput(f"{path}: not GuideLLM's benchmarks.json (a report with `config` and `benchmarks`); give "
                       "the file guidellm benchmark --output-path wrote")
    metadata = found.get("metadata") or {}
    imported = Imported("guidellm", metadata.get("guidellm_version"), files=[file])
    for index, benchmark in enumerate(found["benchmarks"]):
        if not isinstance(benchmark, dict):
            raise BadInput(f"{path}: benchmarks[{index}] is not an object")
        config = benchmark.get("config") or {}
        cell = load(config.get("strategy") or {})
        name = f"benchmark {index + 1} ({_words(cell)})"
        imported.aggregates.extend(_aggregates(benchmark.get("metrics") or {}, name))
        requests = benchmark.get("requests") or {}
        kept = [(status, request) for status in STATUSES for request in requests.get(status) or []]
        made = ((benchmark.get("scheduler_metrics") or {}).get("requests_made") or {}).get("total")
        if isinstance(made, int) and made > len(kept):
            imported.notes.append(f"{name}: GuideLLM kept {len(kept)} of its {made} requests (--sample-requests): "
                                  f"the rows are those {len(kept)}, the aggregates are over all {made}")
        imported.rows.extend(_row(status, request, cell) for status, request in kept)
        model = ((config.get("backend") or {}).get("model")) or ((config.get("requests") or {}).get("model"))
        imported.model = imported.model or model
    return imported


def _words(cell: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in cell.items())


def _aggregates(metrics: dict[str, Any], load_name: str) -> list[Aggregate]:
    out = []
    for tag, summary in metrics.items():
        total = (summary or {}).get("successful") if isinstance(summary, dict) else None
        if not isinstance(total, dict) or "mean" not in total:
            continue
        unit = "ms" if tag.endswith("_ms") else UNITS.get(tag, "")
        for stat in STATS:
            value = number(total.get(stat))
            if value is not None:
                out.append(Aggregate(OURS.get(tag, f"guidellm:{tag}"), "std" if stat == "std_dev" else stat,
                                     value, "requests" if stat == "count" else unit, f"{tag}.successful.{stat}",
                                     load_name))
        for stat in PERCENTILES:
            value = number((total.get("percentiles") or {}).get(stat))
            if value is not None:
                out.append(Aggregate(OURS.get(tag, f"guidellm:{tag}"), stat, value, unit,
                                     f"{tag}.successful.percentiles.{stat}", load_name))
    return out


def _row(status: str, request: dict[str, Any], cell: dict[str, Any]) -> dict[str, Any]:
    info = request.get("info") or {}
    timings = info.get("timings") or {}
    start = number(timings.get("request_start"))
    row: dict[str, Any] = {"cell": cell, "server_request_id": request.get("request_id"),
                           "response_id": request.get("response_id"),
                           "prompt_tokens": request.get("prompt_tokens"), "t_send": start,
                           "t_done": number(timings.get("request_end"))}
    if status != "successful":
        row |= {"status": "errored" if status == "errored" else "incomplete",
                "error": info.get("error") or f"GuideLLM: {status}"}
        return {key: value for key, value in row.items() if value is not None}
    first, last = number(timings.get("first_token_iteration")), number(timings.get("last_token_iteration"))
    row |= {"status": "ok", "completion_tokens": request.get("output_tokens"), "t_first_token": first,
            "t_last_token": last, "ttft_client_s": seconds(number(request.get("time_to_first_token_ms"))),
            "tpot_client_s": seconds(number(request.get("inter_token_latency_ms"))),
            "e2e_client_s": number(request.get("request_latency")),
            "cached_tokens": request.get("cached_tokens")}
    return {key: value for key, value in row.items() if value is not None}


REPORT_VERSION = 2
"""GenerativeBenchmarkMetadata.version of GuideLLM 0.8.1's reports."""
PERCENTILE_KEYS = {"p001": 0.1, "p01": 1, "p05": 5, "p10": 10, "p25": 25, "p50": 50, "p75": 75, "p90": 90, "p95": 95,
                   "p99": 99, "p999": 99.9}
SCHEDULER_DELAYS = ("queued_time_avg", "resolve_start_delay_avg", "resolve_targeted_start_delay_avg",
                    "request_start_delay_avg", "request_targeted_start_delay_avg", "request_time_avg",
                    "resolve_end_delay_avg", "resolve_time_avg", "finalized_delay_avg", "processed_delay_avg")
UNKNOWN = float("nan")
EMPTY: dict[str, Any] = {"mean": 0.0, "median": 0.0, "mode": 0.0, "variance": 0.0, "std_dev": 0.0, "min": 0.0,
                         "max": 0.0, "count": 0, "total_sum": 0.0, "percentiles": dict.fromkeys(PERCENTILE_KEYS, 0.0),
                         "pdf": None}
"""What GuideLLM 0.8.1 writes for a status with no request (its errored requests when none failed): count 0."""
MODALITIES = {"text": ("tokens", "words", "characters"), "image": ("tokens", "images", "pixels", "bytes"),
              "video": ("tokens", "frames", "seconds", "bytes"), "audio": ("tokens", "samples", "seconds", "bytes"),
              "tool_call": ("tokens", "mixed_tokens", "count")}
"""GenerativeMetrics' summaries by modality: ninferkit counts no words, characters, images or audio (null)."""


Weighted = list[tuple[float, float]]
"""(value, weight) samples: GuideLLM weighs TPOT by a request's output tokens and ITL by them less one."""


def distribution(samples: Weighted, count: int | None = None) -> dict[str, Any]:
    """A DistributionSummary as GuideLLM 0.8.1 computes one (DistributionSummary.from_values and from_pdf): equal
    values merged, weights made probabilities; a percentile is the first value whose cumulative probability
    reaches it (no interpolation), the median p50, the mode the most probable value, the variance the
    population's, the count the sum of the weights (or `count`: a rate's events). For no sample, GuideLLM's own:
    every figure 0, count 0 (from_values ignores the count it is given then)."""
    if not samples:
        return EMPTY
    data = np.asarray(samples, dtype=float)
    values, inverse = np.unique(data[:, 0], return_inverse=True)
    weights = np.zeros_like(values)
    np.add.at(weights, inverse, data[:, 1])
    keep = weights > 0
    values, weights = values[keep], weights[keep]
    probabilities = weights / weights.sum()
    cdf = np.cumsum(probabilities)
    percentiles = {key: float(values[min(int(np.searchsorted(cdf, p / 100, side="left")), len(values) - 1)])
                   for key, p in PERCENTILE_KEYS.items()}
    mean = float(np.sum(values * probabilities))
    variance = float(np.sum((values - mean) ** 2 * probabilities))
    count = round(float(data[:, 1].sum())) if count is None else count
    return {"mean": mean, "median": percentiles["p50"], "mode": float(values[np.argmax(probabilities)]),
            "variance": variance, "std_dev": variance ** 0.5, "min": float(values[0]), "max": float(values[-1]),
            "count": count, "total_sum": mean * count, "percentiles": percentiles, "pdf": None}


RATES = ("requests_per_second", "prompt_tokens_per_second", "output_tokens_per_second", "tokens_per_second")
MERGE_S = 1e-4
"""GuideLLM merges events this close in time into one before it computes a rate (a tenth of a millisecond)."""
SHORTEST_S = 1e-6
"""The shortest last interval of a rate: GuideLLM's epsilon."""


def _merged(events: np.ndarray) -> np.ndarray:
    """(time, weight) events sorted by time with those within MERGE_S of a group's first summed onto it, as
    GuideLLM 0.8.1 merges them (DistributionSummary._merge_sorted_times_with_weights): equal times first, then
    each run of close ones, again until none is left."""
    times, inverse = np.unique(events[:, 0], return_inverse=True)
    weights = np.zeros_like(times)
    np.add.at(weights, inverse, events[:, 1])
    while len(times) > 1:
        close = np.diff(times) <= MERGE_S
        if not close.any():
            break
        starts = np.where(np.diff(np.insert(close.astype(int), 0, 0)) == 1)[0]
        ends = np.searchsorted(times, times[starts] + MERGE_S, side="right") - 1
        if len(starts) > 1:
            apart = np.concatenate([[True], starts[1:] > ends[:-1]])
            starts, ends = starts[apart], ends[apart]
        sums = np.concatenate(([0.0], np.cumsum(weights)))
        weights[starts] = sums[ends + 1] - sums[starts]
        marks = np.zeros(len(times) + 1, dtype=int)
        np.add.at(marks, starts, 1)
        np.add.at(marks, ends + 1, -1)
        gone = np.cumsum(marks[:-1]) > 0
        gone[starts] = False
        times, weights = times[~gone], weights[~gone]
    return np.column_stack((times, weights))


def rate(events: Weighted, start: float, end: float) -> dict[str, Any]:
    """A rate over time as GuideLLM 0.8.1 computes one (DistributionSummary.rate_distribution_from_timings): the
    (time, count) events inside the benchmark's window, with its start and end as events of no count, merged
    (MERGE_S); each event's count over the time around it (half way to its neighbours), weighed by that time; the
    count is the events'. Checked against the rates GuideLLM wrote (tests/data/peers)."""
    data = np.asarray(events, dtype=float).reshape(-1, 2)
    data = data[(data[:, 0] >= start) & (data[:, 0] <= end)]
    data = _merged(np.vstack(([[start, 0.0]], data, [[end, 0.0]])))
    if len(data) <= 1:
        return distribution([])
    times, counts = data[:, 0], data[:, 1]
    middles = (times[1:] + times[:-1]) / 2
    spans = np.empty_like(times)
    spans[0] = middles[0] - times[0]
    spans[1:-1] = middles[1:] - middles[:-1]
    spans[-1] = max(times[-1] - middles[-1], SHORTEST_S)
    return distribution(list(zip((counts / spans).tolist(), spans.tolist(), strict=True)),
                        count=round(float(counts.sum())))


def concurrency(intervals: Weighted, start: float, end: float) -> dict[str, Any]:
    """Requests in flight over time as GuideLLM 0.8.1 computes it (DistributionSummary.
    concurrency_distribution_from_timings): the (start, end) intervals that touch the benchmark's window, +1 at
    each start and -1 at each end, merged (MERGE_S); the level before the window carried to its start, the steps
    after its end dropped; each level weighed by how long it held; the count is the intervals'. Checked against the
    concurrency GuideLLM wrote (tests/data/peers)."""
    data = np.asarray(intervals, dtype=float).reshape(-1, 2)
    data = data[(data[:, 1] >= start) & (data[:, 0] <= end)]
    if not len(data):
        return distribution([])
    ones = np.ones(len(data))
    steps = _merged(np.vstack((np.column_stack((data[:, 0], ones)), np.column_stack((data[:, 1], -ones)))))
    first = int(np.searchsorted(steps[:, 0], start, side="left"))
    steps = np.vstack(([[start, steps[:first, 1].sum()]], steps[first:]))
    last = int(np.searchsorted(steps[:, 0], end, side="right"))
    steps = np.vstack((steps[:last], [[end, 0.0]]))
    levels = np.clip(np.cumsum(steps[:, 1]), 0, None)
    held = np.clip(np.diff(steps[:, 0]), 0, None)
    if not (held > 0).any():
        return distribution([])
    return distribution(list(zip(levels[:-1].tolist(), held.tolist(), strict=True)), count=len(data))


def _concurrency(requests: dict[str, list[dict[str, Any]]], start: float, end: float) -> dict[str, Any]:
    """request_concurrency by status: each request from its start to its end (one that lacks either is left out,
    as GuideLLM leaves it)."""
    def spans(found: list[dict[str, Any]]) -> Weighted:
        timings = [request["info"]["timings"] for request in found]
        return [(at["request_start"], at["request_end"]) for at in timings
                if at["request_start"] is not None and at["request_end"] is not None]

    by_status = {status: spans(requests[status]) for status in STATUSES}
    return {status: concurrency(found, start, end) for status, found in by_status.items()} | {
        "total": concurrency([span for found in by_status.values() for span in found], start, end)}


def _token_events(request: dict[str, Any], kind: str) -> Weighted:
    """When a request's tokens of `kind` (prompt, output, total) came, as GuideLLM 0.8.1 spreads them
    (GenerativeRequestStats.*_tokens_timings): the prompt at the first token (else the end), the first output token
    at the first text event and the rest evenly over the text events to the last (without events: all at the last
    token, else the end)."""
    timings = request["info"]["timings"]
    first, last, end = timings["first_token_iteration"], timings["last_token_iteration"], timings["request_end"]
    prompt = (first if first is not None else end, float(request["input_metrics"]["text_tokens"] or 0))
    output = request["output_metrics"]["text_tokens"] or 0
    iterations = timings["token_iterations"]
    if first is None or last is None or iterations <= 1:
        outputs = [(last if last is not None else end, float(output))]
    else:
        per = (output - 1) / (iterations - 1)
        outputs = [(first, float(bool(output))), *((float(at), per) for at in
                                                     np.linspace(first, last, num=iterations)[1:])]
    return {"prompt": [prompt], "output": outputs, "total": [prompt, *outputs]}[kind]


def _rates(requests: dict[str, list[dict[str, Any]]], start: float, end: float) -> dict[str, Any]:
    """requests_per_second (each request's end) and the prompt, output and total tokens per second, by status, as
    GuideLLM computes them over the benchmark's window: its HTML report's RPS and tok/s."""
    def summary(events: Any) -> dict[str, Any]:
        by_status = {status: [e for request in requests[status] for e in events(request)] for status in STATUSES}
        everything = [e for found in by_status.values() for e in found]
        return {status: rate(found, start, end) for status, found in by_status.items()} | {
            "total": rate(everything, start, end)}

    return {"requests_per_second": summary(lambda request: [(request["info"]["timings"]["request_end"], 1.0)]),
            **{name: summary(lambda request, kind=kind: _token_events(request, kind)) for name, kind in
               (("prompt_tokens_per_second", "prompt"), ("output_tokens_per_second", "output"),
                ("tokens_per_second", "total"))}}


def _status_summary(by_status: dict[str, Weighted]) -> dict[str, Any]:
    """A StatusDistributionSummary over successful, errored and incomplete requests and all of them."""
    everything = [v for values in by_status.values() for v in values]
    out = {status: distribution(by_status.get(status, [])) for status in STATUSES}
    return out | {"total": distribution(everything)}


def strategy(cell: Cell) -> dict[str, Any]:
    """The cell's load as a GuideLLM strategy: concurrency N (ninferkit's concurrency cells), poisson at a rate (the
    rate sweep's seeded Poisson arrivals), else synchronous (the other sweeps send one request at a time)."""
    if cell.concurrency:
        return {"type_": "concurrent", "streams": cell.concurrency, "max_concurrency": cell.concurrency,
                "rampup_duration": 0.0}
    if cell.rate_rps:
        return {"type_": "poisson", "rate": cell.rate_rps, "random_seed": int(cell.params.get("arrival_seed") or 0)}
    return {"type_": "synchronous", "max_concurrency": 1}


def _request(row: RequestRow, offset: float) -> dict[str, Any]:
    """A row as GenerativeRequestStats, its monotonic times moved to the wall clock by `offset`."""
    def wall(value: int | float | None) -> float | None:
        return None if value is None else float(value) + offset

    ok = row.status == "ok"
    timings = {"request_start": wall(row.t_send), "first_request_iteration": wall(row.t_first_byte),
               "first_token_iteration": wall(row.t_first_token) if ok else None,
               "first_output_token_iteration": wall(row.t_first_answer_token or row.t_first_token) if ok else None,
               "last_token_iteration": wall(row.t_last_token) if ok else None,
               "token_iterations": row.text_events or 0, "request_end": wall(row.t_done)}
    return {"type_": "generative_request_stats", "request_id": row.request_uid or uuid.uuid4().hex,
            "response_id": row.response_id,
            "info": {"request_id": row.request_uid or "", "status": "completed" if ok else "errored",
                     "timings": timings, "error": None if ok else (row.error or "errored")},
            "input_metrics": {"text_tokens": row.prompt_tokens, "cached_tokens": row.cached_tokens},
            "output_metrics": {"text_tokens": row.completion_tokens if ok else None}}


def _per_request(requests: dict[str, list[dict[str, Any]]], name: str) -> dict[str, Any]:
    """One of GenerativeRequestStats' figures over the benchmark's requests, weighted as GuideLLM weighs it
    (benchmark/schemas/metrics.py). A request without the figure is left out (GuideLLM counts it as 0.0)."""
    from_rows: dict[str, Weighted] = {}
    for status, found in requests.items():
        from_rows[status] = [(value, _weight(request, name)) for request in found
                             if (value := _figure(request, name)) is not None]
    return _status_summary(from_rows)


def _weight(request: dict[str, Any], name: str) -> float:
    output = request["output_metrics"]["text_tokens"] or 0
    return float(output) if name == "time_per_output_token_ms" else \
        float(output - 1) if name == "inter_token_latency_ms" else 1.0


def _figure(request: dict[str, Any], name: str) -> float | None:
    """The figure `name` of one exported request (GuideLLM's formulas, request_stats.py)."""
    timings = request["info"]["timings"]
    start, end = timings["request_start"], timings["request_end"]
    first, last = timings["first_token_iteration"], timings["last_token_iteration"]
    prompt, output = request["input_metrics"]["text_tokens"], request["output_metrics"]["text_tokens"]
    if name == "request_latency":
        return end - start if start is not None and end is not None else None
    if name == "time_to_first_token_ms":
        return MS * (first - start) if first is not None and start is not None else None
    if name == "inter_token_latency_ms":
        return MS * (last - first) / (output - 1) if first is not None and last is not None and output and output > 1 \
            else None
    if name == "time_per_output_token_ms":
        return MS * (last - start) / output if last is not None and start is not None and output else None
    if name == "prompt_token_count":
        return float(prompt) if prompt is not None else None
    if name == "output_token_count":
        return float(output) if output is not None else None
    if name == "total_token_count":
        return float((prompt or 0) + (output or 0)) if prompt is not None or output is not None else None
    return None


def benchmark(source: Source, cell: Cell, run_id: str, index: int) -> dict[str, Any]:
    """The cell as a GenerativeBenchmark."""
    first_wall = next((row for row in cell.rows if row.started_utc and row.t_send is not None), None)
    offset = (dt.datetime.fromisoformat(first_wall.started_utc).timestamp() - float(first_wall.t_send)
              if first_wall and first_wall.started_utc and first_wall.t_send is not None else 0.0)
    requests: dict[str, list[dict[str, Any]]] = {"successful": [], "errored": [], "incomplete": []}
    for row in cell.rows:
        requests["successful" if row.status == "ok" else "errored"].append(_request(row, offset))
    sends = [float(row.t_send) + offset for row in cell.rows if row.t_send is not None]
    ends = [float(row.t_done) + offset for row in cell.rows if row.t_done is not None]
    start, end = (min(sends), max(ends)) if sends and ends else (UNKNOWN, UNKNOWN)
    counts = {"successful": len(requests["successful"]), "errored": len(requests["errored"]), "incomplete": 0,
              "total": len(cell.rows)}
    figures = ("request_latency", "prompt_token_count", "output_token_count", "total_token_count",
               "time_to_first_token_ms", "time_per_output_token_ms", "inter_token_latency_ms")
    metrics: dict[str, Any] = {name: _per_request(requests, name) for name in figures}
    rates = _rates(requests, start, end) if sends and ends else dict.fromkeys(RATES, {})
    in_flight = _concurrency(requests, start, end) if sends and ends else {}
    metrics |= {"request_totals": counts, **rates, "request_concurrency": in_flight,
                "request_streaming_iterations_count": {},
                "time_to_first_output_token_ms": {}, "time_to_last_round_trip_ms": {}, "avg_round_trip_time_ms": {},
                "output_tokens_per_iteration": {},
                "iter_tokens_per_iteration": {}, **{kind: dict.fromkeys(parts) for kind, parts in MODALITIES.items()}}
    strategy_ = strategy(cell)
    return {
        "type_": "generative_benchmark",
        "config": {"id_": f"{run_id}-{cell.cell_id}", "run_id": run_id, "run_index": index, "strategy": strategy_,
                   "constraints": {}, "profile": {"kind": strategy_["type_"]},
                   "requests": {"ninferkit_sweep": cell.sweep, "ninferkit_cell_id": cell.cell_id,
                                "ninferkit_cell": cell.params, "ninferkit_variant": cell.variant},
                   "backend": {"kind": "openai_http", "target": source.url_of(cell), "model": source.model},
                   "environment": {"ninferkit_run_id": source.run_id}},
        "scheduler_state": {"start_time": start, "end_time": end, "created_requests": len(cell.rows),
                            "processed_requests": len(cell.rows), "successful_requests": counts["successful"],
                            "errored_requests": counts["errored"]},
        "scheduler_metrics": {"start_time": start, "request_start_time": start, "measure_start_time": start,
                              "measure_end_time": end, "request_end_time": end, "end_time": end,
                              "requests_made": counts, "strategy_type": strategy_["type_"],
                              **{name: UNKNOWN for name in SCHEDULER_DELAYS}},
        "metrics": metrics, "requests": requests | {"total": None}, "warnings": [],
    }


def export(source: Source, path: Path) -> list[Path]:
    """The run as benchmarks.json: a GenerativeBenchmarksReport with one benchmark per cell."""
    run_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"ninferkit:{source.run_id}"))
    from ninferkit.version import __version__

    benchmarks = [benchmark(source, cell, run_id, index) for index, cell in enumerate(source.cells)]
    kinds = {b["config"]["strategy"]["type_"] for b in benchmarks}
    profile: dict[str, Any] = {"kind": kinds.pop() if len(kinds) == 1 else "synchronous"}
    if profile["kind"] == "concurrent":
        profile["streams"] = [b["config"]["strategy"]["streams"] for b in benchmarks]
    report = {"metadata": {"version": REPORT_VERSION,
                           "guidellm_version": f"none: written by ninferkit {__version__} in GuideLLM 0.8.1's format"},
              "config": {"metadata": {"labels": {"ninferkit_run_id": source.run_id}},
                         "spec": {"backend": {"kind": "openai_http", "target": source.url or "unknown",
                                              "model": source.model},
                                  "profile": profile,
                                  "data": [{"kind": "in_memory_dict_list", "data": []}]}},
              "benchmarks": benchmarks, "conclusions": []}
    return [write_text_atomic(path, json.dumps(report))]


FORMAT = Format("guidellm", "GuideLLM 0.8.1", "benchmarks.json (GenerativeBenchmarksReport), a benchmark per cell",
                export=export, default_name="benchmarks.json", read=read)
