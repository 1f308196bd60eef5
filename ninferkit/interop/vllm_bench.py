"""vLLM's `vllm bench serve --save-result --save-detailed` JSON (vllm/benchmarks/serve.py, mid-2026).

One result object per load; several cells are written one object a line, as `--append-result` writes them.
The per-request lists (`ttfts`, `itls`, `latencies`, `start_times`, `input_lens`, `output_lens`, `errors`) are in
seconds, the statistics (`mean_ttft_ms`, `p99_itl_ms`...) in milliseconds, each computed as serve.py does:
TTFT and E2EL over finished requests, TPOT over those with more than one output token, ITL pooled. What a run
does not record is left out, never filled: `generated_texts` (ninferkit keeps no text), `queue_times`, and
`max_output_tokens_per_s` (vLLM's own chunk timeline). ninferkit's cell rides along as `--metadata` keys do.

Read: a file vLLM wrote with `--save-detailed` gives one row per request (end to end and the end of each request
from its E2EL, E2E_NOTE); without it, only the statistics, kept as aggregates.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

from ninferkit.bounded import INPUT_FILE_BYTES, loads_json, read_text_file
from ninferkit.errors import BadInput
from ninferkit.interop.base import Aggregate, Cell, Format, Imported, Source, number
from ninferkit.interop.stats import last_token_s, throughput
from ninferkit.measure.latency import MS, distribution, samples, tpot_s
from ninferkit.report.headline import params_label
from ninferkit.rundir.runs import write_text_atomic

BACKENDS = {"chat": "openai-chat", "completions": "openai"}
"""vLLM's --backend for each of ninferkit's APIs it has."""
PERCENTILES = ("50", "90", "99")
STAT = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
OURS = {"ttft": "ttft_client_s", "tpot": "tpot_client_s", "itl": "itl_client_s", "e2el": "t_last_token - t_send"}
TOTALS = {"duration": ("wall_s", "s"), "completed": ("completed", "requests"), "failed": ("failed", "requests"),
          "request_throughput": ("requests_per_s", "requests/s"), "output_throughput": ("output_tok_s", "tokens/s"),
          "total_token_throughput": ("total_tok_s", "tokens/s"), "total_input_tokens": ("prompt_tokens", "tokens"),
          "total_output_tokens": ("completion_tokens", "tokens"),
          "max_concurrent_requests": ("peak_in_flight", "requests")}


E2E_NOTE = ("end to end and the wall time are vLLM's `latencies` (E2EL: send to the last text event; vLLM keeps no "
            "time of the stream's end after it), so request and token throughput are over the first send to the "
            "last text event")
"""What an import's rows take from vLLM's E2EL: a round trip keeps end to end and throughput (issue 44)."""


def result(source: Source, cell: Cell) -> dict[str, Any]:
    """One cell as the result object `vllm bench serve --save-result --save-detailed` writes."""
    rows = cell.rows
    ok = cell.ok
    started = next((row.started_utc for row in rows if row.started_utc), None)
    api = rows[0].api or "chat"
    flow = throughput(cell)
    out: dict[str, Any] = {
        "date": _date(started), "endpoint_type": BACKENDS.get(api, api), "backend": BACKENDS.get(api, api),
        "label": f"{cell.sweep}: {params_label(cell.params)}", "model_id": source.model, "tokenizer_id": None,
        "num_prompts": len(rows),
        "request_rate": cell.rate_rps or "inf", "burstiness": 1.0, "max_concurrency": cell.concurrency,
        "ninferkit_run_id": source.run_id, "ninferkit_sweep": cell.sweep, "ninferkit_cell_id": cell.cell_id,
        "ninferkit_cell": json.dumps(cell.params, sort_keys=True), "ninferkit_variant": cell.variant,
        "duration": flow.duration_s, "completed": flow.completed, "failed": flow.failed,
        "total_input_tokens": flow.input_tokens, "total_output_tokens": flow.output_tokens,
        "request_throughput": flow.requests_per_s, "request_goodput": None, "output_throughput": flow.output_tok_s,
        "total_token_throughput": flow.total_tok_s,
        "input_lens": [row.prompt_tokens or 0 for row in rows],
        "output_lens": [(row.completion_tokens or 0) if row.status == "ok" else 0 for row in rows],
        "ttfts": [float(row.ttft_client_s or 0.0) if row.status == "ok" else 0.0 for row in rows],
        "itls": [[float(gap) for gap in row.itl_client_s or ()] if row.status == "ok" else [] for row in rows],
        "latencies": [(last_token_s(row) or 0.0) if row.status == "ok" else 0.0 for row in rows],
        "start_times": [float(row.t_send) if row.t_send is not None else None for row in rows],
        "errors": ["" if row.status == "ok" else (row.error or "errored") for row in rows],
        "max_concurrent_requests": flow.peak_in_flight,
    }
    tpot = [value for row in ok if (row.completion_tokens or 0) > 1 and (value := tpot_s(row)) is not None]
    e2el = [value for row in ok if (value := last_token_s(row)) is not None]
    for name, values in (("ttft", samples(ok, "ttft_client_s")), ("tpot", tpot), ("itl", samples(ok, "itl_client_s")),
                         ("e2el", e2el)):
        spread = distribution(values, MS)
        out[f"mean_{name}_ms"], out[f"median_{name}_ms"], out[f"std_{name}_ms"] = spread.mean, spread.p50, spread.std
        for p in PERCENTILES:
            out[f"p{p}_{name}_ms"] = spread.value(f"p{p}")
    return out


def export(source: Source, path: Path) -> list[Path]:
    """Every cell's result, one JSON object a line (one cell: the one object `--save-result` writes)."""
    lines = [json.dumps(result(source, cell)) for cell in source.cells]
    return [write_text_atomic(path, "\n".join(lines) + "\n")]


def _date(started_utc: str | None) -> str | None:
    """serve.py's `date` (`%Y%m%d-%H%M%S`), from the first request's start."""
    if not started_utc:
        return None
    return dt.datetime.fromisoformat(started_utc).strftime("%Y%m%d-%H%M%S")


def read(path: Path) -> Imported:
    """A `--save-result` file (one object, or one a line as `--append-result` writes): rows where it has
    `--save-detailed`'s lists, the statistics as aggregates always."""
    text = read_text_file(path, INPUT_FILE_BYTES, "reading a vllm bench serve result")
    try:
        results = [loads_json(line) for line in text.splitlines() if line.strip()]
    except ValueError:
        try:
            results = [loads_json(text)]
        except ValueError as exc:
            raise BadInput(f"{path}: not a vllm bench serve result (not JSON: {exc})") from exc
    if not results or not all(isinstance(r, dict) and "duration" in r and "completed" in r for r in results):
        raise BadInput(f"{path}: not a vllm bench serve --save-result file (each result has `duration` and "
                       "`completed`); give the JSON file vllm bench serve wrote")
    imported = Imported("vllm-bench", None, model=results[0].get("model_id"), files=[path])
    for index, found in enumerate(results):
        load = _load(found)
        name = f"result {index + 1}" if len(results) > 1 else None
        imported.aggregates.extend(_aggregates(found, name))
        if "ttfts" in found:
            imported.rows.extend(_rows(found, load, path, index))
            if index == 0:
                imported.notes.append(E2E_NOTE)
        else:
            imported.notes.append(f"{name or 'the result'}: no per-request lists (saved without --save-detailed): "
                                  "its statistics are kept as aggregates, no request rows are made from them")
    return imported


def _load(found: dict[str, Any]) -> dict[str, Any]:
    load: dict[str, Any] = {}
    if found.get("max_concurrency") is not None:
        load["concurrency"] = found["max_concurrency"]
    rate = number(found.get("request_rate"))
    if rate is not None:
        load["request_rate"] = rate
    if found.get("label"):
        load["label"] = str(found["label"])
    return load


def _aggregates(found: dict[str, Any], load: str | None) -> list[Aggregate]:
    out = []
    for key, value in found.items():
        match = STAT.match(key)
        figure = number(value)
        if figure is None:
            continue
        if match:
            stat = "median" if match[1] == "p50" else match[1]
            out.append(Aggregate(OURS[match[2]], stat, figure, "ms", key, load))
        elif key in TOTALS:
            ours, unit = TOTALS[key]
            out.append(Aggregate(ours, "total", figure, unit, key, load))
    return out


def _rows(found: dict[str, Any], load: dict[str, Any], path: Path, index: int) -> list[dict[str, Any]]:
    lists = {key: found.get(key) for key in ("ttfts", "itls", "latencies", "start_times", "input_lens", "output_lens",
                                             "errors")}
    count = len(lists["ttfts"] or [])
    for key, values in lists.items():
        if values is not None and (not isinstance(values, list) or len(values) != count):
            raise BadInput(f"{path}: result {index + 1}: `{key}` is not a list of {count} (one per request, as "
                           "`ttfts`); the file was cut or edited")
    rows = []
    for i in range(count):
        def at(key: str, i: int = i) -> Any:
            values = lists[key]
            return values[i] if values is not None else None

        error = at("errors")
        row: dict[str, Any] = {"cell": load, "prompt_tokens": at("input_lens")}
        if error:
            rows.append(row | {"status": "errored", "error": str(error)})
            continue
        ttft, latency, start = number(at("ttfts")), number(at("latencies")), number(at("start_times"))
        out_tokens = at("output_lens")
        row |= {"status": "ok", "ttft_client_s": ttft, "completion_tokens": out_tokens,
                "itl_client_s": [float(gap) for gap in at("itls") or ()]}
        if start is not None:
            row["t_send"] = start
            if ttft is not None:
                row["t_first_token"] = start + ttft
            if latency is not None:  # vLLM's E2EL ends at the last text event: the stream's end, as vLLM has it
                row["t_last_token"] = row["t_done"] = start + latency
        if latency is not None:
            row["e2e_client_s"] = latency
        if ttft is not None and latency is not None and isinstance(out_tokens, int) and out_tokens > 1:
            row["tpot_client_s"] = (latency - ttft) / (out_tokens - 1)
        rows.append(row)
    return rows


FORMAT = Format("vllm-bench", "vLLM `vllm bench serve`",
                "the --save-result --save-detailed JSON (one result a line for several cells, as --append-result)",
                export=export, default_name="vllm-bench.json", read=read)
