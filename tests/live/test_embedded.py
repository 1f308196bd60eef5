"""The llama.cpp build names itself: the built llama-server reports the pinned build number (the build's pipe,
progress and lock without building: tests/unit/engines/test_embedded.py)."""

from __future__ import annotations

import subprocess

from ninferkit.engines.llama_server.embedded import (
    LLAMA_CPP_BUILD_NUMBER,
    LLAMA_CPP_COMMIT,
    build_llama_cpp,
    configure_options,
    configured_with,
)
from ninferkit.params.profile import BuildSection


def test_the_built_server_names_its_llama_cpp_build() -> None:
    binary = build_llama_cpp(BuildSection())["llama-server"]
    assert configured_with(binary.parent.parent) == configure_options(BuildSection())
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    assert f"(build {LLAMA_CPP_BUILD_NUMBER}, commit {LLAMA_CPP_COMMIT})" in version.stdout + version.stderr
