"""Profiles: loading, overrides, the stable hash, and errors that name field, value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from ninferkit.errors import ProfileError
from ninferkit.fleet.spec import FleetFile
from ninferkit.params import load_profile
from ninferkit.params.kinds import KINDS, serve_section
from ninferkit.params.load import yaml_comments
from ninferkit.params.profile import Profile
from tests.conftest import REPO

LOCAL_CPU = REPO / "params" / "local-cpu.yaml"


def test_every_shipped_profile_validates() -> None:
    profiles = sorted((REPO / "params").glob("*.yaml"))
    assert LOCAL_CPU in profiles
    for path in profiles:
        assert load_profile(path).profile.name


def test_overrides_are_typed_and_change_the_hash() -> None:
    base = load_profile(LOCAL_CPU)
    changed = load_profile(LOCAL_CPU, ["serve.max_context=8192", "serve.kv.dtype=q8_0"])
    assert changed.profile.serve.max_context == 8192
    assert changed.profile.serve.kv.dtype == "q8_0"
    assert base.hash == load_profile(LOCAL_CPU).hash
    assert changed.hash != base.hash
    assert len(base.hash) == 12


def test_unknown_field_suggests_the_closest_name() -> None:
    with pytest.raises(ProfileError) as err:
        load_profile(LOCAL_CPU, ["serve.max_contxt=8192"])
    message = str(err.value)
    assert "serve.max_contxt: unknown field" in message
    assert "did you mean 'max_context'" in message


def test_wrong_type_names_field_and_value() -> None:
    with pytest.raises(ProfileError) as err:
        load_profile(LOCAL_CPU, ["serve.port=eighty"])
    assert "serve.port = 'eighty'" in str(err.value)
    assert "valid integer" in str(err.value)


def test_out_of_range_value_says_the_limit() -> None:
    with pytest.raises(ProfileError) as err:
        load_profile(LOCAL_CPU, ["serve.max_concurrency=0"])
    assert "serve.max_concurrency = 0" in str(err.value)
    assert "greater than or equal to 1" in str(err.value)


def test_unknown_engine_kind_lists_the_allowed_kinds() -> None:
    with pytest.raises(ProfileError) as err:
        load_profile(LOCAL_CPU, ["engine.kind=tgi"])
    message = str(err.value)
    assert "engine.kind = 'tgi'" in message
    assert "'ninfer', 'llama_server' or 'vllm'" in message


def test_api_key_must_be_a_variable_name_not_a_key() -> None:
    with pytest.raises(ProfileError, match="serve.api_key_env.*environment variable NAME"):
        load_profile(LOCAL_CPU, ["serve.api_key_env=sk-live-abc123"])


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ProfileError) as err:
        load_profile(LOCAL_CPU, ["serve.port=0", "gpu.arch=volta"])
    assert "serve.port" in str(err.value) and "gpu.arch" in str(err.value)


def test_malformed_override_says_the_expected_shape() -> None:
    with pytest.raises(ProfileError, match=r"section\.field=value"):
        load_profile(LOCAL_CPU, ["serve.max_context"])


def test_missing_profile_file_is_a_profile_error(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="does not exist"):
        load_profile(tmp_path / "nope.yaml")


def test_artifact_needs_exactly_one_source(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nengine: {kind: llama_server}\nartifact: {repo: a/b, filename: m.gguf}\n")
    with pytest.raises(ProfileError, match="needs repo, revision and filename"):
        load_profile(bad)


def test_comments_beside_keys_become_reasons() -> None:
    text = "serve:\n  max_context: 131072   # two slots of 128K\n  kv:\n    dtype: int8  # Volta: bf16 or int8\n"
    assert yaml_comments(text) == {"serve.max_context": "two slots of 128K", "serve.kv.dtype": "Volta: bf16 or int8"}


def test_a_reason_keeps_its_continuation_lines() -> None:
    """params/local-cpu.yaml's reason for serve.threads (llama-server's -t) runs on to a second line; the reader by
    indentation published only the first, which stops mid-sentence ("... 2 threads wait on")."""
    reason = load_profile(REPO / "params" / "local-cpu.yaml").comments["serve.threads"]
    assert reason.startswith("measured on the 2-core CI machine: beside another busy process llama.cpp's 2 threads "
                             "wait on each other (1.2 tok/s decode, 1 thread 51 tok/s)")
    assert reason.endswith("alone 1 thread decodes 49 tok/s, 2 threads 55")


def test_a_comment_at_the_keys_column_or_after_a_blank_line_is_not_a_continuation() -> None:
    text = ("serve:\n  port: 8088    # first\n                # and second\n  # about threads, not port\n"
            "  threads: 1    # one\n\n                # after a blank line\n")
    assert yaml_comments(text) == {"serve.port": "first and second", "serve.threads": "one"}


def test_a_quoted_hash_is_part_of_the_value_not_a_comment() -> None:
    text = ('serve:\n  model_id: "org/model #2"  # the second upload\n  extra_args: ["--alias", "a #b"]\n'
            "  api_key_env: KEY#1\n")
    assert yaml_comments(text) == {"serve.model_id": "the second upload"}


def test_a_bare_name_is_the_profile_of_that_name_in_params(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ninferkit launch local-cpu` reads params/local-cpu.yaml of the working directory (issue 38 item 9)."""
    (tmp_path / "params").mkdir()
    (tmp_path / "params" / "box.yaml").write_text((REPO / "params" / "local-cpu.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    loaded = load_profile("box")
    assert loaded.source == Path("params/box.yaml") and loaded.profile.name == load_profile(
        REPO / "params" / "local-cpu.yaml").profile.name
    with pytest.raises(ProfileError, match=r"profile boxx does not exist; .*here: box \(give the path, e\.g\. "
                                           r"params/box\.yaml, or the bare name, e\.g\. box\)"):
        load_profile("boxx")
    (tmp_path / "box").mkdir()  # a folder of that name is not a profile: still the file in params/
    assert load_profile("box").source == Path("params/box.yaml")


def test_every_text_field_of_a_fixed_form_says_its_rule_in_words() -> None:
    """A value of the wrong form is answered with the rule in words (`params.base.shaped`), never pydantic's regex:
    every field of a profile (each engine's serve options included) and of a fleet file that checks a pattern
    carries its form."""
    seen: set[type[BaseModel]] = set()
    unworded: list[str] = []
    checked = 0

    def walk(model: type[BaseModel]) -> None:
        nonlocal checked
        if model in seen:
            return
        seen.add(model)
        for name, info in model.model_fields.items():
            if any(getattr(item, "pattern", None) for item in info.metadata):
                checked += 1
                extra = info.json_schema_extra
                if not (isinstance(extra, dict) and isinstance(extra.get("form"), str)):
                    unworded.append(f"{model.__name__}.{name}")
            for nested in _models_in(info.annotation):
                walk(nested)

    for root in (Profile, FleetFile, *(serve_section(kind) for kind in KINDS)):
        walk(root)
    assert checked >= 15, checked  # the walk reached the fleet's Slurm fields and the engines' spec methods
    assert not unworded, unworded


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [found for arg in getattr(annotation, "__args__", ()) for found in _models_in(arg)]


def test_a_value_of_the_wrong_form_is_told_the_form_not_a_regex() -> None:
    with pytest.raises(ProfileError) as caught:
        load_profile(LOCAL_CPU, ["serve.spec.method=Ngram Mod",
                                 'variants=[{name: "Big One", set: {serve.threads: 1}}]'])
    said = str(caught.value)
    assert "serve.spec.method = 'Ngram Mod': must be a --spec-type name: lowercase letters, digits and '-'" in said
    assert "variants.0.name = 'Big One': must be 1-40 lowercase letters" in said
    assert "pattern" not in said and "^" not in said


def test_what_a_profile_does_not_reproduce_is_validated() -> None:
    """`not_reproduced` entries need both keys, an item once, and no other key (a misspelt `reason` fails)."""
    entry = '{"item": "seed 004 §四: the Swift-1.5 row", "why": "nothing pins it"}'
    loaded = load_profile(LOCAL_CPU, [f"not_reproduced=[{entry}]"]).profile
    assert [(each.item, each.why) for each in loaded.not_reproduced] == [("seed 004 §四: the Swift-1.5 row",
                                                                         "nothing pins it")]
    with pytest.raises(ProfileError, match="each item once; given more than once"):
        load_profile(LOCAL_CPU, [f"not_reproduced=[{entry}, {entry}]"])
    with pytest.raises(ProfileError, match=r"not_reproduced\.0\.why"):
        load_profile(LOCAL_CPU, ['not_reproduced=[{"item": "seed 004 §四", "reason": "nothing pins it"}]'])
    with pytest.raises(ProfileError, match=r"not_reproduced\.0\.item"):
        load_profile(LOCAL_CPU, ['not_reproduced=[{"item": "", "why": "nothing pins it"}]'])
