"""AIPerf 0.13's artifacts: `profile_export.jsonl` (one `MetricRecordInfo` a request: metadata, its metrics as
{value, unit} in display units, an error) and `profile_export_aiperf.json` (`JsonExportData`: each metric's
avg, percentiles, min, max, std in its unit).

The formulas are AIPerf's (aiperf/metrics/types/): `time_to_first_token` to the first content chunk,
`request_latency` to the last content chunk (ours: t_last_token - t_send), `inter_token_latency` (latency - TTFT)
/ (output tokens - 1) (our TPOT), `inter_chunk_latency` the gaps between chunks (our ITL). Times are ms,
`benchmark_duration` s. Token counts: ninferkit's are the server's usage, AIPerf's `usage_prompt_tokens` and
`usage_completion_tokens`; its `input_sequence_length` and `output_sequence_length` count with the client's
tokenizer unless run with `--use-server-token-count`, so the import reads the usage fields and the export writes
the server's counts in both, as AIPerf does with that flag. A run writes one artifacts folder per cell
(`<folder>/<sweep>-<cell_id>/`), as AIPerf writes one per profile run; a run of one cell is the folder itself.

Read: the folder (or either file in it). Rows from profile_export.jsonl's profiling records (warm-up records are
left out, as AIPerf's own aggregates leave them out); the aggregate JSON's figures kept as aggregates.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ninferkit.bounded import INPUT_FILE_BYTES, loads_json, not_a_regular_file, read_text_file
from ninferkit.errors import BadInput
from ninferkit.interop.base import Aggregate, Cell, Format, Imported, Source, load_json, ms, number, seconds
from ninferkit.interop.stats import last_token_s, throughput
from ninferkit.measure.latency import MS, gaps, tpot_s
from ninferkit.rundir.records import RequestRow
from ninferkit.rundir.runs import write_text_atomic

RECORDS = "profile_export.jsonl"
AGGREGATE = "profile_export_aiperf.json"
SCHEMA_VERSION = "1.4"
"""JsonExportData.SCHEMA_VERSION of AIPerf 0.13."""
PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)
NS = 1_000_000_000
OURS = {"time_to_first_token": "ttft_client_s", "inter_token_latency": "tpot_client_s",
        "inter_chunk_latency": "itl_client_s", "request_latency": "t_last_token - t_send",
        "usage_prompt_tokens": "prompt_tokens", "usage_completion_tokens": "completion_tokens",
        "usage_prompt_cache_read_tokens": "cached_tokens",
        "request_throughput": "requests_per_s", "output_token_throughput": "output_tok_s",
        "benchmark_duration": "wall_s", "request_count": "completed", "error_request_count": "failed"}


def _wall_ns(row: RequestRow) -> int | None:
    """The send on the wall clock (AIPerf's request_start_ns is time.time_ns())."""
    if not row.started_utc:
        return None
    return int(dt.datetime.fromisoformat(row.started_utc).timestamp() * NS)


def record(index: int, row: RequestRow) -> dict[str, Any]:
    """One request as a line of profile_export.jsonl."""
    start = _wall_ns(row) or 0
    duration = (float(row.t_done) - float(row.t_send)) if row.t_done is not None and row.t_send is not None else 0.0
    values: dict[str, tuple[Any, str]] = {}
    if row.status == "ok":
        found = gaps(row)
        values = {"time_to_first_token": (ms(number_of(row.ttft_client_s)), "ms"),
                  "request_latency": (ms(last_token_s(row)), "ms"),
                  "inter_token_latency": (ms(tpot_s(row)) if (row.completion_tokens or 0) > 1 else None, "ms"),
                  "inter_chunk_latency": ([gap * MS for gap in found] if found else None, "ms"),
                  "output_sequence_length": (row.completion_tokens, "tokens"),
                  "output_token_count": (row.completion_tokens, "tokens"),
                  "usage_completion_tokens": (row.completion_tokens, "tokens"),
                  "usage_prompt_cache_read_tokens": (row.cached_tokens, "tokens")}
    values |= {"input_sequence_length": (row.prompt_tokens, "tokens"),
               "usage_prompt_tokens": (row.prompt_tokens, "tokens")}
    metrics = {tag: {"value": value, "unit": unit} for tag, (value, unit) in values.items() if value is not None}
    metadata = {"session_num": index, "x_request_id": row.request_uid, "conversation_id": row.request_uid,
                "turn_index": 0, "request_start_ns": start, "request_end_ns": start + int(duration * NS),
                "worker_id": "ninferkit", "record_processor_id": "ninferkit", "benchmark_phase": "profiling",
                "was_cancelled": False}
    line: dict[str, Any] = {"metadata": metadata, "metrics": metrics}
    if row.status != "ok":  # AIPerf writes `error` only on a failed record
        line["error"] = {"code": row.http_status, "type": "ninferkit", "message": row.error or "errored"}
    return line


def number_of(value: int | float | None) -> float | None:
    return None if value is None else float(value)


def _metric(values: list[float], unit: str) -> dict[str, Any] | None:
    """JsonMetricResult: avg, p1..p99, min, max, std (population, as numpy), count."""
    if not values:
        return None
    data = np.asarray(values, dtype=float)
    out: dict[str, Any] = {"unit": unit, "avg": float(data.mean())}
    out |= {f"p{p}": float(v) for p, v in zip(PERCENTILES, np.percentile(data, PERCENTILES), strict=True)}
    return out | {"min": float(data.min()), "max": float(data.max()), "std": float(data.std()), "count": len(values)}


def aggregate(source: Source, cell: Cell, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The cell as profile_export_aiperf.json, computed from its own records (as AIPerf computes it)."""
    def per_record(tag: str) -> list[float]:
        out: list[float] = []
        for line in records:
            value = line["metrics"].get(tag, {}).get("value")
            if isinstance(value, list):
                out.extend(value)
            elif value is not None and "error" not in line:
                out.append(float(value))
        return out

    flow = throughput(cell)
    data: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "aiperf_version": None,
                            "benchmark_id": f"ninferkit-{source.run_id}-{cell.name}"}
    for tag in ("request_latency", "time_to_first_token", "inter_token_latency", "inter_chunk_latency"):
        data[tag] = _metric(per_record(tag), "ms")
    for tag in ("input_sequence_length", "output_sequence_length"):
        data[tag] = _metric(per_record(tag), "tokens")
    figures = {"request_throughput": (flow.requests_per_s, "requests/sec"),
               "output_token_throughput": (flow.output_tok_s, "tokens/sec"),
               "request_count": (flow.completed, "requests"), "error_request_count": (flow.failed or None, "requests"),
               "benchmark_duration": (flow.duration_s, "sec"), "total_isl": (flow.input_tokens, "tokens"),
               "total_osl": (flow.output_tokens, "tokens")}
    for tag, (value, unit) in figures.items():
        data[tag] = None if value is None else {"unit": unit, "avg": float(value)}
    starts = [line["metadata"]["request_start_ns"] for line in records]
    ends = [line["metadata"]["request_end_ns"] for line in records]
    if starts and min(starts) > 0:
        data["start_time"] = dt.datetime.fromtimestamp(min(starts) / NS, dt.UTC).isoformat()
        data["end_time"] = dt.datetime.fromtimestamp(max(ends) / NS, dt.UTC).isoformat()
    data["ninferkit"] = {"run_id": source.run_id, "sweep": cell.sweep, "cell_id": cell.cell_id, "cell": cell.params,
                         "variant": cell.variant, "model": source.model, "url": source.url_of(cell)}
    return {key: value for key, value in data.items() if value is not None}


def export(source: Source, path: Path) -> list[Path]:
    """An artifacts folder per cell (the folder itself for a run of one cell)."""
    written = []
    for cell in source.cells:
        folder = path if len(source.cells) == 1 else path / cell.name
        records = [record(index, row) for index, row in enumerate(cell.rows)]
        written.append(write_text_atomic(folder / RECORDS, "".join(json.dumps(line) + "\n" for line in records)))
        written.append(write_text_atomic(folder / AGGREGATE, json.dumps(aggregate(source, cell, records), indent=2)))
    return written


def read(path: Path) -> Imported:
    """An AIPerf artifacts folder, or profile_export.jsonl / profile_export_aiperf.json in it."""
    folder = path if path.is_dir() else path.parent
    records, summary = folder / RECORDS, folder / AGGREGATE
    if path.is_file() and path.name not in (RECORDS, AGGREGATE):
        raise BadInput(f"{path}: not an AIPerf export; give its artifacts folder, {RECORDS} or {AGGREGATE}")
    for named in (records, summary):  # a FIFO or a device under an export's name is refused, not skipped
        if os.path.lexists(named) and (problem := not_a_regular_file(named)) is not None:
            raise BadInput(f"reading AIPerf's export: {problem}; give the file AIPerf wrote")
    if not records.is_file() and not summary.is_file():
        raise BadInput(f"{folder}: holds neither {RECORDS} nor {AGGREGATE}; give the folder AIPerf wrote "
                       "(--output-artifact-dir)")
    found = load_json(summary, "AIPerf aggregate JSON") if summary.is_file() else {}
    if not isinstance(found, dict):
        raise BadInput(f"{summary}: not AIPerf's aggregate JSON (an object)")
    config = found.get("input_config") or {}
    imported = Imported("aiperf", found.get("aiperf_version"), model=_model(config),
                        started_utc=found.get("start_time"), files=[f for f in (records, summary) if f.is_file()])
    imported.aggregates = _aggregates(found)
    load = _load(config)
    if records.is_file():
        imported.rows = _rows(records, load)
    else:
        imported.notes.append(f"no {RECORDS} beside {AGGREGATE}: its aggregates are kept, no request rows are made "
                              "from them")
    if not summary.is_file():
        imported.notes.append(f"no {AGGREGATE}: the tool's version and load are unknown")
    return imported


def _model(config: dict[str, Any]) -> str | None:
    """input_config.models.items[0].name, as AIPerf 0.13 records `--model`."""
    items = (config.get("models") or {}).get("items") or []
    return str(items[0]["name"]) if items and isinstance(items[0], dict) and items[0].get("name") else None


def _load(config: dict[str, Any]) -> dict[str, Any]:
    """The load of the profiling phase (input_config.phases, kind "profiling"): its concurrency and request rate
    where set; the warm-up phase's are not the measurement's."""
    phases = [p for p in config.get("phases") or [] if isinstance(p, dict) and p.get("kind") == "profiling"]
    if not phases:
        return {}
    return {key: phases[0][key] for key in ("concurrency", "request_rate") if phases[0].get(key) is not None}


def _aggregates(found: dict[str, Any]) -> list[Aggregate]:
    out = []
    for tag, result in found.items():
        if not isinstance(result, dict) or "unit" not in result:
            continue
        whole_run = "p50" not in result  # a figure of the run (a throughput, a count), not a distribution
        for stat, value in result.items():
            figure = number(value)
            if stat in ("unit", "count", "sum") or figure is None:
                continue
            said = "total" if whole_run else "mean" if stat == "avg" else stat
            out.append(Aggregate(OURS.get(tag, f"aiperf:{tag}"), said, figure, str(result["unit"]), f"{tag}.{stat}"))
    return out


def _rows(path: Path, load: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for number_, line in enumerate(read_text_file(path, INPUT_FILE_BYTES, "reading AIPerf's records").splitlines(), 1):
        if not line.strip():
            continue
        try:
            found = loads_json(line)
            metadata, metrics = found["metadata"], found.get("metrics") or {}
        except (ValueError, KeyError, TypeError) as exc:
            raise BadInput(f"{path}, line {number_}: not an AIPerf record (metadata, metrics): {exc}") from exc
        if metadata.get("benchmark_phase") != "profiling":
            continue
        rows.append(_row(metadata, metrics, found.get("error"), load))
    return rows


def _value(metrics: dict[str, Any], tag: str, unit: str) -> Any:
    """A record's metric in the unit named; None where the record lacks it. A unit other than the one AIPerf
    0.13 writes is refused (BadInput), never converted by guess."""
    found = metrics.get(tag)
    if found is None:
        return None
    if found.get("unit") != unit:
        raise BadInput(f"AIPerf record: {tag} is in {found.get('unit')!r}, not {unit!r} as AIPerf 0.13 writes it")
    return found.get("value")


def _row(metadata: dict[str, Any], metrics: dict[str, Any], error: Any, load: dict[str, Any]) -> dict[str, Any]:
    start_ns, end_ns = metadata.get("request_start_ns"), metadata.get("request_end_ns")
    row: dict[str, Any] = {"cell": load, "prompt_tokens": _value(metrics, "usage_prompt_tokens", "tokens"),
                           "cached_tokens": _value(metrics, "usage_prompt_cache_read_tokens", "tokens"),
                           "server_request_id": metadata.get("x_request_id")}
    if isinstance(start_ns, int):
        row["started_utc"] = dt.datetime.fromtimestamp(start_ns / NS, dt.UTC).isoformat(timespec="milliseconds")
        row["t_send"] = start_ns / NS
        if isinstance(end_ns, int):
            row["t_done"] = end_ns / NS
    if error:
        message = error.get("message") if isinstance(error, dict) else str(error)
        code = error.get("code") if isinstance(error, dict) else None
        return row | {"status": "errored", "error": str(message),
                      "http_status": code if isinstance(code, int) else None}
    ttft = seconds(number(_value(metrics, "time_to_first_token", "ms")))
    latency = seconds(number(_value(metrics, "request_latency", "ms")))
    chunks = _value(metrics, "inter_chunk_latency", "ms")
    row |= {"status": "ok", "ttft_client_s": ttft,
            "completion_tokens": _value(metrics, "usage_completion_tokens", "tokens"),
            "tpot_client_s": seconds(number(_value(metrics, "inter_token_latency", "ms"))),
            "itl_client_s": [gap / MS for gap in chunks] if isinstance(chunks, list) else None}
    if "t_send" in row and ttft is not None:
        row["t_first_token"] = row["t_send"] + ttft
    if "t_send" in row and latency is not None:
        row["t_last_token"] = row["t_send"] + latency
    return {key: value for key, value in row.items() if value is not None}


FORMAT = Format("aiperf", "AIPerf 0.13", f"the artifacts folder: {RECORDS} and {AGGREGATE} (one folder per cell)",
                export=export, default_name="aiperf", read=read)
