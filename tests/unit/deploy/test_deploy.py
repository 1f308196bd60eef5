"""`ninferkit deploy`'s plan is the reports' deployment: seed 000's `docker run -d --restart unless-stopped`
(§3 and §1.5's run.sh, run through a real bash), seed 003's through its ENTRYPOINT image with the key by name,
a systemd unit for a native binary (checked by systemd-analyze where it is installed), and a finished run's
capacity answer (the H200 run with the V100 flags, tests/data/ninfer_live/g1-h200-v100flags: a real capacity.json).
The live deployment against a Docker engine is tests/live/test_deploy_docker.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ninferkit.cli import main
from ninferkit.deploy import mode_of, service
from ninferkit.deploy.systemd import exec_line
from ninferkit.errors import BadInput, NinferkitError
from tests.conftest import DATA, LOCAL_CPU, REPO
from tests.unit.params.test_seed_profiles import (
    KEY,
    RTX3090,
    SEED_000_S1_5_RUN_SH,
    SEED_000_S3_RUN,
    SEED_000_S3_VARIABLES,
    SEED_003_S1_3_RUN,
    V100,
    bash_argvs,
    differing_flags,
    engine_argv,
    flags,
    option_differences,
    split_docker,
)

V100_FLAGS_RUN = DATA / "ninfer_live" / "g1-h200-v100flags"


@pytest.mark.parametrize("script", [SEED_000_S3_VARIABLES + SEED_000_S3_RUN, SEED_000_S1_5_RUN_SH],
                         ids=["seed000-s3-deploy-script", "seed000-s1.5-run.sh"])
def test_v100_deployment_is_the_reports_command_word_for_word(script: str, tmp_path: Path) -> None:
    [report] = bash_argvs(script, tmp_path)
    _, planned = service.plan(service.load(V100).profile)
    assert planned.argv == report
    assert planned.name == "ninfer" and planned.url == "http://127.0.0.1:18080"


def test_v100_image_keeps_the_reports_cmd_so_run_sh_runs_the_engine_once(tmp_path: Path) -> None:
    """Issue 25: an ENTRYPOINT image given run.sh's `IMAGE ninfer-serve MODEL FLAGS` ran `ninfer-serve ninfer-serve`."""
    _, planned = service.plan(service.load(V100).profile)
    dockerfile = planned.files["Dockerfile"]
    assert dockerfile.rstrip().endswith('CMD ["ninfer-serve", "--help"]') and "ENTRYPOINT" not in dockerfile
    after_image = planned.argv[planned.argv.index("ninfer-v100:0.1.0") + 1:]
    assert after_image[:2] == ["ninfer-serve", "/models/qwen3_8_27b_nvfp4.ninfer"]
    assert after_image.count("ninfer-serve") == 1
    assert set(planned.files) == {"Dockerfile", "nvidia-powerlimit.sh", "nvidia-powerlimit.service"}


def test_3090_deployment_runs_its_entrypoint_image_with_the_key_by_name(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the report mounts $PWD/models; the profile's local_dir is `models`
    monkeypatch.setenv("NINFER_API_KEY", KEY)
    [report] = bash_argvs(SEED_003_S1_3_RUN, tmp_path, env={"KEY": KEY})
    profile = service.load(RTX3090).profile  # its deploy section: the report's --name ninfer and -p 18020:18020
    _, planned = service.plan(profile)
    theirs, image, after = split_docker(report)
    ours, our_image, our_after = split_docker(planned.argv)
    assert our_image == image
    assert "ENTRYPOINT" in planned.files["Dockerfile"]
    entrypoint = [option.split(" ", 1)[1] for option in ours if option.startswith("--entrypoint ")]
    engine = engine_argv(entrypoint, our_after, tmp_path)
    assert engine[:2] == ["ninfer-serve", after[0]] and differing_flags(flags(after), flags(engine)) == {}
    assert sorted(option_differences(theirs, ours), key=str) == sorted([
        (None, "--restart unless-stopped"),  # a deployment restarts itself (seed 000 §3's policy)
        (None, "-e NINFER_API_KEY"),  # the key enters by name, never on the command line
        (None, "--entrypoint sh"),  # ... and `sh -c` expands it inside the container
    ], key=str)
    assert KEY not in " ".join(planned.argv)


def test_dry_run_prints_the_command_and_files_and_changes_nothing(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["deploy", str(V100), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("docker run -d --name ninfer --restart unless-stopped --gpus all --ipc=host")
    assert "# ---- nvidia-powerlimit.service ----" in out and 'CMD ["ninfer-serve", "--help"]' in out
    assert out.rstrip().endswith("is decided once it is")  # the artifact is not verified here: said, not hidden
    assert list(tmp_path.iterdir()) == []


def test_from_run_deploys_the_largest_pool_that_started_and_served() -> None:
    """The H200 run's capacity search: 262,144 tokens at 2 x 131,072, int8, verified by a request. It wins over
    the profile's own setting (here overridden to 100,000 first)."""
    loaded = service.load(V100, ["serve.kv.capacity=100000", "serve.max_context=65536"], from_run=V100_FLAGS_RUN)
    _, planned = service.plan(loaded.profile)
    flags = planned.argv
    assert flags[flags.index("--kv-capacity") + 1] == "262144"
    assert flags[flags.index("--max-context") + 1] == "131072"
    assert flags[flags.index("--max-concurrency") + 1] == "2" and flags[flags.index("--kv-dtype") + 1] == "int8"
    assert loaded.overrides[-4:] == ("serve.max_concurrency=2", "serve.kv.dtype=int8", "serve.kv.capacity=262144",
                                     "serve.max_context=131072")


def test_from_run_without_a_capacity_answer_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no capacity.json: run the capacity step"):
        service.load(V100, from_run=tmp_path)
    (tmp_path / "capacity.json").write_text('{"schema_version": 1, "searches": []}')
    with pytest.raises(BadInput, match="no search answer that started and served"):
        service.load(V100, from_run=tmp_path)


def test_systemd_mode_refuses_before_any_change_where_systemd_is_not_the_init(tmp_path: Path) -> None:
    if Path("/run/systemd/system").is_dir():
        pytest.skip("systemd runs here: the refusal this test checks cannot happen")
    loaded = service.load(LOCAL_CPU, ["deploy.mode=systemd"])
    with pytest.raises(NinferkitError, match="systemd is not this machine's init"):
        service.deploy(loaded, folder=tmp_path / "deploy", say=lambda line: None)
    assert not (tmp_path / "deploy").exists()


def test_systemd_unit_runs_the_native_argv_and_keeps_the_key_out(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NINFER_API_KEY", KEY)
    profile = service.load(V100, ["deploy.mode=systemd", "engine.binary=/usr/bin/true", "serve.docker=false",
                                  "serve.api_key_env=NINFER_API_KEY"]).profile
    mode, planned = service.plan(profile)
    unit = planned.files["ninfer.service"]
    assert mode.name == "systemd" and "After=network-online.target nvidia-powerlimit.service" in unit
    [exec_start] = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert exec_start.startswith("ExecStart=/usr/bin/true /srv/models/qwen3_8_27b_nvfp4.ninfer --host 0.0.0.0 "
                                 "--port 18080 --max-context 131072")
    assert "--api-key ${NINFER_API_KEY}" in exec_start and "EnvironmentFile=/etc/ninferkit/ninfer.env" in unit
    assert "Restart=always" in unit and KEY not in unit
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed: the unit's text was checked, its syntax was not")
    (tmp_path / "ninfer.service").write_text(unit)
    checked = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "ninfer.service")], capture_output=True,
                             text=True)
    assert checked.returncode == 0 and "Unknown" not in checked.stderr, checked.stderr


def test_exec_line_quotes_what_systemd_would_expand() -> None:
    assert exec_line(["/bin/x", "plain", "two words", "100%", "$HOME", 'say "hi"']) == \
        '/bin/x plain "two words" 100%% "$$HOME" "say \\"hi\\""'


def test_mode_follows_the_profile() -> None:
    assert mode_of(service.load(V100).profile).name == "docker"
    assert mode_of(service.load(LOCAL_CPU).profile).name == "systemd"


# -- probe --apply: persistence mode and the power limit, printed before each runs, read back ---------------

def _nvidia_smi_stub(tmp_path: Path, reported: str) -> Path:
    """A stand-in for nvidia-smi (no driver here): records each call, answers the limit query with `reported`."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    stub = bin_dir / "nvidia-smi"
    stub.write_text(f'#!/bin/sh\necho "$*" >> {calls}\ncase "$*" in *--query-gpu*) echo "{reported}";; esac\n')
    stub.chmod(0o755)
    return bin_dir


def test_apply_prints_each_command_before_it_runs_and_reads_the_limit_back(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from ninferkit.deploy.actions import Host
    from ninferkit.deploy.power import apply_now

    monkeypatch.setenv("PATH", f"{_nvidia_smi_stub(tmp_path, '200.00')}:{os.environ['PATH']}")
    said: list[str] = []
    profile = service.load(V100).profile
    assert apply_now(profile, Host(said.append)) == [200.0]
    assert said == ["persistence mode on: nvidia-smi -pm 1", "power limit 200 W: nvidia-smi -pl 200",
                    "read the limit back: nvidia-smi --query-gpu=power.limit --format=csv,noheader,nounits"]
    assert (tmp_path / "calls").read_text().splitlines() == [
        "-pm 1", "-pl 200", "--query-gpu=power.limit --format=csv,noheader,nounits"]


def test_apply_fails_when_the_limit_did_not_take(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ninferkit.deploy.actions import Host
    from ninferkit.deploy.power import apply_now
    from ninferkit.errors import HostActionFailed

    monkeypatch.setenv("PATH", f"{_nvidia_smi_stub(tmp_path, '250.00')}:{os.environ['PATH']}")
    with pytest.raises(HostActionFailed, match=r"reports power limit\(s\) \[250.0\] W after -pl 200"):
        apply_now(service.load(V100).profile, Host(lambda line: None))


def test_apply_is_refused_with_the_reason_and_changes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("nvidia-smi") is not None:
        pytest.skip("nvidia-smi is installed here: --apply would change this machine")
    assert main(["probe", "--apply"]) == 2
    assert "--apply needs --profile" in capsys.readouterr().err
    assert main(["probe", "--apply", "--profile", str(LOCAL_CPU)]) == 1
    assert "there is nothing to apply" in capsys.readouterr().err
    assert main(["probe", "--apply", "--profile", str(V100)]) == 1
    err = capsys.readouterr().err
    assert ("nvidia-smi is not installed" in err if os.geteuid() == 0 else "needs root: run it with sudo" in err)


def test_the_deploy_notebook_shows_the_plan_and_deploys_nothing_by_default(tmp_path: Path) -> None:
    """notebooks/06_deploy.ipynb headless under papermill with its defaults: the plan printed, no service."""
    import nbformat

    out = tmp_path / "out.ipynb"
    subprocess.run([sys.executable, "-m", "papermill", str(REPO / "notebooks" / "06_deploy.ipynb"), str(out),
                    "-p", "profile", str(V100), "-p", "run_dir", str(tmp_path / "run"), "--no-progress-bar"],
                   check=True, capture_output=True, timeout=300)
    texts = [output.get("text", "") + str(output.get("data", {}).get("text/plain", ""))
             for cell in nbformat.read(out, as_version=4).cells if cell.cell_type == "code" for output in cell.outputs]
    shown = "".join(texts)
    assert "docker run -d --name ninfer --restart unless-stopped" in shown
    assert "not deployed (deploy = False)" in shown


def test_the_boot_unit_is_installed_enabled_and_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With stand-ins for install and systemctl (this machine has no systemd, and the real ones would change it):
    the report's two files written, the commands printed in order, `is-enabled` read back."""
    from ninferkit.deploy.actions import Host
    from ninferkit.deploy.power import install_boot_unit
    from ninferkit.errors import HostActionFailed

    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    for name in ("install", "systemctl"):
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\n'
                                    '[ "$1" = is-enabled ] && cat "$(dirname "$0")/state"\nexit 0\n')
        (bin_dir / name).chmod(0o755)
    (bin_dir / "state").write_text("enabled\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    said: list[str] = []
    folder = tmp_path / "deploy"
    folder.mkdir()
    assert install_boot_unit(service.load(V100).profile, folder, Host(said.append)) == "enabled"
    assert sorted(path.name for path in folder.iterdir()) == ["nvidia-powerlimit.service", "nvidia-powerlimit.sh"]
    assert [line.split(":", 1)[0] for line in said] == ["install the power-limit script", "install the boot unit",
                                                          "reload systemd", "enable the boot unit (and run it now)"]
    assert calls.read_text().splitlines()[-2:] == ["systemctl enable --now nvidia-powerlimit.service",
                                                   "systemctl is-enabled nvidia-powerlimit.service"]
    (bin_dir / "state").write_text("disabled\n")
    with pytest.raises(HostActionFailed, match="nvidia-powerlimit.service is disabled after"):
        install_boot_unit(service.load(V100).profile, folder, Host(lambda line: None))
