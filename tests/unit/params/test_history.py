"""Issue 38: a profile an older ninferkit recorded is read by today's schema through the schema's history.

Data: every manifest.json the repository holds (docs/examples/*, tests/data/*: runs recorded by ninferkit from
before 4962535 to today, and the live NInfer captures of tests/data/ninfer_live); the edge cases are those
manifests with one field changed.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ninferkit.errors import ProfileError
from ninferkit.params.history import SHARED, upgrade
from ninferkit.rundir.recorded import read_recorded
from tests.conftest import DATA, REPO

RECORDED = sorted({*REPO.glob("docs/examples/**/manifest.json"), *DATA.glob("**/manifest.json")})
G1_RUN = DATA / "ninfer_live" / "g1-h200" / "run" / "manifest.json"
LLAMA_RUN = DATA / "run_dirs" / "embedded-1" / "manifest.json"


def profile_of(path: Path) -> dict[str, Any]:
    profile: dict[str, Any] = json.loads(path.read_text())["profile"]
    return profile


@pytest.mark.parametrize("path", [p for p in RECORDED if "profile" in json.loads(p.read_text())],
                         ids=lambda p: str(p.relative_to(REPO).parent))
def test_every_recorded_run_reads_by_todays_schema(path: Path) -> None:
    recorded = read_recorded(json.loads(path.read_text()))
    for each in recorded.upgraded.read:  # each field read anew is one the profile recorded
        parent, _, name = each.field.rpartition(".")
        node: Any = profile_of(path)
        for part in parent.split("."):
            node = node[part]
        assert node[name] == each.value


def test_the_live_g1_run_reads_as_its_forks_build() -> None:
    recorded = read_recorded(json.loads(G1_RUN.read_text()))
    assert recorded.profile.engine.fork == "ziworkslab/ninfer-3090-ubuntu"
    assert recorded.recorded_by == ("an unrecorded ninferkit older than 9dd358c (its profile has a field that "
                                    "commit removed)")
    assert [each.field for each in recorded.upgraded.read if each.how] == ["engine.generation"]


def test_a_generation_with_no_fork_reads_as_the_one_build_of_that_interface() -> None:
    profile = profile_of(G1_RUN)
    profile["engine"].update(generation="G0", fork=None)
    read = upgrade(profile)
    assert read.profile.engine.fork == "Neroued/ninfer"
    assert read.summary().startswith('engine.generation "G0" -> engine.fork Neroued/ninfer, the one build of the '
                                     "NInfer build table with interface G0 (9dd358c)")


def test_a_generation_several_builds_share_is_refused_naming_them() -> None:
    profile = profile_of(G1_RUN)
    profile["engine"]["fork"] = None
    with pytest.raises(ProfileError) as refused:
        upgrade(profile)
    assert 'engine.generation = "G1" cannot be read by this ninferkit' in str(refused.value)
    assert "3 builds of the NInfer build table have interface G1 (geoffwatts/ninfer-v100, " in str(refused.value)


@pytest.mark.parametrize(("path", "where", "value", "said"), [
    (LLAMA_RUN, ("serve", "tensor_parallel"), 2, "serve.tensor_parallel = 2"),
    (LLAMA_RUN, ("serve", "spec", "draft_tokens"), 4, "serve.spec.draft_tokens = 4"),
    (LLAMA_RUN, ("capacity", "search_concurrency"), 4, "capacity.search_concurrency = 4"),
])
def test_a_removed_field_that_said_something_is_refused_naming_it(path: Path, where: tuple[str, ...], value: int,
                                                                  said: str) -> None:
    profile = profile_of(path)
    node = profile
    for part in where[:-1]:
        node = node[part]
    node[where[-1]] = value
    with pytest.raises(ProfileError) as refused:
        upgrade(profile)
    assert f"{said} cannot be read by this ninferkit: the field was removed at " in str(refused.value)
    assert "today's profile has no field that says" in str(refused.value)


def test_a_field_ninfer_still_has_is_kept_where_llama_server_lost_it() -> None:
    ninfer = profile_of(G1_RUN)
    ninfer["serve"]["cors"] = True  # NInfer's serve section still has --cors
    assert upgrade(ninfer).profile.serve.model_dump()["cors"] is True
    assert "serve.cors" not in [each.field for each in upgrade(ninfer).read]


def test_vllms_recorded_build_is_dropped_whatever_it_held() -> None:
    profile = profile_of(REPO / "docs" / "examples" / "h200-vllm" / "manifest.json")
    default = copy.deepcopy(profile)
    profile["engine"]["build"]["backend"] = "cuda"
    assert [each.how for each in upgrade(default).read] == [None]
    assert [each.how for each in upgrade(profile).read] == ["dropped: this engine runs as installed and never read it"]


def test_every_rule_names_the_commit_that_removed_its_field() -> None:
    for rule in SHARED:
        sha, date = rule.commit.split()
        assert len(sha) == 7 and date.startswith("(2026-")
