"""llama-server's speculative decoding as a profile setting (serve.spec), checked against the binary's --help.

The --help read here is the real one of the pinned build (the `llama_server` fixture builds or finds it);
the argv is what `ninferkit launch --dry-run` prints.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ninferkit.engines.llama_server.help import binary_help
from ninferkit.errors import ProfileError
from ninferkit.params import load_profile
from ninferkit.server import process as server
from tests.conftest import LOCAL_CPU


def _argv(*overrides: str) -> list[str]:
    return server.planned_argv(load_profile(LOCAL_CPU, list(overrides)).profile)

def test_the_pinned_builds_help_lists_the_spec_types_and_their_options(llama_server: Path) -> None:
    offered = binary_help(llama_server)
    assert offered is not None
    assert {"ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache", "draft-mtp"} <= \
        set(offered.spec_types)
    assert {"--spec-type", "--spec-ngram-mod-n-match", "--spec-ngram-mod-n-min", "--spec-ngram-mod-n-max",
            "--spec-draft-n-max", "--no-repack", "-nr", "-ctk", "--cache-type-k", "-h"} <= offered.options
    assert "--draft-max" in offered.options  # listed, as "the argument has been removed": a name, not a promise

def test_the_embedded_default_launches_with_ngram_mod(llama_server: Path) -> None:
    argv = _argv()
    at = argv.index("--spec-type")
    assert argv[at:at + 8] == ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "24",
                               "--spec-ngram-mod-n-min", "48", "--spec-ngram-mod-n-max", "64"]
    assert "--spec-type" not in _argv("serve.spec={}")  # the A/B's other server

@pytest.mark.parametrize(("overrides", "message"), [
    (["serve.spec.method=ngram-foo"], "serve.spec.method = 'ngram-foo': not a --spec-type of llama-server; "
                                      "allowed: draft-simple, .*ngram-mod, ngram-cache"),
    (["serve.spec.options.n-maxx=3"], "serve.spec.options.n-maxx: llama-server has no --spec-ngram-mod-n-maxx; "
                                      "ngram-mod's options: n-match, n-max, n-min"),
    (["serve.spec.method=ngram-cache"], "serve.spec.options.n-match: llama-server has no "
                                        "--spec-ngram-cache-n-match; ngram-cache's options: none"),
    (["serve.spec.method=none"], "write null to turn speculative decoding off"),
    (["serve.spec.method=null"], "options of no method"),
])
def test_a_spec_the_build_lacks_is_refused_by_its_field(llama_server: Path, overrides: list[str],
                                                        message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        _argv(*overrides)

def test_draft_types_take_the_shared_draft_options(llama_server: Path) -> None:
    argv = _argv("serve.spec={method: draft-simple, options: {n-max: 8, model: /m/draft.gguf}}")
    at = argv.index("--spec-type")  # the options in their order, wherever the rest of the argv puts them
    assert argv[at:at + 6] == ["--spec-type", "draft-simple", "--spec-draft-n-max", "8",
                               "--spec-draft-model", "/m/draft.gguf"]
