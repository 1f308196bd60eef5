"""The AMX rule on the real embedded model (SmolLM2's Q4_1 file, fetched through pip): its weight type is read
from the file, the setup finding says why, and the launch adds --no-repack on a CPU with AMX flags (passed in,
never read from this machine). The rule itself and the crash diagnosis: tests/unit/engines/test_llama_amx_repack.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ninferkit.artifact import model_path, planned_path
from ninferkit.engines import get_adapter
from ninferkit.engines.llama_server import adapter as llama_adapter
from ninferkit.engines.llama_server.amx import file_type, repack_hazard
from ninferkit.host.cpu import HostCPU, host_cpu
from ninferkit.params import load_profile
from ninferkit.rundir.records import ProbeFacts
from ninferkit.rundir.runs import open_run
from ninferkit.server import process as server
from ninferkit.steps import probe
from ninferkit.steps.verify import verify
from tests.conftest import DATA, LOCAL_CPU, REPO

GENERATED = DATA / "profiles" / "generated-cpu.yaml"
AMX = frozenset({"fpu", "avx512f", "amx_bf16", "amx_int8", "amx_tile"})
NO_AMX = frozenset({"fpu", "avx512f", "avx2"})
ADAPTER = get_adapter("llama_server")


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded default's model, fetched and verified by the artifact step (cached after the first run)."""
    record = verify(open_run(LOCAL_CPU, tmp_path_factory.mktemp("verify")), progress=False)
    return Path(record.path)


def test_the_embedded_model_is_q4_1_and_the_generated_one_f16(smollm2: Path) -> None:
    assert file_type(smollm2) == "Q4_1"
    assert file_type(model_path(load_profile(GENERATED).profile)) == "F16"


def test_an_amx_cpu_with_q4_1_weights_is_the_hazard(smollm2: Path) -> None:
    profile = load_profile(LOCAL_CPU).profile
    hazard = repack_hazard(profile, smollm2, AMX)
    assert hazard is not None and hazard.amx_flags == ("amx_bf16", "amx_int8", "amx_tile")
    assert hazard.file_type == "Q4_1" and "SIGSEGV" in hazard.reason()
    assert repack_hazard(profile, smollm2, NO_AMX) is None
    assert repack_hazard(load_profile(LOCAL_CPU, ["engine.build.backend=cuda"]).profile, smollm2, AMX) is None
    assert repack_hazard(load_profile(LOCAL_CPU, ["serve.extra_args=[--repack]"]).profile, smollm2, AMX) is None
    generated = load_profile(GENERATED).profile
    assert repack_hazard(generated, model_path(generated), AMX) is None  # f16 weights serve with AMX (the logs)
    ninfer = load_profile(REPO / "params" / "ninfer-rtx3090-groupwise.yaml").profile
    assert repack_hazard(ninfer, smollm2, AMX) is None  # another engine: not llama.cpp's CPU backend


@pytest.mark.parametrize(("flags", "expected"), [(AMX, True), (NO_AMX, False)])
def test_the_launch_adds_no_repack_on_an_amx_cpu(smollm2: Path, monkeypatch: pytest.MonkeyPatch,
                                                 flags: frozenset[str], expected: bool) -> None:
    # the one stand-in: this machine's CPU, replaced by one with (or without) AMX's flags
    monkeypatch.setattr(llama_adapter, "host_cpu", lambda: HostCPU("stand-in", flags))
    profile = load_profile(LOCAL_CPU).profile
    argv = ADAPTER.argv(profile, smollm2, Path("llama-server"))
    assert ("--no-repack" in argv) is expected
    assert argv.count("--no-repack") <= 1


def test_the_setup_finding_says_why(smollm2: Path) -> None:
    facts = json.loads((DATA / "probe_h200" / "facts.json").read_text())  # the device machine's probe
    profile = load_profile(LOCAL_CPU).profile
    assert planned_path(profile) == smollm2
    recorded = ProbeFacts.model_validate(facts)
    assert "amx_weight_repacking" not in {f.code for f in probe.findings(recorded, profile)}  # recorded before "amx"
    facts["cpu"]["amx"] = sorted(AMX - NO_AMX)
    found = {f.code: f for f in probe.findings(ProbeFacts.model_validate(facts), profile)}["amx_weight_repacking"]
    assert found.severity == "warning"
    assert "the model's weights are Q4_1" in found.message and "crashed (SIGSEGV) while warming up" in found.message
    assert "not reproduced on an AMX Xeon with the same file, so this is a precaution" in found.message
    assert found.fix.startswith("the launch adds --no-repack")
    facts["cpu"]["amx"] = []
    assert "amx_weight_repacking" not in {f.code for f in probe.findings(ProbeFacts.model_validate(facts), profile)}


"""The AMX launches that repacked weights into AMX tiles (and served)."""


def test_the_embedded_default_dry_run_on_this_machine_follows_its_flags(smollm2: Path) -> None:
    argv = server.planned_argv(load_profile(LOCAL_CPU).profile)
    has_amx = bool(host_cpu().flags & {"amx_tile", "amx_int8", "amx_bf16"})
    assert ("--no-repack" in argv) is has_amx
