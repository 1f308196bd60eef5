"""Downloads against a hostile or broken server (a real HTTP server on loopback, tests/range_server.py):
a body that never ends, more bytes than the file has, a redirect loop, a redirect away from HTTP, a
redirect to another host (which must not get the token), and artifact fields that would leave their
folder. Each ends in one clear error, with nothing written past the bound."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import ninferkit.artifact.fetch as fetch
from ninferkit.artifact import download, sha256_file
from ninferkit.errors import ArtifactError, ChecksumMismatch
from ninferkit.rundir.runs import open_run
from ninferkit.steps.verify import verify
from tests.range_server import Faults, RangeServer

COMMIT = "dc370fb6295a" + "7" * 28
SIZE = 2 * 1024 * 1024 + 77


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[RangeServer]:
    root = tmp_path / "served"
    root.mkdir()
    (root / "blob.bin").write_bytes(os.urandom(SIZE))
    with RangeServer(root) as running:
        yield running


def _sha(server: RangeServer) -> str:
    return sha256_file(server.root / "blob.bin").hexdigest


def test_endless_body_is_cut_off_at_the_pinned_size(server: RangeServer, tmp_path: Path) -> None:
    server.faults = Faults(endless=True)
    dest = tmp_path / "blob.bin"
    started = time.monotonic()
    with pytest.raises(ChecksumMismatch, match=r"sent more than the pinned size_bytes \(2,097,229 bytes\)"):
        download(f"{server.url}/blob.bin", dest, SIZE, _sha(server), backoff_s=0, progress=False)
    assert time.monotonic() - started < 30
    assert not dest.exists() and not fetch.part_path(dest).exists()
    assert len(server.log) == 1  # not retried: more bytes will not make it right


def test_trailing_bytes_past_the_file_are_refused(server: RangeServer, tmp_path: Path) -> None:
    server.faults = Faults(trailing_bytes=10)
    dest = tmp_path / "blob.bin"
    with pytest.raises(ChecksumMismatch, match="sent more than the pinned size_bytes"):
        download(f"{server.url}/blob.bin", dest, SIZE, None, backoff_s=0, progress=False)
    assert not dest.exists() and not fetch.part_path(dest).exists()


def test_endless_body_without_any_size_stops_at_the_disk_reserve(server: RangeServer, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing pins or announces the size: the bound is the disk's free space less the reserve. The
    reserve is set so that about 8 MiB may be written here (the test must not fill the disk)."""
    server.faults = Faults(endless=True)
    monkeypatch.setattr(fetch, "DISK_RESERVE_BYTES", shutil.disk_usage(tmp_path).free - 8 * 1024 * 1024)
    dest = tmp_path / "blob.bin"
    with pytest.raises(ChecksumMismatch, match="what the disk can spare"):
        download(f"{server.url}/blob.bin", dest, None, None, backoff_s=0, progress=False)
    assert not fetch.part_path(dest).exists()
    assert server.log[0].body_bytes < 64 * 1024 * 1024


def test_a_trickling_server_stops_at_the_speed_floor_and_the_rerun_resumes(server: RangeServer,
                                                                            tmp_path: Path) -> None:
    """A body at ~4 KB/s is never silent for the read timeout; the floor (here 64 KB/s over 0.5 s, the
    default is 1 KiB/s over 30 s) stops it with the bytes so far kept, and the next try resumes from them."""
    server.faults = Faults(trickle_bytes_per_s=4096)
    dest = tmp_path / "blob.bin"
    floor = fetch.SpeedFloor(bytes_per_s=64 * 1024, window_s=0.5)
    with pytest.raises(ArtifactError, match=r"stopped: [\d,]+ bytes in the last [\d.]+ s, below the floor of "
                                            r"65,536 bytes/s over 0\.5 s; [\d,]+ bytes are kept in .*blob\.bin\.part"):
        download(f"{server.url}/blob.bin", dest, SIZE, _sha(server), speed_floor=floor, progress=False)
    kept = fetch.part_path(dest).stat().st_size
    assert 0 < kept < SIZE and len(server.log) == 1  # not retried against the same trickle
    server.faults = Faults()
    result = download(f"{server.url}/blob.bin", dest, SIZE, _sha(server), speed_floor=floor, progress=False)
    assert (result.resumed_from_bytes, server.log[-1].range) == (kept, f"bytes={kept}-")
    assert dest.stat().st_size == SIZE


def test_redirect_loop_is_an_error_at_once(server: RangeServer, tmp_path: Path) -> None:
    server.faults = Faults(redirect=f"{server.url}/blob.bin")
    with pytest.raises(ArtifactError, match="redirect loop"):
        download(f"{server.url}/blob.bin", tmp_path / "blob.bin", SIZE, backoff_s=0, progress=False)
    assert len(server.log) == 21  # httpx's limit of 20 redirects, then no retry


def test_redirect_away_from_http_is_an_error_at_once(server: RangeServer, tmp_path: Path) -> None:
    server.faults = Faults(redirect="file:///etc/passwd")
    with pytest.raises(ArtifactError, match="redirect away from http/https"):
        download(f"{server.url}/blob.bin", tmp_path / "blob.bin", SIZE, backoff_s=0, progress=False)
    assert len(server.log) == 1


def test_token_goes_to_the_pinned_host_only(server: RangeServer, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub (127.0.0.1) redirects to a CDN on another host (127.0.0.2): the file comes from there,
    the token does not go there."""
    with RangeServer(server.root, host="127.0.0.2") as cdn:
        server.faults = Faults(redirect=f"{cdn.url}/blob.bin")
        monkeypatch.setenv("HF_TOKEN", "hf_only_for_the_hub_9931")
        run = _hub_run(tmp_path, server, filename="blob.bin", sha256=_sha(server), size_bytes=SIZE)
        verify(run, progress=False)
        assert [entry.authorization for entry in server.log] == ["Bearer hf_only_for_the_hub_9931"]
        assert [entry.authorization for entry in cdn.log] == [None]
    assert sha256_file(tmp_path / "models" / "blob.bin").hexdigest == _sha(server)


def _hub_run(tmp_path: Path, server: RangeServer, **artifact: Any) -> Any:
    data = {"name": "hub", "engine": {"kind": "llama_server"},
            "artifact": {"repo": "org/model", "revision": COMMIT, "endpoint": server.url,
                         "local_dir": str(tmp_path / "models"), **artifact}}
    path = tmp_path / "hub.yaml"
    path.write_text(yaml.safe_dump(data))
    return open_run(path, tmp_path / "run")


# -- fields that would leave their folder: one clear error, exit 2, before anything is written --------

TRAVERSALS = [
    ({"artifact": {"repo": "org/m", "revision": COMMIT, "filename": "../../outside.gguf"}}, "artifact.filename"),
    ({"artifact": {"repo": "org/m", "revision": COMMIT, "filename": "/etc/passwd"}}, "artifact.filename"),
    ({"artifact": {"repo": "../../org/m", "revision": COMMIT, "filename": "m.gguf"}}, "artifact.repo"),
    ({"artifact": {"repo": "org/..%2f..", "revision": COMMIT, "filename": "m.gguf"}}, "artifact.repo"),
    ({"artifact": {"url": "http://127.0.0.1:9/a/..%2F..%2Foutside"}}, "artifact.url"),
    ({"artifact": {"url": "file:///etc/passwd"}}, "artifact.url"),
    ({"name": "../../outside", "artifact": {"url": "http://127.0.0.1:9/m.gguf"}}, "name"),
    ({"artifact": {"repo": "org/m", "revision": COMMIT, "filename": "ckpt", "files": {"a/../../x": {}}}},
     "artifact.files"),
]


@pytest.mark.parametrize(("fields", "named"), TRAVERSALS, ids=[f"{n}:{i}" for i, (_, n) in enumerate(TRAVERSALS)])
def test_paths_that_leave_their_folder_are_refused(tmp_path: Path, fields: dict[str, Any], named: str) -> None:
    profile = {"name": "t", "engine": {"kind": "llama_server"}, **fields}
    profile["artifact"] = {"local_dir": str(tmp_path / "models"), **profile["artifact"]}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(profile))
    run_dir = tmp_path / "runs" / "r"
    done = subprocess.run([sys.executable, "-m", "ninferkit", "verify", str(path), "--run-dir", str(run_dir)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["p.yaml"]  # nothing written, anywhere
