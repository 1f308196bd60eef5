"""The seed profiles in params/ reproduce the field reports' deployments, flag by flag.

Each report's command is copied verbatim below with its seed file and section (shared/seeds/), run
through a real bash with the report's own variable defaults (`docker` and the engine are shell
functions or stubs that print their argv), and compared with ninferkit's dry-run command
(`planned_argv`, the command a launch runs and records). The engine's flags must all agree. Where
ninferkit runs Docker differently on purpose, each difference is listed with its reason, and the
test fails on any other. Where a report prints no command line (seed 004) its flags are quoted from
its prose, and every flag it does not print says where it comes from.
"""

from __future__ import annotations

import json
import os
import subprocess
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from ninferkit.artifact.source import check_pin, resolve_source
from ninferkit.cli import main
from ninferkit.engines import get_adapter
from ninferkit.engines.vllm.adapter import VLLM as VllmAdapter
from ninferkit.errors import ProfileError
from ninferkit.params.load import LoadedProfile, load_profile
from ninferkit.server.process import command, planned_argv
from ninferkit.sweeps.plan import build_plan, sweep_names
from tests import seed_excerpts as seeds
from tests.conftest import DATA, REPO

PARAMS = REPO / "params"
V100 = PARAMS / "ninfer-v100-pcie-nvfp4.yaml"
RTX3090 = PARAMS / "ninfer-rtx3090-groupwise.yaml"
TP2 = PARAMS / "ninfer-2xv100-sxm2-tp2.yaml"
GROUPWISE = PARAMS / "ninfer-v100-pcie-groupwise.yaml"
VLLM = PARAMS / "vllm-v100-baseline.yaml"
SEEDS = (V100, RTX3090, TP2, VLLM)
DATA_MAPS = ("artifact.container_revisions", "artifact.files", "serve.docker_env", "engine.build.binary_sha256",
             "sweeps.tasks.concurrency")
"""Settings whose keys are data (versions, file names, variable names): one comment on the key's line covers them."""

# -- the reports' commands, verbatim -----------------------------------------------------------

SEED_000_S3_VARIABLES = """\
MODEL_DIR=${MODEL_DIR:-/srv/models}
PORT=${PORT:-18080}; CTX=${CTX:-131072}; KV_CAP=${KV_CAP:-262144}
CONC=${CONC:-2};   POWER_LIMIT=${POWER_LIMIT:-200}
IMG=ninfer-v100:0.1.0
"""
SEED_000_S3_RUN = """\
docker run -d --name ninfer --restart unless-stopped --gpus all --ipc=host \\
  -e NVIDIA_VISIBLE_DEVICES=all -e NVIDIA_DRIVER_CAPABILITIES=compute,utility \\
  -p "${PORT}":8080 -v "$MODEL_DIR":/models:ro "$IMG" \\
  ninfer-serve /models/qwen3_8_27b_nvfp4.ninfer \\
    --host 0.0.0.0 --port 8080 \\
    --max-context "$CTX" --kv-capacity "$KV_CAP" --max-concurrency "$CONC" \\
    --kv-dtype int8 --prefill-chunk 2048 --pending-timeout-ms 600000 \\
    --spec mtp --draft-tokens 3 --lm-head-draft --preserve-thinking --cors
"""
SEED_000_S1_5_RUN_SH = """\
NAME=ninfer
IMG=ninfer-v100:0.1.0
MODEL_DIR=${MODEL_DIR:-/srv/models}
MODEL=${MODEL:-qwen3_8_27b_nvfp4.ninfer}
PORT=${PORT:-18080}
CTX=${CTX:-131072}          # 单请求逻辑上下文上限
KV_CAP=${KV_CAP:-262144}    # ★ 共享 KV 池，必须显式给 = 2 × CTX
CONC=${CONC:-2}             # 并发路数
PREFILL=${PREFILL:-2048}    # V100 推荐
PENDING_MS=${PENDING_MS:-600000}   # ★ 默认 30s 会把并发长请求挤成 503
API_KEY=${API_KEY:-}        # 留空 = 不鉴权

ARGS=(--host 0.0.0.0 --port 8080
      --max-context "$CTX" --kv-capacity "$KV_CAP" --max-concurrency "$CONC"
      --kv-dtype int8 --prefill-chunk "$PREFILL" --pending-timeout-ms "$PENDING_MS"
      --spec mtp --draft-tokens 3 --lm-head-draft
      --preserve-thinking --cors)
[ -n "$API_KEY" ] && ARGS+=(--api-key "$API_KEY")

    docker run -d --name "$NAME" --restart unless-stopped \\
      --gpus all --ipc=host \\
      -e NVIDIA_VISIBLE_DEVICES=all -e NVIDIA_DRIVER_CAPABILITIES=compute,utility \\
      -p "${PORT}":8080 -v "$MODEL_DIR":/models:ro \\
      "$IMG" ninfer-serve "/models/$MODEL" "${ARGS[@]}"
"""
SEED_003_S1_3_RUN = """\
docker run -d --name ninfer --gpus '"device=0"' --ipc=host -p 18020:18020 \\
  -v $PWD/models:/models:ro ninfer-3090:0.6.1 \\
  /models/qwen3_8_27b.ninfer \\
  --host 0.0.0.0 --port 18020 --model-id qwen3.8-27b --api-key "$KEY" \\
  --max-context 184320 --kv-capacity 184320 \\
  --max-concurrency 2 --max-pending-requests 16 --pending-timeout-ms 900000 \\
  --prefill-chunk 1024 --kv-dtype rk8v4 --spec mtp --draft-tokens 3 --lm-head-draft
"""
SEED_003_ENTRYPOINT = ["ninfer-serve"]  # seed 003 §一.2, its Dockerfile: ENTRYPOINT ["ninfer-serve"]
# seed 001 §5.2, verbatim: the seed text lost the line break after each trailing backslash ("\ --model"),
# which `restore_breaks` puts back.
SEED_001_S5_2 = ("python -m vllm.entrypoints.openai.api_server \\ --model /path/to/qwen3.8-27b-nvfp4 \\ "
                 "--gpu-memory-utilization 0.92 \\ --max-model-len 8192 \\ --swap-space 32 \\ --dtype float16 \\ "
                 "--trust-remote-code \\ --host 0.0.0.0 \\ --port 8000")
# seed 004 prints its flags in prose; the fragments, verbatim, by section:
SEED_004_FRAGMENTS = {
    "§一 (in the default launch)": "--vision --spec mtp --draft-tokens 3 --lm-head-draft",
    "§三 (NInfer defaults to)": "--tp 2 --devices 0,1",
    "§六.5 (Vision needs both)": "--vision --vision-max-tokens 2048",
    "§六.6 (recommended NVFP4 concurrency)": "--max-context 155648 --kv-capacity 155648 --max-concurrency 2",
    "§六.6 ('端口 8080')": "--port 8080",
}
# What seed 004 does not print: the fork's launcher defaults it runs with (tools/v100/ninfer-v100-duo.sh;
# plus1998/NInfer-V100-Duo README @ 19bf15b: "The launcher defaults to TP2 on GPUs 0/1, INT8 KV, CUDA
# Graph, MTP3 with the optimized proposal head, one active request, and `127.0.0.1:8080`").
SEED_004_LAUNCHER_DEFAULTS = {"--kv-dtype": "int8", "--host": "127.0.0.1"}
SEED_004_DIFFERENCES = {
    "--pending-timeout-ms": ("absent", "600000", "the engine's 30 s admission deadline would expire the 3rd and 4th "
                             "requests of §四's 4 clients on 2 slots while the first two decode 2,048 tokens"),
}

# -- the only Docker-level differences, each with its reason ---------------------------------------

FOREGROUND = "ninferkit runs the container in the foreground so it captures the log and can stop it"
OWN_NAME = "ninferkit's own container name, so a stop never ends a container the report's script started"
LOOPBACK = "published on serve.host, loopback, not every interface (security rule)"
V100_DOCKER_DIFFERENCES = [
    ("-d", None, FOREGROUND),
    ("--restart unless-stopped", None, FOREGROUND + "; nothing restarts it behind the runbook"),
    (None, "--rm", FOREGROUND + "; the stopped container is removed"),
    ("--name ninfer", "--name ninferkit-ninfer-v100-pcie-nvfp4-18080", OWN_NAME),
    ("-p 18080:8080", "-p 127.0.0.1:18080:8080", LOOPBACK),
]
RTX3090_DOCKER_DIFFERENCES = [
    ("-d", None, FOREGROUND),
    (None, "--rm", FOREGROUND + "; the stopped container is removed"),
    ("--name ninfer", "--name ninferkit-ninfer-rtx3090-groupwise-18020", OWN_NAME),
    ("-p 18020:18020", "-p 127.0.0.1:18020:18020", LOOPBACK),
    (None, "-e NINFER_API_KEY", "the key enters the container by name; the report's host shell put its value on the "
                                "docker command line"),
]

KEY = "sk-test-0d1f"  # a made-up key: the point is where it appears


def load(path: Path, overrides: tuple[str, ...] | list[str] = ()) -> LoadedProfile:
    return load_profile(path, overrides)


# -- helpers: run the reports' shell, read docker and engine argv ------------------------------------

def bash_argvs(script: str, cwd: Path, env: dict[str, str] | None = None) -> list[list[str]]:
    """The argv of each `docker` / `python` command the script runs, expanded by a real bash."""
    printer = "printf '%s\\0' \"$FUNCNAME\" \"$@\"; printf '\\n\\0'"
    prelude = f"docker() {{ {printer}; }}\npython() {{ {printer}; }}\n"
    result = subprocess.run(["bash", "-c", prelude + script], cwd=cwd, capture_output=True, check=True,
                            env={"PATH": os.environ["PATH"], **(env or {})})
    fields = result.stdout.decode().split("\0")
    argvs, current = [], []
    for field in fields[:-1]:
        if field == "\n":
            argvs.append(current)
            current = []
        else:
            current.append(field)
    return argvs


def split_docker(argv: list[str]) -> tuple[list[str], str, list[str]]:
    """(`docker run` options as 'OPT VALUE' strings, image, what follows the image)."""
    assert argv[:2] == ["docker", "run"], argv
    with_value = {"--name", "--gpus", "-p", "-v", "-e", "--restart", "--entrypoint"}
    index, options = 2, []
    while argv[index].startswith("-"):
        option = argv[index]
        if option in with_value:
            options.append(f"{option} {argv[index + 1]}")
            index += 2
        else:
            assert option in ("-d", "--rm") or "=" in option, f"an option this test does not know: {option}"
            options.append(option)
            index += 1
    return options, argv[index], argv[index + 1:]


def engine_argv(entrypoint: list[str], after_image: list[str], tmp_path: Path) -> list[str]:
    """What the engine process receives. An `sh -c` entrypoint runs for real, with the key in its
    environment and a stub ninfer-serve on PATH that prints its argv."""
    if entrypoint != ["sh"]:
        return entrypoint + after_image
    stubs = tmp_path / "stubs"
    stubs.mkdir(exist_ok=True)
    stub = stubs / "ninfer-serve"
    stub.write_text("#!/bin/sh\nprintf '%s\\0' \"$@\"\n")
    stub.chmod(0o755)
    result = subprocess.run(["sh", *after_image], capture_output=True, check=True,
                            env={"PATH": f"{stubs}:{os.environ['PATH']}", "NINFER_API_KEY": KEY})
    return ["ninfer-serve", *result.stdout.decode().split("\0")[:-1]]


def docker_side(argv: list[str], tmp_path: Path) -> tuple[list[str], str, list[str]]:
    """(options other than --entrypoint, image, engine argv) of ninferkit's docker command."""
    options, image, after = split_docker(argv)
    entrypoint = [o.split(" ", 1)[1] for o in options if o.startswith("--entrypoint ")]
    return [o for o in options if not o.startswith("--entrypoint ")], image, engine_argv(entrypoint, after, tmp_path)


def flags(argv: list[str]) -> dict[str, str | None]:
    """--flag value pairs of an engine argv (a flag followed by another flag, or last, is a switch)."""
    out: dict[str, str | None] = {}
    for index, arg in enumerate(argv):
        if arg.startswith("--"):
            nxt = argv[index + 1] if index + 1 < len(argv) else None
            out[arg] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def differing_flags(report: dict[str, str | None], ours: dict[str, str | None]) -> dict[str, tuple[Any, Any]]:
    missing = object()
    return {flag: (report.get(flag, "absent"), ours.get(flag, "absent")) for flag in sorted(set(report) | set(ours))
            if report.get(flag, missing) != ours.get(flag, missing)}


def option_differences(report: list[str], ours: list[str]) -> list[tuple[str | None, str | None]]:
    """Options only the report has, and only ours has; a changed value pairs up by option name."""
    only_report = list((Counter(report) - Counter(ours)).elements())
    only_ours = list((Counter(ours) - Counter(report)).elements())
    pairs: list[tuple[str | None, str | None]] = []
    for theirs in only_report:
        same = [o for o in only_ours if o.split(" ", 1)[0] == theirs.split(" ", 1)[0]]
        if same and " " in theirs:
            only_ours.remove(same[0])
            pairs.append((theirs, same[0]))
        else:
            pairs.append((theirs, None))
    return pairs + [(None, o) for o in only_ours]


def restore_breaks(text: str) -> str:
    return text.replace(" \\ ", " \\\n  ")


# -- every setting says why ---------------------------------------------------------------------

@pytest.mark.parametrize("path", SEEDS, ids=lambda p: p.stem)
def test_every_setting_says_why(path: Path) -> None:
    loaded = load(path)
    data = yaml.safe_load(path.read_text())

    def leaves(node: Any, prefix: str) -> list[str]:
        key = prefix.rstrip(".")
        if isinstance(node, dict) and node and key not in DATA_MAPS:
            return [leaf for name, child in node.items() for leaf in leaves(child, f"{prefix}{name}.")]
        return [key]

    needs_reason = [key for section in ("serve", "artifact", "sweeps", "capacity") if section in data
                    for key in leaves(data[section], f"{section}.") if key != "artifact.local_dir" or path == VLLM]
    needs_reason += [key for key in leaves(data["engine"], "engine.") if key not in ("engine.kind",
                                                                                    "engine.build.backend")]
    missing = [key for key in needs_reason if key not in loaded.comments]
    assert not missing, f"{path.name}: settings without a reason comment: {missing}"
    for key in needs_reason:
        if key.startswith(("artifact.", "engine.")) and _value(data, key) is None:
            assert "seed" in loaded.comments[key] or "no " in loaded.comments[key], f"{key} is null without saying why"


def _value(data: dict[str, Any], key: str) -> Any:
    node: Any = data
    for part in key.split("."):
        node = node[part]
    return node


# -- seed 000: V100, Docker -----------------------------------------------------------------------

@pytest.mark.parametrize("script", [SEED_000_S3_VARIABLES + SEED_000_S3_RUN, SEED_000_S1_5_RUN_SH],
                         ids=["seed000-s3-deploy-script", "seed000-s1.5-run.sh"])
def test_v100_docker_command_is_the_reports(script: str, tmp_path: Path) -> None:
    [report] = bash_argvs(script, tmp_path)
    report_options, report_image, after = split_docker(report)
    ours_options, ours_image, ours_engine = docker_side(planned_argv(load(V100).profile), tmp_path)
    assert ours_image == report_image == "ninfer-v100:0.1.0"
    assert ours_engine[:2] == after[:2] == ["ninfer-serve", "/models/qwen3_8_27b_nvfp4.ninfer"]
    assert differing_flags(flags(after), flags(ours_engine)) == {}
    assert len(flags(ours_engine)) == 13
    allowed = [(theirs, ours) for theirs, ours, _ in V100_DOCKER_DIFFERENCES]
    assert sorted(option_differences(report_options, ours_options), key=str) == sorted(allowed, key=str)


def test_v100_dry_run_cli_prints_the_command_and_the_reports_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", str(V100), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("docker run --rm --name ninferkit-ninfer-v100-pcie-nvfp4-18080 --gpus all")
    for name in ("Dockerfile", "nvidia-powerlimit.sh", "nvidia-powerlimit.service"):
        assert f"# ---- run_dir/docker/{name} ----" in out


# seed 000 §1.3, the Dockerfile, verbatim
SEED_000_DOCKERFILE = """\
FROM nvidia/cuda:12.8.0-runtime-ubuntu24.04

ARG DEBIAN_FRONTEND=noninteractive

# base 镜像只带 NVIDIA 源、没有 Ubuntu 归档，先换源再装运行库
RUN rm -f /etc/apt/sources.list.d/ubuntu.sources 2>/dev/null; \\
    printf '%s\\n' \\
      'Types: deb' \\
      'URIs: https://mirrors.tuna.tsinghua.edu.cn/ubuntu' \\
      'Suites: noble noble-updates noble-backports' \\
      'Components: main universe restricted multiverse' \\
      'Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg' \\
      '' \\
      'Types: deb' \\
      'URIs: https://mirrors.tuna.tsinghua.edu.cn/ubuntu' \\
      'Suites: noble-security' \\
      'Components: main universe restricted multiverse' \\
      'Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg' \\
      > /etc/apt/sources.list.d/ubuntu.sources \\
    && apt-get update -qq \\
    && apt-get install -y --no-install-recommends \\
        ca-certificates libavcodec60 libavformat60 libavutil58 \\
        libswscale7 libswresample4 libcurl4t64 \\
    && rm -rf /var/lib/apt/lists/*

COPY ninfer ninfer-serve /usr/local/bin/
RUN chmod +x /usr/local/bin/ninfer /usr/local/bin/ninfer-serve

WORKDIR /workspace
EXPOSE 8080
CMD ["ninfer-serve", "--help"]
"""
# seed 003 §一.2, the Dockerfile, verbatim
SEED_003_DOCKERFILE = """\
FROM nvidia/cuda:12.8.0-runtime-ubuntu24.04
# GeForce 卡不能用 forward-compat 的新 libcuda，不删会在启动时报 cudaErrorCompatNotSupportedOnDevice
RUN rm -rf /usr/local/cuda-12.8/compat /usr/local/cuda/compat
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \\
    && rm -rf /var/lib/apt/lists/*
COPY ninfer /usr/local/bin/ninfer
COPY ninfer-serve /usr/local/bin/ninfer-serve
ENTRYPOINT ["ninfer-serve"]
"""
SEED_000_DOCKERFILE_DIFFERENCES: list[tuple[Any, ...]] = []
"""None: the image keeps the report's CMD, so its run.sh (`IMAGE ninfer-serve MODEL FLAGS`) runs the engine once
(issue 25: with an ENTRYPOINT it passed `ninfer-serve` twice); seed 003's profile keeps its ENTRYPOINT."""
ONE_DOCKERFILE = "one generated Dockerfile for both reports, in seed 000's form"
SEED_003_DOCKERFILE_DIFFERENCES = [
    ("RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl && rm -rf "
     "/var/lib/apt/lists/*", "RUN apt-get update -qq && apt-get install -y --no-install-recommends ca-certificates "
     "curl && rm -rf /var/lib/apt/lists/*", ONE_DOCKERFILE + " (-qq: quieter apt output)"),
    ("COPY ninfer /usr/local/bin/ninfer", "COPY ninfer ninfer-serve /usr/local/bin/", ONE_DOCKERFILE),
    ("COPY ninfer-serve /usr/local/bin/ninfer-serve", None, ONE_DOCKERFILE + ": the same two files, one COPY"),
    (None, "ARG DEBIAN_FRONTEND=noninteractive", ONE_DOCKERFILE + ": apt asks no questions"),
    (None, "RUN chmod +x /usr/local/bin/ninfer /usr/local/bin/ninfer-serve", ONE_DOCKERFILE),
    (None, "WORKDIR /workspace", ONE_DOCKERFILE),
    (None, "EXPOSE 18020", ONE_DOCKERFILE + ": documents the engine's port"),
]


def instructions(dockerfile: str) -> list[str]:
    """Instructions with continuation lines joined, comments and blank lines dropped, spaces collapsed."""
    joined = dockerfile.replace("\\\n", " ")
    return [" ".join(line.split()) for line in joined.splitlines() if line.strip() and not line.startswith("#")]


def dockerfile_differences(report: str, ours: str) -> list[tuple[str | None, str | None]]:
    theirs, mine = instructions(report), instructions(ours)
    only_theirs = [line for line in theirs if line not in mine]
    only_mine = [line for line in mine if line not in theirs]
    pairs: list[tuple[str | None, str | None]] = []
    for line in only_theirs:
        same = [m for m in only_mine if m.split(" ", 1)[0] == line.split(" ", 1)[0]]
        if same:
            only_mine.remove(same[0])
        pairs.append((line, same[0] if same else None))
    return pairs + [(None, m) for m in only_mine]


@pytest.mark.parametrize(("path", "report", "allowed"), [
    (V100, SEED_000_DOCKERFILE, SEED_000_DOCKERFILE_DIFFERENCES),
    (RTX3090, SEED_003_DOCKERFILE, SEED_003_DOCKERFILE_DIFFERENCES),
], ids=["seed000-s1.3", "seed003-s1.2"])
def test_dockerfile_is_the_reports(path: Path, report: str, allowed: list[tuple[Any, ...]]) -> None:
    ours = get_adapter("ninfer").docker_files(load(path).profile)["Dockerfile"]
    expected = [(theirs, mine) for theirs, mine, _ in allowed]
    assert sorted(dockerfile_differences(report, ours), key=str) == sorted(expected, key=str)


def test_apt_mirror_is_a_setting(tmp_path: Path) -> None:
    mirror = "http://mirror.example.invalid/ubuntu"
    profile = load_profile(V100, [f"engine.image.apt_mirror={mirror}"]).profile
    dockerfile = get_adapter("ninfer").docker_files(profile)["Dockerfile"]
    assert dockerfile.count(f"'URIs: {mirror}'") == 2 and "tuna" not in dockerfile
    plain = load_profile(V100, ["engine.image.apt_mirror=null"]).profile
    apt = [line for line in instructions(get_adapter("ninfer").docker_files(plain)["Dockerfile"]) if "apt-get" in line]
    assert apt == ["RUN apt-get update -qq && apt-get install -y --no-install-recommends ca-certificates libavcodec60 "
                   "libavformat60 libavutil58 libswscale7 libswresample4 libcurl4t64 && rm -rf /var/lib/apt/lists/*"]


# seed 000 §3, verbatim: the boot-time script and unit
SEED_000_POWER_SCRIPT = """\
#!/bin/bash
for _ in $(seq 1 60); do nvidia-smi -L >/dev/null 2>&1 && break; sleep 5; done
nvidia-smi -pm 1 >/dev/null 2>&1 || true
nvidia-smi -pl "${1:-200}"
"""
SEED_000_POWER_UNIT = """\
# /etc/systemd/system/nvidia-powerlimit.service
[Unit]
Description=Lock V100 power limit
After=systemd-modules-load.service
Before=docker.service
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/bin/nvidia-powerlimit.sh 200
[Install]
WantedBy=multi-user.target
"""


def _code_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and (not line.startswith("#") or line.startswith("#!"))]


def test_power_limit_files_are_the_reports() -> None:
    files = get_adapter("ninfer").docker_files(load(V100).profile)
    assert _code_lines(files["nvidia-powerlimit.sh"]) == _code_lines(SEED_000_POWER_SCRIPT)
    ours, theirs = _code_lines(files["nvidia-powerlimit.service"]), _code_lines(SEED_000_POWER_UNIT)
    # the only difference: the unit's description names the profile
    assert [a for a, b in zip(theirs, ours, strict=True) if a != b] == ["Description=Lock V100 power limit"]


def test_power_limit_script_waits_for_the_driver(tmp_path: Path) -> None:
    """The generated script, run by bash with stand-ins for nvidia-smi (no driver here) and sleep
    (no waiting): `-L` fails twice, as while the module loads, then the limit is set once."""
    script = tmp_path / "nvidia-powerlimit.sh"
    script.write_text(get_adapter("ninfer").docker_files(load(RTX3090).profile)["nvidia-powerlimit.sh"])
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(f'#!/bin/sh\necho "nvidia-smi $*" >> {calls}\n'
                                        f'[ "$1" = -L ] && [ $(grep -c -- " -L" {calls}) -le 2 ] && exit 9\nexit 0\n')
    (bin_dir / "sleep").write_text(f'#!/bin/sh\necho "sleep $*" >> {calls}\n')
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    subprocess.run(["bash", str(script), "300"], check=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert calls.read_text().splitlines() == [
        "nvidia-smi -L", "sleep 5", "nvidia-smi -L", "sleep 5", "nvidia-smi -L", "nvidia-smi -pm 1",
        "nvidia-smi -i 0 -pl 300"]


# -- seed 003: RTX 3090, Docker, an API key ---------------------------------------------------------

def test_3090_docker_command_is_the_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the report mounts $PWD/models; the profile's local_dir is `models`
    monkeypatch.setenv("NINFER_API_KEY", KEY)
    [report] = bash_argvs(SEED_003_S1_3_RUN, tmp_path, {"KEY": KEY})
    report_options, report_image, after = split_docker(report)
    report_engine = SEED_003_ENTRYPOINT + after
    ours_options, ours_image, ours_engine = docker_side(planned_argv(load(RTX3090).profile), tmp_path)
    assert ours_image == report_image == "ninfer-3090:0.6.1"
    assert ours_engine[:2] == report_engine[:2] == ["ninfer-serve", "/models/qwen3_8_27b.ninfer"]
    assert differing_flags(flags(report_engine), flags(ours_engine)) == {}
    assert flags(ours_engine)["--api-key"] == KEY and len(flags(ours_engine)) == 14
    allowed = [(theirs, ours) for theirs, ours, _ in RTX3090_DOCKER_DIFFERENCES]
    assert sorted(option_differences(report_options, ours_options), key=str) == sorted(allowed, key=str)


def test_3090_key_never_on_a_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the command ninferkit starts (what `ps` and `docker inspect` show) nor the one it records
    holds the key; the container's shell expands the variable into the engine's argv."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NINFER_API_KEY", KEY)
    profile = load(RTX3090).profile
    adapter = get_adapter("ninfer")
    started = command(profile, adapter, tmp_path / "models" / "qwen3_8_27b.ninfer", None)
    recorded = planned_argv(profile)
    assert started == recorded
    assert not any(KEY in arg for arg in started)
    assert started[started.index("--entrypoint") + 1] == "sh" and started[-2] == "-c"
    assert started[-1].startswith("exec ninfer-serve ") and started[-1].endswith(' --api-key "$NINFER_API_KEY"')
    assert "-e NINFER_API_KEY" in split_docker(started)[0]  # by name: docker copies the value from its environment


def test_3090_tarball_is_checked_by_the_verify_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's tarball pin is checked, not only printed: a tarball in the cache's engines/ folder
    whose bytes differ from the report's fails the step, saying which sha256 was expected and found."""
    from ninferkit.artifact.verify import sha256_file
    from ninferkit.errors import ArtifactError
    from ninferkit.rundir.runs import open_run
    from ninferkit.steps.verify import verify
    from tests.ninfer_files import write_v1_v2

    monkeypatch.setenv("NINFERKIT_CACHE", str(tmp_path / "cache"))
    tarball = tmp_path / "cache" / "engines" / "ninfer-rtx3090-linux-x64-0.6.1-rtx3090.tar.gz"
    tarball.parent.mkdir(parents=True)
    tarball.write_bytes(b"not the release")
    models = tmp_path / "models"
    models.mkdir()
    write_v1_v2(models / "qwen3_8_27b.ninfer", 2)  # a small stand-in: its own size and sha256 mismatch too
    run = open_run(RTX3090, tmp_path / "run", [f"artifact.local_dir={models}"])
    with pytest.raises(ArtifactError) as failed:
        verify(run, progress=False)
    actual = sha256_file(tarball).hexdigest
    expected = load(RTX3090).profile.engine.build.tarball_sha256
    assert f"engine tarball sha256: expected {expected}, actual {actual}" in str(failed.value)
    saved = json.loads(run.dir.artifact.read_text())
    assert saved["engine_tarball"]["path"] == str(tarball) and saved["engine_tarball"]["ok"] is False


# -- seed 004: TP2, flags from prose ---------------------------------------------------------------

def test_tp2_flags_are_the_reports_and_the_launchers() -> None:
    """The report's flags and the launcher's defaults, and one more with its reason: the report sets no
    --pending-timeout-ms, so the engine's 30 s admission deadline would expire the plan's queued requests (the
    queue note says so where the profile keeps the default)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        argv = planned_argv(load(TP2).profile)
    with pytest.warns(UserWarning, match="or for a free slot while more clients send than the 2 slots"):
        planned_argv(load(TP2, ["serve.pending_timeout_ms=null"]).profile)
    assert argv[0] == "ninfer-serve" and argv[1].endswith("/qwen3_8_27b_nvfp4.ninfer")
    printed: dict[str, str | None] = {}
    for fragment in SEED_004_FRAGMENTS.values():
        for flag, value in flags(fragment.split()).items():
            assert printed.get(flag, value) == value, f"the report gives {flag} two values"
            printed[flag] = value
    expected = {**printed, **SEED_004_LAUNCHER_DEFAULTS}
    assert set(printed).isdisjoint(SEED_004_LAUNCHER_DEFAULTS)
    assert differing_flags(expected, flags(argv)) == {flag: pair[:2] for flag, pair in SEED_004_DIFFERENCES.items()}


# -- seed 001: vLLM ---------------------------------------------------------------------------------

VLLM_DIFFERENCES = {
    "--model": ("/path/to/qwen3.8-27b-nvfp4", "/models/qwen3.8-27b-nvfp4",
                "§5.2's /path/to is a placeholder; §5.3 and §6 name /models/qwen3.8-27b-nvfp4"),
    "--host": ("0.0.0.0", "127.0.0.1", "loopback per the security rule, as the report itself advises (§3.3, §10.2)"),
    "--swap-space": ("32", "absent", "removed from vLLM's arguments in 0.18.0: 0.19.1, the newest vLLM built for "
                                     "sm_70, has no such option (its own parser, versions/0.19.1.json)"),
}


NVFP4_UNSTATED = "serve.checkpoint_quantization=null"
"""Report 001's plan read past its refusal (vLLM 0.19.1 refuses its NVFP4 checkpoint on the V100), as a reader
reads the rest of it."""


def test_vllm_command_is_the_reports(tmp_path: Path) -> None:
    """The report's command as vLLM 0.19.1 takes it, on the report's own GPU (sm_70)."""
    [report] = bash_argvs(restore_breaks(SEED_001_S5_2), tmp_path)
    ours = planned_argv(load(VLLM, [NVFP4_UNSTATED]).profile)
    assert report[:3] == ours[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    allowed = {flag: (theirs, mine) for flag, (theirs, mine, _) in VLLM_DIFFERENCES.items()}
    assert differing_flags(flags(report), flags(ours)) == allowed
    assert len(flags(ours)) == 7


def test_vllm_plan_is_checked_against_the_newest_vllm_built_for_sm_70() -> None:
    """The profile pins 0.19.1; with no vLLM here its plan is checked against the lists read from that release
    (versions/0.19.1.json), whose torch was built for sm_70, and the report's --swap-space is refused by them."""
    profile = load(VLLM).profile
    adapter = get_adapter("vllm")
    assert isinstance(adapter, VllmAdapter)
    facts = adapter.facts(profile, Path(str(profile.engine.binary)))
    assert facts is not None and facts.version == profile.engine.version == "0.19.1"
    assert "versions/0.19.1.json" in facts.source and "sm_70" in facts.torch_cuda_archs
    removed = r"serve.swap_space_gib: vLLM 0.19.1 .* has no option --swap-space \(removed"
    with pytest.raises(ProfileError, match=removed):
        planned_argv(load(VLLM, ["serve.swap_space_gib=32"]).profile)


def test_vllm_0_26_0_on_a_v100_is_refused_before_anything_runs() -> None:
    """vLLM 0.26.0 (a CUDA 13 build, as every release since 0.20.0) runs on a torch with no sm_70 kernels: pinned
    on the report's GPU, the plan fails at the command line, naming the field, the version and where the facts came
    from."""
    with pytest.raises(ProfileError) as refused:
        planned_argv(load(VLLM, ["engine.version=0.26.0"]).profile)
    message = str(refused.value)
    assert "gpu.arch = 'sm_70'" in message and "vLLM 0.26.0" in message and "versions/0.26.0.json" in message
    assert "sm_75" in message and "on an H200" in message


def test_the_reports_dflash2_side_is_refused_by_the_vllm_that_runs_on_a_v100() -> None:
    """Seed 001 §5.2's optional `--attention-backend dflash2`, the B side of §6.2-§6.3's A/B: vLLM 0.19.1 has the
    option, but no backend of that name and no dflash speculative method, so there is no B side to plan."""
    with pytest.raises(ProfileError) as refused:
        planned_argv(load(VLLM, ["serve.attention_backend=dflash2"]).profile)
    message = str(refused.value)
    assert "serve.attention_backend = 'dflash2': not an attention backend of vLLM 0.19.1" in message
    assert "TRITON_ATTN" in message and "speculative-decoding method" not in message
    with pytest.raises(ProfileError, match=r"serve.spec.method = 'dflash': not a speculative method of vLLM 0.19.1"):
        planned_argv(load(VLLM, ["serve.spec.method=dflash"]).profile)


def test_vllm_dry_run_plans_every_table_of_report_001(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 001 §6: §6.2's decode at concurrency 1 with max_tokens 512, §6.3/§6.5's prompt filling the 8K context
    with 32 output tokens, §6.4's 16 requests of 256 tokens at 1 and 8 clients: each a cell of the dry run."""
    seed = (DATA / "seeds" / "001_14cad6f44f36910c.txt").read_text()
    assert '"max_tokens": 512' in seed and "max_workers=8" in seed and "range(16)" in seed
    assert main(["run", str(VLLM), "-p", NVFP4_UNSTATED, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "passes preflight" in out and "sweeps: 4 cells in all" in out
    context = [(cell["target_prompt_tokens"], cell["output_tokens"]) for cell in _planned(VLLM, "context")]
    assert context == [(8160, 32)]
    concurrency = {(cell.get("variant"), cell["concurrency"], cell["prompt_tokens"], cell["output_tokens"],
                    cell["concurrency"] * cell["requests_per_client"], cell["temperature"])
                   for cell in _planned(VLLM)}
    assert '"max_tokens": 512, "temperature": 0.7' in seed and '"max_tokens": 256, "temperature": 0.8' in seed
    assert concurrency == {(None, 1, 32, 256, 2, 0.8), (None, 8, 32, 256, 16, 0.8),
                           ("decode-512", 1, 32, 512, 2, 0.7)}  # each table at the report's own sampling
    said = [line for line in out.splitlines() if line.startswith("not reproduced: ")]
    assert [line.split(": ")[1] for line in said] == [
        "seed 001 §2.2, §5-§8", "seed 001 §6.2", "seed 001 §6.3"]  # NVFP4 on the V100, and both dflash2 sides


def test_vllm_plan_refuses_the_reports_nvfp4_checkpoint_on_the_v100(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 001 serves an NVFP4 checkpoint on a V100 (compute capability 7.0); vLLM 0.19.1's own minimum for
    modelopt_fp4 is 7.5 (read from it into versions/0.19.1.json), so the dry run refuses before anything, naming
    the field and what would run, as NInfer's build rules refuse fp8 KV on sm_86."""
    assert main(["run", str(VLLM), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert ("serve.checkpoint_quantization = 'modelopt_fp4': vLLM 0.19.1 (recorded from vLLM 0.19.1" in err
            and "refuses it below compute capability 7.5 (modelopt_fp4's get_min_capability() is 75), and gpu.arch "
            "'sm_70' is 7.0" in err), err
    assert "a checkpoint whose method runs on sm_70 (bitsandbytes, compressed-tensors, gguf, gptq, " in err
    # the refused plan still says what else of the report the profile cannot reproduce, each once, after the refusal
    said = [line.split(":")[1].strip() for line in err.splitlines() if line.startswith("not reproduced: ")]
    assert said == ["seed 001 §2.2, §5-§8", "seed 001 §6.2", "seed 001 §6.3"], err
    assert err.index("serve.checkpoint_quantization") < err.index("not reproduced: ")
    assert main(["run", str(VLLM), "-p", "gpu.arch=sm_75", "-p", "gpu.name=null", "--dry-run"]) == 0  # a T4 takes it


def test_a_refused_plan_whose_not_reproduced_is_malformed_gives_that_field_alone(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The section is read from the file as written when the profile does not validate: a malformed one is the
    field error, named, and no entry of it is printed as if it were the profile's (one error, no traceback)."""
    assert main(["run", str(VLLM), "-p", "not_reproduced=[{item: x}]", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "not_reproduced.0.why: required field is missing" in err and "Traceback" not in err
    assert not [line for line in err.splitlines() if line.startswith("not reproduced: ")], err


# -- pins -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("path", "repo", "revision", "size", "sha256"), [
    (V100, "neroued/Qwen3.8-27B-nvfp4-NInfer", "204e3d92c30d9d05f3300d2f52e443ad1edf6ddf", 21492695040,
     "bb3360522a06e136e0367f5703414d26272b7285c8a6ab6194135c17dbd81b32"),  # seed 000 §1.4
    (RTX3090, "neroued/Qwen3.8-27B-NInfer", "18dfc887423fa5aabf3cb56fac41490e462b3fab", 18210531328,
     "eec39564993d6e9c7d5e383382a760f093465c9d163ec9a1bd6b80199514bf3e"),  # seed 003 §一.1
    (TP2, "neroued/Qwen3.8-27B-nvfp4-NInfer", "204e3d92c30d9d05f3300d2f52e443ad1edf6ddf", 21492695040,
     "bb3360522a06e136e0367f5703414d26272b7285c8a6ab6194135c17dbd81b32"),  # seed 004's repo, seed 000's pin
], ids=lambda v: v.stem if isinstance(v, Path) else "")
def test_artifact_pins_are_the_reports(path: Path, repo: str, revision: str, size: int, sha256: str) -> None:
    artifact = load(path).profile.artifact
    assert (artifact.repo, artifact.revision, artifact.size_bytes, artifact.sha256) == (repo, revision, size, sha256)
    source = resolve_source(artifact, {})
    assert check_pin(source, artifact.allow_branch) == []  # a commit: the verify step downloads it
    assert source.url.endswith(f"/{repo}/resolve/{revision}/{artifact.filename}")
    profile = load(path).profile
    assert artifact.container_version in get_adapter("ninfer").accepted_container_versions(profile)
    assert artifact.container_revisions[artifact.container_version] == revision


def test_v100_url_is_the_reports() -> None:
    artifact = load(V100).profile.artifact
    assert resolve_source(artifact, {}).url == (  # seed 000 §1.4 and §3 (ART_URL), verbatim
        "https://hf-mirror.com/neroued/Qwen3.8-27B-nvfp4-NInfer/resolve/204e3d92c30d9d05f3300d2f52e443ad1edf6ddf/"
        "qwen3_8_27b_nvfp4.ninfer")


@pytest.mark.parametrize(("path", "fork", "pins"), [
    (V100, "hamawang/ninfer-v100-20260916", {"commit": "f17d37fc98b78cc025a1037e8adb1f4fb83813fb", "binary_sha256": {
        "/opt/ninfer-v100/build-v100/apps/ninfer": "371fd8de37e73df12b1f61144e43b210a12f9c0ef4acc193f5ae3f11f4294658",
        "/opt/ninfer-v100/build-v100/apps/ninfer-serve":
            "6671447e3cbbf07565dff9417462d01bcf8aa1093aa5c9f83fb6a9a0ce79ac10"}}),  # seed 000 §0, §1.2
    (RTX3090, "Don-Chad/ninfer-3090", {  # seed 003 §一.2
        "tarball": "ninfer-rtx3090-linux-x64-0.6.1-rtx3090.tar.gz",
        "tarball_sha256": "eb6a6e5b4b318dcf5a8173ccdae8d98acbe730606a50d87eaf120353962965b5"}),
], ids=["v100", "3090"])
def test_engine_pins_are_the_reports(path: Path, fork: str, pins: dict[str, Any]) -> None:
    engine = load(path).profile.engine
    assert engine.fork == fork
    assert {name: getattr(engine.build, name) for name in pins} == pins


def test_vllm_checkpoint_is_a_local_folder_with_no_invented_source() -> None:
    profile = load(VLLM).profile
    artifact = profile.artifact
    assert (artifact.repo, artifact.revision, artifact.url, artifact.files) == (None, None, None, {})
    assert profile.engine.version == "0.19.1" and profile.serve.trust_remote_code  # the newest vLLM for sm_70


def test_report_000s_ab_is_a_second_profile_pinned_to_every_digit_000_prints() -> None:
    """Seed 000 §2.2 changes the artifact, so its A/B is a second profile paired by sweeps.ab; its pin is seed 003's
    full one, which agrees with the truncated revision, digest and size 000 prints."""
    groupwise = load_profile(REPO / "params" / "ninfer-v100-pcie-groupwise.yaml").profile
    nvfp4 = load_profile(REPO / "params" / "ninfer-v100-pcie-nvfp4.yaml").profile
    seed = (DATA / "seeds" / "000_77605b501239fca0.txt").read_text()
    assert "neroued/Qwen3.8-27B-NInfer @ 18dfc887423f" in seed and "sha256 eec39564993d…4bf3e" in seed
    artifact = groupwise.artifact
    assert artifact.revision and artifact.revision.startswith("18dfc887423f")
    assert artifact.sha256 and artifact.sha256.startswith("eec39564993d") and artifact.sha256.endswith("4bf3e")
    assert f"{artifact.size_bytes / 1024**3:.2f} GiB" == "16.96 GiB" and "16.96 GiB" in seed
    assert groupwise.sweeps.ab.enabled and groupwise.serve == nvfp4.serve  # the artifact is the one variable


# -- the launches seed 000 §2.4(b)/(c) and seed 004 §四 need, and outputs that outlast the engine's windows ----------

WINDOW_S = 5.0
"""The engine's throughput window both reports read (seed 000 §2.4(b) "引擎 5 s 窗口口径", seed 004 "5 秒峰值")."""


def _planned(path: Path, kind: str = "concurrency") -> list[dict[str, Any]]:
    profile = load_profile(path).profile
    return [cell.params.as_dict() | {"slots": _slots(profile, cell.params.as_dict().get("variant")),
                                     "cell_id": cell.cell_id}
            for cell in build_plan(profile, get_adapter(profile.engine.kind), sweep_names(), explicit=False)
            if cell.kind.name == kind]


def _slots(profile: Any, variant: str | None) -> int:
    chosen = next((each for each in profile.variants if each.name == variant), None)
    return int(chosen.set.get("serve.max_concurrency", profile.serve.max_concurrency)) if chosen else \
        int(profile.serve.max_concurrency)


def _windows(output_tokens: int, rate: float) -> float:
    """How many whole engine windows a request decodes for at `rate` tok/s."""
    return output_tokens / rate / WINDOW_S


def test_seed_000_s2_4_b_and_c_are_planned_on_the_groupwise_artifact_as_the_report_measured_them() -> None:
    seed = (DATA / "seeds" / "000_77605b501239fca0.txt").read_text()
    assert "（c）端到端（每路冷启动 8K prompt + 320 输出 token，groupwise 制品）" in seed
    assert "（b）解码批处理（引擎 5 s 窗口口径，groupwise 制品同引擎测得）" in seed
    cells = _planned(GROUPWISE)
    c_rows = {(cell["slots"], cell["concurrency"]) for cell in cells
              if cell["prompt_tokens"] == 8192 and cell["output_tokens"] == 320 and not cell.get("cached")}
    assert c_rows == {(2, 1), (2, 2), (4, 4)}  # §2.4(c)'s three rows: server slots, client lanes
    batch_one = float(seed.split("1.00\t", 1)[1].split("\t", 1)[0])  # §2.4(b)'s batch-1 rate, 60.4 tok/s
    batching = [cell for cell in cells if cell.get("variant") == "batching"]
    assert {cell["concurrency"] for cell in batching} == {1, 2, 4}
    assert all(_windows(cell["output_tokens"], batch_one) >= 2 for cell in batching)  # a whole window after prefill
    assert _windows(320, batch_one) < 2  # the reason (c)'s outputs could not fill (b)'s batch-1 row
    cold = {cell.get("variant") for cell in _planned(V100) if not cell.get("cached")}
    assert not cold - {None, "clients-4-on-2"}  # no §2.4(b)/(c) lanes on nvfp4: the report ran them on groupwise


def test_seed_000_s1_5s_clients_beyond_the_slots_are_planned_on_the_production_launch() -> None:
    """§1.5 explains run.sh's (nvfp4) --max-concurrency 2 with a measurement: clients beyond it starve ("第 3、4 条掉到
    5.7 tok/s"). The nvfp4 profile plans 4 clients on its 2 slots, beside 1 and 2 for the speed-up, as seed 004's
    profile plans its 4 on 2, so the post's slots-against-lanes table has the row and each lane's rate."""
    seed = (DATA / "seeds" / "000_77605b501239fca0.txt").read_text()
    assert "`--max-concurrency 2`\t引擎真批处理路数。客户端并发超过它会被饿（实测第 3、4 条掉到 5.7 tok/s）" in seed
    profile = load_profile(V100).profile
    starved = [cell for cell in _planned(V100) if cell.get("variant") == "clients-4-on-2"]
    assert {(cell["slots"], cell["concurrency"]) for cell in starved} == {(2, 1), (2, 2), (2, 4)}
    assert profile.serve.max_concurrency == 2 and profile.serve.pending_timeout_ms == 600000  # none expires queued


def test_seed_004_outputs_outlast_two_windows_at_its_best_rate() -> None:
    seed = (DATA / "seeds" / "004_976b9d3921b6cb81.txt").read_text()
    peak = max(float(line.split("|")[4]) for line in seed.splitlines()
               if line.startswith("| NVFP4 + MTP") and "单请求" in line)  # the best 5 s window of its NVFP4 rows
    cells = _planned(TP2)
    assert {(cell.get("variant"), cell["concurrency"]) for cell in cells} == {
        (None, 1), (None, 2), (None, 4), ("mtp4", 1), ("mtp5", 1), ("slots-4", 4)}
    assert all(_windows(cell["output_tokens"], peak) >= 2 for cell in cells)


def test_seed_004s_four_clients_run_on_two_slots_and_on_four() -> None:
    """Seed 004 §四: "4 并发时聚合是 1.65× / 2.09× 单请求（2 槽 / 4 槽）" sets 4 clients on the default 2 slots beside
    4 on a 4-slot server; both are planned, each beside a one-request cell of the same MTP3 serving."""
    seed = (DATA / "seeds" / "004_976b9d3921b6cb81.txt").read_text()
    assert "1.65× / 2.09× 单请求（2 槽 / 4 槽）" in seed
    cells = _planned(TP2)
    assert {(cell["slots"], cell["concurrency"]) for cell in cells if cell.get("variant") in (None, "slots-4")} == {
        (2, 1), (2, 2), (2, 4), (4, 4)}
    assert len({cell["output_tokens"] for cell in cells}) == 1  # every row decodes the same output


def test_seed_004s_swift_row_is_left_out_saying_why() -> None:
    """Seed 004 §四's "Swift-1.5 + MTP5" row is another artifact, which nothing pins (the report names it only as
    "Swift-1.5 DFlash2") and a variant cannot change: the profile plans no row for it and says so where its variants
    are (its not_reproduced, which the plan and the post print), naming what would pin it."""
    seed = (DATA / "seeds" / "004_976b9d3921b6cb81.txt").read_text()
    assert "| Swift-1.5 + MTP5 | 单请求 | 163.13 | 183.6 |" in seed
    assert "Swift-1.5 DFlash2（实测 MTP5 速度冠军）" in seed
    assert "huggingface.co" not in seed.split("Swift-1.5", 1)[1].split("\n", 1)[0]  # no link on its line
    [entry] = load_profile(TP2).profile.not_reproduced  # the dry run prints it, the post says it
    assert "Swift-1.5 + MTP5" in entry.item and "nothing pins it" in entry.why and "sha256" in entry.why
    assert not any("artifact" in key for variant in load_profile(TP2).profile.variants for key in variant.set)
    with pytest.raises(ProfileError, match="artifact are every variant's"):
        load_profile(TP2, overrides=['variants=[{"name": "swift", "set": {"artifact.filename": "x.ninfer"}}]'])


def test_seed_000_s2_2s_sustained_and_cached_rows_are_planned_alike_in_both_profiles_so_they_pair() -> None:
    """§2.2's "持续生成（8K，66 tok）" (the §2.1 sustained run: an 8K prompt, a 320-token cap, it stopped at 66)
    and "双并发（8K，均缓存命中）" are no profile's own cells; sweeps.ab pairs cells by id, so both profiles plan
    them alike."""
    seed = (DATA / "seeds" / "000_77605b501239fca0.txt").read_text()
    assert "8K prompt、320 输出上限的持续生成实测 71.5 tok/s（MTP 71%）" in seed and "954.5 / 71.5 / 71%" in seed
    assert "持续生成（8K，66 tok）" in seed and "双并发（8K，均缓存命中）" in seed
    sustained = {path.stem: [cell for kind in ("context", "concurrency") for cell in _planned(path, kind)
                             if cell.get("variant") == "sustained-8k-320"] for path in (V100, GROUPWISE)}
    assert [cell["cell_id"] for cell in sustained[V100.stem]] == [cell["cell_id"] for cell in sustained[GROUPWISE.stem]]
    context, cached = sustained[V100.stem]
    assert (context["target_prompt_tokens"], context["output_tokens"], context["pin_output"]) == (7907, 320, False)
    assert (cached["concurrency"], cached["prompt_tokens"], cached["cached"], cached["warmup"]) == (2, 8192, True, 1)
    assert load_profile(GROUPWISE).profile.sweeps.ab.enabled  # the groupwise profile is the one that pairs


@pytest.mark.parametrize("path", [V100, PARAMS / "ninfer-v100-pcie-groupwise.yaml"], ids=["nvfp4", "groupwise"])
def test_report_000s_task_table_sends_the_prompts_the_report_measured(path: Path) -> None:
    """Issue 38, the audit's gap 1: seed 000 §2.3's prompts were tens of tokens at both its "8K / 64K 档" (TTFT
    0.09-0.47 s), and only the summary was sent after its 5.9K document (5.8 s). So the profile plans each of the
    report's eight tasks once: seven as the instruction alone, the summary after 5,900 document tokens; no summary
    without its document, no other task after one, no cold 8K or 64K prompt (about 15 minutes of prefill on the V100
    that the report never ran), and no agent task (the report has none)."""
    seed = (DATA / "seeds" / seeds.SEED_000).read_text()
    assert seeds.TASK_PROMPTS.text in seed and "摘要（5.9K 文档）" in seed
    profile = load_profile(path).profile
    cells = [cell for cell in build_plan(profile, get_adapter("ninfer"), sweep_names(), explicit=False)
             if cell.sweep == "tasks"]
    depths = {cell.params.as_dict()["task"]: cell.params.as_dict()["context_depth"] for cell in cells}
    assert len(depths) == len(cells) == 8
    assert depths == {"coding": 0, "json_extraction": 0, "summarization": 5900, "translation": 0, "reasoning": 0,
                      "bug_root_cause": 0, "chit_chat": 0, "fiction": 0}
    assert all(cell.skip is None for cell in cells)


@pytest.mark.parametrize("path", [V100, PARAMS / "ninfer-v100-pcie-groupwise.yaml"], ids=["nvfp4", "groupwise"])
def test_report_000s_capacity_table_is_launched_not_estimated(path: Path) -> None:
    """Issue 38, the audit's gap 3: every pool of seed 000 §2.5's table "started and served", 2 x 160K was launched,
    and the 622 MiB the report saved with graphs and state slots off is its own row: the search, one launch per grid
    point and both what-ifs are on, so the run's post answers 2 x 160K from a launch."""
    capacity = load_profile(path).profile.capacity
    assert capacity.search and capacity.fit_launches and 163840 in capacity.contexts
    assert [(case.slots, case.context, case.fixed_less) for case in capacity.what_if] == [
        (2, 163840, None), (2, 163840, "622 MiB")]
    assert "关掉 graph + state 槽也只省 622 MiB" in (DATA / "seeds" / seeds.SEED_000).read_text()
