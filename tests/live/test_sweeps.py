"""Each sweep kind against the live embedded llama-server (small sizes), resume, and a server killed
mid-sweep followed by a resume that sends no finished cell again."""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import papermill as pm
import pytest

from ninferkit import steps
from ninferkit.cli import main as cli_main
from ninferkit.engines.base import EngineAdapter
from ninferkit.engines.llama_server.embedded import llama_cpp_source
from ninferkit.errors import ProfileError, ServerExited, SweepFailed
from ninferkit.rundir.runs import Run, open_run, read_json, read_jsonl
from ninferkit.server import process as server
from ninferkit.steps.sweeps import plan, sweeps
from ninferkit.sweeps.plan import build_plan
from ninferkit.sweeps.rules import CellTally, MaxErrors
from tests.conftest import LOCAL_CPU, REPO, free_port
from tests.live.conftest import sweep_with_the_server_killed

SMALL = [
    "sweeps.context.targets=[64, 128]", "sweeps.context.output_tokens=4", "sweeps.context.repetitions=2",
    "sweeps.context.warmup=1",
    "sweeps.tasks.tasks=[coding, chit_chat]", "sweeps.tasks.depths=[64]", "sweeps.tasks.output_tokens=4",
    "sweeps.tasks.pin_output=true", "sweeps.tasks.speculation_ab=false",  # the A/B: tests/live/test_speculation_ab.py
    "sweeps.concurrency.levels=[1, 3]", "sweeps.concurrency.requests_per_client=1",
    "sweeps.concurrency.prompt_tokens=64", "sweeps.concurrency.output_tokens=24", "sweeps.concurrency.warmup=0",
    "sweeps.prefix_reuse.prompt_tokens=256", "sweeps.prefix_reuse.output_tokens=4",
    "sweeps.prefix_reuse.repetitions=1",
]


def open_small(path: Path, *extra: str) -> Run:
    return open_run(LOCAL_CPU, path, [f"serve.port={free_port()}", *SMALL, *extra])


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory: pytest.TempPathFactory, llama_server: Path) -> Iterator[Run]:
    run = open_small(tmp_path_factory.mktemp("sweeps"))
    steps.launch(run, progress=False)
    yield run
    server.stop(run.dir)


def rows_of(run: Run, sweep: str) -> list[dict]:
    return [r for r in read_jsonl(run.dir.requests) if r["sweep"] == sweep]


def test_context_sweep(sweep_run: Run) -> None:
    table = sweeps(sweep_run, only="context", progress=False)["context"]
    assert list(table["target_prompt_tokens"]) == [64, 128]
    assert list(table["n_ok"]) == [2, 2] and set(table["status"]) == {"done"}
    assert set(table["reasoning_effort"]) == {"none"}  # llama-server reads it; the rows say it was sent
    assert table["decode_tok_s_engine_peak"].isna().all()  # llama-server prints no throughput lines, and says so
    assert set(table["engine_decode_note"]) == {"llama_server printed no throughput line while the sweeps ran"}
    assert list(table["prompt_content_tokens_median"]) == [64, 128]  # achieved, by the server's count
    assert (table["prefill_tok_s_server_median"] > 0).all() and (table["decode_tok_s_server_median"] > 0).all()
    rows = rows_of(sweep_run, "context")
    assert len(rows) == 6 and sum(r["warmup"] for r in rows) == 2  # 1 warm-up + 2 repetitions per cell
    for row in rows:
        assert row["schema_version"] == 1 and row["profile_hash"] == sweep_run.profile_hash
        assert row["completion_tokens"] == row["decode_tokens_server"] == 4  # pinned, and the server agrees
        assert row["prompt_tokens"] >= row["prompt_content_tokens"]
    saved = pd.read_parquet(sweep_run.dir.path / "tables" / "context.parquet")
    assert list(saved["target_prompt_tokens"]) == [64, 128]
    assert (sweep_run.dir.path / "tables" / "context.csv").exists()
    assert read_json(sweep_run.dir.path / "sweeps" / "plan.json")["profile_hash"] == sweep_run.profile_hash


def test_rerun_resumes_without_resending(sweep_run: Run) -> None:
    sweeps(sweep_run, only="context", progress=False)
    before = len(list(read_jsonl(sweep_run.dir.requests)))
    table = sweeps(sweep_run, only="context", progress=False)["context"]
    assert len(list(read_jsonl(sweep_run.dir.requests))) == before
    assert list(table["n_ok"]) == [2, 2]


def test_tasks_sweep(sweep_run: Run) -> None:
    table = sweeps(sweep_run, only="tasks", progress=False)["tasks"]
    assert list(table["task"]) == ["coding", "chit_chat"] and list(table["context_depth"]) == [64, 64]
    assert list(table["speculation"]) == ["ngram-mod"] * 2  # the profile's, which every cell ran with
    assert (table["n_ok"] == 1).all() and (table["completion_tokens_median"] == 4).all()
    assert set(table["finish_reason"]) == {"length"}  # pinned
    # the coding instruction is longer than the chit-chat one, so its prompt is longer at the same depth
    assert table["prompt_tokens_median"].iloc[0] > table["prompt_tokens_median"].iloc[1]


def test_concurrency_sweep_sees_the_queue(sweep_run: Run) -> None:
    table = sweeps(sweep_run, only="concurrency", progress=False)["concurrency"]
    one, three = table.iloc[0], table.iloc[1]
    assert (one["concurrency"], three["concurrency"]) == (1, 3)
    assert (one["n_ok"], three["n_ok"]) == (1, 3)
    assert three["aggregate_output_tok_s_client"] > 0
    # 3 clients on 2 slots: the third request waits for a slot before its prefill starts
    assert three["wait_before_prefill_s_max"] > one["wait_before_prefill_s_max"] + 0.05
    clients = {r["client_index"] for r in rows_of(sweep_run, "concurrency") if r["cell"]["concurrency"] == 3}
    assert clients == {0, 1, 2}


def test_every_cell_and_row_says_how_late_the_clients_clock_ran(sweep_run: Run) -> None:
    """The clock watch (measure/client_clock) over live cells: the ledger has the loop lag and the CPU share the
    cell ran with, each row the largest lag while it was out, and a row is unsure exactly when that lag is over
    5% of its median inter-token gap."""
    from ninferkit.measure.client_clock import row_unsure

    sweeps(sweep_run, only="concurrency", progress=False)
    cells = [c for c in read_jsonl(sweep_run.dir.sweep_cells) if c["sweep"] == "concurrency"]
    assert cells and all(0 < c["client_cpu_share"] < 1.5 and c["client_lag_p99_s"] >= 0 for c in cells)
    rows = rows_of(sweep_run, "concurrency")
    lags = [r["client_lag_max_s"] for r in rows if r["client_lag_max_s"] is not None]
    assert lags and min(lags) >= 0  # 24 tokens on this CPU take longer than a probe's 20 ms
    for row in rows:
        expected = row_unsure(row["client_lag_max_s"], row["itl_client_s"], row["ttft_client_s"])
        assert row["client_unsure"] == expected
    # a few streams of a CPU llama-server are far below what one process stamps: no workers, and the ledger says why
    assert all(c["client_spread"].startswith("one client process: ") and c["client_workers"] is None for c in cells)
    assert {row["client_worker"] for row in rows} == {None}


def test_prefix_reuse_sweep(sweep_run: Run) -> None:
    table = sweeps(sweep_run, only="prefix_reuse", progress=False)["prefix_reuse"].set_index("scenario")
    assert table.loc["cold", "cached_share_median"] < 0.2  # only the chat template's header is shared
    assert table.loc["identical_resend", "cached_share_median"] > 0.9
    assert table.loc["session_marker_changed", "cached_share_median"] < 0.2
    # what llama-server does not read is planned as skipped, with the field named, and nothing is sent
    for scenario, field in (("prompt_cache_breakpoint", "prompt_cache_breakpoint"),
                            ("anthropic_cache_control", "cache_control"),
                            ("responses_previous_response_id", "previous_response_id")):
        assert table.loc[scenario, "status"] == "skipped"
        assert f"llama_server does not read the request field {field} (as its /props says)" in \
            table.loc[scenario, "reason"]
    assert table.loc["anthropic_cache_control", "api"] == "messages"
    responses = table.loc["responses_previous_response_id"]
    assert "output_tokens 4 raised to 16" in responses["notes"]  # SMALL asks 4
    assert {r["cell"]["scenario"] for r in rows_of(sweep_run, "prefix_reuse")} == \
        {"cold", "identical_resend", "max_tokens_changed", "sentence_appended", "session_marker_changed"}
    seeds = [r for r in rows_of(sweep_run, "prefix_reuse") if r.get("prefix_role") == "seed"]
    assert seeds and all(r["status"] == "ok" for r in seeds)
    assert set(table["reasoning_effort"].dropna()) == {"none"}  # seed 000 §2: reasoning_effort none


def test_a_size_over_the_context_fails_before_anything_is_sent(tmp_path: Path) -> None:
    run = open_small(tmp_path, "sweeps.context.targets=[8000]")
    with pytest.raises(ProfileError, match=r"sweeps.context.targets: 8000 prompt \+ 4 output tokens exceed"):
        sweeps(run, only="context")
    assert not run.dir.requests.exists() and not (run.dir.path / "sweeps").exists()
    with pytest.raises(ProfileError, match="unknown sweep kind"):
        plan(run, "contexts")


def test_scenarios_an_engine_cannot_serve_are_planned_as_skipped(sweep_run: Run) -> None:
    class ChatOnly(EngineAdapter):
        kind = "chat_only"
        apis = frozenset({"chat"})

    cells = build_plan(sweep_run.profile, ChatOnly(), ["prefix_reuse"], explicit=True)
    skipped = {c.params.scenario: c.skip for c in cells if c.skip}
    assert set(skipped) == {"prompt_cache_breakpoint", "anthropic_cache_control", "responses_previous_response_id"}
    assert "does not serve the messages API" in skipped["anthropic_cache_control"]
    assert "chat_only does not read the request field prompt_cache_breakpoint" in skipped["prompt_cache_breakpoint"]
    assert all("reasoning_effort 'none' not sent: chat_only does not read it" in c.notes for c in cells
               if c.params.api == "chat")


def test_max_errors_is_a_named_rule() -> None:
    tally = CellTally()
    rule = MaxErrors(2)
    tally.add("errored", "boom", 500)
    assert rule.check(tally) is None
    tally.add("incomplete", "cut", 200)
    assert "2 failed requests (limit 2)" in str(rule.check(tally)) and str(rule) == "max_errors@2"


def test_server_killed_mid_sweep_then_resumed(tmp_path: Path, llama_server: Path) -> None:
    run = open_small(tmp_path, "sweeps.context.targets=[32, 48, 64, 80, 96]", "sweeps.context.output_tokens=48")
    steps.launch(run, progress=False)
    ledger = run.dir.sweep_cells

    sweep_with_the_server_killed(run, "context")
    first = list(read_jsonl(ledger))
    done_before = {e["cell_id"] for e in first if e["status"] == "done"}
    failed = [e for e in first if e["status"] == "failed"]
    assert done_before and len(failed) == 1 and "the server died" in failed[0]["reason"]
    assert (run.dir.path / "tables" / "context.csv").exists()  # what finished is tabulated
    rows_before = collections.Counter(r["cell_id"] for r in read_jsonl(run.dir.requests))

    steps.launch(run, progress=False)
    try:
        table = sweeps(run, only="context", progress=False)["context"]
    finally:
        server.stop(run.dir)
    rows_after = collections.Counter(r["cell_id"] for r in read_jsonl(run.dir.requests))
    for cell_id in done_before:
        assert rows_after[cell_id] == rows_before[cell_id]  # finished cells were not sent again
    assert list(table["status"]) == ["done"] * 5 and (table["n_ok"] == 2).all()


def test_cli_launches_sweeps_and_stops(tmp_path: Path, llama_server: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["sweep", str(LOCAL_CPU), "--run-dir", str(tmp_path), "--only", "context",
            "-p", f"serve.port={free_port()}", *[x for item in SMALL for x in ("-p", item)]]
    assert cli_main(args) == 0
    out = capsys.readouterr().out
    assert "launched the server" in out and "context" in out
    assert read_json(tmp_path / "server.json")["state"] == "stopped"
    assert json.loads((tmp_path / "manifest.json").read_text())["steps"]["sweeps"]["cells_planned"] == 2
    assert cli_main(["sweep", str(LOCAL_CPU), "--run-dir", str(tmp_path), "--only", "nope"]) == 2


NOTEBOOK = REPO / "notebooks" / "03_sweeps.ipynb"


def test_notebook_runs_headless_against_a_live_server(tmp_path: Path, llama_server: Path) -> None:
    overrides = [f"serve.port={free_port()}", *SMALL, "sweeps.tasks.tasks=[fiction]",
                 "sweeps.prefix_reuse.scenarios=[cold, identical_resend]"]
    run = open_run(LOCAL_CPU, tmp_path / "run", overrides)
    steps.launch(run, progress=False)
    try:
        pm.execute_notebook(str(NOTEBOOK), str(tmp_path / "03_sweeps.ipynb"), kernel_name="python3",
                            progress_bar=False, cwd=str(NOTEBOOK.parent),
                            parameters={"profile": str(LOCAL_CPU), "run_dir": str(run.dir.path),
                                        "overrides": overrides})
    finally:
        server.stop(run.dir)
    tables = {name: pd.read_csv(run.dir.path / "tables" / f"{name}.csv")
              for name in ("context", "tasks", "concurrency", "prefix_reuse")}
    assert len(tables["context"]) == 2 and list(tables["tasks"]["task"]) == ["fiction"]
    assert set(tables["prefix_reuse"]["scenario"]) == {"cold", "identical_resend"}
    executed = json.loads((tmp_path / "03_sweeps.ipynb").read_text())
    shown = "".join(json.dumps(cell["outputs"]) for cell in executed["cells"] if cell["cell_type"] == "code")
    assert "prefill, tok/s (server)" in shown and "identical_resend" in shown  # the write-up's views
    assert "prefill_tok_s_server_median" not in shown and "TTFT, ms" in shown  # not the raw frames; latency in ms
    # the figures where the sweep ran (issue 44): the context curves and the latency distributions, embedded
    figures = sorted(path.name for path in (run.dir.path / "sweeps" / "figures").glob("*.png"))
    assert {"context_ttft.png", "context_speed.png", "latency_distributions.png"} <= set(figures)
    assert shown.count("data:image/png;base64,") == len(figures) and "share of requests at or below" in shown
    assert "NVML" not in "".join(json.dumps(o) for c in executed["cells"] if c["cell_type"] == "code"
                                 for o in c["outputs"] if o.get("name") == "stderr")  # no red box on a CPU host


def test_ab_pairs_the_same_plan_by_cell(sweep_run: Run, tmp_path: Path) -> None:
    """Side A is the module's run (context done there); side B is another profile (one thread)."""
    sweeps(sweep_run, only="context", progress=False)
    run_b = open_small(tmp_path, "serve.threads=1", f"sweeps.ab.baseline_run_dir={sweep_run.dir.path}")
    assert run_b.profile_hash != sweep_run.profile_hash
    steps.launch(run_b, progress=False)
    try:
        tables = sweeps(run_b, only="context,ab", progress=False)
    finally:
        server.stop(run_b.dir)
    ab = tables["ab"]
    assert sorted(ab["cell"]) == ["target_prompt_tokens=128 api=chat", "target_prompt_tokens=64 api=chat"]
    assert (ab["decode_tok_s_server_a"] > 0).all() and (ab["decode_tok_s_server_b"] > 0).all()
    ratio = ab["decode_tok_s_server_b"] / ab["decode_tok_s_server_a"]
    assert list(ab["decode_tok_s_server_ratio_b_over_a"]) == pytest.approx(list(ratio))
    assert (run_b.dir.path / "tables" / "ab.parquet").exists()


def test_ab_without_a_baseline_is_a_clear_error(tmp_path: Path) -> None:
    run = open_small(tmp_path)
    with pytest.raises(ProfileError, match="sweeps.ab.baseline_run_dir is not set"):
        plan(run, "ab")


def test_a_cell_the_server_refuses_fails_is_retried_and_fails_the_sweep(tmp_path: Path, llama_server: Path) -> None:
    """A slot of 256 tokens: a 252-token prompt fits the plan's count (252 + 4 output) but not the server's,
    whose chat template adds its own tokens, so llama-server refuses every request of that cell."""
    run = open_small(tmp_path, "serve.max_context=256", "sweeps.context.targets=[32, 252]")
    steps.launch(run, progress=False)
    try:
        with pytest.raises(SweepFailed, match=r"1 of 2 cells measured nothing") as first:
            sweeps(run, only="context", progress=False)
        sent_before = collections.Counter(r["cell"]["target_prompt_tokens"] for r in read_jsonl(run.dir.requests))
        with pytest.raises(SweepFailed):
            sweeps(run, only="context", progress=False)  # the failed cell is run again; the done one is not
        sent_after = collections.Counter(r["cell"]["target_prompt_tokens"] for r in read_jsonl(run.dir.requests))
    finally:
        server.stop(run.dir)
    assert "exceeds the available context size (256 tokens)" in str(first.value)
    assert sent_after[32] == sent_before[32] == 3 and sent_after[252] == 2 * sent_before[252] == 6
    table = pd.read_csv(run.dir.path / "tables" / "context.csv").set_index("target_prompt_tokens")
    assert table.loc[32, "status"] == "done" and table.loc[252, "status"] == "failed"
    assert table.loc[252, "n_ok"] == 0 and "exceeds the available context size" in table.loc[252, "reason"]
    assert read_json(run.dir.manifest)["steps"]["sweeps"]["cells_failed"] == 1


def test_a_refused_key_stops_the_sweep_and_the_command_fails(tmp_path: Path, llama_server: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The server starts with one key; the sweep sends another: the first cell fails with the diagnosis,
    no other cell is tried, and `ninferkit sweep` exits 1."""
    overrides = [f"serve.port={free_port()}", *SMALL, "serve.api_key_env=NINFERKIT_TEST_KEY"]
    monkeypatch.setenv("NINFERKIT_TEST_KEY", "the-key-the-server-has")
    run = open_run(LOCAL_CPU, tmp_path, overrides)
    steps.launch(run, progress=False)
    monkeypatch.setenv("NINFERKIT_TEST_KEY", "another-key")
    try:
        code = cli_main(["sweep", str(LOCAL_CPU), "--run-dir", str(tmp_path), "--only", "context,tasks",
                         *[x for item in overrides for x in ("-p", item)]])
    finally:
        server.stop(run.dir)
    err = capsys.readouterr().err
    assert code == 1 and "failed and the sweep stopped" in err and "HTTP 401" in err
    assert "Fix: export NINFERKIT_TEST_KEY with the key the server was started with" in err
    ledger = list(read_jsonl(run.dir.sweep_cells))
    assert [entry["status"] for entry in ledger] == ["failed"]  # 4 cells planned, the first one tried
    assert ledger[0]["diagnosis"]["code"] == "access_refused"
    written = "".join(f.read_text(errors="replace") for f in tmp_path.rglob("*") if f.is_file())
    assert "another-key" not in written + err and "the-key-the-server-has" not in written + err


def test_reasoning_at_xhigh_and_the_agent_task_only_where_the_template_renders_tools(
        tmp_path: Path, llama_server: Path) -> None:
    """The embedded model's chat template (SmolLM2-135M-Instruct's) drops tools, so the agent task is skipped
    with /props as the reason; llama.cpp's own Qwen3 template (models/templates/Qwen-Qwen3-0.6B.jinja in the
    pinned source) renders them, and the agent task runs with its tool definitions in the prompt. On the
    same server a Responses context cell asking 4 output tokens is sent 16, without a seed."""
    plain = open_small(tmp_path / "plain", "sweeps.tasks.tasks=[reasoning, agent]")
    template = llama_cpp_source() / "models" / "templates" / "Qwen-Qwen3-0.6B.jinja"
    tools = open_small(tmp_path / "tools", "sweeps.tasks.tasks=[agent]", "sweeps.context.api=responses",
                       "sweeps.context.targets=[64]", f"serve.extra_args=[--chat-template-file, '{template}']")
    tables = {}
    for name, run in (("plain", plain), ("tools", tools)):
        steps.launch(run, progress=False)
        try:
            tables[name] = sweeps(run, only="tasks" if name == "plain" else "context,tasks", progress=False)
        finally:
            server.stop(run.dir)
    plain_tasks = tables["plain"]["tasks"].set_index("task")
    reasoning = plain_tasks.loc["reasoning"]
    assert reasoning["status"] == "done" and reasoning["reasoning_effort"] == "xhigh"
    assert plain_tasks.loc["agent", "status"] == "skipped"
    assert "does not read the request field tools (as its /props says)" in plain_tasks.loc["agent", "reason"]
    agent = tables["tools"]["tasks"].iloc[0]
    assert agent["status"] == "done" and agent["n_ok"] == 1 and agent["completion_tokens_median"] == 4
    # the four tool definitions and the template's tool instructions are in the prompt the server counted
    assert agent["prompt_tokens_median"] > agent["prompt_content_tokens_median"] + 200
    row = next(r for r in read_jsonl(tools.dir.requests) if r["sweep"] == "tasks" and not r["warmup"])
    assert row["reasoning_effort"] == "none" and row["finish_reason"] == "length"
    context = tables["tools"]["context"].iloc[0]
    assert context["status"] == "done" and context["completion_tokens_median"] == 16
    assert "output_tokens 4 raised to 16" in context["notes"] and "seed not sent" in context["notes"]
    assert all(r["seed"] is None and r["max_tokens"] == 16 for r in read_jsonl(tools.dir.requests)
               if r["sweep"] == "context")


def test_a_rerun_with_every_cell_done_needs_no_server(tmp_path: Path, llama_server: Path) -> None:
    """04_capacity_fit stops the launch step's server; running 03_sweeps again after it (issue 44) returns the
    tables from the rows, since nothing is left to send, and still refuses where a cell is left to measure."""
    run = open_small(tmp_path / "run", "sweeps.context.targets=[64]", "sweeps.context.repetitions=1")
    steps.launch(run, progress=False)
    try:
        first = sweeps(run, only="context", progress=False)
    finally:
        server.stop(run.dir)
    rows = len(list(read_jsonl(run.dir.requests)))
    again = sweeps(run, only="context", progress=False)
    pd.testing.assert_frame_equal(again["context"], first["context"])
    assert len(list(read_jsonl(run.dir.requests))) == rows  # nothing sent
    with pytest.raises(ServerExited):  # the concurrency cells were never run: they need the server
        sweeps(run, only="context,concurrency", progress=False)


def test_a_task_at_two_requests_at_once_with_the_engines_default_sampling(tmp_path: Path, llama_server: Path) -> None:
    """Seed 003 §二: its coding rows up to 90K ran two at a time (C2), with the engine's default sampling. Each
    repetition's two requests (each its own document) are in flight together, the rows say their lane, no temperature
    or seed is sent, and the table and the post say both."""
    run = open_small(tmp_path / "run", "sweeps.tasks.tasks=[coding]", "sweeps.tasks.depths=[0, 64]",
                     "sweeps.tasks.concurrency={64: 2}", "sweeps.tasks.warmup=0", "sweeps.temperature=null",
                     "sweeps.seed=null")
    steps.launch(run, progress=False)
    try:
        table = sweeps(run, only="tasks", progress=False)["tasks"]
    finally:
        server.stop(run.dir)
    assert list(table["context_depth"]) == [0, 64] and list(table["concurrency"]) == [1, 2]
    assert list(table["n_ok"]) == [1, 2]
    rows = [r for r in rows_of(run, "tasks") if r["cell"]["context_depth"] == 64]
    assert sorted(r["client_index"] for r in rows) == [0, 1] and {r["repetition"] for r in rows} == {0}
    assert max(r["t_send"] for r in rows) < min(r["t_done"] for r in rows)  # sent together, not one after the other
    # each lane's document opens with its own random salt (nothing may come from a prefix cache), whose token count
    # varies, so each document is cut at its own place; the server's count of the joined text can differ by one
    # where that cut meets the task's separator (seen: 249 and 248)
    assert abs(rows[0]["prompt_tokens"] - rows[1]["prompt_tokens"]) <= 1
    assert rows[0]["request_uid"] != rows[1]["request_uid"]
    alone = next(r for r in rows_of(run, "tasks") if r["cell"]["context_depth"] == 0)
    assert "concurrency" not in alone["cell"] and "client_index" not in alone  # the one-at-a-time cell, its id kept
    assert all(r["temperature"] is None and r["seed"] is None and r["cell"]["temperature"] is None
               for r in rows_of(run, "tasks"))
    report = steps.writeup(run)
    post = report.markdown.read_text() + report.appendix["markdown"].read_text()
    assert "Sampling: the engine's default (no temperature sent), seed none sent." in post
    assert "| depth | requests at once | coding: prompt tokens |" in post
    # seed 003 观察 1: the pair's lanes, one row each, the second's engine TTFT holding its wait and its own prefill
    lanes = [line for line in post.splitlines() if line.startswith("| coding, 2 at once, after 64 document tokens | L")]
    assert [line.split(" | ")[1].split()[0] for line in lanes] == ["L1", "L2"]
