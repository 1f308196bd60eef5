"""Issue 37: `ninferkit report` re-derives the join and the tables from the raw files, and says what made them.

Data: tests/data/ninfer_live/g1-h200-2x120k/run (tests/data/ninfer_live/README.md): a real `ninferkit run` of
NInfer on an H200, two 122,880-token lanes, whose join and tables were made by an older ninferkit: rendered as
recorded, one lane pairs one lane's engine TTFT with the other's wall time and the other lane has no engine
numbers, and prefix-reuse hits are "unknown" though the engine logged 16,378. Issue 38: the other two live runs
(g1-h200/run, g1-h200-v100flags) recorded `engine.generation`, removed since, and are re-derived through the
profile's upgrade (params/history.py). Each is copied to tmp_path first.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from ninferkit.cli import main as cli_main
from ninferkit.report import write_report
from ninferkit.report.derive import CAPACITY, DERIVED, JOIN, TABLES, rederive
from ninferkit.rundir.runs import RunDir
from tests.conftest import DATA, REPO

RUN = DATA / "ninfer_live" / "g1-h200-2x120k" / "run"
PAIR = "| 2 clients at 122,880 prompt tokens | "
"""The lane table's rows of the run's one cell of requests at once."""



def test_report_rederives_the_join_and_the_tables_and_the_figures_come_out_right(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "run"
    shutil.copytree(RUN, copy)
    assert cli_main(["report", str(copy)]) == 0
    said = capsys.readouterr().err
    assert f"re-derived {JOIN} from the raw files (was made by an unrecorded ninferkit" in said
    assert f"re-derived {TABLES} from the raw files" in said
    index = (copy / "report" / "index.md").read_text()
    lines = [line for line in index.splitlines() if line.startswith(PAIR)]
    # queued, prompt time, TTFT incl. queue: the second lane waited out the first one's prefill. The queue is the
    # engine's TTFT less its prepare and prefill times (G1 writes no queue field): 133.358 - 0.043 - 66.204 for the
    # second, under 1 ms for the first (its 0.03 s of prepare is no wait)
    assert lines[0].startswith(f"{PAIR}L1 (client 1) | 122,880 | 0.001 | 66.20 (1 m 6.2 s) | 66.24 (1 m 6.2 s) |")
    assert lines[0].endswith("| 32 | 94.78 (1 m 34.8 s) |")
    assert lines[1].startswith(f"{PAIR}L2 (client 0) | 122,880 | 67.11 (1 m 7.1 s) | 66.20 (1 m 6.2 s) | "
                               "133.36 (2 m 13.4 s) |")
    assert "| identical_resend | chat | 1 | 16,384 | 16,378 (engine) |" in index
    # no cell had an engine window of decode alone (the concurrent cell's 6 windows all also prefilled): no peak to
    # set the averages against, so no seed-004 table of "0 / 1" rows, one line in the appendix instead
    assert "## Average decode against the best engine window" not in index
    assert ("Average decode against the best engine window: No table: 3 cells decoded only in engine windows that "
            "also prefilled") in (copy / "report" / "appendix.md").read_text()
    assert "| 4,096 | 4,680 | 1.82 | 41.7 / 0% | 1.00 |" in index  # tokens per round
    # issue 38 item 5 (003's tokens per round): the table's figure is the engine's own speculative.rounds, 1 +
    # accepted / rounds per request of the coding cell (random weights: every draft rejected, so exactly 1)
    uids = {row["request_uid"] for row in map(json.loads, (copy / "requests.jsonl").read_text().splitlines())
            if row["sweep"] == "tasks" and row["cell"].get("task") == "coding" and not row["warmup"]}
    joined = [row for row in map(json.loads, (copy / JOIN).read_text().splitlines()) if row["request_uid"] in uids]
    record = {(line["server_instance_id"], line["request"]["request_id"]): line["speculative"] for line in
              map(json.loads, (copy / "engine-request-log.jsonl").read_text().splitlines())
              if line.get("event") == "request_done" and line.get("speculative")}
    spec = [record[row["server_instance_id"], row["server_request_id"]] for row in joined]
    assert joined and [row["spec_rounds_server"] for row in joined] == [found["rounds"] for found in spec]
    assert {1 + found["accepted_tokens"] / found["rounds"] for found in spec} == {1}
    made = json.loads((copy / DERIVED).read_text())["files"]
    assert set(made) == {JOIN, TABLES}
    assert made[JOIN]["by"]["ninferkit"] and "engine-request-log.jsonl" in made[JOIN]["inputs"]
    appendix = (copy / "report" / "appendix.md").read_text()
    provenance = next(line for line in appendix.splitlines() if line.startswith("| derived files made by |"))
    assert f"{JOIN}: ninferkit " in provenance and f"{TABLES}: ninferkit " in provenance  # the post names its deriver
    assert (RUN / "requests.jsonl").read_bytes() == (copy / "requests.jsonl").read_bytes()  # raw: untouched


def test_as_recorded_renders_the_old_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "run"
    shutil.copytree(RUN, copy)
    assert cli_main(["report", "--as-recorded", str(copy)]) == 0
    assert "not re-derived" in capsys.readouterr().err
    index = (copy / "report" / "index.md").read_text()
    lines = [line for line in index.splitlines() if line.startswith(PAIR)]
    # the old join: this lane lost its engine numbers
    assert lines[1].startswith(f"{PAIR}L2 (client 1) | 122,880 | — |")
    assert "| derived files made by | as recorded: an unrecorded ninferkit (before derived.json) |" in \
        (copy / "report" / "appendix.md").read_text()
    assert not (copy / DERIVED).exists()


G1_RUNS = ("g1-h200/run", "g1-h200-v100flags")
"""The two live captures whose profile an older ninferkit recorded with `engine.generation: "G1"` (removed at
9dd358c): before issue 38's upgrade they kept every derived file as recorded."""


def live_copy(name: str, where: Path) -> Path:
    copy = where / name.replace("/", "-")
    shutil.copytree(DATA / "ninfer_live" / name, copy)
    return copy


def csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("name", G1_RUNS)
def test_a_run_recorded_with_engine_generation_is_re_derived_and_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    copy = live_copy(name, tmp_path)
    manifest = (copy / "manifest.json").read_bytes()
    recorded_tasks = csv_rows(copy / "tables" / "tasks.csv")
    recorded_reuse = {row["scenario"]: row for row in csv_rows(copy / "tables" / "prefix_reuse.csv")}
    assert "answers" not in json.loads((copy / "capacity.json").read_text())
    assert cli_main(["report", str(copy)]) == 0
    said = capsys.readouterr().err.splitlines()
    assert said[0] == ('profile read as recorded by an unrecorded ninferkit older than 9dd358c (its profile has a '
                       'field that commit removed), fields upgraded: engine.generation "G1" -> the interface of '
                       "ziworkslab/ninfer-3090-ubuntu, engine.fork's build in the NInfer build table (9dd358c); "
                       "removed since at their empty values, dropped: serve.gpu_memory_utilization, "
                       "serve.swap_space_gib, serve.threads, serve.weights_dtype")
    assert {f"re-derived {name} from the raw files (was made by an unrecorded ninferkit (before derived.json))"
            for name in (CAPACITY, JOIN, TABLES)} == set(said[1:])
    assert (copy / "manifest.json").read_bytes() == manifest  # raw: never rewritten
    derived = json.loads((copy / DERIVED).read_text())
    assert set(derived["files"]) == {CAPACITY, JOIN, TABLES}
    assert derived["profile"]["recorded_by"].startswith("an unrecorded ninferkit older than 9dd358c")
    assert derived["profile"]["upgraded"][0].startswith('engine.generation "G1" (removed at 9dd358c (2026-12-01))')
    # what changed: the tokens per round come from the engine's speculative.rounds (1 + accepted / rounds: random
    # weights reject every draft, so exactly 1), a column the recorded tables lacked
    done = [line for line in map(json.loads, (copy / "engine-request-log.jsonl").read_text().splitlines())
            if line.get("event") == "request_done" and line.get("speculative")]
    assert done and {1 + line["speculative"]["accepted_tokens"] / line["speculative"]["rounds"] for line in done} \
        == {1}
    assert all("tokens_per_round_server_median" not in row for row in recorded_tasks)
    assert {row["tokens_per_round_server_median"] for row in csv_rows(copy / "tables" / "tasks.csv")} == {"1.0"}
    # prefix-reuse hits: "unknown" as recorded (the chat usage carries none), the engine's own count re-derived
    hits = {line["result"]["prefix_cache_hit_tokens"] for line in done}
    reuse = {row["scenario"]: row for row in csv_rows(copy / "tables" / "prefix_reuse.csv")}
    assert recorded_reuse["identical_resend"]["cached_tokens_median"] == ""
    assert float(reuse["identical_resend"]["hit_tokens_median"]) in hits - {0}
    assert reuse["identical_resend"]["hit_tokens_source"] == "engine"
    # capacity.json fitted again: the per-answer table the recorded fit predates
    assert json.loads((copy / "capacity.json").read_text())["answers"]
    index = (copy / "report" / "index.md").read_text()
    appendix = (copy / "report" / "appendix.md").read_text()
    assert "16 (length) |" in index and "16 (—) |" not in index
    assert "| coding: tokens per round |" in index and "## Average decode against the best engine window" not in index
    assert "Average decode against the best engine window: No table: " in appendix  # every window also prefilled
    assert "paired in start order" not in index
    provenance = next(line for line in appendix.splitlines() if line.startswith("| profile read |"))
    assert 'engine.generation "G1" -> the interface of ziworkslab/ninfer-3090-ubuntu' in provenance


def test_a_run_recorded_by_todays_schema_says_no_field_was_upgraded(tmp_path: Path) -> None:
    copy = live_copy("g1-h200-2x120k/run", tmp_path)
    result = rederive(RunDir(copy))
    assert result.lines()[0] == "profile read as recorded by ninferkit 0.1.0 @1af22a9, fields upgraded: none"
    assert json.loads((copy / DERIVED).read_text())["profile"] == {"recorded_by": "ninferkit 0.1.0 @1af22a9",
                                                                  "upgraded": []}


@pytest.mark.parametrize(("field", "value", "named"), [
    ("generation", "G3", 'engine.generation = "G3" cannot be read by this ninferkit: the field was removed at '
     "9dd358c (2026-12-01), and engine.fork 'ziworkslab/ninfer-3090-ubuntu' is the build "
     "ziworkslab/ninfer-3090-ubuntu, whose interface is G1, not G3"),
    ("flavour", "fast", "engine.flavour: unknown field"),
])
def test_a_field_that_cannot_be_upgraded_keeps_the_derived_files_naming_it(
        tmp_path: Path, field: str, value: str, named: str) -> None:
    copy = live_copy("g1-h200/run", tmp_path)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["profile"]["engine"][field] = value
    (copy / "manifest.json").write_text(json.dumps(manifest))
    result = rederive(RunDir(copy))
    assert result.changed == [] and set(result.kept) == {CAPACITY, JOIN, TABLES}
    assert result.lines()[0].startswith("the recorded profile cannot be read by this ninferkit: ")
    assert named in result.lines()[0]
    report = write_report(copy)
    provenance = next(line for line in report.appendix["markdown"].read_text().splitlines()
                      if line.startswith("| profile read |"))
    assert "not by this ninferkit (the derived files are as recorded)" in provenance and named in provenance


def test_a_run_whose_removed_fields_said_nothing_is_re_derived(tmp_path: Path) -> None:
    # tests/data/run_dirs/embedded-1 (an older ninferkit's run) records fields since removed at their empty or
    # default values (serve.cors false, serve.tensor_parallel 1, engine.generation null): re-derived all the same
    copy = tmp_path / "run"
    shutil.copytree(DATA / "run_dirs" / "embedded-1", copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    assert manifest["profile"]["serve"]["cors"] is False and manifest["profile"]["serve"]["tensor_parallel"] == 1
    result = rederive(RunDir(copy))
    assert TABLES in result.changed and not result.kept.get(TABLES)
    assert json.loads((copy / "manifest.json").read_text()) == manifest  # a raw file: never rewritten

def test_capacity_is_fitted_again_from_its_own_observations(tmp_path: Path) -> None:
    # docs/examples/h200-vllm at 39c922d: its capacity.json was written by an older fit that pinned nothing
    # ("borderline", margin unknown, at every row) from one real vLLM 0.26.0 startup on an H200; the same
    # observation fitted by this ninferkit pins the free memory after weights, so every row is decided
    example = REPO / "docs" / "examples" / "h200-vllm"
    copy = tmp_path / "run"
    shutil.copytree(example, copy, ignore=shutil.ignore_patterns("report", "compare", "*.gz", "h200-*"))
    # the fit reads the model's KV layout from capacity.vllm_config, a path on the H200 that no fresh machine has:
    # point it at the same model's config.json, captured on the device (tests/data/vllm-live/session3)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["profile"]["capacity"]["vllm_config"] = str(DATA / "vllm-live" / "session3" / "config.json")
    (copy / "manifest.json").write_text(json.dumps(manifest))
    old = json.loads((copy / "capacity.json").read_text())
    old["decision_table"] = [{**row, "fits": None, "verdict": "not pinned by the data"}
                             for row in old["decision_table"]]
    (copy / "capacity.json").write_text(json.dumps(old))
    result = rederive(RunDir(copy))
    assert CAPACITY in result.changed
    fitted = json.loads((copy / "capacity.json").read_text())
    assert fitted["observations"] == old["observations"] and fitted["created"] == old["created"]
    assert {row["fits"] for row in fitted["decision_table"]} == {True}
    assert fitted["derived_by"]["ninferkit"]
    assert CAPACITY not in rederive(RunDir(copy)).changed  # fitted again: the same content, nothing to write
