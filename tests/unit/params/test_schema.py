"""The profile's JSON Schema (issue 44 item 7): made from the models that validate profiles, committed where the
profiles' first line points editors to it, and as strict as the loader on what a typo looks like."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import jsonschema
import pytest
import yaml

from ninferkit.params.schema import profile_schema
from tests.conftest import LOCAL_CPU, REPO

COMMITTED = REPO / "docs" / "profile.schema.json"
PROFILES = sorted((REPO / "params").glob("*.yaml"))


def _errors(profile: dict[str, Any]) -> list[str]:
    return [error.message for error in jsonschema.Draft202012Validator(profile_schema()).iter_errors(profile)]


def test_the_committed_schema_is_the_models_own() -> None:
    assert json.loads(COMMITTED.read_text()) == profile_schema(), "run: ninferkit schema -o docs/profile.schema.json"
    printed = subprocess.run([sys.executable, "-m", "ninferkit", "schema"], capture_output=True, text=True, check=True)
    assert json.loads(printed.stdout) == profile_schema()


@pytest.mark.parametrize("path", PROFILES, ids=[path.name for path in PROFILES])
def test_every_profile_names_the_schema_and_passes_it(path: Any) -> None:
    assert path.read_text().splitlines()[0] == "# yaml-language-server: $schema=../docs/profile.schema.json"
    assert _errors(yaml.safe_load(path.read_text())) == []


def test_a_wrong_field_is_flagged_where_the_loader_refuses_it() -> None:
    profile = yaml.safe_load(LOCAL_CPU.read_text())
    profile["serve"]["max_contxt"] = 8192
    assert _errors(profile) == ["Additional properties are not allowed ('max_contxt' was unexpected)"]
    profile = yaml.safe_load(LOCAL_CPU.read_text())
    profile["serve"]["tensor_parallel"] = 2  # a vLLM and NInfer option: llama-server's serve has none
    assert _errors(profile) == ["Additional properties are not allowed ('tensor_parallel' was unexpected)"]
    profile["engine"] = {"kind": "vllm"}
    assert not any("tensor_parallel" in error for error in _errors(profile))  # vLLM's serve takes it
    profile = yaml.safe_load(LOCAL_CPU.read_text())
    profile["sweeps"]["context"]["repetitions"] = 0
    assert _errors(profile) == ["0 is less than the minimum of 1"]
