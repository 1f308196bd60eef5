"""Setup facts on this machine, and the rules that turn facts into findings.

The facts a rule reads have the shape the real probe records (probe.json under tests/data and
docs/examples): recorded files where one exists (the live H200 captures in tests/data/ninfer_live),
otherwise built here with the numbers the field reports print, each cited where it is used.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from ninferkit.engines.ninfer.auto_room import AUTO_ESTIMATE_SLACK, auto_room
from ninferkit.errors import ProfileError
from ninferkit.params import Profile, load_profile
from ninferkit.rundir.records import ProbeFacts, ProbeRecord
from ninferkit.steps import probe
from tests.conftest import DATA, REPO

LOCAL_CPU = REPO / "params" / "local-cpu.yaml"
LIVE = DATA / "ninfer_live"
GIB = 1024**3


def _recorded(path: str) -> dict[str, Any]:
    facts: dict[str, Any] = json.loads((LIVE / path).read_text())["facts"]
    return facts


def _volta_facts(**gpu: Any) -> dict[str, Any]:
    """The recorded H200 probe (g1-h200/run/probe.json) with its GPU replaced by seed 000's V100 (§0: driver
    580.178.04, V100-PCIE-32GB, 250 W default; E5-2697 v4, no AVX-512) and a misconfigured box around it:
    open module, CUDA 13 toolkit, no Docker, 10 GiB of disk. Free GPU memory is left out (the rules then
    use the total)."""
    facts = _recorded("g1-h200/run/probe.json")
    v100 = facts["gpu"]["gpus"][0]
    del v100["memory_free_bytes"]
    v100.update({"name": "Tesla V100-PCIE-32GB", "arch": "sm_70", "compute_capability": "7.0",
                 "memory_total_bytes": 34359738368, "power_limit_w": 250.0, "pcie_gen": 3, "pcie_gen_max": 3,
                 "nvlink": [], **gpu})
    facts["gpu"]["driver_version"] = "580.178.04"
    facts["pci_gpus"] = []
    facts["kernel_module"] = {"loaded": True, "flavour": "open", "version_line": None}
    facts["cuda_toolkit"] = {"nvcc": "/usr/local/cuda/bin/nvcc", "version": "13.0"}
    facts["docker"] = {"client": None, "engine_running": False, "nvidia_runtime": False}
    facts["cpu"] = {"model": "Intel(R) Xeon(R) CPU E5-2697 v4 @ 2.30GHz", "cores": 16, "avx2": True, "avx512f": False}
    facts["disk"] = {"path": "/models", "free_bytes": 10 * GIB, "total_bytes": 200 * GIB}
    return facts


def _ninfer(tmp_path: Path, serve: str, fork: str = "hamawang/ninfer-v100-20260916", extra: str = "",
            overrides: list[str] | None = None) -> Profile:
    """A NInfer profile with the given serve section (YAML, indented 2)."""
    path = tmp_path / "ninfer.yaml"
    path.write_text(f"""name: probe-test
engine: {{kind: ninfer, fork: {fork}, binary: ninfer-serve}}
artifact: {{repo: org/model, revision: '{"0" * 40}', filename: model.ninfer, size_bytes: 21492695040}}
serve:
{serve}
{extra}
""")
    return load_profile(path, overrides or []).profile


def _codes(facts: dict[str, Any], profile: Profile | None) -> dict[str, probe.Finding]:
    return {f.code: f for f in probe.findings(ProbeFacts.model_validate(facts), profile)}


def test_this_machine_is_probed_without_error() -> None:
    result = probe.probe(load_profile(LOCAL_CPU).profile)
    facts = result.facts
    assert facts.cpu.cores is not None and facts.cpu.cores >= 1
    assert facts.disk.free_bytes is not None and facts.disk.free_bytes > 0
    assert all({"address", "id", "class", "driver"} <= set(card.as_dict()) for card in facts.pci_gpus)
    codes = {f.code: f.severity for f in result.findings}
    if not facts.gpu.available:  # the embedded default needs no GPU: nothing of it stops the run
        assert codes.get("no_gpu", codes.get("gpu_without_driver")) in ("info", "warning")
    assert result.blocking() == []
    assert probe.describe(result)
    for gpu in facts.gpu.gpus:  # on a GPU machine: NVML's default limit beside the one in force (000 §0)
        assert gpu.power_limit_default_w is not None and f"(default {gpu.power_limit_default_w:g} W" in \
            probe.describe(result)


def test_field_report_rules_fire_on_a_misconfigured_volta_box() -> None:
    profile = load_profile(LOCAL_CPU, [
        "gpu.arch=sm_70", "gpu.power_limit_w=200", "gpu.memory_gib=32", "serve.kv.dtype=fp8",
        "artifact.size_bytes=21492695040", "serve.docker=true", "engine.docker_image=ninfer:sm70",
    ]).profile
    found = _codes(_volta_facts(), profile)
    assert found["open_module_on_volta"].severity == "error"
    assert found["cuda13_for_sm70"].severity == "warning"  # in Docker the image brings a binary built elsewhere
    assert found["kv_dtype_unsupported"].severity == "error"
    assert "nvidia-smi -pl 200" in found["power_limit_differs"].fix
    assert found["disk_low"].severity == "error"
    assert found["no_nvidia_container_runtime"].severity == "error"
    assert "gpu_memory_low" not in found
    assert "driver_branch_too_new" not in found  # 580.178.04 is the report's own (R580) driver


def test_a_smaller_gpu_than_expected_is_an_error() -> None:
    profile = load_profile(LOCAL_CPU, ["gpu.memory_gib=32"]).profile
    found = set(_codes(_volta_facts(memory_total_bytes=16 * 1024**3), profile))
    assert "gpu_memory_low" in found


def test_no_gpu_is_an_error_only_when_the_profile_requires_one() -> None:
    facts = _volta_facts()
    facts["gpu"] = {"available": False, "reason": "no driver", "gpus": []}
    required = load_profile(LOCAL_CPU, ["gpu.required=true"]).profile
    assert _codes(facts, required)["no_gpu"].severity == "error"
    assert _codes(facts, load_profile(LOCAL_CPU).profile)["no_gpu"].severity == "info"


def test_a_waived_error_is_recorded_but_does_not_stop_the_run() -> None:
    facts = _volta_facts()
    profile = load_profile(LOCAL_CPU, ["gpu.arch=sm_70", "gpu.waive=[open_module_on_volta]"]).profile
    found = _codes(facts, profile)
    assert found["open_module_on_volta"].waived and found["open_module_on_volta"].severity == "error"
    assert found["cuda13_for_sm70"].severity == "error"  # llama-server is built here, with this toolkit
    assert not found["cuda13_for_sm70"].waived
    result = ProbeRecord.model_validate({"facts": facts, "findings": [asdict(f) for f in found.values()]})
    assert [f.code for f in result.blocking()] == ["cuda13_for_sm70"]
    assert "[error, waived by gpu.waive] open_module_on_volta" in probe.describe(result)


def test_an_unknown_waiver_code_is_a_profile_error_listing_the_codes() -> None:
    with pytest.raises(ProfileError) as err:
        load_profile(LOCAL_CPU, ["gpu.waive=[open_kernel_module]"])
    message = str(err.value)
    assert "gpu.waive" in message and "open_kernel_module" in message
    assert "'open_module_on_volta'" in message and "'tensor_parallel_without_nvlink'" in message


# --- a card on the bus with no driver (seed 000 §1.7) ----------------------------------------------

def _no_driver_facts() -> dict[str, Any]:
    facts = _volta_facts()
    # seed 000 §1.7: nvidia-smi "couldn't communicate with the NVIDIA driver", lspci shows 10de:1db6
    facts["gpu"] = {"available": False, "gpus": [],
                    "reason": "NVML could not start (Driver Not Loaded): no NVIDIA driver loaded"}
    facts["kernel_module"] = {"loaded": False, "flavour": None, "version_line": None}
    facts["pci_gpus"] = [{"address": "0000:01:00.0", "id": "10de:1db6", "class": "0x030200", "driver": None}]
    return facts


def test_a_card_on_the_bus_without_a_driver_is_named_with_the_driver_to_install() -> None:
    required = load_profile(LOCAL_CPU, ["gpu.required=true"]).profile
    found = _codes(_no_driver_facts(), required)
    assert "no_gpu" not in found
    assert found["gpu_without_driver"].severity == "error"
    assert "10de:1db6" in found["gpu_without_driver"].message
    assert "nvidia-driver-580-server" in found["gpu_without_driver"].fix
    assert _codes(_no_driver_facts(), load_profile(LOCAL_CPU).profile)["gpu_without_driver"].severity == "warning"


def test_a_card_the_nvidia_driver_drives_is_not_called_driverless() -> None:
    facts = _no_driver_facts()
    facts["pci_gpus"][0]["driver"] = "nvidia"  # NVML failed for another reason (no libnvidia-ml in a container)
    assert set(_codes(facts, None)) == {"no_gpu"}


def test_a_recorded_h200_on_the_bus_is_driven_by_nvidia() -> None:
    """tests/data/probe_h200/facts.json: the probe run on a real H200 box; its card on the PCI bus is bound
    to the nvidia driver, so no rule calls it driverless, even where NVML itself is missing."""
    facts = json.loads((DATA / "probe_h200" / "facts.json").read_text())
    assert facts["pci_gpus"] == [{"address": "0000:00:06.0", "class": "0x030200", "driver": "nvidia",
                                  "id": "10de:2335"}]
    assert "gpu_without_driver" not in _codes(facts, load_profile(LOCAL_CPU, ["gpu.required=true"]).profile)
    facts["gpu"] = {"available": False, "gpus": [], "reason": "pynvml is not installed"}
    assert set(_codes(facts, None)) == {"no_gpu"}
    facts["pci_gpus"][0]["driver"] = None
    assert "10de:2335 at 0000:00:06.0 (driver: none)" in _codes(facts, None)["gpu_without_driver"].message


def test_the_pci_bus_is_read_from_sysfs(tmp_path: Path) -> None:
    """The layout of /sys/bus/pci/devices: one folder per function, vendor/device/class files, a driver link."""
    def device(address: str, vendor: str, model: str, klass: str, driver: str | None) -> None:
        folder = tmp_path / "devices" / address
        folder.mkdir(parents=True)
        for name, value in (("vendor", vendor), ("device", model), ("class", klass)):
            (folder / name).write_text(value + "\n")
        if driver is not None:
            (tmp_path / "drivers" / driver).mkdir(parents=True, exist_ok=True)
            (folder / "driver").symlink_to(tmp_path / "drivers" / driver)

    device("0000:01:00.0", "0x10de", "0x1db6", "0x030200", None)      # V100-PCIE-32GB, no driver bound
    device("0000:02:00.0", "0x10de", "0x2204", "0x030000", "nvidia")  # RTX 3090
    device("0000:02:00.1", "0x10de", "0x1aef", "0x040300", "snd_hda_intel")  # its audio function
    device("0000:00:01.0", "0x1af4", "0x1045", "0xffff00", "virtio-pci")
    assert probe.pci_gpus(tmp_path / "devices") == [
        {"address": "0000:01:00.0", "id": "10de:1db6", "class": "0x030200", "driver": None},
        {"address": "0000:02:00.0", "id": "10de:2204", "class": "0x030000", "driver": "nvidia"},
    ]


# --- the driver branch on Volta (seed 000 §1.1) ---------------------------------------------------

def test_a_driver_after_r580_on_volta_is_an_error() -> None:
    found = _codes(_volta_facts(), None)
    assert "driver_branch_too_new" not in found
    facts = _volta_facts()
    facts["gpu"]["driver_version"] = "590.44.01"
    too_new = _codes(facts, None)["driver_branch_too_new"]
    assert too_new.severity == "error" and "R590" in too_new.message and "Tesla V100" in too_new.message
    assert "nvidia-driver-580-server" in too_new.fix


def test_a_driver_after_r580_is_read_from_the_module_when_nvml_sees_no_volta() -> None:
    """A driver after R580 does not drive a V100, so NVML lists no GPU; /proc/driver/nvidia/version still
    names the driver (its first line, as the probe records it), and the profile says Volta."""
    facts = _no_driver_facts()
    facts["kernel_module"] = {"loaded": True, "flavour": "proprietary",
                              "version_line": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  590.44.01  "
                                              "Tue Nov 18 00:00:00 UTC 2025"}
    volta = load_profile(LOCAL_CPU, ["gpu.arch=sm_70"]).profile
    assert "R590" in _codes(facts, volta)["driver_branch_too_new"].message
    assert "driver_branch_too_new" not in _codes(facts, load_profile(LOCAL_CPU, ["gpu.arch=sm_86"]).profile)


def test_the_recorded_h200_is_not_judged_by_volta_rules() -> None:
    facts = _recorded("g1-h200/run/probe.json")  # open module 580.159.04 on an H200: fine for Hopper
    assert not {"open_module_on_volta", "driver_branch_too_new"} & set(_codes(facts, None))


# --- tensor parallel needs two NVLinked GPUs (seed 004 §六.1) -----------------------------------------

TP2 = """  tensor_parallel: 2
  gpu_devices: [0, 1]
  max_context: 155648
  max_concurrency: 2
  kv: {capacity: 155648, dtype: int8}"""


def test_tensor_parallel_on_the_recorded_one_gpu_h200_misses_a_gpu(tmp_path: Path) -> None:
    facts = _recorded("g1-h200/run/probe.json")
    found = _codes(facts, _ninfer(tmp_path, TP2, fork="plus1998/NInfer-V100-Duo"))
    assert found["tensor_parallel_gpus_missing"].severity == "error"
    assert "NVML sees 1 GPU(s) (0: NVIDIA H200)" in found["tensor_parallel_gpus_missing"].message
    vllm = tmp_path / "vllm.yaml"
    vllm.write_text("name: v\nengine: {kind: vllm}\nartifact: {url: http://127.0.0.1/m}\n"
                    "serve: {tensor_parallel: 2, gpu_devices: [0, 1]}\n")
    assert "tensor_parallel_gpus_missing" in _codes(facts, load_profile(vllm).profile)


def test_tensor_parallel_without_nvlink_is_an_error_and_with_it_is_not(tmp_path: Path) -> None:
    facts = _recorded("g1-h200/run/probe.json")
    second = copy.deepcopy(facts["gpu"]["gpus"][0])
    second["index"] = 1
    facts["gpu"]["gpus"].append(second)  # two H200 entries as recorded: NVML listed no NVLink link
    profile = _ninfer(tmp_path, TP2, fork="plus1998/NInfer-V100-Duo")
    found = _codes(facts, profile)
    assert "tensor_parallel_gpus_missing" not in found
    assert "seed 004" in found["tensor_parallel_without_nvlink"].message
    for gpu in facts["gpu"]["gpus"]:  # NVML's link states on an NVLinked pair
        gpu["nvlink"] = [{"link": n, "active": True} for n in range(6)]
    assert "tensor_parallel_without_nvlink" not in _codes(facts, profile)
    one_gpu = _ninfer(tmp_path, "  max_context: 8192")
    assert not {"tensor_parallel_gpus_missing", "tensor_parallel_without_nvlink"} & set(_codes(facts, one_gpu))


# --- --kv-capacity auto without room (seed 000 §2.5, seed 003) -------------------------------------

V100_AUTO = """  max_context: {context}
  max_concurrency: 2
  kv: {{capacity: auto, dtype: int8}}
  spec: {{method: mtp, draft_tokens: 3}}"""


def test_auto_on_the_v100_with_the_nvfp4_artifact_is_short_as_the_report_measured(tmp_path: Path) -> None:
    """Seed 000 §2.5: 2 slots, int8 KV, MTP3, the 21,492,695,040 B nvfp4 file on a 32 GB V100: `auto` refused
    to start, short 0.88 GiB. Its numbers (auto gives 328,960 tokens with the groupwise file, above 2 x 128K)
    place that table at a smallest legal pool of 262,144 tokens: max_context 262,144 at 2 slots."""
    profile = _ninfer(tmp_path, V100_AUTO.format(context=262144), extra="capacity: {model: qwen3.8-27b}")
    finding = _codes(_volta_facts(), profile)["kv_auto_no_room"]
    assert finding.severity == "error"
    assert "262,144 tokens x 35,904 B" in finding.message and "2.75 GiB fixed (seed 000 §2.5, V100" in finding.message
    room = auto_room(profile, ProbeFacts.model_validate(_volta_facts()).gpu.gpus)
    assert room is not None
    assert round((room.need_bytes - room.available_bytes) / GIB, 2) == 0.53  # from these facts; the report: 0.88 GB
    assert "explicit" in finding.fix


def test_auto_at_the_v100_profiles_own_context_starts(tmp_path: Path) -> None:
    """At max_context 131,072 the smallest legal pool is 2,048 pages: auto starts (with ~237K tokens, seed 000)."""
    profile = _ninfer(tmp_path, V100_AUTO.format(context=131072), extra="capacity: {model: qwen3.8-27b}")
    assert "kv_auto_no_room" not in _codes(_volta_facts(), profile)


def test_auto_on_the_24gb_3090_is_borderline(tmp_path: Path) -> None:
    """Seed 003: 2 x 184,320 tokens, rk8v4 KV, MTP3, the 18,210,531,328 B groupwise file on an RTX 3090 (NVML
    total 24,576 MiB): "kv-capacity auto 起不来". The estimate leaves a third of a GiB: within its error."""
    profile = _ninfer(tmp_path, """  max_context: 184320
  max_concurrency: 2
  kv: {capacity: auto, dtype: rk8v4}
  spec: {method: mtp, draft_tokens: 3}""", fork="Don-Chad/ninfer-3090", extra="capacity: {model: qwen3.8-27b}",
        overrides=["artifact.size_bytes=18210531328", "engine.version=0.6.1"])
    facts = _volta_facts(name="NVIDIA GeForce RTX 3090", arch="sm_86", memory_total_bytes=24576 * 1024**2)
    finding = _codes(facts, profile)["kv_auto_no_room"]
    assert finding.severity == "warning" and "27,744 B" in finding.message and "seed 003" in finding.message


@pytest.mark.parametrize("run", ["g1-h200-v100flags", "g1-h200/run"])
def test_the_auto_estimate_holds_against_the_live_engines_own_figures(tmp_path: Path, run: str) -> None:
    """The live H200 runs: the engine's request log states its setting, its free memory after weights and
    its runtime minimum. The estimate from probe.json and artifact.json at that setting must be a lower
    bound on that minimum (no report measured a fixed part on sm_90) and within AUTO_ESTIMATE_SLACK of
    that free memory."""
    folder = LIVE / run
    start = next(e for e in map(json.loads, (folder / "engine-request-log.jsonl").read_text().splitlines())
                 if e.get("event") == "server_start")
    engine = start["engine"]
    size = json.loads((folder / "artifact.json").read_text())["size_bytes"]
    profile = _ninfer(tmp_path, f"""  max_context: {engine['max_context']}
  max_concurrency: {engine['max_concurrency']}
  kv: {{capacity: auto, dtype: {engine['kv_cache']}}}
  spec: {{method: {engine['speculative_backend']}, draft_tokens: {engine['speculative_draft_window']}}}""",
                      fork="ziworkslab/ninfer-3090-ubuntu", extra="capacity: {model: qwen3.6-27b}",
                      overrides=[f"artifact.size_bytes={size}"])
    facts = _recorded(f"{run}/probe.json")
    room = auto_room(profile, ProbeFacts.model_validate(facts).gpu.gpus)
    assert room is not None and room.fixed is None
    assert room.kv_bytes <= start["memory"]["minimum_runtime_reservation_bytes"]
    assert abs(room.available_bytes - start["memory"]["available_after_weights_bytes"]) <= AUTO_ESTIMATE_SLACK
    assert "kv_auto_no_room" not in _codes(facts, profile)


def test_auto_is_not_judged_without_the_numbers_it_needs(tmp_path: Path) -> None:
    facts = _volta_facts()
    no_geometry = _ninfer(tmp_path, V100_AUTO.format(context=262144))  # no capacity.model: no bytes per token
    assert "kv_auto_no_room" not in _codes(facts, no_geometry)
    explicit = _ninfer(tmp_path, "  max_context: 262144\n  kv: {capacity: 262144, dtype: int8}",
                       extra="capacity: {model: qwen3.8-27b}")
    assert "kv_auto_no_room" not in _codes(facts, explicit)
