"""Downloads against a real HTTP server on loopback (tests/range_server.py): full, resumed after a
drop, from a server that ignores Range, pinned vs branch revisions, mirrors, and the artifact step
that ties download, verification and artifact.json together."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import ninferkit.artifact.fetch as fetch
from ninferkit.artifact import (
    UnpinnedArtifactWarning,
    check_pin,
    download,
    resolve_source,
    sha256_file,
)
from ninferkit.errors import ArtifactError, ChecksumMismatch
from ninferkit.params import validate_profile
from ninferkit.rundir.runs import open_run
from ninferkit.steps.verify import verify
from tests.ninfer_files import write_v1_v2, write_v3
from tests.range_server import Faults, RangeServer

COMMIT = "dc370fb6295a" + "7" * 28
SIZE = 3 * 1024 * 1024 + 123


@pytest.fixture()
def served(tmp_path: Path) -> Path:
    root = tmp_path / "served"
    root.mkdir()
    (root / "blob.bin").write_bytes(os.urandom(SIZE))
    return root


@pytest.fixture()
def server(served: Path) -> Iterator[RangeServer]:
    with RangeServer(served) as running:
        yield running


def _fetch(server: RangeServer, dest: Path, **kwargs: Any) -> Any:
    blob = server.root / "blob.bin"
    return download(f"{server.url}/org/model/resolve/{COMMIT}/blob.bin", dest, SIZE,
                    sha256_file(blob).hexdigest, backoff_s=0, progress=False, **kwargs)


def test_full_download_lands_only_when_verified(server: RangeServer, tmp_path: Path) -> None:
    dest = tmp_path / "out" / "blob.bin"
    result = _fetch(server, dest)
    assert dest.read_bytes() == (server.root / "blob.bin").read_bytes()
    assert not (tmp_path / "out" / "blob.bin.part").exists()
    assert (result.size, result.bytes_received, result.attempts, result.restarts) == (SIZE, SIZE, 1, 0)
    assert [(s.range, s.status) for s in server.log] == [(None, 200)]
    with pytest.raises(ArtifactError, match="never overwritten"):
        _fetch(server, dest)


def test_connection_dropped_midway_resumes_with_range(server: RangeServer, tmp_path: Path) -> None:
    server.faults = Faults(drop_after_bytes=1_000_000, drops=2)
    dest = tmp_path / "blob.bin"
    result = _fetch(server, dest)
    assert sha256_file(dest).hexdigest == sha256_file(server.root / "blob.bin").hexdigest
    asked = [(s.range, s.status, s.body_bytes) for s in server.log]
    assert asked == [(None, 200, 1_000_000), ("bytes=1000000-", 206, 1_000_000),
                     ("bytes=2000000-", 206, SIZE - 2_000_000)]
    assert (result.attempts, result.restarts, result.bytes_received) == (3, 0, SIZE)


def test_part_left_by_an_earlier_run_is_resumed(server: RangeServer, tmp_path: Path) -> None:
    dest = tmp_path / "blob.bin"
    (tmp_path / "blob.bin.part").write_bytes((server.root / "blob.bin").read_bytes()[:777_777])
    result = _fetch(server, dest)
    assert result.resumed_from_bytes == 777_777 and result.bytes_received == SIZE - 777_777
    assert server.log[0].range == "bytes=777777-"
    assert dest.read_bytes() == (server.root / "blob.bin").read_bytes()


def test_server_that_ignores_range_restarts_cleanly(server: RangeServer, tmp_path: Path) -> None:
    server.faults = Faults(drop_after_bytes=1_500_000, drops=1, ignore_range=True)
    dest = tmp_path / "blob.bin"
    result = _fetch(server, dest)
    assert dest.read_bytes() == (server.root / "blob.bin").read_bytes()
    assert [(s.range, s.status) for s in server.log[:2]] == [(None, 200), ("bytes=1500000-", 200)]
    assert result.restarts == 1


def test_corrupted_source_is_rejected_and_not_renamed(server: RangeServer, tmp_path: Path) -> None:
    blob = server.root / "blob.bin"
    pinned = sha256_file(blob).hexdigest
    data = bytearray(blob.read_bytes())
    data[SIZE // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    dest = tmp_path / "blob.bin"
    with pytest.raises(ChecksumMismatch, match=f"sha256: expected {pinned}, actual {sha256_file(blob).hexdigest}"):
        download(f"{server.url}/blob.bin", dest, SIZE, pinned, backoff_s=0, progress=False)
    assert not dest.exists() and not (tmp_path / "blob.bin.part").exists()


def test_wrong_size_is_refused_before_the_body(server: RangeServer, tmp_path: Path) -> None:
    dest = tmp_path / "blob.bin"
    with pytest.raises(ChecksumMismatch, match=f"size_bytes: expected {SIZE + 5}, actual {SIZE}"):
        download(f"{server.url}/blob.bin", dest, SIZE + 5, None, backoff_s=0, progress=False)
    assert not dest.exists() and (tmp_path / "blob.bin.part").stat().st_size == 0


def test_retries_are_bounded_and_keep_the_part(server: RangeServer, tmp_path: Path) -> None:
    server.faults = Faults(drop_after_bytes=0, drops=100)
    with pytest.raises(ArtifactError, match="failed 3 times in a row without progress"):
        download(f"{server.url}/blob.bin", tmp_path / "blob.bin", SIZE, retries=2, backoff_s=0, progress=False)
    assert len(server.log) == 3
    with pytest.raises(ArtifactError, match="HTTP 404; check artifact.repo"):
        download(f"{server.url}/missing.bin", tmp_path / "missing.bin", progress=False)


def test_part_reaches_the_disk_in_steps_while_downloading(server: RangeServer, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper has the part fdatasync'ed as it grows (so the fsync before the rename has little
    left); small batch and sync sizes make a 3 MiB file take that path. The spy calls the real one."""
    monkeypatch.setattr(fetch, "WRITE_BATCH_BYTES", 256 * 1024)
    monkeypatch.setattr(fetch, "SYNC_EVERY_BYTES", 512 * 1024)
    synced: list[int] = []
    real_fdatasync = os.fdatasync

    def spy(fd: int) -> None:
        synced.append(os.fstat(fd).st_size)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", spy)
    dest = tmp_path / "blob.bin"
    result = _fetch(server, dest)
    assert dest.read_bytes() == (server.root / "blob.bin").read_bytes() and result.size == SIZE
    assert synced and all(512 * 1024 <= size <= SIZE for size in synced)


def test_proxy_from_the_environment_is_used(server: RangeServer, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast transport would bypass httpx's proxy handling, so a proxy in the environment keeps
    httpx's own; the range server answers a proxied (absolute-form) request for its file."""
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", server.url)
    blob = server.root / "blob.bin"
    dest = tmp_path / "blob.bin"
    download("http://files.example.invalid/blob.bin", dest, SIZE, sha256_file(blob).hexdigest, backoff_s=0,
             progress=False)
    assert [s.path for s in server.log] == ["http://files.example.invalid/blob.bin"]
    assert dest.read_bytes() == blob.read_bytes()


def test_resolve_url_layout_and_mirror_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    artifact = validate_profile({"name": "t", "engine": {"kind": "llama_server"},
                                 "artifact": {"repo": "org/m", "revision": COMMIT, "filename": "a b.ninfer"}}).artifact
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert resolve_source(artifact).url == f"https://huggingface.co/org/m/resolve/{COMMIT}/a%20b.ninfer"
    monkeypatch.setenv("HF_ENDPOINT", "https://hf-mirror.com/")
    assert resolve_source(artifact).url.startswith("https://hf-mirror.com/org/m/resolve/")
    mirrored = artifact.model_copy(update={"endpoint": "http://10.0.0.5:8000"})
    assert resolve_source(mirrored).url.startswith("http://10.0.0.5:8000/org/m/resolve/")


# -- the artifact step -------------------------------------------------------------------------


def _hub_run(tmp_path: Path, server: RangeServer, **artifact: Any) -> Any:
    data = {"name": "hub", "engine": {"kind": "ninfer", "fork": "geoffwatts/ninfer-v100"},
            "artifact": {"repo": "org/model", "revision": COMMIT, "endpoint": server.url,
                         "local_dir": str(tmp_path / "models"), **artifact}}
    path = tmp_path / "hub.yaml"
    path.write_text(yaml.safe_dump(data))
    return open_run(path, tmp_path / "run")


def test_step_downloads_verifies_and_records_provenance(server: RangeServer, tmp_path: Path) -> None:
    entry = write_v1_v2(server.root / "m.ninfer", 2)
    sha = sha256_file(entry).hexdigest
    run = _hub_run(tmp_path, server, filename="m.ninfer", sha256=sha, size_bytes=entry.stat().st_size,
                   container_version=2)
    record = verify(run, progress=False)
    saved = json.loads(run.dir.artifact.read_text())
    assert saved == record.model_dump(mode="json", exclude_unset=True)
    assert saved["ok"] and saved["sha256"] == sha and saved["container_version"] == 2
    assert saved["source"]["url"] == f"{server.url}/org/model/resolve/{COMMIT}/m.ninfer" and saved["source"]["pinned"]
    assert saved["container"]["identity"] == {"model_id": "qwen3.8-27b", "weights_id": "groupwise-int"}
    assert saved["engine"]["accepted_container_versions"] == [2]
    assert saved["verification"]["sha256_computed_while_downloading"] and saved["downloads"][0]["bytes_received"]
    assert {c["name"] for c in saved["checks"]} == {"size_bytes", "sha256", "container_version"}
    again = verify(run, progress=False)  # in place: verified again, not downloaded again
    assert again.downloads == [] and len(server.log) == 1


def test_step_refuses_v3_for_a_v2_engine_and_still_writes_artifact_json(server: RangeServer, tmp_path: Path) -> None:
    write_v3(server.root / "m.ninfer")
    v2_commit = "c8b8c1c0df4c74df3c190c6aa3a7f24dc614721c"
    run = _hub_run(tmp_path, server, filename="m.ninfer", container_revisions={2: v2_commit})
    with pytest.raises(ArtifactError, match=f"pin revision {v2_commit} \\(container v2\\) instead"):
        verify(run, progress=False)
    saved = json.loads(run.dir.artifact.read_text())
    assert saved["ok"] is False and saved["container_version"] == 3


def test_step_fetches_v3_continuation_parts(server: RangeServer, tmp_path: Path) -> None:
    write_v3(server.root / "m.ninfer", parts=2)
    run = _hub_run(tmp_path, server, filename="m.ninfer")
    run = open_run(run.loaded.source, run.dir.path, ["engine.fork=zhongpei/ninfer-4090"])
    record = verify(run, progress=False)
    assert record.ok and len(record.downloads) == 3 and len(record.parts) == 2
    for name in ("m.ninfer.part-0001", "m.ninfer.part-0002"):
        assert (tmp_path / "models" / name).read_bytes() == (server.root / name).read_bytes()


def test_step_never_overwrites_a_file_in_place(server: RangeServer, tmp_path: Path) -> None:
    entry = write_v1_v2(server.root / "m.ninfer", 2)
    local = tmp_path / "models" / "m.ninfer"
    local.parent.mkdir()
    local.write_bytes(write_v1_v2(tmp_path / "other.ninfer", 2, seed=1).read_bytes())
    before = local.read_bytes()
    run = _hub_run(tmp_path, server, filename="m.ninfer", sha256=sha256_file(entry).hexdigest)
    with pytest.raises(ChecksumMismatch, match="sha256: expected"):
        verify(run, progress=False)
    assert local.read_bytes() == before and server.log == []


def test_branch_revision_is_refused_before_any_request(server: RangeServer, tmp_path: Path) -> None:
    write_v1_v2(server.root / "m.ninfer", 2)
    run = _hub_run(tmp_path, server, filename="m.ninfer", revision="main")
    with pytest.raises(ArtifactError, match="revision 'main' is not a commit hash"):
        verify(run, progress=False)
    assert server.log == [] and not (tmp_path / "models").exists() and not run.dir.artifact.exists()
    allowed = open_run(run.loaded.source, run.dir.path, ["artifact.allow_branch=true"])
    with pytest.warns(UnpinnedArtifactWarning, match="is a branch"):
        record = verify(allowed, progress=False)
    assert record.ok and record.source["pinned"] is False
    assert any("is a branch" in w for w in record.warnings)


def test_complete_part_is_accepted_without_fetching_the_body_again(server: RangeServer, tmp_path: Path) -> None:
    (tmp_path / "blob.bin.part").write_bytes((server.root / "blob.bin").read_bytes())
    result = _fetch(server, tmp_path / "blob.bin")
    assert result.bytes_received == 0 and [(s.range, s.status) for s in server.log] == [(f"bytes={SIZE}-", 416)]
    assert (tmp_path / "blob.bin").read_bytes() == (server.root / "blob.bin").read_bytes()


def test_step_records_a_failed_download_in_artifact_json(server: RangeServer, tmp_path: Path) -> None:
    write_v1_v2(server.root / "m.ninfer", 2)
    run = _hub_run(tmp_path, server, filename="m.ninfer", sha256="ab" * 32)
    with pytest.raises(ChecksumMismatch, match=f"sha256: expected {'ab' * 32}, actual"):
        verify(run, progress=False)
    saved = json.loads(run.dir.artifact.read_text())
    assert saved["ok"] is False and "sha256: expected" in saved["problems"][0]
    assert not (tmp_path / "models" / "m.ninfer").exists()


def test_direct_url_pins_by_its_resolve_segment() -> None:
    def artifact(url: str) -> Any:
        return validate_profile({"name": "t", "engine": {"kind": "llama_server"}, "artifact": {"url": url}}).artifact

    with pytest.raises(ArtifactError, match="revision 'main' is not a commit hash"):
        check_pin(resolve_source(artifact("https://huggingface.co/o/r/resolve/main/m.ninfer")), allow_branch=False)
    assert check_pin(resolve_source(artifact(f"https://huggingface.co/o/r/resolve/{COMMIT}/m.ninfer")), False) == []
    assert check_pin(resolve_source(artifact("https://example.org/files/m.ninfer")), False) == []


def test_hub_token_is_sent_but_never_recorded(server: RangeServer, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    write_v1_v2(server.root / "m.ninfer", 2)
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value_123")
    run = _hub_run(tmp_path, server, filename="m.ninfer")
    verify(run, progress=False)
    assert server.log[0].authorization == "Bearer hf_secret_value_123"
    assert "hf_secret_value_123" not in run.dir.artifact.read_text()
    assert "hf_secret_value_123" not in run.dir.manifest.read_text()


def test_restarts_are_bounded_when_range_is_ignored_and_the_link_keeps_dropping(
        server: RangeServer, tmp_path: Path) -> None:
    server.faults = Faults(drop_after_bytes=100_000, drops=1000, ignore_range=True)
    with pytest.raises(ArtifactError, match="had to restart from byte 0 3 times"):
        download(f"{server.url}/blob.bin", tmp_path / "blob.bin", SIZE, retries=2, backoff_s=0, progress=False)
