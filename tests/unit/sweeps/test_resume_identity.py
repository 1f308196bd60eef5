"""Issue 37: a rerun keeps what was measured under the same serving, sends only new or changed cells (saying
why), and a cell is done only when it measured something.

The rows are real: the context sweep's recorded requests of the embedded default (tests/data/run_dirs/
embedded-1, README there), replayed into the cells of a run of the local-cpu profile (test_repeats.replayed_run),
since a unit test has no server; tests/live/test_resume_identity.py runs the same checks against the embedded
llama-server. The made-up value is named where it is made: one server field set negative, the impossible
figure a server sent in the field (issue 37, "a cell is done though it measured nothing").
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ninferkit.engines import get_adapter
from ninferkit.measure.client import RequestResult
from ninferkit.rundir.identity import same_serving, serving_identity
from ninferkit.rundir.records import ServerRecord
from ninferkit.rundir.runs import open_run
from ninferkit.rundir.servings import run_servings
from ninferkit.sweeps.execute import Recorder, SweepContext, _append_outcome, base_row, ended_outcome
from ninferkit.sweeps.plan import build_plan
from ninferkit.sweeps.resume import Resume, resume_plan
from ninferkit.sweeps.tables import demote_unmeasured, latest_outcomes, measured_ok
from tests.conftest import LOCAL_CPU
from tests.unit.sweeps.test_repeats import TWO_CELLS, recorded, replayed_run


def rerun(folder: Path, *overrides: str) -> Resume:
    """What a rerun of the finished run in `folder` with these overrides would keep and send."""
    run = open_run(LOCAL_CPU, folder, [*TWO_CELLS, *overrides])
    cells = build_plan(run.profile, get_adapter("llama_server"), ["context"], explicit=True)
    return resume_plan(cells, run.dir.read_cells(), measured_ok(run.dir.read_requests()), run_servings(run.dir))


def test_a_finished_run_keeps_its_cells_and_a_new_target_sends_only_that_cell(tmp_path: Path) -> None:
    replayed_run(tmp_path, ("embedded-1",))
    assert [(len(r.keep), len(r.send)) for r in [rerun(tmp_path)]] == [(2, 0)]
    plan = rerun(tmp_path, "sweeps.context.targets=[256, 512, 1024]")
    assert len(plan.keep) == 2
    assert [(cell.params.target_prompt_tokens, why) for cell, why in plan.send] == [(1024, "new cell")]
    assert plan.summary("x").startswith("keeping 2 of 3 cells (finished under serving x); sending 1:")


def test_a_new_port_is_the_same_serving_and_sends_nothing(tmp_path: Path) -> None:
    replayed_run(tmp_path, ("embedded-1",))
    plan = rerun(tmp_path, "serve.port=18081", "serve.startup_timeout_s=60")
    assert (len(plan.keep), plan.send) == (2, [])


def test_repeats_one_to_two_sends_one_new_repeat_of_each_cell(tmp_path: Path) -> None:
    replayed_run(tmp_path, ("embedded-1",))
    plan = rerun(tmp_path, "sweeps.repeats=2")
    assert len(plan.keep) == 2
    assert [(cell.params.target_prompt_tokens, cell.params.repeat, why) for cell, why in plan.send] == [
        (256, 1, "new repeat 2"), (512, 1, "new repeat 2")]


def test_a_new_kv_dtype_sends_every_cell_naming_the_change(tmp_path: Path) -> None:
    replayed_run(tmp_path, ("embedded-1",))
    plan = rerun(tmp_path, "serve.kv.dtype=q8_0")
    assert plan.keep == []
    assert {why for _, why in plan.send} == {"serving changed: kv: f16 vs q8_0"}
    assert plan.reasons() == {"serving changed": 2}


def test_the_identity_leaves_out_port_host_paths_and_names_what_differs(tmp_path: Path) -> None:
    one = open_run(LOCAL_CPU, tmp_path / "a", TWO_CELLS)
    other = open_run(LOCAL_CPU, tmp_path / "b", [*TWO_CELLS, "serve.port=9999", "serve.api_key_env=SOME_KEY",
                                                 "sweeps.context.output_tokens=8"])
    a = serving_identity(one.profile, None, {"binary_sha256": "ab" * 32, "model_id": "embedded"})
    b = serving_identity(other.profile, None, {"binary_sha256": "ab" * 32, "model_id": "embedded"})
    assert a.id == b.id and same_serving(a, b) == (True, [], [])
    assert not any(key.endswith(("port", "host", "api_key_env", "startup_timeout_s")) for key in a.fields)
    assert a.fields["model.sha256"] == one.profile.artifact.sha256 and a.fields["serve.kv.dtype"] == "f16"
    q8 = serving_identity(open_run(LOCAL_CPU, tmp_path / "c", ["serve.kv.dtype=q8_0"]).profile, None,
                          {"binary_sha256": "ab" * 32, "model_id": "embedded"})
    assert same_serving(a, q8) == (False, ["kv: f16 vs q8_0"], [])
    assert same_serving(a, q8, stated=True)[0]
    spec_off = run_servings(one.dir).spec_off
    assert "speculation: ngram-mod vs unset" in run_servings(one.dir).main.differences(spec_off)


def test_a_url_server_is_compared_on_what_it_says_of_itself(tmp_path: Path) -> None:
    profile = open_run(LOCAL_CPU, tmp_path, TWO_CELLS).profile
    url = serving_identity(profile, None, {"external": True, "model_id": "embedded", "engine_version": "b11434"})
    launched = serving_identity(profile, None, {"binary_sha256": "ab" * 32, "model_id": "embedded"})
    assert (url.proven, url.source) == (False, "url")
    assert "model.sha256" not in url.fields and "serve.kv.dtype" not in url.fields
    pooled, differing, unknown = same_serving(url, launched)
    assert pooled and differing == [] and "kv" in unknown and "speculation" in unknown


def test_a_pinned_build_is_known_by_its_source_and_a_named_binary_by_its_bytes(tmp_path: Path) -> None:
    """Each host of a fleet compiles the pinned llama.cpp source itself (the binaries' bytes differ): one serving.
    A binary the profile names (`engine.binary`, the CI gate's new build) is another, by its sha256."""
    profile = open_run(LOCAL_CPU, tmp_path / "a", TWO_CELLS).profile
    here = serving_identity(profile, None, {"binary_sha256": "ab" * 32, "model_id": "embedded"})
    there = serving_identity(profile, None, {"binary_sha256": "cd" * 32, "model_id": "embedded"})
    assert same_serving(here, there) == (True, [], []) and "engine.binary_sha256" not in here.fields
    named = open_run(LOCAL_CPU, tmp_path / "b", [*TWO_CELLS, "engine.binary=/opt/new/llama-server"]).profile
    old = serving_identity(named, None, {"binary_sha256": "ab" * 32, "model_id": "embedded"})
    new = serving_identity(named, None, {"binary_sha256": "cd" * 32, "model_id": "embedded"})
    assert same_serving(old, new)[1] == [f"binary: {'ab' * 6} vs {'cd' * 6}"]


def test_a_cell_whose_every_row_was_refused_as_impossible_is_failed_and_resent(tmp_path: Path) -> None:
    """The server's prefill rate made negative (the made-up value): the row is stored errored, the cell failed."""
    run = open_run(LOCAL_CPU, tmp_path, TWO_CELLS)
    adapter = get_adapter("llama_server")
    serving = run_servings(run.dir).main
    ctx = SweepContext(run, adapter, "http://recorded", "embedded", {}, None, [],  # type: ignore[arg-type]
                       base_row(run, adapter, ServerRecord(), serving), 60.0, None, serving)
    cell = build_plan(run.profile, adapter, ["context"], explicit=True)[0]
    record = Recorder(ctx, cell, "replay")
    for repetition, row in enumerate(recorded("embedded-1", 256)):
        fields = {name: row[name] for name in RequestResult.__dataclass_fields__ if name in row and name != "server"}
        asyncio.run(record(RequestResult(**fields, server={"prefill_tok_s_server": -5.0}), repetition, False))
    assert (record.measured.ok, record.measured.errored) == (0, 2)
    outcome = ended_outcome(ctx, record)
    assert outcome.status == "failed" and "prefill_tok_s_server is -5.0, below 0" in str(outcome.reason)
    # an older ledger said done for such a cell: read as failed, and a rerun sends it again
    _append_outcome(ctx, cell, outcome)
    entries = run.dir.read_cells()
    said_done = entries[-1].model_copy(update={"status": "done", "reason": None})
    demoted = demote_unmeasured({cell.cell_id: said_done}, measured_ok(run.dir.read_requests()))
    assert demoted[cell.cell_id].status == "failed"
    plan = resume_plan([cell], [said_done], measured_ok(run.dir.read_requests()), run_servings(run.dir))
    assert plan.send == [(cell, "recorded done but measured nothing")]
    assert latest_outcomes(run.dir, run_servings(run.dir))[cell.cell_id].status == "failed"
