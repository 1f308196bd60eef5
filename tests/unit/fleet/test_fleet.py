"""The fleet file is checked as a profile is, before anything is written or submitted; the task table and the
sbatch script say what the fleet asked (GRES by type, one array, a time limit from the plan)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ninferkit.errors import ProfileError
from ninferkit.fleet.slurm import batch_script
from ninferkit.fleet.spec import load_fleet
from ninferkit.fleet.tasks import StateDir, plan_tasks, write_tasks
from tests.conftest import REPO

FLEET = REPO / "params" / "fleets" / "embedded-three.yaml"


def written(tmp_path: Path, change: dict[str, Any] | None = None, host: dict[str, Any] | None = None) -> Path:
    data = yaml.safe_load(FLEET.read_text())
    data["state_dir"] = str(tmp_path / "state")
    data.update(change or {})
    if host is not None:
        data["hosts"][0].update(host)
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_shipped_fleet_file_loads_with_every_profile_preflighted(tmp_path: Path) -> None:
    fleet = load_fleet(written(tmp_path), root=REPO)
    assert [host.name for host in fleet.spec.hosts] == ["slurm-a", "slurm-b", "ssh-c"]
    assert set(fleet.profiles) == {(name, "params/local-cpu.yaml") for name in ("slurm-a", "slurm-b", "ssh-c")}
    assert not (tmp_path / "state").exists()  # loading writes nothing


@pytest.mark.parametrize(("host", "expected"), [
    ({"gress": "gpu:v100:2"}, "hosts.0.gress: unknown field; did you mean 'gres'? allowed: "),
    ({"gres": "v100"}, "'v100': a GRES by type is NAME:TYPE:COUNT, e.g. gpu:v100:2"),
    ({"via": "kubernetes"}, "hosts.0.via = 'kubernetes': Input should be 'slurm' or 'ssh'"),
    ({"via": "ssh"}, "host slurm-a runs via ssh: give its ssh section"),
    ({"name": "b@d"}, "'b@d': a host name is letters, digits"),
    ({"profiles": []}, "hosts.0.profiles = []: List should have at least 1 item"),
])
def test_a_wrong_field_is_named_with_what_is_allowed(tmp_path: Path, host: dict[str, Any], expected: str) -> None:
    with pytest.raises(ProfileError) as caught:
        load_fleet(written(tmp_path, host=host), root=REPO)
    assert "is not a valid fleet file" in str(caught.value)
    assert expected in str(caught.value)


def test_an_ssh_host_needs_an_absolute_run_root(tmp_path: Path) -> None:
    data = yaml.safe_load(FLEET.read_text())
    data["hosts"][2]["run_root"] = "runs"
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError) as caught:
        load_fleet(path, root=REPO)
    assert "its run_root must be an absolute path on the host, not 'runs'" in str(caught.value)


def test_duplicate_host_names_are_refused(tmp_path: Path) -> None:
    data = yaml.safe_load(FLEET.read_text())
    data["hosts"][1]["name"] = "slurm-a"
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError, match="host names must be unique; written twice: slurm-a"):
        load_fleet(path, root=REPO)


def test_a_host_whose_profile_fails_its_preflight_refuses_the_fleet(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as caught:
        load_fleet(written(tmp_path), ["sweeps.context.targets=[99999]"], root=REPO)
    message = str(caught.value)
    assert "nothing was submitted or started; 3 host profile(s) refused" in message
    assert "host slurm-a, profile params/local-cpu.yaml" in message and "max_context" in message


def test_a_profile_outside_the_checkout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="profile ../outside.yaml is outside the checkout"):
        load_fleet(written(tmp_path, host={"profiles": ["../outside.yaml"]}), root=REPO)


def test_one_array_asks_gres_by_type_and_the_plans_time(tmp_path: Path) -> None:
    fleet = load_fleet(written(tmp_path), root=REPO)
    tasks = plan_tasks(fleet, lambda host: host.run_root)
    assert not (tmp_path / "state").exists()  # planning writes nothing (submit --dry-run plans)
    write_tasks(fleet, tasks)
    assert [(task.index, task.host, task.via) for task in tasks] == [
        (0, "slurm-a", "slurm"), (1, "slurm-b", "slurm"), (2, "ssh-c", "ssh")]
    # the plan: setup allowance 900 s + one launch of 120 s + 2 context cells x 120 s = 1260 s = 21 min
    assert {task.time_limit_min for task in tasks} == {21}
    assert tasks[2].run_dir == "/srv/ninferkit-runs/ssh-c-local-cpu"
    state = StateDir(fleet.state_dir)
    assert (state.path / tasks[0].profile_file).read_text() == (REPO / "params" / "local-cpu.yaml").read_text()
    script = batch_script(state, tasks[:2], REPO, python="/venv/bin/python")
    assert "#SBATCH --array=0,1\n" in script and "#SBATCH --gres=\"gpu:fake:1\"\n" in script
    assert "#SBATCH --time=21\n" in script and "#SBATCH --job-name=ninferkit-embedded-three\n" in script
    command = f'exec /venv/bin/python -m ninferkit fleet task {state.path} "$SLURM_ARRAY_TASK_ID"'
    assert script.rstrip().endswith(command)


def test_an_ssh_host_without_the_asked_gpus_is_refused_by_its_task() -> None:
    """No scheduler hands an SSH host its GRES, so the task checks NVML itself: a kind of GPU no host has."""
    from ninferkit.fleet.tasks import gres_missing

    assert gres_missing(None) is None
    reason = gres_missing("gpu:nosuchgpu:1")
    assert reason is not None and reason.startswith("the fleet asks for gpu:nosuchgpu:1 (1 GPU(s) named like "
                                                   "'nosuchgpu'); this host has ")


def test_two_tasks_sharing_a_run_directory_are_refused_naming_both(tmp_path: Path) -> None:
    """One profile listed twice on a host, and a second profile file with the same `name:`: each pair would write
    one run directory, whose rows the merge would count twice (issue 41: 12 rows for 6 requests)."""
    (tmp_path / "params").mkdir()
    for name in ("local-cpu.yaml", "twin.yaml"):  # the twin has the same name: local-cpu
        (tmp_path / "params" / name).write_text((REPO / "params" / "local-cpu.yaml").read_text())
    data = yaml.safe_load(FLEET.read_text())
    data["state_dir"] = str(tmp_path / "state")
    data["hosts"][0]["profiles"] = ["params/local-cpu.yaml", "params/local-cpu.yaml"]
    data["hosts"][1]["profiles"] = ["params/local-cpu.yaml", "params/twin.yaml"]
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError) as caught:
        load_fleet(path, root=tmp_path)
    message = str(caught.value)
    assert "nothing was submitted or started; 2 host profile(s) refused" in message, message
    assert ("host slurm-a, profile params/local-cpu.yaml (#2 of its profiles, name: local-cpu) would share the run "
            "directory runs/slurm-a-local-cpu with host slurm-a, profile params/local-cpu.yaml (#1 of its "
            "profiles, name: local-cpu)") in message, message
    assert ("host slurm-b, profile params/twin.yaml (#2 of its profiles, name: local-cpu) would share the run "
            "directory runs/slurm-b-local-cpu with host slurm-b, profile params/local-cpu.yaml (#1") in message
    assert not (tmp_path / "state").exists()


def test_sinfo_gres_is_read_by_type_and_count() -> None:
    """sinfo's %G as Slurm 22-23 print it (a socket binding in parentheses, several types on one node)."""
    from ninferkit.fleet.slurm import gres_counts

    assert gres_counts("gpu:fakea:3(S:0),gpu:fakeb:1") == {"gpu:fakea": 3, "gpu:fakeb": 1}
    assert gres_counts("(null)") == {}


def test_an_unreachable_ssh_host_answers_with_its_own_reason_beside_the_others(tmp_path: Path) -> None:
    """A real TCP refusal on loopback (no sshd on the port): `fleet status` says so for that host's task within
    its bound, never an empty reason, and the Slurm tasks (not submitted yet) answer beside it."""
    import socket
    import subprocess
    import time

    from ninferkit.fleet.follow import status

    key = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{closed} {(tmp_path / 'key.pub').read_text()}")
    data = yaml.safe_load(FLEET.read_text())
    data["state_dir"] = str(tmp_path / "state")
    data["hosts"][2]["ssh"].update(address="127.0.0.1", port=closed, identity_file=str(key), known_hosts=str(known))
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    fleet = load_fleet(path, root=REPO)
    write_tasks(fleet, plan_tasks(fleet, lambda host: host.run_root))
    started = time.monotonic()
    shown = status(fleet)
    assert time.monotonic() - started < 20
    assert [task["state"] for task in shown] == ["pending", "pending", "unknown"]
    assert shown[2]["reason"].startswith(f"host ssh-c: cannot connect to {data['hosts'][2]['ssh']['user']}@127.0.0.1:"
                                         f"{closed}: "), shown[2]
    assert shown[2]["reason"].endswith(f"[Errno 111] Connect call failed ('127.0.0.1', {closed}); "
                                       "the task last said: nothing")


@pytest.mark.parametrize(("restarts", "previous", "expected"), [
    ("1", None, "Slurm started this task again (restart 1: its node was lost, or the job was requeued)"),
    ("0", "running", "an attempt of this task is recorded running (pid 4242 on nodea, since "),
])
def test_a_second_attempt_does_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restarts: str,
                                       previous: str | None, expected: str) -> None:
    """Slurm's own restart counter (a requeue despite --no-requeue), or a status that says an attempt is running
    (submit writes pending first): the task refuses before its run directory or server exist, keeping the port."""
    from ninferkit.fleet.tasks import TaskStatus, run_task

    fleet = load_fleet(written(tmp_path), root=REPO)
    tasks = plan_tasks(fleet, lambda host: host.run_root)
    write_tasks(fleet, tasks)
    state = StateDir(fleet.state_dir)
    if previous is not None:
        state.write_status(TaskStatus(index=0, host="slurm-a", state="running", pid=4242, node="nodea", port=40001,
                                      started="2026-12-06T02:00:00+00:00"))
    monkeypatch.setenv("SLURM_RESTART_COUNT", restarts)
    said: list[str] = []
    assert run_task(state.path, 0, say=said.append) == 1
    status = state.read_status(0)
    assert status is not None and status.state == "failed" and status.step == "restart", status
    assert status.reason is not None and status.reason.startswith(expected), status.reason
    assert status.port == (40001 if previous else None)
    assert not state.run_dir(tasks[0]).exists() and said == [f"slurm-a: task 0 refused: {status.reason}"]


@pytest.mark.parametrize(("host", "expected"), [
    ({"mem": "16 GB"}, "hosts.0.mem = '16 GB': must be a whole number with an optional K, M, G or T (16G)"),
    ({"constraint": "a b"}, "hosts.0.constraint = 'a b': must be node feature names joined by "),
    ({"account": "lab;rm"}, "hosts.0.account = 'lab;rm': must be 1-64 letters, digits"),
    ({"container_image": "img with space"}, "hosts.0.container_image = 'img with space': must be an image name"),
])
def test_slurm_request_fields_are_validated(tmp_path: Path, host: dict[str, Any], expected: str) -> None:
    with pytest.raises(ProfileError) as caught:
        load_fleet(written(tmp_path, host=host), root=REPO)
    assert expected in str(caught.value), str(caught.value)
    assert "pattern" not in str(caught.value)  # the rule in words, not pydantic's regex


def test_a_slurm_field_on_an_ssh_host_is_refused(tmp_path: Path) -> None:
    data = yaml.safe_load(FLEET.read_text())
    data["hosts"][2].update(account="labx", mem="8G")
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError, match="host ssh-c runs via ssh: account, mem are Slurm fields"):
        load_fleet(path, root=REPO)


def test_request_fields_are_sbatch_lines_and_an_image_runs_the_task_through_pyxis(tmp_path: Path) -> None:
    """Each field an #SBATCH line (quoted for sbatch's reader); tasks that ask differently go in separate arrays
    (the grouping key is the lines); an image wraps the task in pyxis's srun (generated only: pyxis is absent
    here, and `fleet submit` refuses an image then; tests/live/test_fleet.py)."""
    from ninferkit.fleet.slurm import request_lines

    fleet = load_fleet(written(tmp_path, host={"account": "labx", "qos": "high", "constraint": "ib&[r1|r2]",
                                               "mem": "16G", "container_image": "nvcr.io#nvidia/pytorch:24.05-py3"}),
                       root=REPO)
    tasks = plan_tasks(fleet, lambda host: host.run_root)
    write_tasks(fleet, tasks)
    assert request_lines(tasks[0]) == ['#SBATCH --gres="gpu:fake:1"', '#SBATCH --account="labx"',
                                       '#SBATCH --qos="high"', '#SBATCH --constraint="ib&[r1|r2]"',
                                       '#SBATCH --mem="16G"']
    assert request_lines(tasks[1]) == ['#SBATCH --gres="gpu:fake:1"']
    state = StateDir(fleet.state_dir)
    script = batch_script(state, tasks[:1], REPO, python="/venv/bin/python")
    assert (f"exec srun --ntasks=1 '--container-image=nvcr.io#nvidia/pytorch:24.05-py3' --container-mounts="
            f"{REPO}:{REPO},{state.path}:{state.path} --container-workdir={REPO} /venv/bin/python -m ninferkit "
            f"fleet task {state.path} \"$SLURM_ARRAY_TASK_ID\"") in script


def two_slurm_tasks(tmp_path: Path) -> tuple[Path, Any]:
    """The example fleet's two Slurm hosts, their tasks planned and written, never submitted (nothing asks Slurm)."""
    data = yaml.safe_load(FLEET.read_text())
    data["state_dir"] = str(tmp_path / "state")
    data["hosts"] = data["hosts"][:2]
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    fleet = load_fleet(path, root=REPO)
    write_tasks(fleet, plan_tasks(fleet, lambda host: host.run_root))
    return path, fleet


def test_status_watch_redraws_a_terminal_and_prints_plain_changed_lines_elsewhere(tmp_path: Path) -> None:
    """Two Slurm tasks never submitted (nothing asks Slurm), their statuses written as the tasks write them:
    round one shows one running and one finished; between rounds the running one ends; the view stops once
    none is pending or running. Not a terminal: stamped plain lines, no control codes."""
    from ninferkit.fleet.follow import CLEAR, watch
    from ninferkit.fleet.tasks import TaskStatus

    path, fleet = two_slurm_tasks(tmp_path)
    state = StateDir(fleet.state_dir)
    waits: list[float] = []

    def between_rounds(seconds: float) -> None:  # what the task itself writes when it ends
        waits.append(seconds)
        state.write_status(TaskStatus(index=0, host="slurm-a", state="failed", node="nodea", step="sweeps",
                                      reason="a step failed\nsecond line"))

    for terminal in (False, True):
        state.write_status(TaskStatus(index=0, host="slurm-a", state="running", node="nodea", step="sweeps"))
        state.write_status(TaskStatus(index=1, host="slurm-b", state="ok", node="nodeb"))
        written_out: list[str] = []
        shown = watch(fleet, 5.0, written_out.append, terminal, sleep=between_rounds)
        assert [task["state"] for task in shown] == ["failed", "ok"]
        assert len(written_out) == 2
        first, last = written_out
        assert "task 0 slurm-a (local-cpu): running on nodea at sweeps\n" in first
        assert "task 1 slurm-b (local-cpu): ok on nodeb\n" in first
        assert "task 0 slurm-a (local-cpu): failed on nodea at sweeps: a step failed\n" in last
        assert "embedded-three: 2 task(s), 0 pending or running" in last
        if terminal:
            assert first.startswith(CLEAR) and "(every 5 s; Ctrl-C stops watching, not the tasks)" in first
        else:
            assert "\x1b" not in first + last and "\r" not in first + last
    assert waits == [5.0, 5.0]


@pytest.mark.parametrize(("state", "code"), [("interrupted", 1), ("failed", 1), ("ok", 0)])
def test_status_exits_1_while_a_task_needs_you(tmp_path: Path, state: str, code: int,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Two Slurm tasks never submitted (nothing asks Slurm), their statuses as the tasks write them: an interrupted
    task stopped midway as a failed one did, and `fleet status` says so in its exit code (it had exited 0)."""
    from ninferkit.cli import main
    from ninferkit.fleet.tasks import TaskStatus

    path, fleet = two_slurm_tasks(tmp_path)
    status = StateDir(fleet.state_dir)
    status.write_status(TaskStatus(index=0, host="slurm-a", state=state, node="nodea"))  # type: ignore[arg-type]
    status.write_status(TaskStatus(index=1, host="slurm-b", state="ok", node="nodeb"))
    assert main(["fleet", "status", str(path)]) == code
    assert f"task 0 slurm-a (local-cpu): {state}" in capsys.readouterr().out
