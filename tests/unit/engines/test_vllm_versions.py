"""The vLLM releases a plan is checked against where no vLLM runs here (ninferkit/engines/vllm/versions/): each file
says which install it was read from and how, and what it holds agrees with what was kept of that install. 0.26.0 was
read on the H200 it ran on (tests/data/vllm-live/README.md); 0.19.1, the newest vLLM built for sm_70 (report 001's
V100), from its PyPI wheels on a machine without a GPU (tests/data/vllm-pypi-0.19.1/README.md). Nothing here is
written by hand: the expectations are read from those recorded files."""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest

from ninferkit.engines.vllm.facts import VllmFacts, recorded_facts
from ninferkit.errors import ProfileError
from ninferkit.params.load import load_profile
from ninferkit.server.process import planned_argv
from tests.conftest import DATA, REPO

VERSIONS = resources.files("ninferkit.engines.vllm").joinpath("versions")
FILES = sorted(entry.name for entry in VERSIONS.iterdir() if entry.name.endswith(".json"))
PYPI = DATA / "vllm-pypi-0.19.1"
SM_70 = 70


def facts_of(version: str) -> VllmFacts:
    facts = recorded_facts(version)
    assert facts is not None
    return facts


def kernel_archs(text: str) -> dict[str, tuple[set[int], set[int]]]:
    """scripts/fatbin-archs.py's lines: {library: (cubin architectures, PTX architectures)}."""
    found = {}
    for line in text.splitlines():
        if match := re.fullmatch(r"(\S+): cubin (.*); PTX (.*)", line):
            found[match[1]] = ({int(a) for a in re.findall(r"sm_(\d+)", match[2])},
                               {int(a) for a in re.findall(r"compute_(\d+)", match[3])})
    return found


def releases() -> dict[str, str]:
    """releases.txt's blocks by vLLM version."""
    text = (PYPI / "releases.txt").read_text()
    return {block.split(":", 1)[0].strip(): block for block in text.split("== vllm ")[1:]}


@pytest.mark.parametrize("name", FILES)
def test_every_versions_file_says_where_and_how_it_was_read(name: str) -> None:
    data = json.loads(VERSIONS.joinpath(name).read_text())
    facts = facts_of(name.removesuffix(".json"))
    assert facts.version == data["version"] == name.removesuffix(".json")
    assert facts.source == f"recorded from {data['recorded_from']} (ninferkit/engines/vllm/versions/{name})"
    assert "facts" in data["how"] and data["version"] in data["how"]
    named = re.findall(r"(?:tests|scripts)/[\w./-]+[\w/]", data["how"])
    assert named and all((REPO / path).exists() for path in named), named  # what it points to is there to read
    assert facts.options and facts.attention_backends and facts.speculative_methods and facts.torch_cuda_archs


def test_0_19_1_was_read_from_its_pypi_wheels_without_a_gpu() -> None:
    read = json.loads(VERSIONS.joinpath("0.19.1.json").read_text())["read"]
    assert read["gpu"] is None and read["platform"] == "cpu, standing in: no GPU visible"
    assert (read["torch"], read["torch_cuda"]) == ("2.10.0+cu128", "12.8")
    wheels = (PYPI / "wheels.txt").read_text()
    assert re.search(r"^[0-9a-f]{64}  vllm-0\.19\.1-\S+\.whl$", wheels, re.MULTILINE)
    assert re.search(r"^[0-9a-f]{64}  torch-2\.10\.0-\S+\.whl$", wheels, re.MULTILINE)
    machine = (PYPI / "machine.txt").read_text()
    assert re.search(r"^vllm\s+0\.19\.1$", machine, re.MULTILINE) and "no GPU on this machine" in machine
    help_text = (PYPI / "api-server-help.txt").read_text()
    # why the facts program stands vLLM's CPU platform in: without a GPU, 0.19.1's own --help stops on the device
    assert help_text.rstrip().endswith("exit 1") and "Failed to infer device type" in help_text


def test_0_19_1s_torch_and_kernels_are_built_for_sm_70() -> None:
    """torch's own build flags (the facts) are architectures whose cubins scripts/fatbin-archs.py found in torch's
    library, so the reader and torch agree; vLLM's own kernels carry sm_70 too, FlashAttention's do not (sm_80)."""
    facts = facts_of("0.19.1")
    archs = kernel_archs((PYPI / "kernel-archs.txt").read_text())
    torch_cubins, _ = archs["torch/lib/libtorch_cuda.so"]
    assert {int(arch.removeprefix("sm_")) for arch in facts.torch_cuda_archs} <= torch_cubins
    assert "sm_70" in facts.torch_cuda_archs
    for library in ("vllm/_C.abi3.so", "vllm/_moe_C.abi3.so", "vllm/_C_stable_libtorch.abi3.so"):
        assert SM_70 in archs[library][0], library
    assert min(archs["vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"][0]) > SM_70


def test_no_later_release_has_a_kernel_a_v100_can_run() -> None:
    """0.19.1 links CUDA 12 and pins torch 2.10.0; 0.20.0 and the newest that day (0.34.0) link CUDA 13, with no
    sm_70 cubin and no PTX a V100's driver could compile for it; 0.26.0's torch, read on the H200, lacks sm_70."""
    blocks = releases()
    assert set(blocks) == {"0.19.1", "0.20.0", "0.34.0"}
    assert "Requires-Dist: torch==2.10.0" in blocks["0.19.1"] and "libcudart.so.12" in blocks["0.19.1"]
    assert SM_70 in next(iter(kernel_archs(blocks["0.19.1"]).values()))[0]
    for version in ("0.20.0", "0.34.0"):
        assert "libcudart.so.13" in blocks[version], version
        [(cubins, ptx)] = kernel_archs(blocks[version]).values()
        assert min(cubins) > SM_70 and min(ptx) > SM_70, version
    assert "sm_70" not in facts_of("0.26.0").torch_cuda_archs


def test_0_19_1_has_the_reports_baseline_flags_and_not_what_it_adds() -> None:
    """Report 001's baseline command parses on 0.19.1 (the profile's planned argv, every flag in its parser); §5.2's
    --swap-space and the dflash2 A/B side are in none of its lists."""
    facts = facts_of("0.19.1")
    profile = load_profile(REPO / "params" / "vllm-v100-baseline.yaml",  # read past its NVFP4 refusal (below)
                           ["serve.checkpoint_quantization=null"]).profile
    planned = [token for token in planned_argv(profile) if token.startswith("--")]
    assert planned and all(flag in facts.options and not facts.deprecated(flag) for flag in planned)
    assert "--swap-space" not in facts.options and "--attention-backend" in facts.options
    assert "TRITON_ATTN" in facts.attention_backends
    assert not any("DFLASH" in name for name in facts.attention_backends)
    assert not any("dflash" in name for name in facts.speculative_methods)


def test_0_19_1_says_each_quantization_methods_minimum_compute_capability() -> None:
    """vLLM's start-up check (config/vllm.py: the method's get_min_capability() against the GPU's) as the facts
    program read it from 0.19.1 itself: NVFP4 (modelopt_fp4) needs 7.5, so report 001's NVFP4 checkpoint cannot
    start on its V100; GPTQ and GGUF can. 0.26.0's file was recorded before the program read minimums: it has none,
    and nothing is refused for want of them."""
    minimum = facts_of("0.19.1").quantization_min_capability
    assert minimum["modelopt_fp4"] == 75 and minimum["modelopt_fp4"] > SM_70
    assert minimum["gptq"] <= SM_70 and minimum["gguf"] <= SM_70 and minimum["fp8"] > SM_70
    recorded = json.loads(VERSIONS.joinpath("0.19.1.json").read_text())
    assert recorded["quantization_min_capability"] == minimum
    assert facts_of("0.26.0").quantization_min_capability == {}
    profile = load_profile(REPO / "params" / "vllm-v100-baseline.yaml",
                           ["engine.version=0.26.0", "gpu.arch=sm_90", "gpu.name=null"]).profile
    assert "--model" in planned_argv(profile)  # 0.26.0 names no minimum: the checkpoint is not judged
    with pytest.raises(ProfileError, match=r"serve.checkpoint_quantization = 'nvfp4': not a quantization method of "
                       r"vLLM 0.19.1 .*allowed: awq, awq_marlin, "):
        planned_argv(load_profile(REPO / "params" / "vllm-v100-baseline.yaml",
                                  ["serve.checkpoint_quantization=nvfp4"]).profile)
