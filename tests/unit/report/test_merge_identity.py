"""Issue 37: `merge` pools rows only within one serving; runs of one profile on other ports are one serving.

Data: tests/data/run_dirs/embedded-spec-ab (README there): a real run of the embedded default. Its copies stand
for other runs of it; what a copy changes is named where it is made: the port in its manifest's profile (the
same serving), or the KV dtype there (another serving; the rows are the recorded f16 ones, so only the pooling
decision is tested, not what q8_0 measures). tests/live/test_resume_identity.py merges real runs of each.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ninferkit.cli import main
from ninferkit.report.compare import compare_runs
from ninferkit.report.merge import merge, serving_lines
from tests.conftest import DATA
from tests.run_copies import copy_as_another_run

RUN = DATA / "run_dirs" / "embedded-spec-ab"


def copy_with(folder: Path, name: str, **serve: object) -> Path:
    """A copy of the recorded run whose manifest's profile sets these serve options."""
    copy = folder / name
    copy_as_another_run(RUN, copy, ignore=shutil.ignore_patterns("report", "notebooks"))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["profile"]["serve"].update(serve)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    (copy / "fleet-task.json").write_text(json.dumps({"schema_version": 1, "host": name, "fleet": "test"}))
    return copy


def test_two_runs_on_different_ports_are_one_serving_and_pool(tmp_path: Path) -> None:
    merged = merge([copy_with(tmp_path, "a", port=8088), copy_with(tmp_path, "b", port=18081)], tmp_path / "out")
    # two servings, both measured by both runs: the profile's, and speculation off (the task cells' A/B twins)
    assert [group.hosts for group in merged.servings] == [["a", "b"], ["a", "b"]]
    assert "speculation: ngram-mod vs unset" in merged.servings[0].members[0].differences(
        merged.servings[1].members[0])
    assert merged.apart.empty
    counts = merged.cells["hosts"].value_counts().to_dict()
    assert set(counts) == {"all: a, b", "a", "b"} and len(set(counts.values())) == 1  # each cell: union, a, b


def test_a_q8_0_run_and_an_f16_run_do_not_pool_and_the_difference_is_named(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    a, b = copy_with(tmp_path, "a"), copy_with(tmp_path, "b", kv={"dtype": "q8_0"})
    assert main(["merge", str(a), str(b), "-o", str(tmp_path / "out")]) == 0
    said = capsys.readouterr()
    assert "Not pooled: serving 1 and serving 3 differ in kv: f16 vs q8_0" in said.err
    assert "comparable cells: 0" in said.out
    merged = merge([a, b], tmp_path / "out2")
    assert set(merged.apart["why"]) == {"another serving measured it, which differ in kv: f16 vs q8_0",
                                        "another serving measured it, which differ in kv: q8_0 vs f16"}
    assert "Not pooled: serving 1 and serving 3 differ in kv: f16 vs q8_0" in (
        tmp_path / "out2" / "report" / "index.md").read_text()


def test_same_serving_pools_them_and_the_write_up_says_the_user_stated_it(tmp_path: Path) -> None:
    a, b = copy_with(tmp_path, "a"), copy_with(tmp_path, "b", kv={"dtype": "q8_0"})
    merged = merge([a, b], tmp_path / "out", same_serving_stated=True)
    assert len(merged.servings) == 1 and merged.apart.empty  # the user's word pools speculation off in too
    index = (tmp_path / "out" / "report" / "index.md").read_text()
    assert "Pooled on the user's word (--same-serving)." in index
    assert "they differ in kv: f16 vs q8_0" in index
    rows = [json.loads(line) for line in (tmp_path / "out" / "requests.jsonl").read_text().splitlines()]
    assert all(row["serving_stated"] is True and row["serving_id"] for row in rows)


def test_compare_names_what_the_candidates_serving_changes(tmp_path: Path) -> None:
    a, b = copy_with(tmp_path, "a"), copy_with(tmp_path, "b", kv={"dtype": "q8_0"}, port=9000)
    serving = compare_runs([a, b]).serving
    assert serving[0].startswith("Baseline ") and "kv f16" in serving[0]
    assert serving[1].endswith(": differs in kv: f16 vs q8_0.")
    assert compare_runs([a, copy_with(tmp_path, "c", port=9000)]).serving[1].endswith(": same serving.")
    stated = compare_runs([a, b], same_serving_stated=True)
    assert "The user stated that these runs serve one configuration (--same-serving)" in stated.serving[-1]
    assert "--same-serving" in stated.document().sections[0].blocks[0].items[-1]  # type: ignore[attr-defined]


def test_imports_pool_on_the_model_id_they_name_else_only_on_the_users_word(tmp_path: Path) -> None:
    """tests/data/peers: AIPerf 0.13.0 and GuideLLM 0.8.1 runs of one load against the embedded server (its
    CAPTURE.txt). Their files name no build, model bytes or serve options; both name the model id requested."""
    for tool, folder in (("aiperf", "aiperf-0.13.0"), ("guidellm", "guidellm-0.8.1")):
        assert main(["import", str(DATA / "peers" / folder), "--format", tool, "-o", str(tmp_path / tool)]) == 0
    runs = [tmp_path / "aiperf", tmp_path / "guidellm"]
    pooled = merge(runs, tmp_path / "pooled")
    assert len(pooled.servings) == 1 and serving_lines(pooled.servings, pooled.stated) == [
        "Serving 1 (aiperf, guidellm): serving import-aiperf (model id embedded)"]
    assert list(pooled.cells["cell"].unique()) == ["imported concurrency=2"]
    assert list(pooled.cells["hosts"])[0] == "all: aiperf, guidellm"
    for run in runs:  # a tool file that names no model: nothing to compare on
        manifest = json.loads((run / "manifest.json").read_text())
        manifest["imported_from"]["model"] = None
        (run / "manifest.json").write_text(json.dumps(manifest))
    apart = merge(runs, tmp_path / "apart")
    assert len(apart.servings) == 2 and apart.cells.empty
    assert set(apart.apart["why"]) == {"another serving measured it, which cannot be shown alike: neither states its "
                                       "serving (an import, or a profile this ninferkit no longer reads); "
                                       "--same-serving pools them on your word"}
    stated = merge(runs, tmp_path / "stated", same_serving_stated=True)
    assert list(stated.cells["hosts"])[0] == "all: aiperf, guidellm"
