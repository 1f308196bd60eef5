"""Verification of files: `.ninfer` headers v1/v2/v3 (built per reference §6), sha256, size, engine
compatibility with pin advice, and damaged or foreign files reported as problems, not crashes."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from ninferkit.artifact import check_container_compatibility, read_container, sha256_file, verify_file
from ninferkit.engines import get_adapter
from ninferkit.params import validate_profile
from tests.ninfer_files import write_v1_v2, write_v3

V2_PIN = "c8b8c1c0df4c74df3c190c6aa3a7f24dc614721c"
V3_PIN = "81f924d4" + "0" * 32


def test_v1_v2_v3_headers_are_read_with_their_identity(tmp_path: Path) -> None:
    v1 = read_container(write_v1_v2(tmp_path / "a.ninfer", 1))
    v2 = read_container(write_v1_v2(tmp_path / "b.ninfer", 2))
    v3 = read_container(write_v3(tmp_path / "c.ninfer"))
    assert (v1.version, v1.identity, v1.problems) == (1, {"model_id": "qwen3.6-27b"}, [])
    assert (v2.version, v2.identity["weights_id"], v2.problems) == (2, "groupwise-int", [])
    assert v3.version == 3 and v3.identity["name"] == "qwen3.8-27b" and v3.problems == []
    assert v1.payload_offset == v2.payload_offset == 4096 and v1.object_count == 3
    assert v1.tensor_formats == {"BF16": 3} and v3.tensor_formats == {"bf16": 3}
    assert v3.artifact_id is not None and v1.artifact_id is None


def test_v3_continuation_parts_are_checked(tmp_path: Path) -> None:
    entry = write_v3(tmp_path / "m.ninfer", parts=2)
    info = read_container(entry)
    assert [p.path for p in info.parts] == ["m.ninfer.part-0001", "m.ninfer.part-0002"]
    assert all(not p.problems for p in info.parts)
    second = tmp_path / "m.ninfer.part-0002"
    second.write_bytes(second.read_bytes()[:-10])
    (tmp_path / "m.ninfer.part-0001").unlink()
    report = verify_file(entry)
    assert not report.ok
    assert any("m.ninfer.part-0001 is missing" in p for p in report.problems)
    assert any("part-0002: truncated" in p for p in report.problems)


def test_truncated_files_are_reported_as_truncated(tmp_path: Path) -> None:
    whole = write_v1_v2(tmp_path / "whole.ninfer", 2).read_bytes()
    cuts = {"payload": 4096 + 100, "json": 40, "header": 10}
    for where, length in cuts.items():
        path = tmp_path / f"cut-{where}.ninfer"
        path.write_bytes(whole[:length])
        report = verify_file(path)
        assert not report.ok, where
        assert report.container_version == 2, where
        assert any(p.startswith("truncated") for p in report.problems), (where, report.problems)
    v3 = write_v3(tmp_path / "v3.ninfer")
    v3.write_bytes(v3.read_bytes()[:-1])
    assert any("truncated: the entry should be" in p for p in verify_file(v3).problems)


def test_non_ninfer_files(tmp_path: Path) -> None:
    foreign = tmp_path / "model.ninfer"
    foreign.write_bytes(b"GGUF\x03\x00\x00\x00" + os.urandom(100))
    report = verify_file(foreign)
    assert report.container_version is None and not report.ok
    assert report.problems[0].startswith("not an NInfer container: the first 8 bytes are 4747554603000000")
    empty = tmp_path / "empty.ninfer"
    empty.touch()
    assert verify_file(empty).problems[0].startswith("not an NInfer container")
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(foreign.read_bytes())
    plain = verify_file(gguf)
    assert plain.ok and plain.container_version is None  # not .ninfer and nothing expected: no problem
    assert not verify_file(gguf, accepted_versions={2}).ok  # an engine that reads only containers
    assert verify_file(tmp_path / "absent.ninfer").problems == [f"file not found: {tmp_path / 'absent.ninfer'}"]


def test_corrupted_byte_and_wrong_size_are_named_with_expected_and_actual(tmp_path: Path) -> None:
    path = write_v1_v2(tmp_path / "m.ninfer", 2)
    good_sha, size = sha256_file(path).hexdigest, path.stat().st_size
    assert verify_file(path, size, good_sha).ok
    data = bytearray(path.read_bytes())
    data[5000] ^= 0x01
    path.write_bytes(bytes(data))
    bad = verify_file(path, size, good_sha)
    assert bad.problems == [f"sha256: expected {good_sha}, actual {hashlib.sha256(data).hexdigest()}"]
    wrong_size = verify_file(path, size + 1)
    assert wrong_size.problems == [f"size_bytes: expected {size + 1}, actual {size}"]


def test_sha256_matches_hashlib_across_block_boundaries(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    data = os.urandom(3 * 1024 * 1024 + 17)
    path.write_bytes(data)
    result = sha256_file(path, block_bytes=1024 * 1024)
    assert result.hexdigest == hashlib.sha256(data).hexdigest() and result.bytes == len(data)


def test_compatibility_advice_names_the_revision_to_pin() -> None:
    assert check_container_compatibility(2, {1, 2}, {2: V2_PIN}) == []
    assert check_container_compatibility(None, {1, 2}, {}) == []
    assert check_container_compatibility(3, None, {}) == []
    [refused] = check_container_compatibility(3, {1, 2}, {1: "old", 2: V2_PIN, 3: V3_PIN})
    assert "container v3 is not readable by this engine build (it reads v1, v2)" in refused
    assert f"pin revision {V2_PIN} (container v2) instead" in refused
    [reverse] = check_container_compatibility(2, {3}, {2: V2_PIN, 3: V3_PIN})
    assert f"pin revision {V3_PIN} (container v3)" in reverse
    [unknown] = check_container_compatibility(3, {1, 2}, {})
    assert "carries container v2 or v1" in unknown and "artifact.container_revisions" in unknown


def test_v3_file_refused_for_a_v2_only_engine_with_pin_advice(tmp_path: Path) -> None:
    path = write_v3(tmp_path / "m.ninfer")
    report = verify_file(path, accepted_versions={1, 2}, container_pins={2: V2_PIN})
    assert report.container_version == 3 and not report.ok
    assert report.problems == [
        f"container v3 is not readable by this engine build (it reads v1, v2); pin revision {V2_PIN} "
        "(container v2) instead"]


def test_v3_refused_through_the_ninfer_adapter(tmp_path: Path) -> None:
    """The build table decides (geoffwatts, G1, reads v2 only: reference §6); the profile supplies the pin."""
    profile = validate_profile({
        "name": "g1", "engine": {"kind": "ninfer", "fork": "geoffwatts/ninfer-v100"},
        "artifact": {"repo": "neroued/Qwen3.8-27B-NInfer", "revision": V3_PIN, "filename": "m.ninfer",
                     "container_revisions": {2: V2_PIN}},
    })
    accepted = get_adapter(profile.engine.kind).accepted_container_versions(profile)
    assert accepted is not None and 3 not in accepted
    report = verify_file(write_v3(tmp_path / "m.ninfer"), accepted_versions=accepted,
                         container_pins=profile.artifact.container_revisions)
    assert any(f"pin revision {V2_PIN}" in p for p in report.problems)
    assert verify_file(write_v1_v2(tmp_path / "ok.ninfer", 2), accepted_versions=accepted).ok


@pytest.mark.parametrize("version", [1, 2, 3])
def test_declared_container_version_is_checked(tmp_path: Path, version: int) -> None:
    path = write_v3(tmp_path / "m.ninfer") if version == 3 else write_v1_v2(tmp_path / "m.ninfer", version)
    assert verify_file(path, expected_container_version=version).ok
    other = 1 + version % 3
    assert f"container_version: expected {other}, actual {version}" in verify_file(
        path, expected_container_version=other).problems


def test_damaged_header_length_is_a_problem_not_a_huge_read(tmp_path: Path) -> None:
    path = write_v1_v2(tmp_path / "m.ninfer", 1)
    data = bytearray(path.read_bytes())
    data[8:16] = (2**40).to_bytes(8, "little")
    path.write_bytes(bytes(data))
    assert verify_file(path).problems == [
        f"json_bytes {2**40} is not a plausible directory size (1..{256 * 1024 * 1024})"]
