"""The declared dependency floors are versions the code works with: a fresh virtual environment gets exactly
the floor of every requirement in pyproject.toml (`name>=X` installed as `name==X`), on the lowest Python
the project supports, and the tests that call into those packages run there against this checkout.

It needs a package index and a Python 3.11 interpreter, and takes minutes (on the 2-core development VM:
about 2 minutes to install from the index, 1 minute for the tests), so it carries the `live` marker: the
quick `-m "not live"` run leaves it out, and CI, which runs the whole suite (`./scripts/test`), runs it.
Without an index or a Python 3.11 it is skipped, saying which.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.conftest import REPO

FLOOR_PYTHON = (3, 11)
"""pyproject's requires-python floor: the floors are the lowest versions that install and work there."""
NAMES = ("test_params", "test_client", "test_client_stream", "test_latency", "test_report", "test_report_compare",
         "test_capacity_architecture", "test_telemetry", "test_packaging", "test_cli_diagnose", "test_h200_captured",
         "test_server_processes", "test_console")
TESTS = [str(path.relative_to(REPO)) for name in NAMES
         for path in sorted((REPO / "tests" / "unit").rglob(f"{name}.py"))]
"""The tests that reach each dependency (found by name wherever tests/unit keeps them): pydantic, PyYAML and
ruamel.yaml (profiles and their comments),
prometheus_client (telemetry's /metrics), psutil (the server's process group), httpx and sniffio (the client),
numpy (latency, capacity), pandas, pyarrow and matplotlib (tables and the write-up), gguf (GGUF headers
and KV layouts), nvidia-ml-py (telemetry), papermill, nbformat and JupyterLab's kernel (packaging), tqdm, rich
(the console's tables)."""


def floors(requirements: list[str]) -> list[str]:
    """`name==X` for every `name>=X` (a requirement without a floor is an error: it would float)."""
    pinned = []
    for requirement in requirements:
        match = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*>=\s*([0-9][^,;\s]*)\s*", requirement)
        assert match, f"{requirement!r} states no floor (name>=version)"
        pinned.append(f"{match[1]}=={match[2]}")
    return pinned


def floor_python() -> str | None:
    if sys.version_info[:2] == FLOOR_PYTHON:
        return sys.executable
    return shutil.which(f"python{FLOOR_PYTHON[0]}.{FLOOR_PYTHON[1]}")


def test_every_requirement_states_a_floor() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">={}.{}".format(*FLOOR_PYTHON)
    pinned = floors(project["dependencies"])
    assert "gguf==0.16.0" in pinned  # ReaderField.contents(), which the generated model copies its tokenizer with


def test_the_code_works_with_every_floor(tmp_path: Path) -> None:
    assert len(TESTS) == len(NAMES), TESTS  # each named test file found once, wherever tests/unit keeps it
    python = floor_python()
    if python is None:
        pytest.skip("no Python {}.{} interpreter to install the floors for".format(*FLOOR_PYTHON))
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    runner = [r for r in project["optional-dependencies"]["test"] if r.startswith("pytest")]  # not the linters
    pinned = floors(project["dependencies"]) + floors(runner)
    venv = tmp_path / "floors"
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    probe = subprocess.run([*pip, "download", "--no-deps", "--dest", str(tmp_path / "probe"), "sniffio==1.3.0"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no package index reachable: {probe.stderr.strip().splitlines()[-1:]}")
    installed = subprocess.run([*pip, "install", "--quiet", *pinned], capture_output=True, text=True)
    assert installed.returncode == 0, f"the floors do not install together:\n{installed.stderr[-3000:]}"
    listed = subprocess.run([*pip, "list", "--format=freeze"], capture_output=True, text=True, check=True).stdout
    kept = {canonicalize_name(name): Version(version)
            for name, version in (line.split("==") for line in listed.splitlines() if "==" in line)}
    for requirement in pinned:  # what pip kept is the floor, not a newer release a dependency pulled in
        name, version = requirement.split("==")
        assert kept.get(canonicalize_name(name)) == Version(version), (requirement, kept.get(canonicalize_name(name)))
    env = {**os.environ, "PYTHONPATH": str(REPO), "NINFERKIT_CACHE": str(tmp_path / "cache")}
    # A floor's own deprecation warnings about its newer transitive dependencies (matplotlib 3.7 calls
    # pyparsing's parseString, deprecated in pyparsing 3.3) are not the code failing; every other warning
    # stays an error, as in the suite.
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "-q", "-m", "not live", "-p",
                           "no:cacheprovider", "-W", "ignore::DeprecationWarning", *TESTS],
                          cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"with the floors installed:\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
