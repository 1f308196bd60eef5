"""The engine's release tarball (engine.build.tarball, tarball_sha256) is checked by the verify step: fetched
from a real HTTP server on loopback (tests/range_server.py) when a URL names it, looked up in the cache's
engines/ folder when a bare name does, and a mismatch fails the step saying which sha256 was expected
and which was found."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from ninferkit.artifact import sha256_file
from ninferkit.errors import ArtifactError, ChecksumMismatch
from ninferkit.rundir.runs import Run, open_run
from ninferkit.steps.verify import verify
from tests.range_server import RangeServer


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NINFERKIT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def run_with(tmp_path: Path, **build: Any) -> Run:
    model = tmp_path / "models" / "m.gguf"
    model.parent.mkdir(parents=True, exist_ok=True)
    model.write_bytes(b"GGUF-ish bytes")
    data = {"name": "t", "engine": {"kind": "llama_server", "build": build},
            "artifact": {"filename": "m.gguf", "local_dir": str(model.parent),
                         "sha256": sha256_file(model).hexdigest}}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data))
    return open_run(path, tmp_path / "run")


def release(tmp_path: Path) -> Path:
    root = tmp_path / "served"
    root.mkdir(exist_ok=True)
    tarball = root / "ninfer-linux-x64-1.0.tar.gz"
    tarball.write_bytes(os.urandom(300_000))
    return tarball


def test_tarball_url_is_downloaded_and_checked(tmp_path: Path, cache: Path) -> None:
    tarball = release(tmp_path)
    sha = sha256_file(tarball).hexdigest
    with RangeServer(tarball.parent) as server:
        url = f"{server.url}/releases/download/v1.0/{tarball.name}"
        record = verify(run_with(tmp_path, tarball=url, tarball_sha256=sha), progress=False)
        again = verify(run_with(tmp_path, tarball=url, tarball_sha256=sha), progress=False)
        assert len(server.log) == 1  # the second step checks the file in place
    landed = cache / "engines" / tarball.name
    assert landed.read_bytes() == tarball.read_bytes()
    assert record.engine_tarball == {"tarball": url, "path": str(landed), "expected_sha256": sha, "sha256": sha,
                                        "size_bytes": 300_000, "downloaded": True, "ok": True}
    assert again.ok and again.engine_tarball["downloaded"] is False
    checks = [check.model_dump() for check in record.checks]
    assert {"name": "engine tarball sha256", "expected": sha, "actual": sha, "ok": True} in checks


def test_tarball_url_serving_other_bytes_fails_the_step(tmp_path: Path, cache: Path) -> None:
    tarball = release(tmp_path)
    with RangeServer(tarball.parent) as server:
        run = run_with(tmp_path, tarball=f"{server.url}/{tarball.name}", tarball_sha256="ab" * 32)
        actual = sha256_file(tarball).hexdigest
        with pytest.raises(ArtifactError, match=f"sha256: expected {'ab' * 32}, actual {actual}"):
            verify(run, progress=False)
    assert not (cache / "engines" / tarball.name).exists()
    assert json.loads(run.dir.artifact.read_text())["engine_tarball"]["ok"] is False


def test_tarball_by_name_in_the_cache_is_checked(tmp_path: Path, cache: Path) -> None:
    (cache / "engines").mkdir(parents=True)
    local = cache / "engines" / "ninfer-linux-x64-1.0.tar.gz"
    local.write_bytes(b"a different build")
    expected = "0" * 64
    run = run_with(tmp_path, tarball=local.name, tarball_sha256=expected)
    with pytest.raises(ChecksumMismatch, match=f"engine tarball sha256: expected {expected}, actual "
                                               f"{sha256_file(local).hexdigest}"):
        verify(run, progress=False)


def test_missing_tarball_without_url_says_where_to_put_it(tmp_path: Path, cache: Path) -> None:
    run = run_with(tmp_path, tarball="ninfer-linux-x64-1.0.tar.gz", tarball_sha256="0" * 64)
    with pytest.raises(ArtifactError, match=f"not found at {cache / 'engines' / 'ninfer-linux-x64-1.0.tar.gz'}; "
                                            "the profile gives no URL"):
        verify(run, progress=False)


def test_unpinned_tarball_is_recorded_and_a_pin_without_tarball_is_warned(tmp_path: Path) -> None:
    local = tmp_path / "dist" / "engine.tar.gz"
    local.parent.mkdir()
    local.write_bytes(b"bytes")
    record = verify(run_with(tmp_path, tarball=str(local)), progress=False)
    assert record.ok and record.engine_tarball["sha256"] == sha256_file(local).hexdigest
    assert any("tarball_sha256 is not pinned" in warning for warning in record.warnings)
    record = verify(run_with(tmp_path, tarball_sha256="0" * 64), progress=False)
    assert record.ok and record.engine_tarball is None
    assert any("does not say where the tarball lies" in warning for warning in record.warnings)
