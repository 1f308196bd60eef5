"""Run directories: atomic JSON, flushed JSONL that survives a torn line, the manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ninferkit.errors import ProfileError
from ninferkit.rundir.runs import append_jsonl, open_run, read_jsonl, write_json_atomic
from tests.conftest import REPO

LOCAL_CPU = REPO / "params" / "local-cpu.yaml"


def test_atomic_write_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "a" / "out.json"
    write_json_atomic(target, {"x": 1})
    write_json_atomic(target, {"x": 2})
    assert json.loads(target.read_text()) == {"x": 2}
    assert [p.name for p in target.parent.iterdir()] == ["out.json"]


def test_jsonl_skips_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    append_jsonl(path, {"i": 1})
    append_jsonl(path, {"i": 2})
    with path.open("a") as handle:
        handle.write('{"i": 3, "trunc')
    assert [row["i"] for row in read_jsonl(path)] == [1, 2]


def test_manifest_records_profile_hash_versions_and_git(tmp_path: Path) -> None:
    run = open_run(LOCAL_CPU, tmp_path / "run", ["serve.max_context=2048"])
    manifest = json.loads(run.dir.manifest.read_text())
    assert manifest["profile_hash"] == run.profile_hash
    assert manifest["profile"]["serve"]["max_context"] == 2048
    assert manifest["profile_overrides"] == ["serve.max_context=2048"]
    assert manifest["packages"]["papermill"]
    assert set(manifest["git"]) == {"commit", "dirty"}
    run.dir.record_step("setup", status="ok")
    reopened = open_run(LOCAL_CPU, tmp_path / "run", ["serve.max_context=2048"])
    assert reopened.dir.read_manifest().steps["setup"].status == "ok"


def test_a_bad_profile_creates_no_run_directory(tmp_path: Path) -> None:
    with pytest.raises(ProfileError):
        open_run(LOCAL_CPU, tmp_path / "run", ["serve.port=-1"])
    assert not (tmp_path / "run").exists()
