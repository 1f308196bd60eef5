"""`ninferkit deploy` in Docker mode against a real Docker engine: the embedded llama-server as a service that
restarts itself, checked by health and acceptance, found again by status, logs and stop, and by report 000's
own run.sh (seed 000 §1.5: its status and stop subcommands, verbatim).

No registry is reachable here, so the image is built from a local root filesystem: the llama-server build of
the cache, the shared libraries `ldd` names for it and the loader, `docker import`ed with the CMD a generated
image has. The model (SmolLM2-135M, pinned) is mounted read-only at /models, as the report mounts its folder.
The Docker engine is the system's (`docker.io`, installed by scripts/test); the fixture starts `dockerd` when
none answers and stops only the one it started.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ninferkit.cli import main
from ninferkit.deploy import mode_of, service
from ninferkit.engines import get_adapter
from ninferkit.rundir.runs import open_run
from ninferkit.server.process import acceptance_checks
from ninferkit.steps.verify import verify
from tests.conftest import LOCAL_CPU, free_port

IMAGE = "ninferkit-test/llama-server:11434"
NAME = "ninfer"  # seed 000 §1.5: NAME=ninfer, so the report's run.sh finds the deployment
SEED_000_RUN_SH_TAIL = """\
case "${1:-start}" in
  stop)    docker stop -t 30 "$NAME";;
  logs)    docker logs -f --tail 100 "$NAME";;
  status)  docker ps -a --filter "name=^${NAME}$";;
esac
"""
"""seed 000 §1.5, run.sh's stop, logs and status lines verbatim (its start runs ninfer-serve, which this box lacks)."""


def _docker_answers() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "info"], capture_output=True, timeout=30).returncode == 0


@pytest.fixture(scope="module")
def docker_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A Docker engine that answers: the running one, or a dockerd started here (root only) and stopped after."""
    if _docker_answers():
        yield
        return
    if shutil.which("dockerd") is None or os.geteuid() != 0:
        pytest.skip("no Docker engine answers and dockerd cannot be started here (install docker.io, run as root)")
    log = tmp_path_factory.mktemp("dockerd") / "dockerd.log"
    with log.open("w") as handle:
        daemon = subprocess.Popen(["dockerd"], stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while not _docker_answers():
        if daemon.poll() is not None or time.monotonic() > deadline:
            daemon.kill()
            pytest.fail(f"dockerd did not start: {log.read_text()[-2000:]}")
        time.sleep(0.5)
    yield
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(timeout=60)


def _libraries(binary: Path) -> list[Path]:
    """The shared objects the binary loads, as ldd resolves them here (the loader included)."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        parts = line.split()
        path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0]
        if path.startswith("/"):
            found.append(Path(path))
    return found


@pytest.fixture(scope="module")
def llama_image(docker_engine: None, llama_server: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """IMAGE: llama-server on PATH, its libraries, CMD ["llama-server", "--help"] as a generated image has."""
    tarball = tmp_path_factory.mktemp("rootfs") / "rootfs.tar"
    with tarfile.open(tarball, "w") as tar:
        tar.add(llama_server.resolve(), arcname="usr/local/bin/llama-server")
        for library in _libraries(llama_server):
            target = library.as_posix().lstrip("/") if "ld-linux" in library.name else f"usr/local/lib/{library.name}"
            tar.add(library.resolve(), arcname=target)
        for folder in ("tmp", "models"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777
            tar.addfile(info)
    subprocess.run(["docker", "import", "--change", 'CMD ["llama-server", "--help"]',
                    "--change", "ENV PATH=/usr/local/bin:/usr/bin:/bin",
                    "--change", "ENV LD_LIBRARY_PATH=/usr/local/lib",
                    str(tarball), IMAGE], check=True, capture_output=True, timeout=300)
    yield IMAGE
    subprocess.run(["docker", "image", "rm", IMAGE], capture_output=True)


@pytest.fixture(scope="module")
def model_ready(tmp_path_factory: pytest.TempPathFactory) -> None:
    verify(open_run(LOCAL_CPU, tmp_path_factory.mktemp("verify")), progress=False)


def _wait(condition, what: str, timeout_s: float = 90) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout_s:.0f} s"
        time.sleep(0.5)


def test_docker_deployment_restarts_after_the_engine_is_killed(llama_image: str, model_ready: None, tmp_path: Path,
                                                              capfd: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    overrides = ["serve.docker=true", f"engine.docker_image={llama_image}", f"serve.port={port}",
                 "serve.container_port=8080", f"deploy.name={NAME}"]
    loaded = service.load(LOCAL_CPU, overrides)
    profile = loaded.profile
    said: list[str] = []
    if subprocess.run(["docker", "inspect", "--type", "container", NAME], capture_output=True).returncode == 0:
        pytest.skip(f"a container named {NAME} exists on this machine: deploying would replace it")
    try:
        record = service.deploy(loaded, folder=tmp_path / "deploy", say=said.append)
        # the report's shape: detached, its name, restart policy, the port published, the model folder read-only
        assert record.argv[:7] == ["docker", "run", "-d", "--name", NAME, "--restart", "unless-stopped"]
        assert "--gpus" not in record.argv  # a CPU build gets no GPUs (a Docker engine without NVIDIA refuses it)
        image_at = record.argv.index(llama_image)
        assert record.argv[image_at + 1:image_at + 4] == ["llama-server", "-m",
                                                          "/models/SmolLM2-135M-Instruct.Q4_1.gguf"]
        assert f"127.0.0.1:{port}:8080" in record.argv and "--entrypoint" not in record.argv
        assert [check.name for check in record.checks if check.ok] == ["health", "models", "chat"]
        assert said[-1].startswith(f"start the container {NAME}: docker run -d")
        written = json.loads((tmp_path / "deploy" / "deploy.json").read_text())
        assert written["argv"] == record.argv and written["checks"][2]["ok"] is True

        mode = mode_of(profile)
        before = service.state(profile)
        assert before.running and before.restarts == 0 and before.detail["restart_policy"] == "unless-stopped"
        assert before.pid is not None
        os.kill(before.pid, signal.SIGKILL)  # the engine process itself, as a crash would end it
        _wait(lambda: (service.state(profile).restarts or 0) >= 1, "docker restarted the killed engine")
        after = service.state(profile)
        assert after.pid != before.pid
        service.wait_healthy(profile, get_adapter(profile.engine.kind), mode, NAME, record.url or "")
        again = acceptance_checks(profile, get_adapter(profile.engine.kind), record.url or "")
        assert [check.name for check in again if check.ok] == ["health", "models", "chat"]

        capfd.readouterr()
        options = [word for override in overrides for word in ("-p", override)]
        assert main(["deploy", "status", str(LOCAL_CPU), *options]) == 0
        status = capfd.readouterr().out
        assert f"{NAME} (docker): running" in status and "restarted 1 time(s)" in status
        assert main(["deploy", "logs", str(LOCAL_CPU), "--lines", "5000", *options]) == 0
        logs = capfd.readouterr()
        printed = logs.out + logs.err
        # docker keeps the log across the restart: the engine started twice, each time on the container's port
        assert printed.count("listening on http://0.0.0.0:8080") == 2
        assert get_adapter("llama_server").parse_ledger(printed)["listen_url"] == "http://0.0.0.0:8080"

        # report 000's run.sh, verbatim, finds the container by its name
        script = f"NAME={NAME}\n" + SEED_000_RUN_SH_TAIL
        listed = subprocess.run(["bash", "-c", script, "run.sh", "status"], capture_output=True, text=True, check=True)
        assert NAME in listed.stdout and llama_image in listed.stdout and "Up " in listed.stdout
        subprocess.run(["bash", "-c", script, "run.sh", "stop"], capture_output=True, text=True, check=True)
        stopped = service.state(profile)
        assert stopped.exists and not stopped.running and stopped.status == "exited"
        assert main(["deploy", "stop", str(LOCAL_CPU), *options]) == 0
        assert f"{NAME} was not running" in capfd.readouterr().out
    finally:
        subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)


def test_the_reports_deployment_is_refused_before_any_change_without_nvidia_smi(docker_engine: None,
                                                                                tmp_path: Path) -> None:
    """Seed 000's profile sets a 200 W limit: its boot unit needs nvidia-smi, which this machine lacks; nothing is
    written or started."""
    if shutil.which("nvidia-smi") is not None:
        pytest.skip("nvidia-smi is installed here")
    from ninferkit.errors import NinferkitError

    loaded = service.load(Path(__file__).parents[2] / "params" / "ninfer-v100-pcie-nvfp4.yaml")
    said: list[str] = []
    why = "nvidia-smi is not installed" if os.geteuid() == 0 else "needs root"
    with pytest.raises(NinferkitError, match=f"cannot install the power-limit boot unit: .*{why}"):
        service.deploy(loaded, folder=tmp_path / "deploy", say=said.append)
    assert said == [] and not (tmp_path / "deploy").exists()
