"""The sweeps step and the post answer the objective alike (issue 39): both settle it from the run's files
(sweeps/settle.py), so the answer the step records at the end of its launches is the one the post publishes.

Data: the three recorded runs with an objective (tests/data/run_dirs/embedded-variants-search,
embedded-objective-goodput, embedded-objective-context; README there: real llama-server launches of the embedded
default on a 2-core VM). Each is copied and its sweeps step run again under its own recorded profile: every cell is
done, so nothing is sent and no server is needed, and the step answers from the files as it does after its last
launch. The last test adds what an earlier run can leave behind: a variant whose launch did not start (its
variant.json says failed), not launched again by a rerun because the search did not need it. The post has always
read that record; the step now reads it too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ninferkit.report.data import load_run
from ninferkit.report.document import Paragraph, Table
from ninferkit.report.objective import section
from ninferkit.rundir.profile_change import checked_profile
from ninferkit.rundir.records import VariantRecord
from ninferkit.rundir.runs import RunDir, open_run, write_record
from ninferkit.steps.sweeps import sweeps
from tests.conftest import DATA, REPO

RUNS = DATA / "run_dirs"


def _step_answer(run_dir: Path, only: str) -> str:
    """The recorded run's sweeps step run again under its own profile; the answer it records."""
    loaded, _ = checked_profile("", run_dir, [], allow_change=False, base=REPO)
    run = open_run(loaded, run_dir)
    sweeps(run, only=only, progress=False)
    entry = RunDir(run_dir).read_manifest().steps["sweeps"]
    answered = getattr(entry, "objective_answer", None)
    assert isinstance(answered, str), entry
    return answered


def _post(run_dir: Path) -> tuple[str, dict[str, str]]:
    """The post's objective paragraph and its outcomes by launch."""
    found = section(load_run(run_dir))
    assert found is not None
    said = next(block.text for block in found.blocks if isinstance(block, Paragraph))
    table = next(block for block in found.blocks if isinstance(block, Table))
    return said, {str(row[0]): str(row[1]) for row in table.rows}


@pytest.mark.parametrize(("name", "only"), [("embedded-variants-search", "concurrency"),
                                            ("embedded-objective-goodput", "concurrency"),
                                            ("embedded-objective-context", "context")])
def test_the_step_records_the_answer_the_post_publishes(tmp_path: Path, name: str, only: str) -> None:
    run_dir = tmp_path / name
    shutil.copytree(RUNS / name, run_dir)
    answered = _step_answer(run_dir, only)
    best, why = answered.split(": ", 1)
    said, _ = _post(run_dir)
    assert best != "no answer" and f" Answer: {best}: {why}." in said, (answered, said)


def test_a_variant_an_earlier_run_could_not_start_counts_in_the_step_as_in_the_post(tmp_path: Path) -> None:
    """slots-1 of the goodput climb (not launched in the recorded run: goodput rose from slots-2 to slots-4) with
    the record of an earlier launch that did not start. A launch that did not start meets nothing, so the figure no
    longer rises to one peak along the order; the step said "the peak ... along the order" from the rows alone
    while the post said otherwise. The rerun does not launch slots-1 (the measured launches rule it out), and both
    say the same."""
    run_dir = tmp_path / "run"
    shutil.copytree(RUNS / "embedded-objective-goodput", run_dir)
    folder = RunDir(run_dir).variant("slots-1")
    folder.path.mkdir(parents=True)
    error = "ServerStartError: the server exited during startup (exit code 1)"
    write_record(folder.variant_record, VariantRecord(schema_version=VariantRecord.SCHEMA_VERSION, name="slots-1",
                                                      state="failed", error=error))
    answered = _step_answer(run_dir, "concurrency")
    said, outcomes = _post(run_dir)
    assert answered.startswith("slots-8: the highest goodput_rps (") and "does not rise to one peak" in answered
    assert f" Answer: {answered}." in said
    assert outcomes["slots-1"] == f"misses: did not start: {error}"
    assert folder.read_variant() == VariantRecord(schema_version=VariantRecord.SCHEMA_VERSION, name="slots-1",
                                                  state="failed", error=error)  # not launched again
