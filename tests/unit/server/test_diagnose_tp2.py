"""The TP2 engine's startup refusals (issue 25, item 6): each gets its own diagnosis, with the fix in seed 004's terms
and, read with --profile, the profile's pair of GPUs.

No TP2 engine runs here and no log of one is recorded, so every log line below is FORMED FROM THE FORK'S SOURCE: the
message format string each refusal throws, as tests/data/ninfer-tp2/refusals.json records it (repo, path, commit),
filled the way the source fills it (device ids, a word index, a CUDA error's name and text). None of these lines is a
captured log; the JSON's `printed_by` says why a line is the message alone (the forks' console-log prefix is not in
the stored source).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from ninferkit.engines import get_adapter
from ninferkit.params import load_profile
from ninferkit.server.diagnose import diagnose
from tests.conftest import REPO

DATA = json.loads((REPO / "tests" / "data" / "ninfer-tp2" / "refusals.json").read_text())
REFUSALS: list[dict[str, Any]] = DATA["refusals"]
ADAPTER = get_adapter("ninfer")
TP2 = REPO / "params" / "ninfer-2xv100-sxm2-tp2.yaml"  # seed 004: NInfer-V100-Duo, --tp 2 --devices 0,1


def formed_from_source(entry: dict[str, Any]) -> str:
    """The line the source would print: its format string filled with the entry's example values (the self-check's
    detail is itself built from a second format string, detail_format)."""
    values = dict(entry.get("example", {}))
    if "detail_format" in entry:
        values["detail"] = entry["detail_format"].format(**values)
    return str(entry["format"].format(**values))


def test_every_recorded_message_names_where_it_came_from() -> None:
    for entry in REFUSALS + DATA["not_refusals"]:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", entry["repo"]) and entry["path"]
        assert re.fullmatch(r"[0-9a-f]{40}", entry["commit"]), entry
        placeholders = set(re.findall(r"\{(\w+)\}", entry["format"]))
        assert placeholders <= set(entry.get("example", {})) | {"detail", "reason"}, entry


@pytest.mark.parametrize("entry", REFUSALS, ids=[f"{e['code']}:{e['format'][:40]}" for e in REFUSALS])
def test_each_source_message_gets_its_own_diagnosis(entry: dict[str, Any]) -> None:
    """The line is formed from the source's format string (not captured). The generic rules behind these (an option
    that `must` …, `startup failed`) must not take it."""
    line = formed_from_source(entry)
    found = ADAPTER.diagnose(f"loading model...\n{line}\n")
    assert found is not None and found.code == entry["code"], (line, found)
    assert found.evidence == line and "{" not in found.cause + found.fix


def _entry(code: str, starts: str = "") -> dict[str, Any]:
    return next(e for e in REFUSALS if e["code"] == code and e["format"].startswith(starts))


def test_the_self_check_refusal_says_what_failed_and_checks_the_nvlink_pair() -> None:
    """V100-Duo's enable_peer_access(): formed from the source's format strings with GPU 1 -> GPU 0, word 0."""
    report = diagnose(formed_from_source(_entry("tp_peer_copy_corrupt")) + "\n")
    assert report["verdict"] == "failed: tp_peer_copy_corrupt" and not report["healthy"]
    [error] = report["errors"]
    assert "device 1 -> 0 data mismatch at word 0" in error["cause"]
    assert "`nvidia-smi topo -m` must show NV# between the two GPUs of serve.gpu_devices" in error["fix"]
    assert "tensor_parallel_without_nvlink" in error["fix"] and "iommu=pt" in error["fix"]
    assert "this profile" not in error["fix"]  # no profile: no pair to name


def test_with_the_profile_the_self_check_names_its_pair() -> None:
    line = formed_from_source(_entry("tp_peer_copy_corrupt"))  # formed from the source's format strings
    fix = diagnose(line + "\n", load_profile(TP2).profile)["errors"][0]["fix"]
    assert fix.endswith("; this profile's pair is GPUs 0 and 1 (serve.gpu_devices)")
    fix = diagnose(line + "\n", load_profile(TP2, ["serve.gpu_devices=[2,3]"]).profile)["errors"][0]["fix"]
    assert fix.endswith("; this profile's pair is GPUs 2 and 3 (serve.gpu_devices)")


def test_a_failed_cuda_call_of_the_startup_check_names_the_call() -> None:
    """Formed from the source's format string with the probe's own call name and CUDA's name and text for a failed
    allocation (cudaErrorMemoryAllocation, "out of memory")."""
    report = diagnose(formed_from_source(_entry("tp_peer_startup_failed")) + "\n")
    [error] = report["errors"]
    assert error["code"] == "tp_peer_startup_failed"
    assert "(cudaMalloc source: cudaErrorMemoryAllocation, out of memory)" in error["cause"]


def test_the_fallback_warning_is_not_a_refusal() -> None:
    """V100-Duo serves on when the direct copy fails but the host-staged one matches; its warning (formed from the
    source's format string, the direct copy's mismatch as the reason) must not read as the self-check refusal."""
    [warning] = DATA["not_refusals"]
    line = warning["format"].format(reason="device 1 -> 0 data mismatch at word 3")
    assert ADAPTER.diagnose(line + "\n") is None


def test_a_device_list_that_matches_the_profile_points_at_the_flags_it_did_not_write() -> None:
    """V100-Duo's serve_options.cpp refusal (formed from the source's format string: it has no values)."""
    line = _entry("tp_devices_mismatch", "--devices must list exactly")["format"] + "\n"
    without = diagnose(line)["errors"][0]["fix"]
    assert without.startswith("list exactly serve.tensor_parallel different GPU indices in serve.gpu_devices")
    fix = diagnose(line, load_profile(TP2).profile)["errors"][0]["fix"]
    assert fix.startswith("the profile's serve.tensor_parallel 2 and serve.gpu_devices [0, 1] agree (ninferkit writes "
                          "--tp 2 --devices 0,1 from them), so the engine was started with other flags")
    fix = diagnose(line, load_profile(TP2, ['serve.extra_args=["--devices","0"]']).profile)["errors"][0]["fix"]
    assert fix.endswith("so serve.extra_args adds --devices: remove it")


def test_a_profile_whose_devices_do_not_match_its_width_says_so() -> None:
    line = _entry("tp_devices_mismatch", "--tp 2 requires an explicit")["format"] + "\n"  # formed from the source
    fix = diagnose(line, load_profile(TP2, ["serve.gpu_devices=[0]"]).profile)["errors"][0]["fix"]
    assert fix.endswith("; this profile has serve.tensor_parallel 2 and serve.gpu_devices [0], which do not agree")


def test_mixed_gpus_name_both_architectures() -> None:
    """zsq…-tp2 core/device.cu, formed from the source's format string with GPU 0 sm_75 and GPU 1 sm_86."""
    found = ADAPTER.diagnose(formed_from_source(_entry("tp_mixed_gpus")) + "\n")
    assert found is not None and "(GPU 0 is sm_75, GPU 1 is sm_86)" in found.cause


@pytest.mark.parametrize(("starts", "field"), [
    ("--tp 2 does not support the DFlash", "serve.spec.method to mtp"),
    ("tensor-parallel execution supports", "serve.spec.method to mtp"),
    ("--tp 2 does not support Vision", "serve.vision to false"),
    ("tensor-parallel DFlash2", "serve.spec.lm_head_draft to true"),
    ("tensor-parallel attention", "serve.kv.dtype to int8"),
    ("--host-kv-mib", "--host-kv-mib from serve.extra_args"),
])
def test_an_option_a_tp2_build_rejects_names_the_field_to_change(starts: str, field: str) -> None:
    found = ADAPTER.diagnose(_entry("tp_unsupported", starts)["format"] + "\n")  # formed from the source's text
    assert found is not None and field in found.fix
