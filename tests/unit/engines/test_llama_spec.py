"""llama-server's speculative decoding as a profile setting (serve.spec), checked against the binary's --help.

The --help read here is the real one of the pinned build (the `llama_server` fixture builds or finds it);
the argv is what `ninferkit launch --dry-run` prints.
"""

from __future__ import annotations

from pathlib import Path

from ninferkit.engines import get_adapter
from ninferkit.engines.llama_server.help import read_help
from ninferkit.params import load_profile
from ninferkit.server import process as server
from tests.conftest import LOCAL_CPU

ADAPTER = get_adapter("llama_server")


def _argv(*overrides: str) -> list[str]:
    return server.planned_argv(load_profile(LOCAL_CPU, list(overrides)).profile)


def test_a_binary_that_cannot_be_asked_is_not_guessed_at(tmp_path: Path) -> None:
    missing = tmp_path / "llama-server"
    argv = _argv(f"engine.binary={missing}", "serve.spec.method=ngram-whatever", "serve.spec.options={}")
    assert argv[argv.index("--spec-type") + 1] == "ngram-whatever"  # checked when the launch has a binary


def test_help_without_spec_type_reads_as_no_spec_types() -> None:
    older = read_help("-h,    --help, --usage                  print usage and exit\n"
                      "--draft-max N                           number of tokens to draft\n")
    assert older.spec_types == () and older.options == {"-h", "--help", "--usage", "--draft-max"}


def test_the_recipe_names_the_profile_field_of_each_spec_flag() -> None:
    assert ADAPTER.profile_field_of("--spec-type") == "serve.spec.method"
    assert ADAPTER.profile_field_of("--spec-ngram-mod-n-max") == "serve.spec.options.n-max"
    assert ADAPTER.profile_field_of("--spec-ngram-map-k4v-size-n") == "serve.spec.options.size-n"
    assert ADAPTER.profile_field_of("--spec-draft-p-min") == "serve.spec.options.p-min"
    assert ADAPTER.profile_field_of("-ctk") is None


def test_speculation_is_part_of_the_capacity_setting() -> None:
    serve = load_profile(LOCAL_CPU).profile.serve
    assert serve.speculation() == ("ngram-mod", 64)
    assert load_profile(LOCAL_CPU, ["serve.spec={}"]).profile.serve.speculation() == (None, None)
