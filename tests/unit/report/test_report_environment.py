"""The environment as the field reports give it (issue 38): each card's memory in use once the server was up (004
§四 "启动后 nvidia-smi 看双卡各占 13.5 GB", 001 §5.2 "25 GB+"), the power limit beside the card's default (000 §0
"200 W（V100-PCIE 默认 250 W）"), the disk's size, and the load time beside the file system it was read from (000
§1.4). Data: the recorded live NInfer run (tests/data/ninfer_live/SOURCE.md), the H100's own power answers
(tests/data/host_evidence_h100/SOURCE.md) and this machine's probe."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
from pathlib import Path

from ninferkit.host.gpu import power_limit_words
from ninferkit.report import write_report
from ninferkit.report.compare import compare_runs
from ninferkit.report.conditions import memory_after_ready
from ninferkit.report.data import load_run
from ninferkit.report.fmt import gib
from ninferkit.rundir.records import GpuInfo
from ninferkit.steps.probe import disk_facts
from tests.conftest import DATA
from tests.unit.report.test_report import markdown_table

LIVE = DATA / "ninfer_live" / "g1-h200-2x120k" / "run"
H100_POWER = DATA / "host_evidence_h100" / "nvidia_smi_query_gpu_names.txt"


def _copy(where: Path) -> Path:
    copy = where / "run"
    shutil.copytree(LIVE, copy, ignore=shutil.ignore_patterns("report", "*.parquet"))
    return copy


def _environment(run: Path) -> dict[str, str]:
    post = write_report(run, ["markdown"]).markdown.read_text()
    return {row["fact"]: row["value"] for row in markdown_table(post, "Environment")}


def _telemetry(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "telemetry.jsonl").read_text().splitlines()]


def _write_telemetry(run: Path, rows: list[dict]) -> None:
    (run / "telemetry.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_memory_after_start_is_the_first_sample_after_ready_and_agrees_with_the_engines_ledger(tmp_path: Path) -> None:
    run = _copy(tmp_path)
    server = json.loads((run / "server.json").read_text())
    ready = dt.datetime.fromisoformat(server["started"]) + dt.timedelta(seconds=server["ready_s"])
    nvml = [row for row in _telemetry(run) if row["source"] == "nvml"]
    first = next(row for row in nvml if dt.datetime.fromisoformat(row["t_utc"]) >= ready)
    gap = (dt.datetime.fromisoformat(first["t_utc"]) - ready).total_seconds()
    [card] = memory_after_ready(load_run(run))
    assert (card.gpu, card.used_bytes, card.after_ready_s) == ("0", first["memory_used_bytes"], gap)
    # The engine's own ledger says what its start left free: the card's size less that is what NVML read in use
    probe = json.loads((run / "probe.json").read_text())["facts"]["gpu"]["gpus"][0]
    free = server["ledger"]["free_after_startup_bytes"]
    assert abs(probe["memory_total_bytes"] - free - card.used_bytes) < 0.01 * card.used_bytes
    value = _environment(run)["GPU memory used after start"]
    assert value.startswith(f"GPU 0 {gib(first['memory_used_bytes'])} (NVML's used memory, every process on the card")
    assert f"the first sample after the server was ready, {gap:.0f} s after" in value
    assert "total" not in value  # one card


def test_memory_not_sampled_says_so_never_zero(tmp_path: Path) -> None:
    run = _copy(tmp_path)
    _write_telemetry(run, [{k: v for k, v in row.items() if k != "memory_used_bytes"} for row in _telemetry(run)])
    value = _environment(run)["GPU memory used after start"]
    assert value.startswith("not sampled") and "0.00" not in value


def test_memory_without_a_ready_time_is_the_runs_first_sample_and_says_so(tmp_path: Path) -> None:
    run = _copy(tmp_path)
    server = json.loads((run / "server.json").read_text())
    (run / "server.json").write_text(json.dumps({**server, "ready_s": None}))
    first = next(row for row in _telemetry(run) if row["source"] == "nvml")
    value = _environment(run)["GPU memory used after start"]
    assert value.startswith(f"GPU 0 {gib(first['memory_used_bytes'])} (")
    assert "the run's first sample (server.json records no ready time)" in value


def test_memory_of_each_card_and_their_total(tmp_path: Path) -> None:
    """No run of two GPUs is recorded: the second card here is the live run's own samples relabelled GPU 1, with
    the reading a quarter larger, to check that each card is printed and the total is their sum."""
    run = _copy(tmp_path)
    rows = _telemetry(run)
    second = [{**row, "gpu": 1, "memory_used_bytes": row["memory_used_bytes"] * 5 // 4}
              for row in rows if row["source"] == "nvml"]
    _write_telemetry(run, rows + second)
    cards = memory_after_ready(load_run(run))
    assert [card.gpu for card in cards] == ["0", "1"]
    value = _environment(run)["GPU memory used after start"]
    assert value.startswith(f"GPU 0 {gib(cards[0].used_bytes)}; GPU 1 {gib(cards[1].used_bytes)}; "
                            f"total {gib(cards[0].used_bytes + cards[1].used_bytes)} (")


def test_the_power_limit_reads_beside_the_cards_default_as_000_writes_it() -> None:
    """000 §0 and §2.7: "200 W（V100-PCIE 默认 250 W）", "可设 100–250"; the H100 answered nvidia-smi with its own."""
    v100 = GpuInfo(power_limit_w=200.0, power_limit_default_w=250.0, power_limit_min_w=100.0, power_limit_max_w=250.0)
    assert power_limit_words(v100) == "200 W (default 250 W, settable 100–250 W)"
    header, row = H100_POWER.read_text().splitlines()
    read = dict(zip((name.strip() for name in header.split(",")), (value.strip() for value in row.split(",")),
                    strict=True))
    watts = {key: float(read[f"power.{key} [W]"].removesuffix(" W")) for key in ("limit", "default_limit",
                                                                               "min_limit", "max_limit")}
    h100 = GpuInfo(power_limit_w=watts["limit"], power_limit_default_w=watts["default_limit"],
                   power_limit_min_w=watts["min_limit"], power_limit_max_w=watts["max_limit"])
    assert power_limit_words(h100) == "700 W (default 700 W, settable 200–700 W)"
    assert power_limit_words(GpuInfo(power_limit_w=700)) == "700 W (default not read)"  # probed before it was read
    assert power_limit_words(GpuInfo()) == "not read"


def test_the_title_names_the_limit_only_where_it_is_not_the_default(tmp_path: Path) -> None:
    run = _copy(tmp_path)
    title = write_report(run, ["markdown"]).markdown.read_text().splitlines()[0]
    assert " at 700 W: " in title  # the recorded probe read no default: the limit stays
    probe = json.loads((run / "probe.json").read_text())
    gpu = probe["facts"]["gpu"]["gpus"][0]
    gpu.update(power_limit_default_w=700.0, power_limit_min_w=200.0, power_limit_max_w=700.0)  # the H100's answers
    (run / "probe.json").write_text(json.dumps(probe))
    post = write_report(run, ["markdown"]).markdown.read_text()
    assert re.match(r"# qwen3.6-27b groupwise-int on NVIDIA H200: decode ", post)
    assert _environment(run)["GPU 0"].endswith("power limit 700 W (default 700 W, settable 200–700 W), PCIe gen 5 x16")
    gpu["power_limit_w"] = 500.0  # held under its default, as 000's V100 at 200 W of 250 W
    (run / "probe.json").write_text(json.dumps(probe))
    assert " at 500 W: " in write_report(run, ["markdown"]).markdown.read_text().splitlines()[0]


def test_the_disk_and_the_load_time_beside_the_file_system_it_was_read_from(tmp_path: Path) -> None:
    """The live run's probe predates the mount: here it is this machine's own reading of a folder on it."""
    run = _copy(tmp_path)
    probe = json.loads((run / "probe.json").read_text())
    probe["facts"]["disk"] = disk_facts(tmp_path)
    (run / "probe.json").write_text(json.dumps(probe))
    disk = probe["facts"]["disk"]
    server = json.loads((run / "server.json").read_text())
    post = write_report(run, ["markdown"]).markdown.read_text()
    row = next(line for line in post.splitlines() if line.startswith("| artifact folder's file system |"))
    assert row.endswith(f"from {disk['mount_source']}): the engine loads the weights from it; weights loaded in "
                        f"{server['ledger']['weights_load_s']:.2f} s (the engine's figure), ready "
                        f"{server['ready_s']:.1f} s after start |")
    room = _environment(run)["artifact folder's disk"]
    assert room.startswith(f"{disk['total_bytes'] / 2**30:.1f} GiB, {disk['free_bytes'] / 2**30:.1f} GiB free at "
                           f"setup, holding ")
    assert room.endswith(f"(mounted at {disk['mount_point']})")


def test_compare_sets_the_runs_file_systems_and_load_times_side_by_side(tmp_path: Path) -> None:
    """Seed 000 §1.4's local disk against NFS is two runs of one profile, the artifact on each mount: compare's
    Start-up section gives each run's file system beside its weights' load and ready times, as each post's recipe
    does, and says "not recorded" for a run whose probe predates the mount (the live run as recorded)."""
    read = _copy(tmp_path / "a")
    probe = json.loads((read / "probe.json").read_text())
    probe["facts"]["disk"] = disk_facts(tmp_path)  # this machine's own reading, as the previous test
    (read / "probe.json").write_text(json.dumps(probe))
    recorded = _copy(tmp_path / "b")
    server = json.loads((read / "server.json").read_text())
    comparison = compare_runs([read, recorded])
    first, second = comparison.startup
    assert first.startswith(f"{load_run(read).run_id}: artifact folder's file system local (")
    assert first.endswith(f"weights loaded in {server['ledger']['weights_load_s']:.2f} s (the engine's figure), "
                          f"ready {server['ready_s']:.1f} s after start")
    assert second == f"{load_run(recorded).run_id}: not recorded"
    assert [section.title for section in comparison.document().sections][:2] == ["Serving", "Start-up"]
