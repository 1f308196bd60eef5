"""Variants (issue 39) on the embedded llama-server: the base and each variant launched in turn on one artifact.

Two variants of the embedded default differ from it in a real llama-server flag (`--ubatch-size`) and in
`serve.threads`; the concurrency sweep runs against each, every row names its variant and serving, each
variant's server keeps its own startup ledger and is stopped after its cells, and a rerun keeps what was
measured (no variant is launched again).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ninferkit import steps
from ninferkit.errors import ProfileError, ServerError, ToolMissing
from ninferkit.params import load_profile
from ninferkit.rundir.runs import open_run
from ninferkit.server import process as server
from ninferkit.steps.runner import run_runbook
from ninferkit.steps.sweeps import sweeps
from tests.conftest import LOCAL_CPU, free_port

VARIANTS = ('variants=[{name: ub32, set: {serve.extra_args: [--ubatch-size, "32"]}, why: smaller micro-batch}, '
            '{name: t2, set: {serve.threads: 2}}]')
SMALL = ["sweeps.concurrency.levels=[1, 2]", "sweeps.concurrency.requests_per_client=1",
         "sweeps.concurrency.prompt_tokens=128", "sweeps.concurrency.output_tokens=8", "sweeps.telemetry=false"]


def test_each_variant_is_launched_measured_and_kept(tmp_path: Path, llama_server: Path) -> None:
    run = open_run(LOCAL_CPU, tmp_path / "run", [f"serve.port={free_port()}", *SMALL, VARIANTS])
    steps.launch(run, progress=False)
    try:
        table = sweeps(run, only="concurrency", progress=False)["concurrency"]
    finally:
        server.stop(run.dir)
    assert list(table["variant"]) == ["base", "base", "ub32", "ub32", "t2", "t2"]
    assert list(table["concurrency"]) == [1, 2] * 3 and set(table["status"]) == {"done"}
    assert table.groupby("variant")["serving_id"].nunique().eq(1).all() and table["serving_id"].nunique() == 3
    rows = [json.loads(line) for line in run.dir.requests.read_text().splitlines()]
    assert {row["cell"].get("variant", "base") for row in rows} == {"base", "ub32", "t2"}
    ub32 = run.dir.variant("ub32")
    argv = json.loads(ub32.server.read_text())["argv"]
    assert argv[argv.index("--ubatch-size") + 1] == "32" and json.loads(ub32.server.read_text())["state"] == "stopped"
    t2 = json.loads(run.dir.variant("t2").server.read_text())
    assert t2["argv"][t2["argv"].index("-t") + 1] == "2" and t2["ledger"].get("kv_tokens")  # its own startup books
    record = ub32.read_variant()
    assert record is not None and record.state == "done" and record.ready_s and record.seconds
    assert record.seconds >= record.ready_s
    launched = record.launched

    # a rerun keeps every cell: nothing is sent and no variant is launched again
    steps.launch(run, progress=False)
    try:
        again = sweeps(run, only="concurrency", progress=False)["concurrency"]
    finally:
        server.stop(run.dir)
    assert len(again) == 6 and ub32.read_variant().launched == launched  # type: ignore[union-attr]
    assert run.dir.read_manifest().steps["sweeps"].cells_sent == 0


def test_a_flag_the_build_lacks_is_refused_before_the_first_launch(tmp_path: Path, llama_server: Path) -> None:
    """The built llama-server's own --help decides: the runner refuses the run, naming the variant and the flag,
    and leaves no run directory (nothing was launched)."""
    bad = 'variants=[{name: nope, set: {serve.extra_args: [--no-such-flag, "1"]}}]'
    with pytest.raises(ProfileError) as refused:
        run_runbook(LOCAL_CPU, tmp_path / "run", ["launch", "sweeps"], [f"serve.port={free_port()}", bad],
                    say=lambda line: None)
    lines = [line for line in str(refused.value).splitlines() if "variant 'nope'" in line]
    assert len(lines) == 1 and "--no-such-flag" in lines[0] and "serve.extra_args" in lines[0]
    assert not (tmp_path / "run").exists()


def test_the_step_leaves_the_base_running_and_a_rerun_launches_only_the_variant(tmp_path: Path,
                                                                               llama_server: Path) -> None:
    """After its variants the sweeps step launches the run's own server again (the user finds the base serving as
    the step found it), keeping the first launch's log; a rerun whose only missing cells are a variant's needs no
    base server: it launches that variant alone and leaves the base as it found it (stopped)."""
    one = 'variants=[{name: ub32, set: {serve.extra_args: [--ubatch-size, "32"]}}]'
    run = open_run(LOCAL_CPU, tmp_path / "run", [f"serve.port={free_port()}", *SMALL, one])
    first = steps.launch(run, progress=False)
    try:
        sweeps(run, only="concurrency", progress=False)
        now = server.ensure_running(run.dir)  # raises where no base server runs
    finally:
        server.stop(run.dir)
    assert now.pid != first.pid and now.argv == first.argv and now.state == "ready"
    kept = run.dir.logs / "server.1.log"  # the first launch's log, which the base's rows were joined to
    assert kept.is_file() and "listening on" in kept.read_text()
    assert run.dir.read_manifest().steps["sweeps"].server_relaunched

    # a run killed during the variant's cells: the ledger holds the base's cells only (it is appended cell by cell)
    lines = run.dir.sweep_cells.read_text().splitlines(keepends=True)
    run.dir.sweep_cells.write_text("".join(line for line in lines if '"variant"' not in line))
    launched = run.dir.variant("ub32").read_variant().launched  # type: ignore[union-attr]
    table = sweeps(run, only="concurrency", progress=False)["concurrency"]  # no base server runs
    assert list(table["variant"]) == ["base", "base", "ub32", "ub32"] and set(table["status"]) == {"done"}
    assert run.dir.read_manifest().steps["sweeps"].cells_sent == 2
    assert run.dir.variant("ub32").read_variant().launched != launched  # type: ignore[union-attr]
    with pytest.raises(ServerError):
        server.ensure_running(run.dir)  # the base was stopped before the rerun, and stays so


def test_a_variant_cells_are_planned_with_what_its_own_server_reads(tmp_path: Path, llama_server: Path) -> None:
    """The agent task needs a chat template that renders tools. The embedded default's does not, so the base's agent
    cell is skipped; a variant that launches with params/local-cpu-tools.yaml's template (SmolLM2's ChatML with
    Hermes-style tools) is asked by its own server's /props, so its agent cell is sent (it was planned with the
    base's answer, and skipped)."""
    template = load_profile(LOCAL_CPU.parent / "local-cpu-tools.yaml").profile.serve.extra_args
    tools = "variants=" + json.dumps([{"name": "tools", "set": {"serve.extra_args": template}}])
    agent = ["sweeps.agent.sessions=1", "sweeps.agent.max_round_trips=1", "sweeps.agent.output_tokens=16",
             "sweeps.agent.apis=[chat]", "sweeps.telemetry=false"]
    run = open_run(LOCAL_CPU, tmp_path / "run", [f"serve.port={free_port()}", *agent, tools])
    steps.launch(run, progress=False)
    try:
        sweeps(run, only="agent", progress=False)
    finally:
        server.stop(run.dir)
    ledger = [json.loads(line) for line in run.dir.sweep_cells.read_text().splitlines()]
    status = {entry["cell"].get("variant", "base"): entry for entry in ledger}
    assert status["base"]["status"] == "skipped" and "tools" in status["base"]["reason"]
    assert status["tools"]["status"] in ("done", "failed") and status["tools"]["status"] != "skipped"
    rows = [json.loads(line) for line in run.dir.requests.read_text().splitlines()]
    assert any(row["cell"].get("variant") == "tools" and row["status"] == "ok" for row in rows)


def test_a_power_variant_without_nvidia_smi_is_refused_and_the_base_left_running(tmp_path: Path,
                                                                               llama_server: Path) -> None:
    """The runner's preflight refuses a power limit this machine cannot set; the sweeps step called alone meets the
    missing nvidia-smi at its first read (nothing changed, no variant launched), says so, and still launches the
    run's server again."""
    if shutil.which("nvidia-smi") is not None:
        pytest.skip("nvidia-smi is installed here: the variant would change this machine's power limit")
    power = "variants=[{name: w350, set: {gpu.power_limit_w: 350}}]"
    run = open_run(LOCAL_CPU, tmp_path / "run", [f"serve.port={free_port()}", *SMALL, power])
    steps.launch(run, progress=False)
    try:
        with pytest.raises(ToolMissing, match="nvidia-smi is not installed"):
            sweeps(run, only="concurrency", progress=False)
        assert server.ensure_running(run.dir).state == "ready"
    finally:
        server.stop(run.dir)
    assert not run.dir.variant("w350").path.exists()  # never launched
    assert run.dir.read_manifest().steps["sweeps"].server_relaunched


def test_a_runbook_whose_capacity_step_launches_leaves_the_base_stopped_after_the_variants(
        tmp_path: Path, llama_server: Path) -> None:
    """`ninferkit run` with variants and a capacity step that launches: the capacity step's first launch stops the
    run's server, so the sweeps step does not start it again after the variants (on a GPU, minutes of a model's
    load for nothing). The capacity step still finds the base's launch as the launch step left it (its log, with the
    acceptance checks that served), and a rerun of the sweeps step has nothing to send and needs no server."""
    one = 'variants=[{name: ub32, set: {serve.extra_args: [--ubatch-size, "32"]}}]'
    only = ["sweeps.context.enabled=false", "sweeps.tasks.enabled=false", "sweeps.prefix_reuse.enabled=false"]
    grid = ["capacity.concurrencies=[1]", "capacity.contexts=[1024]", "capacity.kv_dtypes=[f16]",
            "capacity.fit_launches=true", "capacity.search=false"]
    overrides = [f"serve.port={free_port()}", *SMALL, *only, one, *grid]
    lines: list[str] = []
    result = run_runbook(LOCAL_CPU, tmp_path / "run", ["launch", "sweeps", "capacity"], overrides, say=lines.append)
    assert result.ok, lines
    run_dir = result.run.dir
    entry = run_dir.read_manifest().steps["sweeps"]
    assert entry.server_left_stopped.startswith("the run's server is not started again after the variants")
    assert getattr(entry, "server_relaunched", None) is None
    assert run_dir.server_logs() == [run_dir.server_log]  # the base launched once: no server.1.log
    assert any(entry.server_left_stopped in line for line in lines), lines  # said as the step ran
    assert not any("stopped the launch step's server" in line for line in lines), lines  # nothing left to stop
    capacity = run_dir.read_capacity()
    assert capacity is not None
    own = capacity.observations[0]
    assert own.source == str(run_dir.server_log) and own.served  # the base's launch, as the launch step left it
    assert [Path(obs.source).parent.parent.name for obs in capacity.observations[1:]] == ["01"]  # the grid's launch
    assert [variant.name for variant in capacity.variants] == ["ub32"]

    # a rerun of the sweeps step: every cell is kept, nothing is sent, no server is started
    reopened = open_run(LOCAL_CPU, run_dir.path, overrides)
    table = sweeps(reopened, only="concurrency", progress=False)["concurrency"]
    assert list(table["variant"]) == ["base", "base", "ub32", "ub32"] and set(table["status"]) == {"done"}
    with pytest.raises(ServerError):
        server.ensure_running(run_dir)


@pytest.mark.parametrize("after", [[], ["capacity", "writeup"]], ids=["sweeps-last", "capacity-reading-logs"])
def test_a_runbook_whose_later_steps_need_no_server_leaves_the_base_stopped_after_the_variants(
        tmp_path: Path, llama_server: Path, after: list[str]) -> None:
    """`ninferkit run` with variants where the sweeps step is the last, or only a capacity step that launches nothing
    (it reads the launch's log) and the write-up come after it: no later step sends the run's server a request and
    the runner stops it at the end, so the sweeps step does not start it again after the variants (before, it did,
    then the runner stopped it: on a GPU, a model's load for nothing). Its first launch's log stays the only one."""
    one = 'variants=[{name: ub32, set: {serve.extra_args: [--ubatch-size, "32"]}}]'
    only = ["sweeps.context.enabled=false", "sweeps.tasks.enabled=false", "sweeps.prefix_reuse.enabled=false"]
    reading = ["capacity.fit_launches=false", "capacity.search=false"]
    overrides = [f"serve.port={free_port()}", *SMALL, *only, one, *reading]
    lines: list[str] = []
    result = run_runbook(LOCAL_CPU, tmp_path / "run", ["launch", "sweeps", *after], overrides, say=lines.append)
    assert result.ok, lines
    run_dir = result.run.dir
    entry = run_dir.read_manifest().steps["sweeps"]
    said = ("the sweeps step is the last of this run" if not after
            else "no later step of this run (capacity, writeup) sends it requests")
    assert entry.server_left_stopped == (f"the run's server is not started again after the variants: {said}, and the "
                                         "run stops it at its end")
    assert getattr(entry, "server_relaunched", None) is None
    assert run_dir.server_logs() == [run_dir.server_log]  # the base launched once: no server.1.log
    assert any(entry.server_left_stopped in line for line in lines), lines
    if after:
        capacity = run_dir.read_capacity()
        assert capacity is not None and capacity.observations[0].source == str(run_dir.server_log)
        assert (run_dir.path / "report" / "index.md").is_file()
