"""`ninferkit verify` (profile and --file forms), engine-binary checks, and the 01_artifact_verify
notebook run headless under papermill for the embedded default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ninferkit.artifact import sha256_file
from ninferkit.cli import main
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
