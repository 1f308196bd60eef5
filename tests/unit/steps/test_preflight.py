"""The whole plan is checked when a run starts: a plan that cannot finish stops with exit 2, one line per
problem naming the profile field, before anything is downloaded or launched.

The profiles here are small ones built with the faults of the seed profiles as they were on main at
9dd358c: params/ninfer-v100-pcie-nvfp4.yaml swept a 131,072-token prompt (+ 64 output tokens) at
serve.max_context 131,072; params/vllm-v100-baseline.yaml ran the default task sweep (8,192-token
documents + 200 + the coding task's 640 output tokens) and prefix sweep (16,384 tokens) at 8,192. Their
artifact sits on a real HTTP server on loopback (tests/range_server.py), which records every request:
a run that got as far as the verify step would have asked it for the file.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ninferkit import steps
from ninferkit.artifact import sha256_file
from ninferkit.errors import NinferkitError, ProfileError
from ninferkit.params import load_profile
from ninferkit.rundir.runs import open_run, read_json
from ninferkit.steps import preflight
from ninferkit.steps.runner import run_runbook
from tests.conftest import LOCAL_CPU, REPO
from tests.ninfer_files import write_v1_v2
from tests.range_server import RangeServer

REVISION = "204e3d92c30d9d05f3300d2f52e443ad1edf6ddf"  # seed 000 §1.4's pin (the file served here is not it)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[RangeServer]:
    served = tmp_path / "served"
    served.mkdir()
    write_v1_v2(served / "model.ninfer", 2)
    with RangeServer(served) as running:
        yield running


def _artifact(hub: RangeServer, tmp_path: Path) -> str:
    model = hub.root / "model.ninfer"
    return (f"artifact: {{repo: org/qwen3.8-27b, revision: '{REVISION}', filename: model.ninfer, "
            f"endpoint: '{hub.url}', size_bytes: {model.stat().st_size}, sha256: {sha256_file(model).hexdigest}, "
            f"container_version: 2, local_dir: '{tmp_path / 'models'}'}}")


def _v100_like(hub: RangeServer, tmp_path: Path, targets: str = "[2048, 131072]", capacity: str = "") -> Path:
    """Seed 000's deployment (the V100 fork, 2 x 128K, int8 KV, MTP3) with its context sweep reaching 128K."""
    path = tmp_path / "v100-like.yaml"
    path.write_text(f"""name: v100-like
engine: {{kind: ninfer, fork: hamawang/ninfer-v100-20260916, binary: ninfer-serve}}
{_artifact(hub, tmp_path)}
serve:
  max_context: 131072
  max_concurrency: 2
  kv: {{capacity: 262144, dtype: int8}}
  pending_timeout_ms: 600000
  spec: {{method: mtp, draft_tokens: 3}}
sweeps:
  context: {{targets: {targets}}}
{capacity}
""")
    return path


def _vllm_like(hub: RangeServer, tmp_path: Path) -> Path:
    """The vLLM baseline's serve settings with the default tasks and prefix-reuse sweeps (named, so they run)."""
    path = tmp_path / "vllm-like.yaml"
    path.write_text(f"""name: vllm-like
engine: {{kind: vllm}}
{_artifact(hub, tmp_path)}
serve: {{max_context: 8192, max_concurrency: 1, gpu_memory_utilization: 0.92, weights_dtype: float16}}
sweeps: {{context: {{}}, tasks: {{}}, prefix_reuse: {{}}}}
""")
    return path


def test_the_v100_fault_exits_2_before_anything_is_downloaded_or_launched(hub: RangeServer, tmp_path: Path) -> None:
    profile = _v100_like(hub, tmp_path)
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "ninferkit", "run", str(profile), "--run-dir", str(run_dir)],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    problems = [line for line in done.stderr.splitlines() if line.startswith("  - ")]
    assert problems == ["  - sweeps.context.targets: 131072 prompt + 64 output tokens exceed serve.max_context = "
                        "131072; allowed: prompt + output <= 131072"]
    assert not run_dir.exists()  # no manifest, probe.json, artifact.json or server.json
    assert hub.log == []  # nothing asked of the artifact's server
    # the same artifact, verified on its own, is fetched from that server: the check above is not vacuous
    verified = subprocess.run([sys.executable, "-m", "ninferkit", "verify", str(profile), "--run-dir",
                               str(tmp_path / "verify")], capture_output=True, text=True, cwd=REPO)
    assert verified.returncode == 0, verified.stderr
    assert [served.status for served in hub.log] == [200]


def test_the_vllm_fault_lists_every_problem_and_writes_nothing(hub: RangeServer, tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as err:
        run_runbook(_vllm_like(hub, tmp_path), tmp_path / "run", say=lambda line: None)
    lines = str(err.value).splitlines()
    assert lines[0].endswith("nothing was downloaded or launched (2 problem(s)):")
    assert lines[1:] == [
        "  - sweeps.tasks.depths: 8392 prompt + 640 output tokens exceed serve.max_context = 8192; "
        "allowed: prompt + output <= 8192",
        "  - sweeps.prefix_reuse.prompt_tokens: 16416 prompt + 32 output tokens exceed serve.max_context = 8192; "
        "allowed: prompt + output <= 8192"]
    assert not (tmp_path / "run").exists()
    assert hub.log == []


def test_only_the_steps_that_will_run_are_checked(hub: RangeServer, tmp_path: Path) -> None:
    profile = load_profile(_v100_like(hub, tmp_path)).profile
    assert preflight.problems(profile, ["setup", "verify"]) == []
    assert preflight.problems(profile, ["launch"]) == []
    assert len(preflight.problems(profile, ["setup", "sweeps"])) == 1
    assert len(preflight.problems(profile)) == 1  # None: every step


def test_the_embedded_default_and_the_sweep_fixed_profile_pass(hub: RangeServer, tmp_path: Path) -> None:
    assert preflight.problems(load_profile(LOCAL_CPU).profile) == []
    assert preflight.problems(load_profile(_v100_like(hub, tmp_path, targets="[2048, 126976]")).profile) == []


def test_the_capacity_grid_is_checked_with_the_engines_own_pool_rule(hub: RangeServer, tmp_path: Path) -> None:
    """With fit launches every grid point is launched with the profile's pool (262,144 tokens): a legal NInfer
    pool is a whole number of 64-token pages in [max(L, C), C x L] (flags.POOL), and 1..8 slots."""
    grid = "capacity: {model: qwen3.8-27b, concurrencies: [1, 2, 9], contexts: [4096, 131072], fit_launches: true}"
    found = preflight.problems(load_profile(_v100_like(hub, tmp_path, "[2048]", grid)).profile, ["capacity"])
    where = "(capacity.concurrencies x capacity.contexts x capacity.kv_dtypes)"
    pool = "serve.kv.capacity = '262144': must lie in"
    assert f"capacity grid point 1 slot(s) x 4096 tokens, kv int8 {where}: {pool} 4096..4096 tokens" in found[0]
    assert f"capacity grid point 1 slot(s) x 131072 tokens, kv int8 {where}: {pool} 131072..131072 tokens" in found[1]
    assert f"capacity grid point 2 slot(s) x 4096 tokens, kv int8 {where}: {pool} 4096..8192 tokens" in found[2]
    assert not any("2 slot(s) x 131072 tokens" in line for line in found)  # the profile's own setting fits
    for context in (4096, 131072):
        assert any(line.startswith(f"capacity grid point 9 slot(s) x {context} tokens") and
                   line.endswith("serve.max_concurrency = '9': must be in 1..8") for line in found)
    # without fit launches the table's cells are at the engine's own pool: only the slot count is wrong
    table = grid.replace("fit_launches: true", "fit_launches: false")
    found = preflight.problems(load_profile(_v100_like(hub, tmp_path, "[2048]", table)).profile, ["capacity"])
    assert found and all("9 slot(s)" in line and "must be in 1..8" in line for line in found)


def test_a_search_at_a_legal_setting_passes_and_at_too_many_slots_does_not(hub: RangeServer, tmp_path: Path) -> None:
    search = "capacity: {model: qwen3.8-27b, concurrencies: [1, 2], contexts: [131072], search: true}"
    assert preflight.problems(load_profile(_v100_like(hub, tmp_path, "[2048]", search)).profile, ["capacity"]) == []
    found = preflight.problems(load_profile(_v100_like(hub, tmp_path, "[2048]", search.replace("[1, 2]", "[16]")))
                               .profile, ["capacity"])
    assert any(line.startswith("capacity.search at 16 slot(s) x 131072 tokens, kv int8: serve.max_concurrency")
               for line in found)


def test_a_kv_pool_of_part_pages_is_refused(hub: RangeServer, tmp_path: Path) -> None:
    profile = load_profile(_v100_like(hub, tmp_path, "[2048]"), ["serve.kv.capacity=262100"]).profile
    assert preflight.problems(profile, ["launch"]) == [
        "serve.kv.capacity = 262100: not a whole number of 64-token pages, so the engine would serve 262144 tokens "
        "and the run would record a pool it did not get; allowed: a multiple of 64, e.g. 262080 or 262144"]


def test_a_missing_api_key_stops_the_plan(hub: RangeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NINFERKIT_TEST_NO_SUCH_KEY", raising=False)
    profile = load_profile(_v100_like(hub, tmp_path, "[2048]"), ["serve.api_key_env=NINFERKIT_TEST_NO_SUCH_KEY"])
    said = ("serve.api_key_env names NINFERKIT_TEST_NO_SUCH_KEY, but it is not set; export "
            "NINFERKIT_TEST_NO_SUCH_KEY=<key> first")
    assert preflight.machine_problems(profile.profile, ["launch"]) == [said]  # this machine's environment
    assert preflight.problems(profile.profile, ["launch"]) == []  # the profile itself is fine (a dry run plans it)
    with pytest.raises(ProfileError, match="NINFERKIT_TEST_NO_SUCH_KEY, but it is not set"):
        preflight.check(profile, ["launch"])  # the run refuses before anything is written
    preflight.check(profile, ["launch"], here=False)
    assert preflight.machine_problems(profile.profile, ["setup", "verify"]) == []


def test_the_setup_step_alone_checks_the_plan_the_run_recorded(hub: RangeServer, tmp_path: Path) -> None:
    """The 00_setup notebook calls steps.setup(run): by itself it checks every step; under `ninferkit run`
    the steps the runner recorded."""
    run = open_run(_v100_like(hub, tmp_path), tmp_path / "run")
    with pytest.raises(ProfileError, match="sweeps.context.targets"):
        steps.setup(run)
    assert not run.dir.probe.exists()
    preflight.record_plan(run.dir, ["setup", "verify", "launch"])
    assert preflight.planned_steps(run.dir) == ["setup", "verify", "launch"]
    assert steps.setup(run).profile_hash == run.profile_hash
    assert run.dir.probe.exists() and hub.log == []


def test_a_setup_error_stops_the_step_unless_the_profile_waives_it(tmp_path: Path) -> None:
    """disk_low fires on any machine for an artifact of 2**60 bytes: an error finding, deterministically."""
    huge = ["artifact.size_bytes=1152921504606846976"]
    run = open_run(LOCAL_CPU, tmp_path / "run", huge)
    with pytest.raises(NinferkitError) as err:
        steps.setup(run)
    message = str(err.value)
    assert "disk_low:" in message and "Fix: free disk space or point artifact.local_dir elsewhere" in message
    assert "gpu.waive" in message
    recorded = {f["code"]: f for f in read_json(run.dir.probe)["findings"]}
    assert recorded["disk_low"]["severity"] == "error" and not recorded["disk_low"]["waived"]
    waived = open_run(LOCAL_CPU, tmp_path / "waived", [*huge, "gpu.waive=[disk_low]"])
    result = steps.setup(waived)
    assert {f.code: f.waived for f in result.findings}["disk_low"] is True
