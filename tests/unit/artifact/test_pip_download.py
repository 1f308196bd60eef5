"""pip's download shown as bytes of a total: a real pip fetches a wheel over loopback HTTP.

The wheel is built here (tests/unit/artifact/test_artifact_package.py's builder) and served by
tests/range_server.py; pip finds it through a local links page (PIP_NO_INDEX + PIP_FIND_LINKS, as a lab points
pip at a mirror).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ninferkit import progress
from ninferkit.pip_download import pip_download
from tests.range_server import RangeServer
from tests.unit.artifact.test_artifact_package import build_wheel

PAYLOAD = bytes(range(256)) * 4096 * 8  # 8 MiB


def test_pips_raw_progress_becomes_bytes_of_a_total(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    wheel = build_wheel(tmp_path / "served", PAYLOAD)
    monkeypatch.setenv(progress.MODE_VARIABLE, "lines")
    monkeypatch.setattr(progress, "LINE_INTERVAL_S", 0.001)  # pip runs for far longer: its last state shows
    with RangeServer(tmp_path / "served") as server:
        links = tmp_path / "links.html"
        links.write_text(f'<a href="{server.url}/{wheel.name}">{wheel.name}</a>\n')
        monkeypatch.setenv("PIP_NO_INDEX", "1")
        monkeypatch.setenv("PIP_FIND_LINKS", str(links))
        done = pip_download(["--no-deps", "--only-binary", ":all:", "toy-model==1.0", "-d", str(tmp_path / "out")],
                            "toy-model==1.0")
    assert done.returncode == 0, done.output
    assert (tmp_path / "out" / wheel.name).read_bytes() == wheel.read_bytes()
    assert f"Progress {wheel.stat().st_size} of {wheel.stat().st_size}" in done.output  # pip's own words, kept
    size = f"{wheel.stat().st_size / 2**20:.1f} MiB"
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("fetching toy-model==1.0 with pip: ")
    assert lines[-1].startswith(f"fetching toy-model==1.0 with pip: {size} of {size} (100%) at "), lines[-1]
    assert lines[-1].endswith("Successfully downloaded toy-model (done)")
