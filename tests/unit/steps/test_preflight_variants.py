"""Variants that cannot start are refused before the first launch, each line naming the variant and the field.

The profile is the embedded default (params/local-cpu.yaml) or a seed profile of params/, with variants given as
`-p` gives them; nothing here launches or downloads (the checks are preflight's, which the runner asks before it
writes anything). A flag the build's `--help` lacks needs the built llama-server, so that refusal is checked
live (tests/live/test_variants.py).
"""

from __future__ import annotations

import pytest

from ninferkit.errors import ProfileError
from ninferkit.params import load_profile
from ninferkit.steps import preflight
from tests.conftest import LOCAL_CPU, REPO


def _problems(variants: str, *more: str, profile: object = LOCAL_CPU) -> list[str]:
    loaded = load_profile(profile, [f"variants={variants}", *more])  # type: ignore[arg-type]
    return preflight.problems(loaded.profile, ["launch", "sweeps"])


def test_a_field_the_engine_lacks_and_a_value_out_of_range_name_the_variant_and_the_field() -> None:
    found = _problems("[{name: typo, set: {serve.thread: 2}}, {name: tiny, set: {serve.max_context: 16}}]")
    assert any(line.startswith("variant 'typo': serve.thread: unknown field; did you mean 'threads'?")
               for line in found), found
    assert any(line.startswith("variant 'tiny': serve.max_context = 16") for line in found), found


def test_a_variant_that_changes_nothing_measured_is_refused() -> None:
    found = _problems("[{name: other-port, set: {serve.port: 9099, serve.startup_timeout_s: 60}}]")
    assert found == ["variant 'other-port': set serve.port, serve.startup_timeout_s changes nothing that is "
                     "measured (the same serving as the profile's own, the same cells); allowed: a serve option that "
                     "changes behaviour, gpu.power_limit_w, or cells of its own (sweeps.*)"]
    assert _problems("[{name: long-out, set: {sweeps.context.output_tokens: 320}, kinds: [context]}]") == []


def test_a_power_limit_this_machine_cannot_set_is_refused_on_the_machine_that_runs() -> None:
    """The profile alone plans it (a dry run, a fleet's check elsewhere); the run's own check, on its machine, refuses
    it (this machine has no nvidia-smi, or no root) before anything is written."""
    loaded = load_profile(LOCAL_CPU, ["variants=[{name: w300, set: {gpu.power_limit_w: 300}}]"])
    assert preflight.problems(loaded.profile, ["launch", "sweeps"]) == []
    preflight.check(loaded, ["launch", "sweeps"], here=False)
    found = preflight.machine_problems(loaded.profile, ["launch", "sweeps"])
    assert len(found) == 1 and found[0].startswith("variant 'w300': gpu.power_limit_w = 300: ")
    assert "root" in found[0] or "nvidia-smi is not installed" in found[0]
    with pytest.raises(ProfileError, match="variant 'w300': gpu.power_limit_w = 300: "):
        preflight.check(loaded, ["launch", "sweeps"])
    assert preflight.machine_problems(loaded.profile, ["launch"]) == []  # no sweeps, no variant launch


def test_a_pool_the_stated_memory_cannot_hold_is_refused_with_its_numbers() -> None:
    """Seed 003's RTX 3090 (24 GiB): 2 x 262,144 tokens of its groupwise layout need more than the card has."""
    found = _problems("[{name: long, set: {serve.max_context: 262144, serve.kv.capacity: 524288}}]",
                      profile=REPO / "params" / "ninfer-rtx3090-groupwise.yaml")
    memory = [line for line in found if "holds" in line]
    assert len(memory) == 1 and memory[0].startswith("variant 'long': serve.kv: a pool of 524,288 tokens holds ")
    assert "more than the 24.00 GiB the profile states the device has" in memory[0]


def test_a_sweep_kind_a_variant_names_must_exist() -> None:
    found = _problems("[{name: ub, set: {serve.threads: 2}, kinds: [concurency]}]")
    assert any("variant 'ub': kinds: unknown sweep kind(s) concurency" in line for line in found), found


@pytest.mark.parametrize(("variants", "words"), [
    ("[{name: base, set: {serve.threads: 2}}]", "'base' names the profile's own serving"),
    ("[{name: a, set: {serve.threads: 2}}, {name: a, set: {serve.threads: 3}}]", "variant name(s) a given twice"),
    ("[{name: m, set: {artifact.sha256: abc}}]", "a variant changes serve.* fields or gpu.power_limit_w"),
    ("[{name: e, set: {}}]", "variants.0.set"),
])
def test_the_profile_itself_refuses_what_no_variant_can_be(variants: str, words: str) -> None:
    with pytest.raises(ProfileError) as refused:
        load_profile(LOCAL_CPU, [f"variants={variants}"])
    assert words in str(refused.value)


def test_a_good_variant_passes_and_the_base_profile_keeps_its_hash() -> None:
    assert _problems("[{name: t2, set: {serve.threads: 2}}]") == []
    assert load_profile(LOCAL_CPU).hash == load_profile(LOCAL_CPU, ["variants=[]"]).hash


def test_an_objective_names_figures_the_rows_have_and_largest_a_numeric_cell_parameter() -> None:
    """Goodput is a figure the objective computes; `largest` needs no variant (the base's own cells answer it), and
    must be a numeric parameter of the sweep's cells; any other objective needs variants to choose among."""
    goodput = ("objective={sweep: concurrency, maximize: goodput_tok_s, ordered: true, goodput: {ttft_s: 2}}")
    assert _problems("[{name: t2, set: {serve.threads: 2}}]", goodput) == []
    largest = "objective={{sweep: context, largest: {}, at_least: {{decode_tok_s_server: 10}}}}"
    assert _problems("[]", largest.format("target_prompt_tokens")) == []
    found = _problems("[]", largest.format("api"))
    assert len(found) == 1 and found[0].startswith("objective.largest = 'api': not a numeric cell parameter of the "
                                                   "context sweep; allowed: ")
    assert "target_prompt_tokens" in found[0]
    found = _problems("[]", "objective={sweep: concurrency, maximize: decode_tok_s_server}")
    assert len(found) == 1 and found[0].startswith("objective: it chooses among the profile's variants, and it has "
                                                   "none")
