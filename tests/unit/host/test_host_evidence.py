"""The setup step reads what failures leave on the host: the kernel log, the driver packages, each NVLink's
far end; each finding carries seed 000 §1.7's fix in its order.

Kernel-log text is only what the field reports quote (tests/seed_excerpts.py, with seed and section): the GSP
refusal of the open module on Volta. The box around it is tests/unit/steps/test_probe.py's (the recorded H200 probe
with seed 000's V100 and a card no driver drives). Package listings are this machine's real dpkg-query output
where a parser is tested; the kernel log unreadable is this machine's dmesg as an unprivileged user.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ninferkit.host import evidence as host_evidence
from ninferkit.host import findings as evidence_findings
from ninferkit.params import load_profile
from ninferkit.rundir.records import ProbeFacts
from ninferkit.steps import probe
from tests.conftest import DATA, REPO
from tests.seed_excerpts import OPEN_MODULE, OPEN_MODULE_ROW
from tests.unit.steps.test_probe import TP2, _codes, _ninfer, _no_driver_facts, _recorded

V100 = REPO / "params" / "ninfer-v100-pcie-nvfp4.yaml"
REPORT_ORDER = ('1. sudo apt purge "nvidia-*-open"; 2. sudo apt-get install -y "linux-headers-$(uname -r)" '
                "nvidia-driver-580-server; 3. sudo modprobe nvidia && nvidia-smi -L")


@pytest.mark.parametrize("excerpt", [OPEN_MODULE, OPEN_MODULE_ROW], ids=["seed000-s1.1", "seed000-s1.7"])
def test_the_open_modules_refusal_in_the_kernel_log_gets_the_purge_first(excerpt: Any) -> None:
    """No module loaded, NVML sees nothing, the card is on the bus: only the kernel log says why (issue 25)."""
    facts = _no_driver_facts()
    facts["kernel_log"] = {"source": "dmesg", "lines": [excerpt.text]}
    found = _codes(facts, load_profile(V100).profile)
    assert excerpt.text in found["open_module_refused"].message
    assert found["open_module_refused"].fix.startswith(REPORT_ORDER)
    assert "open_module_on_volta" not in found  # no module is loaded
    assert found["gpu_without_driver"].fix.startswith(REPORT_ORDER)  # not "install the proprietary driver" alone


def test_open_driver_packages_on_volta_are_named_even_with_no_module_loaded() -> None:
    facts = _no_driver_facts()
    facts["driver_packages"] = host_evidence.packages_record("dpkg", [
        {"name": "nvidia-driver-580-server-open", "version": "580.95.05-0ubuntu1"},
        {"name": "nvidia-kernel-common-580-server", "version": "580.95.05-0ubuntu1"}])
    found = _codes(facts, load_profile(V100).profile)
    assert "nvidia-driver-580-server-open" in found["open_driver_packages_on_volta"].message
    assert found["open_driver_packages_on_volta"].fix.startswith(REPORT_ORDER)
    proprietary = _no_driver_facts()
    proprietary["driver_packages"] = host_evidence.packages_record("dpkg", [
        {"name": "nvidia-driver-580-server", "version": "580.178.04"}])
    assert "open_driver_packages_on_volta" not in _codes(proprietary, load_profile(V100).profile)


def test_the_loaded_open_module_on_volta_gets_the_reports_order_too() -> None:
    from tests.unit.steps.test_probe import _volta_facts

    found = _codes(_volta_facts(), load_profile(V100).profile)
    assert found["open_module_on_volta"].fix.startswith(REPORT_ORDER)


@pytest.mark.parametrize(("names", "expected"), [
    (["nvidia-driver-580-server"], "proprietary"),
    (["nvidia-driver-580-open", "libnvidia-compute-580"], "open"),
    (["linux-modules-nvidia-580-open-6.8.0-45-generic"], "open"),
    (["kmod-nvidia-open-dkms"], "open"),
    (["nvidia-driver-580-server", "nvidia-kernel-open-580"], "both"),
    (["libnvidia-compute-580", "nvidia-utils-580"], None),  # libraries and tools say nothing of the module
])
def test_the_flavour_comes_from_the_driver_packages(names: list[str], expected: str | None) -> None:
    assert host_evidence.flavour(names) == expected


def test_dpkg_output_is_read_as_dpkg_query_prints_it() -> None:
    """This machine's own dpkg-query, in the setup step's format, over packages it has (docker.io, python3)."""
    if shutil.which("dpkg-query") is None:
        pytest.skip("no dpkg here")
    argv = [*host_evidence.DPKG_QUERY[:-1], "python3*"]
    out = subprocess.run(argv, capture_output=True, text=True).stdout
    packages = host_evidence.dpkg_packages(out)
    assert {"python3"} <= {p["name"] for p in packages}
    installed = [line for line in out.splitlines() if line.endswith("\tii ")]
    assert len(packages) == len(installed) and all(p["version"] for p in packages)


def test_an_unreadable_kernel_log_says_why() -> None:
    """dmesg as nobody on this machine (kernel.dmesg_restrict=1), run by the system Python on the module's file:
    it needs nothing but the standard library."""
    restricted = Path("/proc/sys/kernel/dmesg_restrict")
    if os.geteuid() != 0 or shutil.which("runuser") is None or restricted.read_text() != "1\n":
        pytest.skip("needs root, runuser and kernel.dmesg_restrict=1 to read the kernel log as a user who may not")
    module = str(REPO / "ninferkit" / "host" / "evidence.py")
    code = (f"import importlib.util as u, json; s = u.spec_from_file_location('he', {module!r}); "
            "m = u.module_from_spec(s); s.loader.exec_module(m); print(json.dumps(m.kernel_log()))")
    python = shutil.which("python3", path="/usr/bin") or sys.executable
    out = subprocess.run(["runuser", "-u", "nobody", "--", python, "-c", code], capture_output=True, text=True,
                         check=True, cwd="/").stdout
    log = json.loads(out)
    assert log["source"] is None and "dmesg: " in log["reason"] and "Operation not permitted" in log["reason"]
    facts = _no_driver_facts()
    facts["kernel_log"] = log
    assert "kernel_log_unreadable" in _codes(facts, load_profile(V100).profile)


def test_nvml_bus_ids_are_read_in_sysfs_spelling() -> None:
    # tests/data/probe_h200/SOURCE.md: nvidia-smi printed 00000000:00:06.0 for the card /sys calls 0000:00:06.0
    assert host_evidence._bus_id(b"00000000:00:06.0") == "0000:00:06.0"
    gpus = [{"index": 0, "pci_bus_id": "0000:1b:00.0", "nvlink": [{"link": 0, "active": True,
                                                                   "remote_bus_id": "0000:1c:00.0"}]},
            {"index": 1, "pci_bus_id": "0000:1c:00.0", "nvlink": [{"link": 0, "active": True,
                                                                   "remote_bus_id": "0000:8a:00.0"}]}]
    host_evidence.join_peers(gpus)
    assert gpus[0]["nvlink"][0]["remote_gpu"] == 1 and gpus[1]["nvlink"][0]["remote_gpu"] is None


def _four_gpus(links: dict[int, list[int]]) -> dict[str, Any]:
    """The recorded H200 probe's GPU four times, each GPU's active links reaching the GPUs given."""
    facts = _recorded("g1-h200/run/probe.json")
    template = facts["gpu"]["gpus"][0]
    facts["gpu"]["gpus"] = []
    for index in range(4):
        gpu = copy.deepcopy(template)
        gpu.update(index=index, pci_bus_id=f"0000:{index + 1:02x}:00.0",
                   nvlink=[{"link": n, "active": True, "remote_bus_id": f"0000:{peer + 1:02x}:00.0"}
                           for n, peer in enumerate(links[index])])
        facts["gpu"]["gpus"].append(gpu)
    host_evidence.join_peers(facts["gpu"]["gpus"])
    return facts


def test_tensor_parallel_needs_the_pair_linked_to_each_other(tmp_path: Path) -> None:
    """Issue 25: GPUs 0 and 1 each have active links, but to GPUs 2 and 3: the per-GPU check passed them."""
    profile = _ninfer(tmp_path, TP2, fork="plus1998/NInfer-V100-Duo")
    elsewhere = _four_gpus({0: [2, 2], 1: [3, 3], 2: [0, 0], 3: [1, 1]})
    found = _codes(elsewhere, profile)["tensor_parallel_without_nvlink"]
    assert "GPU 0 and GPU 1 are not linked to each other" in found.message
    assert "GPU 0: 2 links to GPU 2; GPU 1: 2 links to GPU 3" in found.message
    paired = _four_gpus({0: [1, 1], 1: [0, 0], 2: [3], 3: [2]})
    assert "tensor_parallel_without_nvlink" not in _codes(paired, profile)


def test_the_environment_names_where_each_link_goes() -> None:
    record = probe.ProbeRecord(facts=ProbeFacts.model_validate(_four_gpus({0: [1, 1], 1: [0, 0], 2: [3], 3: [2]})))
    text = probe.describe(record)
    assert "NVLink: GPU 0: 2 links to GPU 1" in text and "GPU 3: 1 link to GPU 2" in text


H200 = DATA / "host_evidence_h200"  # recorded on a lent H200 (SOURCE.md)


def test_the_recorded_h200_kernel_log_is_kept_and_judged_healthy() -> None:
    """The open module's healthy start on a GSP GPU: every NVIDIA line kept, no refusal found in it."""
    text = (H200 / "dmesg_nvidia.txt").read_text()
    lines = host_evidence.nvidia_lines("[    0.000000] Linux version 6.18.44\n" + text)
    assert len(lines) == 5 and lines[2].endswith("NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04"
                                                 "  Release Build  (nixbld@)")
    facts = _recorded("g1-h200/run/probe.json")
    facts["kernel_log"] = {"source": "dmesg", "lines": lines}
    facts["driver_packages"] = host_evidence.packages_record(
        "dpkg", host_evidence.dpkg_packages((H200 / "dpkg_query.txt").read_text()))
    found = _codes(facts, load_profile(V100).profile)
    assert not {"open_module_refused", "open_driver_packages_on_volta", "kernel_log_unreadable"} & set(found)
    rows = dict(evidence_findings.environment_rows(ProbeFacts.model_validate(facts)))
    assert rows["kernel log"].startswith("dmesg: 5 NVIDIA line(s), last: [    3.774316] NVRM: Persistence mode is "
                                         "deprecated")
    assert rows["driver packages"] == "dpkg: none"


def test_a_package_dpkg_knows_but_never_installed_is_not_installed() -> None:
    """The H200's dpkg lists nvidia-libopencl1-dev with status `un` and no version: not an installed package."""
    assert host_evidence.dpkg_packages((H200 / "dpkg_query.txt").read_text()) == []
