"""The host's memory and form (VM or container) and the file system of the artifact's folder, as the setup step
records them: this machine's own answers, checked against an independent source where one exists (the page count
sysconf gives, `findmnt`), and a recorded mount table with an NFS volume (seed 000 §1.4 loads in 18.2 s from local
disk and 52-59 s over NFS)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ninferkit.host.cpu import host_cpu
from ninferkit.host.machine import form, machine_facts, memory_total_bytes
from ninferkit.host.mounts import MOUNTINFO, file_system, mount_of, parse_mountinfo
from ninferkit.rundir.records import DiskFacts, HostFacts
from ninferkit.steps.probe import disk_facts

K8S_NFS_POD = """\
3416 2892 253:0 /var/lib/kubelet/pods/f2c26abd-d7b4-4c07-9067-7fc2b72f89cb/volumes/kubernetes.io~configmap/server-entrypoint /opt ro,relatime - ext4 /dev/mapper/ubuntu--vg-ubuntu--lv rw,stripe=64
3417 2892 0:212 / /kaiwudb/certs rw,relatime - nfs4 20.20.20.43:/data/k8s/nfs_share/pvc-2108ee90-b185-43f7-a95c-21d9a4d84a67 rw,vers=4.1,rsize=1048576,wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=20.20.20.27,local_lock=none,addr=20.20.20.43
3418 2892 253:0 /var/lib/kubelet/pods/f2c26abd-d7b4-4c07-9067-7fc2b72f89cb/etc-hosts /etc/hosts rw,relatime - ext4 /dev/mapper/ubuntu--vg-ubuntu--lv rw,stripe=64
"""  # noqa: E501
"""Three lines of a Kubernetes pod's /proc/self/mountinfo with an NFS volume, as a public project's cgroup tests
keep it (found by the code search; the node's own output, not written here)."""


def test_this_machines_memory_is_what_sysconf_counts() -> None:
    facts = HostFacts.model_validate(machine_facts())
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert facts.memory_total_bytes is not None
    assert abs(facts.memory_total_bytes - pages) < 0.01 * pages  # two readings of MemTotal, rounded differently


def test_this_machines_form_is_what_systemd_detect_virt_and_the_cpu_say() -> None:
    facts = HostFacts.model_validate(machine_facts())
    said = form(facts)
    if shutil.which("systemd-detect-virt"):
        vm = subprocess.run(["systemd-detect-virt", "--vm"], capture_output=True, text=True).stdout.strip()
        assert facts.vm == vm and facts.source == "systemd-detect-virt"
        assert said.startswith(f"virtual machine ({vm})" if vm != "none" else "bare metal")
    if host_cpu().flags and "hypervisor" in host_cpu().flags:  # x86 guests see the flag their hypervisor sets
        assert facts.hypervisor_flag is True and facts.vm != "none"


@pytest.mark.parametrize(("vm", "container", "flag", "words"), [
    ("kvm", "docker", True, "virtual machine (kvm), in a docker container"),
    ("none", "none", False, "bare metal (no hypervisor)"),
    (None, None, True, "virtual machine (the CPU's hypervisor flag)"),
    (None, None, None, "not known (no systemd-detect-virt, CPU flags or DMI to read)"),
])
def test_the_form_in_words(vm: str | None, container: str | None, flag: bool | None, words: str) -> None:
    assert form(HostFacts(vm=vm, container=container, hypervisor_flag=flag)) == words


def test_meminfo_is_kib() -> None:
    assert memory_total_bytes("MemTotal:       24683772 kB\nMemFree: 1 kB\n") == 24683772 * 1024
    assert memory_total_bytes("MemFree: 1 kB\n") is None


def test_the_artifact_folders_file_system_is_the_one_findmnt_names(tmp_path: Path) -> None:
    if not shutil.which("findmnt"):
        pytest.skip("findmnt is not installed: nothing independent to check against")
    folder = tmp_path / "models" / "not-yet"  # the verify step has not made it: its nearest folder's mount
    disk = DiskFacts.model_validate(disk_facts(folder))
    target, fstype, source = subprocess.run(["findmnt", "-n", "-T", str(tmp_path), "-o", "TARGET,FSTYPE,SOURCE"],
                                            capture_output=True, text=True, check=True).stdout.split()
    assert (disk.mount_point, disk.fstype, disk.mount_source) == (target, fstype, source)
    assert disk.network is False and file_system(disk).startswith(f"local ({fstype} at {target}, ")


def test_a_model_folder_on_an_nfs_volume_is_network() -> None:
    text = MOUNTINFO.read_text() + K8S_NFS_POD  # this machine's table, with the pod's mounts over it
    mount = mount_of(Path("/kaiwudb/certs/qwen3_8_27b.ninfer"), text)
    assert mount is not None and (mount.mount_point, mount.fstype, mount.network) == ("/kaiwudb/certs", "nfs4", True)
    assert mount.source.startswith("20.20.20.43:/data/k8s/nfs_share/")
    beside = mount_of(Path("/kaiwudb/certs-local/x"), text)  # a sibling whose name starts alike is not inside it
    assert beside is not None and beside.mount_point != "/kaiwudb/certs"
    disk = DiskFacts(fstype=mount.fstype, mount_point=mount.mount_point, mount_source=mount.source,
                     network=mount.network)
    assert file_system(disk).startswith("network (nfs4 at /kaiwudb/certs, from 20.20.20.43:")
    assert file_system(DiskFacts()) == "not recorded"  # a probe made before ninferkit read it


def test_escaped_mount_points_and_a_later_mount_over_an_earlier() -> None:
    mounts = parse_mountinfo("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n2 1 0:50 / /srv/my\\040models rw - nfs4 h:/x rw\n"
                             "3 1 8:2 / /srv/my\\040models rw - xfs /dev/sdb1 rw\nno separator here\n")
    assert [m.mount_point for m in mounts] == ["/", "/srv/my models", "/srv/my models"]
