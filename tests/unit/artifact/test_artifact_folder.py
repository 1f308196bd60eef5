"""A checkpoint folder (what vLLM loads: config.json, tokenizer, weight shards) fetched from a real HTTP
server on loopback (tests/range_server.py) in the hub's resolve layout, and verified file by file:
pinned, resumed after a dropped connection, refused when a byte differs, and, for a folder fetched by
hand as seed 001 does, hashed and recorded so it can be pinned."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ninferkit.artifact import sha256_file
from ninferkit.artifact.record_text import describe
from ninferkit.errors import ArtifactError, ChecksumMismatch, ProfileError
from ninferkit.params import load_profile
from ninferkit.rundir.runs import open_run
from ninferkit.steps.verify import verify
from tests.conftest import REPO
from tests.range_server import Faults, RangeServer

COMMIT = "5f1e2d3c" + "4" * 32
VLLM = REPO / "params" / "vllm-v100-baseline.yaml"
CHECKPOINT = {  # file name -> size; the shards are random bytes, nothing here loads them
    "config.json": None,
    "model-00001-of-00002.safetensors": 2 * 1024 * 1024 + 17,
    "model-00002-of-00002.safetensors": 1024 * 1024 + 5,
    "tokenizer.json": 300_000,
}


@pytest.fixture()
def served(tmp_path: Path) -> Path:
    root = tmp_path / "served"
    root.mkdir()
    for name, size in CHECKPOINT.items():
        content = json.dumps({"architectures": ["Qwen3ForCausalLM"]}).encode() if size is None else os.urandom(size)
        (root / name).write_bytes(content)
    return root


@pytest.fixture()
def server(served: Path) -> Iterator[RangeServer]:
    with RangeServer(served) as running:
        yield running


def pins(root: Path) -> dict[str, dict[str, Any]]:
    return {path.name: {"size_bytes": path.stat().st_size, "sha256": sha256_file(path).hexdigest}
            for path in sorted(root.iterdir())}


def folder_run(tmp_path: Path, server: RangeServer, **artifact: Any) -> Any:
    data = {"name": "ckpt", "engine": {"kind": "vllm"},
            "artifact": {"repo": "org/qwen-ckpt", "revision": COMMIT, "filename": "qwen-ckpt", "endpoint": server.url,
                         "local_dir": str(tmp_path / "models"), **artifact}}
    path = tmp_path / "ckpt.yaml"
    path.write_text(yaml.safe_dump(data))
    return open_run(path, tmp_path / "run")


def test_folder_downloads_each_file_from_the_resolve_url_and_verifies(server: RangeServer, tmp_path: Path) -> None:
    run = folder_run(tmp_path, server, files=pins(server.root))
    record = verify(run, progress=False)
    folder = tmp_path / "models" / "qwen-ckpt"
    asked = sorted(s.path for s in server.log)
    assert asked == sorted(f"/org/qwen-ckpt/resolve/{COMMIT}/{name}" for name in CHECKPOINT)
    for name in CHECKPOINT:
        assert (folder / name).read_bytes() == (server.root / name).read_bytes()
    assert record.ok and record.path == str(folder) and record.sha256 is None
    assert [row["path"] for row in record.files] == sorted(CHECKPOINT)
    assert all(row["ok"] and row["pinned"] for row in record.files)
    assert record.size_bytes == sum((server.root / name).stat().st_size for name in CHECKPOINT)
    assert len(record.checks) == 2 * len(CHECKPOINT) and record.verification["sha256_computed_while_downloading"]
    assert "per file (4 of 4 as pinned)" in describe(record)
    again = verify(run, progress=False)  # in place: checked again, nothing fetched
    assert again.ok and again.downloads == [] and len(server.log) == len(CHECKPOINT)


def test_a_dropped_shard_resumes_where_it_stopped(server: RangeServer, tmp_path: Path) -> None:
    # The next two responses are cut after 700,000 bytes: config.json (fetched first) is smaller, so only
    # the first shard is cut, and its download resumes from the byte where it stopped.
    server.faults = Faults(drop_after_bytes=700_000, drops=2)
    run = folder_run(tmp_path, server, files=pins(server.root))
    record = verify(run, progress=False)
    assert record.ok
    asked = [(s.path.rsplit("/", 1)[1], s.range, s.body_bytes) for s in server.log]
    shard = "model-00001-of-00002.safetensors"
    assert asked[1:3] == [(shard, None, 700_000), (shard, "bytes=700000-", CHECKPOINT[shard] - 700_000)]
    assert [result["resumed_from_bytes"] for result in record.downloads] == [0, 0, 0, 0]
    assert [result["attempts"] for result in record.downloads] == [1, 2, 1, 1]


def test_a_changed_byte_on_the_server_is_refused_naming_the_file(server: RangeServer, tmp_path: Path) -> None:
    pinned = pins(server.root)
    shard = server.root / "model-00002-of-00002.safetensors"
    data = bytearray(shard.read_bytes())
    data[1000] ^= 0xFF
    shard.write_bytes(bytes(data))
    run = folder_run(tmp_path, server, files=pinned)
    expected = pinned["model-00002-of-00002.safetensors"]["sha256"]
    with pytest.raises(ChecksumMismatch, match=f"model-00002-of-00002.safetensors does not match its pin: sha256: "
                                               f"expected {expected}, actual {sha256_file(shard).hexdigest}"):
        verify(run, progress=False)
    saved = json.loads(run.dir.artifact.read_text())
    assert saved["ok"] is False and not (tmp_path / "models" / "qwen-ckpt" / shard.name).exists()


def test_a_file_in_place_that_differs_is_named_and_kept(server: RangeServer, tmp_path: Path) -> None:
    run = folder_run(tmp_path, server, files=pins(server.root))
    verify(run, progress=False)
    local = tmp_path / "models" / "qwen-ckpt" / "tokenizer.json"
    local.write_bytes(local.read_bytes()[:-1])
    (tmp_path / "models" / "qwen-ckpt" / "stray.safetensors").write_bytes(b"x")
    with pytest.raises(ChecksumMismatch, match="tokenizer.json size_bytes: expected 300000, actual 299999") as failed:
        verify(run, progress=False)
    assert "tokenizer.json sha256: expected" in str(failed.value) and len(local.read_bytes()) == 299_999
    saved = json.loads(run.dir.artifact.read_text())
    assert any("does not pin: stray.safetensors" in warning for warning in saved["warnings"])
    assert [row["path"] for row in saved["files"] if not row["ok"]] == ["tokenizer.json"]


def test_a_branch_is_refused_before_any_request(server: RangeServer, tmp_path: Path) -> None:
    run = folder_run(tmp_path, server, files=pins(server.root), revision="main")
    with pytest.raises(ArtifactError, match="revision 'main' is not a commit hash"):
        verify(run, progress=False)
    assert server.log == []


def test_seed_001_folder_fetched_by_hand_is_hashed_and_recorded(served: Path, tmp_path: Path) -> None:
    """The vLLM seed profile names no repo (seed 001 downloads with ModelScope by hand): the verify step
    checks the folder is there and records every file's size and sha256, ready to pin."""
    models = tmp_path / "models"
    (models / "qwen3.8-27b-nvfp4").mkdir(parents=True)
    for name in CHECKPOINT:
        (models / "qwen3.8-27b-nvfp4" / name).write_bytes((served / name).read_bytes())
    (models / "qwen3.8-27b-nvfp4" / ".msc").write_bytes(b"modelscope bookkeeping")  # hidden: not the checkpoint
    run = open_run(VLLM, tmp_path / "run", [f"artifact.local_dir={models}"])
    record = verify(run, progress=False)
    assert record.ok and record.source["kind"] == "local" and record.downloads == []
    recorded = {row["path"]: {"size_bytes": row["size_bytes"], "sha256": row["sha256"]} for row in record.files}
    assert recorded == pins(served)
    assert any("artifact.files pins nothing" in warning for warning in record.warnings)
    overrides = [f"artifact.local_dir={models}", f"artifact.files={json.dumps(recorded)}"]
    pinned = open_run(VLLM, tmp_path / "run2", overrides)
    assert verify(pinned, progress=False).ok


def test_seed_001_folder_missing_says_there_is_no_source(tmp_path: Path) -> None:
    run = open_run(VLLM, tmp_path / "run", [f"artifact.local_dir={tmp_path / 'models'}"])
    with pytest.raises(ArtifactError, match="does not exist, and the profile names no source to fetch it from"):
        verify(run, progress=False)
    assert json.loads(run.dir.artifact.read_text())["ok"] is False


@pytest.mark.parametrize(("artifact", "match"), [
    ({"filename": "m"}, "needs local_dir"),
    ({"url": "https://x.invalid/m", "files": {"a": {}}}, "files pins a checkpoint folder on a hub or in local_dir"),
    ({"filename": "m", "local_dir": "/m", "sha256": "a" * 64, "files": {"a": {}}}, "pinned file by file"),
    ({"filename": "m", "local_dir": "/m", "files": {"../etc/passwd": {}}}, "paths inside the folder"),
])
def test_folder_settings_are_checked_before_anything_runs(tmp_path: Path, artifact: dict[str, Any],
                                                          match: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "p", "engine": {"kind": "vllm"}, "artifact": artifact}))
    with pytest.raises(ProfileError, match=match):
        load_profile(path)
