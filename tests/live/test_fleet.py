"""`ninferkit fleet` against a real one-node Slurm cluster (munged, slurmctld, slurmd; a typed GRES gpu:fake) and
a real sshd on loopback with a key made here (tests/live/daemons.py), each host running the embedded default with
its sweeps trimmed: submit, a host killed mid-run, collect, merge, submit again (only the killed task), merge.

The figures of the closing note come from here: the time from submit to the first merged report, and after
the resume; the merged percentiles are checked against numpy over the concatenated raw rows."""

from __future__ import annotations

import json
import os
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

from tests.conftest import REPO
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

    started = time.monotonic()
    submitted = ninferkit(env, "fleet", "submit", str(fleet))
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    submit_s = time.monotonic() - started
    remote_status = tmp_path / "remote" / ".fleet-live-three" / "status" / "task-2.json"
    assert json.loads(remote_status.read_text())["state"] in ("pending", "running")  # submit
    # returned while the SSH host's task runs in the background
    arrays = json.loads((state / "slurm.json").read_text())["arrays"]
    assert len(arrays) == 1 and arrays[0]["tasks"] == [0, 1] and arrays[0]["gres"] == "gpu:fake:1"
    script = Path(arrays[0]["script"]).read_text()
    assert "#SBATCH --gres=gpu:fake:1" in script and "#SBATCH --array=0,1" in script
    assert "#SBATCH --time=" in script
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
    status = ninferkit(env, "fleet", "status", str(fleet), "--json")
    killed = json.loads(status.stdout)[1]
    assert status.returncode == 0 and killed["host"] == "slurm-b", status.stdout + status.stderr
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
    assert arrays[-1]["tasks"] == [1]  # only what is missing
    assert "ssh-c] task 2 (local-cpu) already finished there" in resumed.stdout
    again = ninferkit(env, "fleet", "collect", str(fleet), "-o", str(tmp_path / "merged-2"))
    resumed_report_s = time.monotonic() - started
    assert again.returncode == 0, again.stdout + again.stderr
    done = [json.loads(line) for line in killed_cells.read_text().splitlines()]
    assert sorted(entry["status"] for entry in done) == ["done", "done"]  # the resume ran only the missing cell

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
    assert "incomplete" not in (tmp_path / "merged-2" / "report" / "index.md").read_text()
    print(f"\nfleet of 3 (2 Slurm + 1 SSH), one killed: submit {submit_s:.1f} s, "
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
