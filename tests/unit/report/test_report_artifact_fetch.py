"""Seed 000 §0 and §1.4 in the post: the download's rate, the artifact folder's file system (local disk against
NFS), the host's memory and form. The run's own records make them: the verify step's real download from a loopback
hub (tests/range_server.py) and the setup step's probe of this machine; the post prints what they recorded."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import yaml

from ninferkit.artifact import sha256_file
from ninferkit.report import write_report
from ninferkit.report.fmt import gib
from ninferkit.rundir.runs import open_run, write_record
from ninferkit.steps import probe
from ninferkit.steps.verify import verify
from tests.ninfer_files import write_v1_v2
from tests.range_server import RangeServer

COMMIT = "dc370fb6295a" + "7" * 28


def test_the_post_prints_the_download_rate_the_file_system_and_the_host(tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    entry = write_v1_v2(served / "m.ninfer", 2)
    with RangeServer(served) as hub:
        data = {"name": "hub", "engine": {"kind": "ninfer", "fork": "geoffwatts/ninfer-v100"},
                "artifact": {"repo": "org/model", "revision": COMMIT, "endpoint": hub.url, "filename": "m.ninfer",
                             "sha256": sha256_file(entry).hexdigest, "local_dir": str(tmp_path / "models")}}
        (tmp_path / "hub.yaml").write_text(yaml.safe_dump(data))
        run = open_run(tmp_path / "hub.yaml", tmp_path / "run")
        record = verify(run, progress=False)
    probed = probe.probe(run.profile)
    write_record(run.dir.probe, probed)
    [fetched] = record.downloads
    post = write_report(run.dir.path, ["markdown"]).markdown.read_text()

    row = next(line for line in post.splitlines() if line.startswith("| artifact download (this run) |"))
    rate = fetched["bytes_received"] / fetched["seconds"] / 1e6
    assert f"| {rate:.1f} MB/s: {fetched['bytes_received']:,} bytes in " in row
    assert fetched["bytes_received"] == entry.stat().st_size

    disk = probed.facts.disk
    assert disk.fstype and disk.mount_point and disk.network is False  # tmp_path is on this machine's own disk
    assert (f"| artifact folder's file system | local ({disk.fstype} at {disk.mount_point}, from {disk.mount_source})"
            ": the engine loads the weights from it |") in post

    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    host = next(line for line in post.splitlines() if line.startswith("| host |"))
    facts = probed.facts.host
    assert host.endswith(f"; memory {gib(facts.memory_total_bytes)}; system disk (/) "
                         f"{gib(facts.system_disk_total_bytes)}, {gib(facts.system_disk_free_bytes)} free |")
    assert facts.system_disk_total_bytes == shutil.disk_usage("/").total
    assert abs((probed.facts.host.memory_total_bytes or 0) - memory) < 0.01 * memory


def test_a_run_without_them_recorded_prints_no_such_rows(tmp_path: Path) -> None:
    """A probe made before ninferkit read them, and a file already in place: no row, never an empty or zero one."""
    run = open_run(Path(__file__).parents[3] / "params" / "local-cpu.yaml", tmp_path / "run")
    write_record(run.dir.probe, probe.ProbeRecord())
    post = write_report(run.dir.path, ["markdown"]).markdown.read_text()
    assert "artifact download" not in post and "file system" not in post and "| host |" not in post
    assert "artifact folder's disk" not in post and "GPU memory used" not in post  # no size read; a CPU run
