"""What the sweeps send and when a cell counts, on engines that cannot run here: NInfer and vLLM.

The NInfer data are the live capture (tests/data/ninfer_live/, see its README.md: ninfer-serve of
ziworkslab/ninfer-3090-ubuntu at f750a5d on an H200, driven by ninferkit): the rows, ledger and
telemetry of its two runs, and the HTTP probe's answers. Nothing here is written by hand; the plans
come from the seed profiles in params/ and the build table. The same behaviour against a live
llama-server is in tests/live/test_sweeps.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from ninferkit.engines import get_adapter
from ninferkit.engines.ninfer.logs import parse_throughput
from ninferkit.measure.client import RequestResult
from ninferkit.measure.telemetry import engine_rates
from ninferkit.rundir.records import ServerRecord
from ninferkit.rundir.runs import RunDir, open_run, read_jsonl
from ninferkit.rundir.servings import run_servings
from ninferkit.sweeps.cell import Cell
from ninferkit.sweeps.execute import (
    AccessRefused,
    Recorder,
    SweepContext,
    _access_diagnosis,
    _append_outcome,
    base_row,
    ended_outcome,
)
from ninferkit.sweeps.kinds import get_kind
from ninferkit.sweeps.plan import build_plan
from ninferkit.sweeps.rules import MaxErrors
from ninferkit.sweeps.tables import counted_rows, latest_outcomes, sweep_table
from tests import seed_excerpts as seeds
from tests.conftest import DATA, REPO

LIVE = DATA / "ninfer_live"
G1_RUN = LIVE / "g1-h200" / "run"
V100_FLAGS_RUN = LIVE / "g1-h200-v100flags"
PROBE = json.loads((LIVE / "g1-h200" / "http" / "http_probe.json").read_text())
LIVE_G1 = ["engine.fork=ziworkslab/ninfer-3090-ubuntu", "engine.version=null"]  # the build of the capture


def planned(tmp_path: Path, profile: str, *overrides: str, kinds: tuple[str, ...] = ("tasks", "prefix_reuse")
            ) -> dict[str, Cell[Any]]:
    run = open_run(REPO / "params" / profile, tmp_path, list(overrides))
    cells = build_plan(run.profile, get_adapter(run.profile.engine.kind), kinds, explicit=True)
    return {c.params.as_dict().get("scenario") or f"{c.params.task}@{c.params.context_depth}": c for c in cells}


# ---------------------------------------------------------------------------------------------
# The plan: what each engine build is sent
# ---------------------------------------------------------------------------------------------


def test_the_live_g1_build_gets_the_responses_floor_and_no_field_it_does_not_read(tmp_path: Path) -> None:
    """The capture's prefix-reuse sweep asked 8 output tokens of the Responses API; its build reads
    reasoning_effort (it answered 200 to the probe's chat_reasoning_none) but neither cache_control nor
    prompt_cache_breakpoint (IF §4: G2/G3 fields)."""
    assert PROBE["chat_reasoning_none"][0] == 200
    cells = planned(tmp_path, "ninfer-rtx3090-groupwise.yaml", *LIVE_G1, "sweeps.prefix_reuse.output_tokens=8",
                    "sweeps.tasks.tasks=[reasoning, agent]", "sweeps.tasks.depths=[8192]",
                    "sweeps.tasks.concurrency={}", "sweeps.tasks.output_tokens=null", "sweeps.seed=0")
    responses = cells["responses_previous_response_id"]
    assert responses.skip is None and responses.params.output_tokens == 16
    assert "output_tokens 8 raised to 16" in responses.notes[0] and "seed not sent" in responses.notes[1]
    assert cells["cold"].params.output_tokens == 8 and cells["cold"].request == {"reasoning_effort": "none"}
    for scenario, field in (("prompt_cache_breakpoint", "prompt_cache_breakpoint"),
                            ("anthropic_cache_control", "cache_control")):
        assert f"ninfer build ziworkslab/ninfer-3090-ubuntu does not read the request field {field}" in \
            str(cells[scenario].skip)
    reasoning = cells["reasoning@8192"]
    assert reasoning.request == {"reasoning_effort": "xhigh"} and reasoning.params.output_tokens == 1024
    agent = cells["agent@8192"]
    assert agent.skip is None and agent.params.output_tokens == 160 and "TTFT" in agent.notes[0]


def test_the_seed_000_build_reads_the_cache_breakpoint(tmp_path: Path) -> None:
    """hamawang/ninfer-v100-20260916 (seed 000) ran the prompt_cache_breakpoint and cache_control rows."""
    cells = planned(tmp_path, "ninfer-v100-pcie-nvfp4.yaml")
    assert cells["prompt_cache_breakpoint"].skip is None and cells["anthropic_cache_control"].skip is None
    assert cells["anthropic_cache_control"].params.api == "messages"
    assert cells["anthropic_cache_control"].request == {}  # reasoning_effort rides on the chat API only
    assert any("sent on the chat API only" in note for note in cells["anthropic_cache_control"].notes)


def test_vllm_is_sent_no_extension_and_skips_the_agent_task(tmp_path: Path) -> None:
    cells = planned(tmp_path, "vllm-v100-baseline.yaml", "sweeps.tasks.depths=[1024]", kinds=("tasks",))
    assert "does not read the request field tools" in str(cells["agent@1024"].skip)
    assert cells["coding@1024"].request == {}
    assert "reasoning_effort 'none' not sent: vllm does not read it" in cells["coding@1024"].notes


def test_a_build_outside_the_table_is_planned_from_its_own_help(tmp_path: Path) -> None:
    """No engine.fork: the build is what its --help says (the capture's help.txt, printed by a stand-in
    for the binary): it serves the Responses API, so previous_response_id is planned; its help names no
    request field, so reasoning_effort is not sent and the notes say so."""
    binary = tmp_path / "ninfer-serve"
    binary.write_text(f"#!/bin/sh\ncat '{LIVE / 'g1-h200' / 'help.txt'}'\n")
    binary.chmod(0o755)
    cells = planned(tmp_path / "run", "ninfer-rtx3090-groupwise.yaml", "engine.fork=null", "engine.version=null",
                    f"engine.binary={binary}")
    assert cells["responses_previous_response_id"].skip is None
    assert cells["cold"].request == {}
    assert "reasoning_effort 'none' not sent: ninfer does not read it" in cells["cold"].notes


def test_a_cells_id_is_what_was_asked_whatever_the_engine_is_sent(tmp_path: Path) -> None:
    """A/B pairs a NInfer cell with a vLLM one: the ids do not depend on what each engine is sent."""
    same = ["sweeps.tasks.depths=[1024]", "sweeps.tasks.output_tokens=null", "sweeps.tasks.pin_output=false",
            "sweeps.tasks.repetitions=1", "sweeps.tasks.warmup=1", "sweeps.temperature=0.0", "sweeps.seed=0"]
    ninfer = planned(tmp_path / "n", "ninfer-v100-pcie-nvfp4.yaml", *same, kinds=("tasks",))["coding@1024"]
    vllm = planned(tmp_path / "v", "vllm-v100-baseline.yaml", *same, kinds=("tasks",))["coding@1024"]
    assert ninfer.cell_id == vllm.cell_id
    assert (ninfer.request, vllm.request) == ({"reasoning_effort": "none"}, {})


# ---------------------------------------------------------------------------------------------
# When a cell counts: the capture's own rows and answers
# ---------------------------------------------------------------------------------------------


def recorded(row: dict) -> RequestResult:
    """A requests.jsonl row of the capture as the RequestResult it was made from."""
    fields = {name: row[name] for name in RequestResult.__dataclass_fields__ if name in row and name != "server"}
    return RequestResult(**fields)


def answered(api: str, probe: str) -> RequestResult:
    """A request the HTTP probe sent, with the engine's recorded status and body."""
    status, _headers, body = PROBE[probe] if probe != "queue" else PROBE["queue"]["1"]
    return RequestResult(api=api, status="errored", http_status=status, error=body)


def context_cell(tokens: int, output: int) -> Cell[Any]:
    return get_kind("context").recorded({"target_prompt_tokens": tokens, "api": "chat", "output_tokens": output,
                                         "pin_output": True, "repetitions": 2, "warmup": 0, "temperature": 0.0,
                                         "seed": 0})


def context(tmp_path: Path) -> SweepContext:
    run = open_run(REPO / "params" / "ninfer-rtx3090-groupwise.yaml", tmp_path, LIVE_G1)
    adapter = get_adapter("ninfer")
    return SweepContext(run, adapter, "http://recorded", "qwen3.6-27b", {}, None, [MaxErrors(3)],  # type: ignore[arg-type]
                        base_row(run, adapter, ServerRecord(), run_servings(run.dir).main), 60.0, None,
                        run_servings(run.dir).main)


def test_the_captured_cell_that_served_nothing_is_failed_and_retried(tmp_path: Path) -> None:
    """The capture's ledger says `done` for the Responses cell with 0 requests served (its last line); its
    recorded rows, replayed into a cell, make it failed with the engine's own words, and a rerun runs it."""
    ledger = list(read_jsonl(G1_RUN / "sweeps" / "cells.jsonl"))
    captured = ledger[-1]
    assert (captured["status"], captured["requests_ok"], captured["requests_errored"]) == ("done", 0, 1)
    ctx = context(tmp_path)
    cell = get_kind("prefix_reuse").recorded(captured["cell"])
    record = Recorder(ctx, cell, "replay")
    for row in read_jsonl(G1_RUN / "requests.jsonl"):
        if row["cell_id"] == captured["cell_id"]:
            asyncio.run(record(recorded(row), row["repetition"], row["warmup"], prefix_role=row.get("prefix_role")))
    outcome = ended_outcome(ctx, record)
    assert outcome.status == "failed"
    assert "0 measured of 1 sent" in str(outcome.reason)
    assert "HTTP 400: unknown_parameter: unknown parameter: seed (param seed)" in str(outcome.reason)
    _append_outcome(ctx, cell, outcome)
    assert latest_outcomes(ctx.run.dir)[cell.cell_id].status == "failed"  # not finished: the next run retries it


def test_a_cell_refused_at_admission_is_failed_with_the_diagnosis(tmp_path: Path) -> None:
    """Three chat requests the engine expired before admission (probe "queue": 503 request_queue_timeout)."""
    ctx = context(tmp_path)
    cell = context_cell(1024, 32)
    record = Recorder(ctx, cell, "replay")
    for repetition in range(2):
        asyncio.run(record(answered("chat", "queue"), repetition, False))
    outcome = ended_outcome(ctx, record)
    assert outcome.status == "failed" and "HTTP 503: request_queue_timeout" in str(outcome.reason)
    assert outcome.diagnosis is not None and outcome.diagnosis["code"] == "request_queue_timeout"
    assert "pending_timeout_ms" in outcome.diagnosis["fix"]


def test_a_refused_key_stops_the_cell_with_the_engines_diagnosis(tmp_path: Path) -> None:
    """Probe "chat_wrongkey": 401 invalid_api_key. The first refusal ends the cell (and, in run_cell, the sweep)."""
    ctx = context(tmp_path)
    record = Recorder(ctx, context_cell(64, 16), "replay")
    with pytest.raises(AccessRefused, match="HTTP 401: invalid_api_key: missing or invalid API key") as refused:
        asyncio.run(record(answered("chat", "chat_wrongkey"), 0, False))
    diagnosis = _access_diagnosis(ctx, refused.value.body)
    assert diagnosis.code == "invalid_api_key" and "serve.api_key_env" in diagnosis.fix


def test_a_cell_with_one_measured_success_is_done(tmp_path: Path) -> None:
    """A warm-up that failed does not fail a cell whose measured request was served (capture rows)."""
    ctx = context(tmp_path)
    rows = [row for row in read_jsonl(G1_RUN / "requests.jsonl") if row["sweep"] == "context"]
    cell = get_kind("context").recorded(rows[0]["cell"])
    record = Recorder(ctx, cell, "replay")
    asyncio.run(record(answered("chat", "chat_too_long"), -1, True))
    asyncio.run(record(recorded(next(row for row in rows if not row["warmup"])), 0, False))
    assert ended_outcome(ctx, record).status == "done"


# ---------------------------------------------------------------------------------------------
# The engine's own decode windows: peak beside mean (seed 004 "5 秒峰值", seed 000 §2.4(b))
# ---------------------------------------------------------------------------------------------


def captured_table(run_dir: Path, kind: str) -> pd.DataFrame:
    folder = RunDir(run_dir)
    outcomes = latest_outcomes(folder)
    return sweep_table(kind, counted_rows(folder, outcomes), outcomes, folder.read_telemetry())


def test_windows_that_mixed_prefill_with_decode_are_not_decode_windows() -> None:
    """The V100-flags capture logged every 5 s. Its concurrency cell (two 100,000-token requests, 770.3 to
    873.2 s on the telemetry clock) holds 7 whole windows that decoded, from logs/server.log:
      14:54:48.857 ... decode=0.4tok/s ... 14:54:53.857 ... decode=1.2tok/s ... 14:55:18.859 ... decode=0.6tok/s
    (0.4, 1.2, 1.2, 1.0, 1.0, 0.8, 0.6 in telemetry.jsonl), every one with prefill at 1,638-2,457 tok/s
    beside it: a 32-token decode inside a 100,000-token prefill. Averaged as decode windows they read
    about 0.9 tok/s beside the engine's 35.0 tok/s per request; none of them is a decode window."""
    row = captured_table(V100_FLAGS_RUN, "concurrency").iloc[0]
    assert row["engine_windows"] == 0 and row["engine_windows_mixed"] == 7
    assert pd.isna(row["decode_tok_s_engine_peak"]) and pd.isna(row["decode_tok_s_engine_mean"])
    note = row["engine_decode_note"]
    assert "the 7 that decoded mixed it with prefill" in note
    assert "32 tokens in about 0.9 s (35.0 tok/s by the engine)" in note and "end before a window" in note
    context = captured_table(V100_FLAGS_RUN, "context").set_index("target_prompt_tokens")
    assert pd.isna(context.loc[4096, "decode_tok_s_engine_peak"])  # 2.4 s long: no whole 5 s window
    assert context.loc[4096, "engine_decode_note"] == "no whole 5 s engine window inside this cell (2.4 s long)"
    assert "decoded in none of the 5 whole windows" in context.loc[65536, "engine_decode_note"]  # prefill only
    assert context.loc[126976, "engine_windows_mixed"] == 1  # the 1.40 / 1.40 the post printed before


def test_a_decode_window_is_one_the_engine_says_ran_no_prefill() -> None:
    """Seed 000 §2.4(d)'s three lines as printed: the serial prefill (no decode), the starved decode (3.2 tok/s
    beside a prefill of 819.2) and the batched decode (126.8 tok/s, prefill clause left out: none ran). Only
    the last is a decode window; the starved one is counted as mixed, never averaged in."""
    lines = [parse_throughput(line) for line in
             (*seeds.SERIAL_PREFILL.text.splitlines(), *seeds.PREFILL_STARVES_DECODE.text.splitlines())]
    rates = engine_rates([line for line in lines if line], "decode", alone=True)
    assert (rates["windows"], rates["mixed"], rates["peak_tok_s"], rates["mean_tok_s"]) == (1, 1, 126.8, 126.8)
    assert engine_rates([line for line in lines if line], "decode")["windows"] == 2  # as diagnose counts them


def test_the_2_s_capture_has_its_own_window_length() -> None:
    """The first capture ran --log-stats-interval-ms 2000, 32-token outputs: every 2 s window that decoded
    also prefilled, so no cell has a decode rate from the engine's windows, and each says why."""
    tables = [captured_table(G1_RUN, kind) for kind in ("context", "concurrency")]
    found = pd.concat(tables)
    assert set(found["engine_window_s"].dropna()) == {2.0}
    assert found["decode_tok_s_engine_peak"].isna().all() and (found["engine_windows_mixed"] > 0).any()
    mixed = found[found["engine_windows_mixed"] > 0]
    assert mixed["engine_decode_note"].str.contains("no 2 s engine window inside this cell decoded without").all()
