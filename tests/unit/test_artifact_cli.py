"""`ninferkit verify` (profile and --file forms), engine-binary checks, and the 01_artifact_verify
notebook run headless under papermill for the embedded default."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import papermill as pm
import pytest

from ninferkit.artifact import model_path, sha256_file, verify_step
from ninferkit.cli import main
from ninferkit.errors import ArtifactError
from ninferkit.params import load_profile
from ninferkit.runner import NOTEBOOKS_DIR
from ninferkit.runs import open_run
from tests.conftest import GENERATED_CPU, LOCAL_CPU
from tests.ninfer_files import write_v1_v2, write_v3


def _verify_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(["verify", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_verify_file_json_names_expected_and_actual(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_v1_v2(tmp_path / "m.ninfer", 2)
    sha, size = sha256_file(path).hexdigest, path.stat().st_size
    code, out = _verify_json(capsys, "--file", str(path), "--sha256", sha, "--size", str(size))
    assert code == 0 and out["ok"] and out["problems"] == []
    assert (out["path"], out["size"], out["sha256"], out["container_version"]) == (str(path), size, sha, 2)
    wrong = "0" * 64
    code, out = _verify_json(capsys, "--file", str(path), "--sha256", wrong, "--size", str(size + 1))
    assert code == 1 and not out["ok"]
    assert out["problems"] == [f"size_bytes: expected {size + 1}, actual {size}",
                               f"sha256: expected {wrong}, actual {sha}"]


def test_verify_file_reports_truncated_and_foreign_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    v3 = write_v3(tmp_path / "m.ninfer")
    v3.write_bytes(v3.read_bytes()[:5000])
    code, out = _verify_json(capsys, "--file", str(v3))
    assert code == 1 and out["container_version"] == 3 and out["problems"][0].startswith("truncated")
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    code, out = _verify_json(capsys, "--file", str(text))
    assert code == 0 and out["container_version"] is None and out["sha256"] == sha256_file(text).hexdigest


def test_verify_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify"]) == 2
    assert "give either a PROFILE or --file PATH" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["verify", "--file", "x", "--sha256", "nothex"])
    assert exited.value.code == 2


@pytest.mark.parametrize(("profile", "kind"), [(GENERATED_CPU, "generated"), (LOCAL_CPU, "package")])
def test_verify_profile_records_where_the_model_came_from(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         profile: Path, kind: str) -> None:
    code = main(["verify", str(profile), "--run-dir", str(tmp_path / "run")])
    assert code == 0 and "all checks passed" in capsys.readouterr().out
    record = json.loads((tmp_path / "run" / "artifact.json").read_text())
    model = model_path(load_profile(profile).profile)
    assert record["sha256"] == sha256_file(model).hexdigest and record["size_bytes"] == model.stat().st_size
    assert record["source"]["kind"] == kind and record["container_version"] is None


def test_engine_binaries_are_checked_against_pinned_sha256(tmp_path: Path) -> None:
    binary = tmp_path / "bin" / "llama-server"
    binary.parent.mkdir()
    binary.write_bytes(b"#!/bin/sh\necho fake build\n")
    binary.chmod(0o755)
    (binary.parent / "libengine.so").write_bytes(b"library bytes")
    good = sha256_file(binary).hexdigest
    pins = f"engine.build.binary_sha256={{llama-server: {good}, libengine.so: {'ab' * 32}}}"
    run = open_run(LOCAL_CPU, tmp_path / "run", [f"engine.binary={binary}", pins])
    with pytest.raises(ArtifactError) as failed:
        verify_step(run, progress=False)
    message = str(failed.value)
    library_sha = sha256_file(binary.parent / "libengine.so").hexdigest
    assert f"binary libengine.so sha256: expected {'ab' * 32}, actual {library_sha}" in message
    assert "binary llama-server" not in message
    rows = {row["name"]: row["ok"] for row in json.loads(run.dir.artifact.read_text())["binaries"]}
    assert rows == {"llama-server": True, "libengine.so": False}


def test_notebook_runs_headless_for_the_embedded_default(tmp_path: Path) -> None:
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    shutil.copy(NOTEBOOKS_DIR / "01_artifact_verify.ipynb", notebooks)
    run_dir = tmp_path / "run"
    pm.execute_notebook(str(notebooks / "01_artifact_verify.ipynb"), str(tmp_path / "out.ipynb"),
                        parameters={"profile": str(LOCAL_CPU), "run_dir": str(run_dir), "overrides": []},
                        cwd=str(notebooks), kernel_name="python3", progress_bar=False)
    record = json.loads((run_dir / "artifact.json").read_text())
    assert record["ok"] and record["sha256"] == sha256_file(model_path(load_profile(LOCAL_CPU).profile)).hexdigest
