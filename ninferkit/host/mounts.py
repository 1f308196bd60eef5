"""The file system a path lies on, from the kernel's mount table (/proc/self/mountinfo), as `findmnt -T` finds it.

Seed 000 §1.4 measured the same artifact loading in 18.2 s from local disk and in 52-59 s over NFS: a load time
means little without the file system it was read from, so the setup step records the one holding the artifact's
folder, and the write-up names it local or network beside the load time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ninferkit.rundir.records import DiskFacts
from ninferkit.units import GIB

MOUNTINFO = Path("/proc/self/mountinfo")
NETWORK_TYPES = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "gpfs", "beegfs",
                           "9p", "afs", "ocfs2", "virtiofs", "fuse.sshfs", "fuse.s3fs", "fuse.rclone",
                           "fuse.glusterfs", "fuse.juicefs", "fuse.gcsfuse", "fuse.ceph", "fuse.cephfs"})
"""File system types whose bytes cross a network or a hypervisor's share, not a local block device."""


@dataclass(frozen=True)
class Mount:
    mount_point: str
    fstype: str
    source: str

    @property
    def network(self) -> bool:
        return self.fstype in NETWORK_TYPES


def _unescape(field: str) -> str:
    """mountinfo writes a space, tab, newline and backslash in a path as octal escapes (\\040 ...)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def parse_mountinfo(text: str) -> list[Mount]:
    """Every mount of a mountinfo text, in the kernel's order (a later mount on the same point hides an earlier)."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields or len(fields) < 5:
            continue
        after = fields[fields.index("-") + 1:]
        if len(after) >= 2:
            mounts.append(Mount(_unescape(fields[4]), after[0], _unescape(after[1])))
    return mounts


def mount_of(path: Path, text: str) -> Mount | None:
    """The mount of a mountinfo text holding the absolute `path`: the longest mount point above it, the last mounted
    where several share it."""
    resolved = str(path)
    best: Mount | None = None
    for mount in parse_mountinfo(text):
        point = mount.mount_point.rstrip("/") or "/"
        inside = resolved == point or resolved.startswith(point if point == "/" else point + "/")
        if inside and (best is None or len(point) >= len(best.mount_point.rstrip("/") or "/")):
            best = mount
    return best


def read_mount(path: Path) -> Mount | None:
    """This machine's mount holding `path` (its nearest existing folder, links resolved); None where the mount table
    cannot be read."""
    existing = path.expanduser().absolute()
    while not existing.exists() and existing != existing.parent:  # a folder the verify step has not made yet
        existing = existing.parent
    try:
        return mount_of(Path(os.path.realpath(existing)), MOUNTINFO.read_text())
    except OSError:
        return None


def file_system(disk: DiskFacts) -> str:
    """probe.json's file system of the artifact's folder in words: local or network, its type, mount point and
    source; "not recorded" in a probe made before ninferkit read it."""
    if disk.fstype is None:
        return "not recorded"
    where = "network" if disk.network else "local"
    return f"{where} ({disk.fstype} at {disk.mount_point}, from {disk.mount_source})"


def disk_room(disk: DiskFacts) -> str | None:
    """probe.json's disk of the artifact's folder in words: the file system's size and what was free at setup (seed
    000 §0 gives its disk's size: "200G 系统盘"), then the folder and the mount it is on where read; None where the
    probe read no size."""
    if disk.total_bytes is None:
        return None
    where = disk.path or "the artifact's folder"
    on = f" (mounted at {disk.mount_point})" if disk.mount_point else ""
    free = f", {disk.free_bytes / GIB:.1f} GiB free at setup" if disk.free_bytes is not None else ""
    return f"{disk.total_bytes / GIB:.1f} GiB{free}, holding {where}{on}"
