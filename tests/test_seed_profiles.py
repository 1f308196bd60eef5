"""The seed profiles in params/ reproduce the field reports' deployments flag by flag.

Expected flags are copied from reference/field-reports.md section 1 (the "Launch highlights"
column); pins (sizes, container versions, caps) from the same table.

The reports pin hub revisions that the reference does not print, so the profiles name `main`,
which the verify step refuses (allow_branch is false) with the advice to pin the commit; a test
below holds the artifact step to that.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from ninferkit.artifact.source import check_pin, resolve_source
from ninferkit.cli import main
from ninferkit.engines import get_adapter
from ninferkit.errors import ArtifactError
from ninferkit.params.load import LoadedProfile, load_profile
from ninferkit.server import planned_argv

PARAMS = Path(__file__).resolve().parent.parent / "params"
V100 = PARAMS / "ninfer-v100-pcie-nvfp4.yaml"
RTX3090 = PARAMS / "ninfer-rtx3090-groupwise.yaml"
TP2 = PARAMS / "ninfer-2xv100-sxm2-tp2.yaml"
VLLM = PARAMS / "vllm-v100-baseline.yaml"
SEEDS = (V100, RTX3090, TP2, VLLM)

# field-reports.md section 1, verbatim.
V100_FLAGS = ("--max-context 131072 --kv-capacity 262144 --max-concurrency 2 --kv-dtype int8 --prefill-chunk 2048 "
              "--pending-timeout-ms 600000 --spec mtp --draft-tokens 3 --lm-head-draft --preserve-thinking --cors")
RTX3090_FLAGS = ("--max-context 184320 --kv-capacity 184320 --max-concurrency 2 --max-pending-requests 16 "
                 "--pending-timeout-ms 900000 --prefill-chunk 1024 --kv-dtype rk8v4 --spec mtp --draft-tokens 3 "
                 "--lm-head-draft --api-key ...")
TP2_FLAGS = "--tp 2 --devices 0,1 --max-context 155648 --kv-capacity 155648 --max-concurrency 2"
VLLM_FLAGS = "--gpu-memory-utilization 0.92 --max-model-len 8192 --swap-space 32 --dtype float16"


def load(path: Path) -> LoadedProfile:
    return load_profile(path)


def flag_map(args: list[str]) -> dict[str, str | None]:
    """--flag value pairs (a flag followed by another flag, or last, is a switch)."""
    out: dict[str, str | None] = {}
    for index, arg in enumerate(args):
        if arg.startswith("--"):
            nxt = args[index + 1] if index + 1 < len(args) else None
            out[arg] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def engine_args(argv: list[str], after: str) -> list[str]:
    return argv[argv.index(after) + 2:]


@pytest.mark.parametrize("path", SEEDS, ids=lambda p: p.stem)
def test_every_setting_says_why(path: Path) -> None:
    loaded = load(path)
    data = yaml.safe_load(path.read_text())

    def leaves(node: Any, prefix: str) -> list[str]:
        if isinstance(node, dict) and node:
            return [key for name, child in node.items() for key in leaves(child, f"{prefix}{name}.")]
        return [prefix.rstrip(".")]

    needs_reason = leaves(data["serve"], "serve.")
    needs_reason += [key for key in leaves(data["artifact"], "artifact.") if key != "artifact.local_dir"]
    needs_reason += [f"engine.{key}" for key in ("fork", "cuda_runtime") if key in data["engine"]]
    missing = [key for key in needs_reason if key not in loaded.comments]
    assert not missing, f"{path.name}: settings without a reason comment: {missing}"
    for key, value in _flatten(data).items():
        if value is None and key.startswith(("artifact.", "engine.")):
            assert key in loaded.comments, f"{path.name}: {key} is null without saying why"


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for name, child in node.items():
            out.update(_flatten(child, f"{prefix}{name}."))
        return out
    return {prefix.rstrip("."): node}


def test_v100_flags_exactly() -> None:
    argv = planned_argv(load(V100).profile)
    assert argv[:2] == ["docker", "run"] and "--gpus" in argv
    assert argv[argv.index("-v") + 1] == "/models:/models:ro"
    assert argv[argv.index("--entrypoint") + 1:argv.index("--entrypoint") + 4] == [
        "ninfer-serve", "ninferkit/ninfer-sm70:cuda12.8", "/models/qwen3_8_27b_nvfp4.ninfer"]
    assert engine_args(argv, "--model-id") == V100_FLAGS.split()
    assert flag_map(argv)["--host"] == "0.0.0.0" and argv[argv.index("-p") + 1] == "127.0.0.1:8080:8080"


def test_v100_dry_run_cli_prints_the_report_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["launch", str(V100), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    first = shlex.split(out.splitlines()[0])
    assert engine_args(first, "--model-id") == V100_FLAGS.split()
    assert "# ---- run_dir/docker/Dockerfile ----" in out
    assert "FROM nvidia/cuda:12.8.0-runtime-ubuntu24.04" in out
    assert "ExecStart=/usr/bin/nvidia-smi -pl 200" in out


def test_3090_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NINFER_API_KEY", "k-from-env")
    profile = load(RTX3090).profile
    adapter = get_adapter("ninfer")
    argv = adapter.argv(profile, Path("/models/qwen3_8_27b.ninfer"), Path("ninfer-serve"))
    expected = flag_map(RTX3090_FLAGS.split())
    expected["--api-key"] = "k-from-env"  # the report elides the key; ours comes from NINFER_API_KEY
    got = flag_map(engine_args(argv, "--model-id"))
    assert got == expected
    planned = planned_argv(profile)
    assert "k-from-env" not in planned and flag_map(planned)["--api-key"] == "***"
    assert planned[planned.index("-e") + 1] == "NINFER_API_KEY"


def test_tp2_flags() -> None:
    argv = planned_argv(load(TP2).profile)
    got = flag_map(argv)
    for flag, value in flag_map(TP2_FLAGS.split()).items():
        assert got[flag] == value, flag
    assert (got["--kv-dtype"], got["--spec"], got["--draft-tokens"]) == ("int8", "mtp", "3")
    assert argv[0] == "ninfer-serve" and "--lm-head-draft" not in argv  # the TP2 report does not use it


def test_vllm_flags() -> None:
    argv = planned_argv(load(VLLM).profile)
    got = flag_map(argv)
    for flag, value in flag_map(VLLM_FLAGS.split()).items():
        assert got[flag] == value, flag
    assert argv[:2] == ["vllm", "serve"] and got["--max-num-seqs"] == "1"


@pytest.mark.parametrize(("path", "size", "container", "power"), [
    (V100, 21492695040, 2, 200), (RTX3090, 18210531328, 2, 300), (TP2, 21492695040, 2, None),
])
def test_pins_and_container_fit_the_engine(path: Path, size: int, container: int, power: float | None) -> None:
    profile = load(path).profile
    assert (profile.artifact.size_bytes, profile.artifact.container_version) == (size, container)
    assert profile.gpu.power_limit_w == power
    assert container in get_adapter("ninfer").accepted_container_versions(profile)


def test_3090_docker_files_drop_the_compat_libcuda() -> None:
    files = get_adapter("ninfer").docker_files(load(RTX3090).profile)
    assert "RUN rm -rf /usr/local/cuda/compat" in files["Dockerfile"]
    assert "ExecStart=/usr/bin/nvidia-smi -pl 300" in files["ninferkit-power-limit.service"]


@pytest.mark.parametrize("path", SEEDS, ids=lambda p: p.stem)
def test_unknown_pins_stop_the_download(path: Path) -> None:
    artifact = load(path).profile.artifact
    assert artifact.revision == "main" and not artifact.allow_branch
    with pytest.raises(ArtifactError, match="Pin the commit"):
        check_pin(resolve_source(artifact), artifact.allow_branch)
