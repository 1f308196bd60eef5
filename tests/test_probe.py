"""Setup facts on this machine, and the rules that turn facts into findings (facts as pynvml reports them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ninferkit import probe
from ninferkit.params import load_profile

LOCAL_CPU = Path(__file__).resolve().parent.parent / "params" / "local-cpu.yaml"


def _volta_facts(**gpu: Any) -> dict[str, Any]:
    v100 = {"index": 0, "name": "Tesla V100-PCIE-32GB", "arch": "sm_70", "memory_total_bytes": 34359738368,
            "power_limit_w": 250.0}
    v100.update(gpu)
    return {
        "gpu": {"available": True, "gpus": [v100]},
        "kernel_module": {"loaded": True, "flavour": "open"},
        "cuda_toolkit": {"version": "13.0"},
        "docker": {"engine_running": False, "nvidia_runtime": False},
        "cpu": {"avx512f": False},
        "disk": {"path": "/models", "free_bytes": 10 * 1024**3},
    }


def test_this_machine_is_probed_without_error() -> None:
    result = probe.probe(load_profile(LOCAL_CPU).profile)
    facts = result["facts"]
    assert facts["cpu"]["cores"] >= 1
    assert facts["disk"]["free_bytes"] > 0
    codes = {f["code"]: f["severity"] for f in result["findings"]}
    if not facts["gpu"]["available"]:
        assert codes["no_gpu"] == "info"  # the embedded default needs no GPU
    assert probe.summary(result)


def test_field_report_rules_fire_on_a_misconfigured_volta_box() -> None:
    profile = load_profile(LOCAL_CPU, [
        "gpu.arch=sm_70", "gpu.power_limit_w=200", "gpu.memory_gib=32", "serve.kv.dtype=fp8",
        "artifact.size_bytes=21492695040", "serve.docker=true", "engine.docker_image=ninfer:sm70",
    ]).profile
    found = {f.code: f for f in probe.findings(_volta_facts(), profile)}
    assert found["open_module_on_volta"].severity == "error"
    assert found["cuda13_for_sm70"].severity == "error"
    assert found["kv_dtype_unsupported"].severity == "error"
    assert "nvidia-smi -pl 200" in found["power_limit_differs"].fix
    assert found["disk_low"].severity == "error"
    assert found["no_nvidia_container_runtime"].severity == "error"
    assert "gpu_memory_low" not in found


def test_a_smaller_gpu_than_expected_is_an_error() -> None:
    profile = load_profile(LOCAL_CPU, ["gpu.memory_gib=32"]).profile
    found = {f.code for f in probe.findings(_volta_facts(memory_total_bytes=16 * 1024**3), profile)}
    assert "gpu_memory_low" in found


def test_no_gpu_is_an_error_only_when_the_profile_requires_one() -> None:
    facts = _volta_facts()
    facts["gpu"] = {"available": False, "reason": "no driver", "gpus": []}
    required = load_profile(LOCAL_CPU, ["gpu.required=true"]).profile
    assert {f.code: f.severity for f in probe.findings(facts, required)}["no_gpu"] == "error"
