"""`ninferkit fleet` against a real one-node Slurm cluster (munged, slurmctld, slurmd; a typed GRES gpu:fake) and
a real sshd on loopback with a key made here (tests/live/daemons.py), each host running the embedded default with
its sweeps trimmed: hosts checked before submit (a GRES the cluster lacks, an empty known_hosts, a closed SSH port
refused; --dry-run), submit, a second submit refused, one task killed with kill -9 (its watchdog stops its server)
and one cancelled mid-run, collect, merge, submit again (only the killed tasks, on their ports), merge.

The figures of the closing note come from here: the time from submit to the first merged report, and after
the resume; the merged percentiles are checked against numpy over the concatenated raw rows."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.conftest import REPO, free_port
from tests.live.daemons import SlurmCluster, SshServer, missing, slurm_cluster, ssh_server

TRIM = ["sweeps.context.targets=[256, 512]", "sweeps.context.repetitions=3", "sweeps.tasks.enabled=false",
        "sweeps.concurrency.enabled=false", "sweeps.prefix_reuse.enabled=false", "sweeps.telemetry=false"]

pytestmark = pytest.mark.skipif(bool(missing("slurmctld", "slurmd", "munged", "sshd", "sbatch")),
                                reason=f"needs {missing('slurmctld', 'slurmd', 'munged', 'sshd', 'sbatch')} "
                                       "(scripts/test installs slurm-wlm, munge, openssh-server)")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as started:
        yield started


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    with ssh_server(tmp_path_factory.mktemp("sshd")) as started:
        yield started


def fleet_file(folder: Path, sshd: SshServer) -> Path:
    """Two Slurm hosts (GRES gpu:fake:1 each) and one SSH host (this checkout, reached over loopback)."""
    fleet = {
        "name": "live-three", "state_dir": str(folder / "state"), "steps": ["setup", "verify", "launch", "sweeps"],
        "overrides": TRIM, "seconds_per_cell": 120, "setup_allowance_s": 900,
        "hosts": [
            {"name": "slurm-a", "via": "slurm", "gres": "gpu:fake:1", "profiles": ["params/local-cpu.yaml"],
             "run_root": "runs"},
            {"name": "slurm-b", "via": "slurm", "gres": "gpu:fake:1", "profiles": ["params/local-cpu.yaml"],
             "run_root": "runs"},
            {"name": "ssh-c", "via": "ssh", "profiles": ["params/local-cpu.yaml"],
             "run_root": str(folder / "remote"),
             "ssh": {"address": "127.0.0.1", "port": sshd.port, "user": sshd.user, "identity_file": str(sshd.key),
                     "known_hosts": str(sshd.known_hosts), "checkout": str(REPO)}},
        ]}
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet, sort_keys=False))
    return path


def ninferkit(env: dict[str, str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ninferkit", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def union_percentiles(run_dirs: list[Path]) -> dict[tuple[str, int], dict[str, float]]:
    """numpy over the concatenated raw rows of the runs' context cells: the check on merge's numbers."""
    pooled: dict[tuple[str, int], list[float]] = defaultdict(list)
    for run_dir in run_dirs:
        counted = {}
        for line in (run_dir / "sweeps" / "cells.jsonl").read_text().splitlines():
            entry = json.loads(line)
            counted[entry["cell_id"]] = entry["attempt"]
        for line in (run_dir / "requests.jsonl").read_text().splitlines():
            row = json.loads(line)
            if (row["status"] == "ok" and not row.get("warmup") and row["sweep"] == "context"
                    and counted.get(row["cell_id"]) == row["attempt"]):
                pooled[("ttft", row["cell"]["target_prompt_tokens"])].append(row["ttft_client_s"])
    return {key: dict(zip(("p50", "p90", "p99"), np.percentile(values, [50, 90, 99]), strict=True))
            for key, values in pooled.items()}


def test_fleet_over_slurm_and_ssh_killed_host_resumes(tmp_path: Path, cluster: SlurmCluster, sshd: SshServer,
                                                      llama_server: Path) -> None:
    env = {**os.environ, **cluster.env, "NINFERKIT_PROGRESS": "lines"}
    fleet = fleet_file(tmp_path, sshd)
    state = tmp_path / "state"

    # a host whose profile fails its own preflight refuses the whole fleet, before anything is submitted
    refused = ninferkit(env, "fleet", "submit", str(fleet), "-p", "sweeps.context.targets=[99999]")
    assert refused.returncode == 2, refused.stderr
    assert "nothing was submitted or started" in refused.stderr and "host slurm-a" in refused.stderr
    assert not (state / "slurm.json").exists()
    # so does a host the cluster or SSH cannot serve, found before submitting: a GRES type the cluster lacks,
    # an empty known_hosts, a closed SSH port, an SSH host without the GPUs asked for (issue 41, item 4)
    data = yaml.safe_load(fleet.read_text())
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    data["hosts"][0]["gres"] = "gpu:nosuch:1"
    data["hosts"][2]["ssh"]["known_hosts"] = str(empty)
    data["hosts"].append({**data["hosts"][2], "name": "ssh-closed",
                          "ssh": {**data["hosts"][2]["ssh"], "known_hosts": str(sshd.known_hosts),
                                  "port": free_port()}})
    data["hosts"].append({**data["hosts"][2], "name": "ssh-nogpu", "gres": "gpu:nosuch:1",
                          "ssh": {**data["hosts"][2]["ssh"], "known_hosts": str(sshd.known_hosts)}})
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    checked = time.monotonic()
    refused = ninferkit(env, "fleet", "submit", str(tmp_path / "bad.yaml"))
    checks_s = time.monotonic() - checked
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "nothing was submitted or started; 4 host problem(s)" in refused.stderr, refused.stderr
    assert "host ssh-nogpu: the fleet asks for gpu:nosuch:1 (1 GPU(s) named like 'nosuch'); this host has " \
        in refused.stderr  # an SSH host has no scheduler: its GPUs are read there, through NVML
    assert "host slurm-a: gres gpu:nosuch:1: no node of partition test has 1 gpu of type nosuch" in refused.stderr
    assert f"host ssh-c: ssh.known_hosts {empty} is empty" in refused.stderr
    assert "host ssh-closed: cannot connect to" in refused.stderr and "Connect call failed" in refused.stderr
    assert "Traceback" not in refused.stderr and "CryptographyDeprecationWarning" not in refused.stderr
    assert not state.exists()
    dry = ninferkit(env, "fleet", "submit", str(fleet), "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "task 0 slurm-a (params/local-cpu.yaml, name local-cpu): slurm partition (default), gres gpu:fake:1, " \
           "time limit 21 min" in dry.stdout and "nothing was submitted or started" in dry.stdout
    assert f"task 2 ssh-c (params/local-cpu.yaml, name local-cpu): ssh {sshd.user}@127.0.0.1:{sshd.port}" in dry.stdout
    assert not state.exists()

    started = time.monotonic()
    submitted = ninferkit(env, "fleet", "submit", str(fleet))
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    submit_s = time.monotonic() - started
    again = ninferkit(env, "fleet", "submit", str(fleet))  # while the tasks are queued or running
    assert again.returncode == 0, again.stdout + again.stderr
    assert "slurm: task 0 is still held by job " in again.stdout and "slurm: task 1 is still held by job " \
        in again.stdout and "ssh-c] task 2 is running there" in again.stdout, again.stdout
    assert len(json.loads((state / "slurm.json").read_text())["arrays"]) == 1  # not submitted twice
    remote_status = tmp_path / "remote" / ".fleet-live-three" / "status" / "task-2.json"
    assert json.loads(remote_status.read_text())["state"] in ("pending", "running")  # submit
    # returned while the SSH host's task runs in the background
    arrays = json.loads((state / "slurm.json").read_text())["arrays"]
    assert len(arrays) == 1 and arrays[0]["tasks"] == [0, 1] and arrays[0]["gres"] == "gpu:fake:1"
    script = Path(arrays[0]["script"]).read_text()
    assert "#SBATCH --gres=gpu:fake:1" in script and "#SBATCH --array=0,1" in script
    assert "#SBATCH --time=" in script and "#SBATCH --no-requeue" in script
    shown = subprocess.run(["scontrol", "show", "job", "-o", arrays[0]["job_id"]], env=env, capture_output=True,
                           text=True).stdout
    assert "TresPerNode=gres:gpu:fake:1" in shown  # Slurm itself holds the typed request

    # the follower's SSH connection drops (its process killed) while ssh-c sweeps: the task there goes on
    follower = subprocess.Popen([sys.executable, "-m", "ninferkit", "fleet", "collect", str(fleet)], cwd=REPO,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    remote_log = tmp_path / "remote" / ".fleet-live-three" / "logs" / "task-2.log"
    deadline = time.monotonic() + 600
    while not (remote_log.exists() and "[4/4] sweeps    running" in remote_log.read_text()):
        assert time.monotonic() < deadline and follower.poll() is None, "ssh-c did not reach its sweeps"
        time.sleep(0.2)
    follower.kill()
    streamed = follower.communicate()[0]
    assert "[ssh-c] [1/4] setup     running" in streamed  # it was streaming the host's lines
    remote = json.loads(remote_status.read_text())
    assert remote["state"] == "running"
    os.kill(remote["pid"], 0)  # alive after the connection that was following it dropped

    # slurm-a is killed with kill -9 mid-sweeps: its watchdog stops its llama-server, its status says so and keeps
    # its port (issue 41, item 2)
    run_a = state / "runs" / "slurm-a-local-cpu"
    cells_a = run_a / "sweeps" / "cells.jsonl"
    deadline = time.monotonic() + 600
    while not (cells_a.exists() and cells_a.read_text().strip()):
        assert time.monotonic() < deadline, "slurm-a finished no cell in 600 s"
        time.sleep(0.2)
    status_a = state / "status" / "task-0.json"
    before = json.loads(status_a.read_text())
    server = json.loads((run_a / "server.json").read_text())
    assert before["state"] == "running" and server["state"] == "ready", (before, server)
    os.kill(before["pid"], 9)
    killed = time.monotonic()
    while _alive(server["pid"]):
        assert time.monotonic() - killed < 30, "the killed task's llama-server still serves after 30 s"
        time.sleep(0.1)
    orphan_s = time.monotonic() - killed
    while json.loads(status_a.read_text())["state"] == "running":
        assert time.monotonic() - killed < 30, "no status says the task died"
        time.sleep(0.1)
    said = json.loads(status_a.read_text())
    assert f"process {before['pid']} ended without a status (a signal it cannot catch: kill -9" in said["reason"]
    assert f"its server (pid {server['pid']}" in said["reason"] and said["port"] == before["port"], said
    cells_a_killed = [json.loads(line) for line in cells_a.read_text().splitlines()]

    # slurm-b dies mid-run: cancelled by Slurm once the first of its two cells has finished
    killed_cells = state / "runs" / "slurm-b-local-cpu" / "sweeps" / "cells.jsonl"
    deadline = time.monotonic() + 600
    while not (killed_cells.exists() and killed_cells.read_text().strip()):
        assert time.monotonic() < deadline, "slurm-b finished no cell in 600 s"
        time.sleep(0.2)
    subprocess.run(["scancel", f"{arrays[0]['job_id']}_1"], env=env, check=True)

    collected = ninferkit(env, "fleet", "collect", str(fleet), "-o", str(tmp_path / "merged-1"))
    first_report_s = time.monotonic() - started
    assert collected.returncode == 1, collected.stdout + collected.stderr  # a task did not finish: said, not dropped
    assert "[ssh-c]" in collected.stdout and "[slurm-a]" in collected.stdout  # lines prefixed by their host
    assert "task 1 slurm-b (local-cpu): interrupted\n  step: sweeps\n" in collected.stdout, collected.stdout
    assert "task 0 slurm-a (local-cpu): failed\n" in collected.stdout, collected.stdout
    assert "DeadKernelError" not in collected.stdout
    status = ninferkit(env, "fleet", "status", str(fleet), "--json")
    killed = json.loads(status.stdout)[1]
    assert status.returncode == 1 and killed["host"] == "slurm-b", status.stdout + status.stderr
    assert killed["state"] == "interrupted" and killed["step"] == "sweeps", killed
    assert killed["reason"].startswith("interrupted (signal 15)") and killed["log"].endswith("task-1.log")
    merged = tmp_path / "merged-1"
    report = (merged / "report" / "index.md").read_text()
    assert "incomplete: sweeps" in report
    ssh_run = state / "runs" / "ssh-c" / "ssh-c-local-cpu"
    assert (ssh_run / "requests.jsonl").exists()  # copied back from the SSH host

    resumed = ninferkit(env, "fleet", "submit", str(fleet))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    arrays = json.loads((state / "slurm.json").read_text())["arrays"]
    assert arrays[-1]["tasks"] == [0, 1]  # only what is missing
    assert "ssh-c] task 2 (local-cpu) already finished there" in resumed.stdout
    again = ninferkit(env, "fleet", "collect", str(fleet), "-o", str(tmp_path / "merged-2"))
    resumed_report_s = time.monotonic() - started
    assert again.returncode == 0, again.stdout + again.stderr
    done = [json.loads(line) for line in killed_cells.read_text().splitlines()]
    assert sorted(entry["status"] for entry in done) == ["done", "done"]  # the resume ran only the missing cell
    resumed_a = [json.loads(line) for line in cells_a.read_text().splitlines()]
    assert resumed_a[: len(cells_a_killed)] == cells_a_killed  # what the killed attempt finished stands
    assert json.loads(status_a.read_text())["port"] == before["port"]  # on the port it had: same profile hash

    run_dirs = [state / "runs" / "slurm-a-local-cpu", state / "runs" / "slurm-b-local-cpu", ssh_run]
    cells = pd.read_csv(tmp_path / "merged-2" / "cells.csv")
    union = cells[cells["hosts"].str.startswith("all: ")]
    assert len(union) == 2 and set(union["hosts"]) == {"all: slurm-a, slurm-b, ssh-c"}
    expected = union_percentiles(run_dirs)
    for _, row in union.iterrows():
        target = int(row["cell"].split("target_prompt_tokens=")[1].split()[0])
        for p in ("p50", "p90", "p99"):
            assert row[f"ttft_client_s_{p}"] == pytest.approx(expected[("ttft", target)][p], rel=1e-12)
        assert row["requests"] == 9  # 3 hosts x 3 repetitions: no row lost or counted twice across the kill
    merged_rows = [json.loads(line) for line in (tmp_path / "merged-2" / "requests.jsonl").read_text().splitlines()]
    assert {row["host"] for row in merged_rows} == {"slurm-a", "slurm-b", "ssh-c"}
    assert all(row["gpu"] and row["engine_build"] and row["profile_hash"] for row in merged_rows)
    jobs = [f"{entry['job_id']}_{{0}}" for entry in arrays]  # both attempts of the resumed Slurm tasks
    for row in merged_rows:
        if row["host"] == "ssh-c":
            assert "jobs" not in row and row["nodes"] == [socket.gethostname()] and "gres" not in row
        else:
            index = 0 if row["host"] == "slurm-a" else 1
            assert row["jobs"] == [job.format(index) for job in jobs] and row["gres"] == "gpu:fake:1", row
            assert row["nodes"] == [socket.gethostname()]
    assert "incomplete" not in (tmp_path / "merged-2" / "report" / "index.md").read_text()
    print(f"\nchecks before submit refused 4 hosts in {checks_s:.1f} s; kill -9: server gone {orphan_s:.1f} s later")
    print(f"fleet of 3 (2 Slurm + 1 SSH), two killed: submit {submit_s:.1f} s, "
          f"first merged report {first_report_s:.0f} s, "
          f"after resume {resumed_report_s:.0f} s")


def test_a_failed_task_is_reported_with_its_step_diagnosis_and_log(tmp_path: Path, cluster: SlurmCluster,
                                                                   llama_server: Path) -> None:
    """A server that cannot become ready in 10 ms (the profile passes preflight: nothing there knows the time)
    fails its launch step on the Slurm node; collect names the step, the server log's verdict and the log."""
    env = {**os.environ, **cluster.env, "NINFERKIT_PROGRESS": "lines"}
    fleet = {"name": "live-failing", "state_dir": str(tmp_path / "state"), "steps": ["setup", "verify", "launch"],
             "overrides": ["serve.startup_timeout_s=0.01"], "hosts": [
                 {"name": "slow", "via": "slurm", "gres": "gpu:fake:1", "profiles": ["params/local-cpu.yaml"],
                  "run_root": "runs"}]}
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet))
    assert ninferkit(env, "fleet", "submit", str(path)).returncode == 0
    collected = ninferkit(env, "fleet", "collect", str(path))
    assert collected.returncode == 1, collected.stdout + collected.stderr
    status = json.loads((tmp_path / "state" / "status" / "task-0.json").read_text())
    assert status["state"] == "failed" and status["step"] == "launch", status
    assert status["notebook"].endswith("notebooks/02_launch.ipynb")
    assert status["diagnosis"].endswith(f"[{tmp_path / 'state' / 'runs' / 'slow-local-cpu' / 'logs' / 'server.log'}]")
    assert "task 0 slow (local-cpu): failed\n  step: launch\n  reason: " in collected.stdout
    assert "  diagnosis: " in collected.stdout and "  log: " in collected.stdout


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
