"""The AMX rule on the real embedded model (SmolLM2's Q4_1 file, fetched through pip): its weight type is read
from the file, the setup finding says why, and every start of llama-server adds --no-repack on a CPU with AMX
flags. The CPU is a recorded one, never this machine's, so both paths run on every machine: the device machine's
Xeon with AMX (tests/data/ninfer_live/g1-h200-2x120k/run/probe.json, its setup step's probe) and this project's
2-core CI Xeon without (tests/data/run_dirs/embedded-spec-ab/probe.json). The rule itself and the crash
diagnosis: tests/unit/engines/test_llama_amx_repack.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ninferkit.artifact import model_path, planned_path
from ninferkit.deploy import service
from ninferkit.engines.llama_server import amx
from ninferkit.engines.llama_server.amx import file_type, repack_argv, repack_hazard
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


RECORDED_CPUS = {"amx-xeon": DATA / "ninfer_live" / "g1-h200-2x120k" / "run" / "probe.json",
                 "ci-xeon-no-amx": DATA / "run_dirs" / "embedded-spec-ab" / "probe.json"}


def recorded_cpu(probe_json: Path) -> HostCPU:
    """A CPU as a setup step recorded it: its model and the flags the repacking rule reads."""
    cpu = ProbeFacts.model_validate(json.loads(probe_json.read_text())["facts"]).cpu
    return HostCPU(cpu.model, frozenset([*(cpu.amx or ()), *(["avx512f"] if cpu.avx512f else [])]))


def starts_of_llama_server(overrides: list[str] = []) -> dict[str, list[str]]:  # noqa: B006 (never mutated)
    """Every way ninferkit starts llama-server, as the argv each would run: the launch (and with it the capacity
    launches and a fleet task's, which run the launch's argv with their own pool), the speculation A/B's second
    server, and a deployment in either mode (a container's engine argv sits after the image)."""
    launch = load_profile(LOCAL_CPU, overrides).profile
    spec_off = load_profile(LOCAL_CPU, [*overrides, "serve.spec={}"]).profile
    docker = service.load(LOCAL_CPU, [*overrides, "serve.docker=true", "engine.docker_image=llama-cpu:test"]).profile
    systemd = service.load(LOCAL_CPU, [*overrides, "deploy.mode=systemd"]).profile
    return {"launch": server.planned_argv(launch), "speculation off": server.planned_argv(spec_off),
            "capacity launch": server.planned_argv(load_profile(LOCAL_CPU, [*overrides, "serve.kv.capacity=2048"])
                                                   .profile),
            "deploy docker": service.plan(docker)[1].argv, "deploy systemd": service.plan(systemd)[1].argv}


@pytest.mark.parametrize("cpu", sorted(RECORDED_CPUS))
def test_every_start_takes_the_same_repacking_decision(smollm2: Path, monkeypatch: pytest.MonkeyPatch,
                                                       cpu: str) -> None:
    recorded = recorded_cpu(RECORDED_CPUS[cpu])
    # the one stand-in: this machine's CPU, replaced by a recorded one, where the decision reads it
    monkeypatch.setattr(amx, "host_cpu", lambda: recorded)
    expected = bool(recorded.flags & amx.AMX_FLAGS)
    assert repack_argv(load_profile(LOCAL_CPU).profile, smollm2) == (["--no-repack"] if expected else [])
    for start, argv in starts_of_llama_server().items():
        assert argv.count("--no-repack") == (1 if expected else 0), start
    docker = starts_of_llama_server()["deploy docker"]
    assert docker[docker.index("llama-cpu:test") + 1:][:3] == ["llama-server", "-m",
                                                               "/models/SmolLM2-135M-Instruct.Q4_1.gguf"]
    for start, argv in starts_of_llama_server(["serve.extra_args=[--repack]"]).items():
        assert "--no-repack" not in argv and argv.count("--repack") == 1, start  # the profile decided


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
    has_amx = bool(host_cpu().flags & amx.AMX_FLAGS)
    for start, argv in starts_of_llama_server().items():
        assert ("--no-repack" in argv) is has_amx, start
