"""`ninferkit verify` (profile and --file forms), engine-binary checks, and the 01_artifact_verify
notebook run headless under papermill for the embedded default."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import papermill as pm
import pytest

from ninferkit.artifact import model_path, sha256_file
from ninferkit.cli import main
from ninferkit.errors import ArtifactError
from ninferkit.params import load_profile
from ninferkit.rundir.runs import open_run
from ninferkit.steps.runner import NOTEBOOKS_DIR
from ninferkit.steps.verify import verify
from tests.conftest import GENERATED_CPU, LOCAL_CPU


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
        verify(run, progress=False)
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
