"""`ninferkit run PROFILE --dry-run`: the plan a run would carry out, from the run's own checks, with nothing written
(the run folder is not made), downloaded or launched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ninferkit.engines import get_adapter
from ninferkit.params import load_profile
from ninferkit.sweeps.plan import build_plan, parse_only
from tests.conftest import LOCAL_CPU, REPO

TP2 = REPO / "params" / "ninfer-2xv100-sxm2-tp2.yaml"
RTX3090 = REPO / "params" / "ninfer-rtx3090-groupwise.yaml"
NVFP4 = REPO / "params" / "ninfer-v100-pcie-nvfp4.yaml"


def dry_run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ninferkit", "run", *args, "--dry-run"], cwd=folder,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_the_plan_names_each_launch_and_counts_the_cells_a_run_would_send(tmp_path: Path) -> None:
    done = dry_run(tmp_path, str(LOCAL_CPU))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    launched = subprocess.run([sys.executable, "-m", "ninferkit", "launch", str(LOCAL_CPU), "--dry-run"],
                              capture_output=True, text=True, check=True, cwd=REPO)
    assert f"launch (base): {launched.stdout.strip()}" in lines  # the command `launch --dry-run` prints
    profile = load_profile(LOCAL_CPU).profile
    cells = build_plan(profile, get_adapter(profile.engine.kind), parse_only(None), explicit=False)
    assert f"sweeps: {sum(1 for cell in cells if cell.skip is None)} cells in all" in lines
    context = sum(1 for cell in cells if cell.sweep == "context" and cell.skip is None)
    assert next(line for line in lines if line.startswith("sweeps on base: ")).startswith(
        f"sweeps on base: context {context}, ")
    assert lines[-1] == "nothing was written, downloaded or launched"
    assert list(tmp_path.iterdir()) == []  # no runs/ folder, no file


def test_each_variant_is_a_launch_of_its_own_and_the_plans_warnings_are_notes(tmp_path: Path) -> None:
    """Report 004's profile: the base MTP3 launch, MTP 4 and 5 at one request, 4 slots, and what it does not
    reproduce (the Swift-1.5 row) after the plan. With the engine's default pending timeout (the report sets none;
    the profile does, for its 4 clients on 2 slots) the queue is warned of as a note, not a Python warning."""
    done = dry_run(tmp_path, str(TP2))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    launches = [line for line in lines if line.startswith("launch (")]
    assert [line.split(":")[0] for line in launches] == ["launch (base)", "launch (mtp4", "launch (mtp5",
                                                         "launch (slots-4"]
    assert "--draft-tokens 5" in launches[2] and "--max-concurrency 4" in launches[3]
    assert "--pending-timeout-ms 600000" in launches[0] and "note:" not in done.stdout
    [said] = [line for line in lines if line.startswith("not reproduced: ")]
    assert said.startswith("not reproduced: seed 004 §四: the Swift-1.5 + MTP5 row (163.13 tok/s average, 183.6 "
                           "peak): it is another model file") and lines.index(said) == len(lines) - 2
    default = dry_run(tmp_path, str(TP2), "-p", "serve.pending_timeout_ms=null")
    assert default.returncode == 0, default.stderr
    assert ("note: serve.pending_timeout_ms is 30000 ms with max_concurrency 2 and max_context 155648: a request "
            "waiting for admission longer than that (behind a long prompt, whose prefill runs one request at a time, "
            "or for a free slot while more clients send than the 2 slots) expires with 503 request_queue_timeout"
            ) in default.stdout
    assert "UserWarning" not in default.stderr and "Traceback" not in default.stderr


def test_an_unset_api_key_is_not_checked_by_a_dry_run_and_refused_by_the_run_itself(tmp_path: Path) -> None:
    """Seed 003's profile names NINFER_API_KEY (its docker run passes -e NINFER_API_KEY): a dry run on a machine
    without it plans and says it could not check it, as for the power limit; the run refuses before anything is
    written (no runs/ folder)."""
    env = {key: value for key, value in os.environ.items() if key != "NINFER_API_KEY"} | {"PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "ninferkit", "run", str(RTX3090), "--dry-run"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert ("not checked by a dry run: serve.api_key_env names NINFER_API_KEY, which the run reads from its machine's "
            "environment and refuses before anything is written where it is unset; here it is not set (export "
            "NINFER_API_KEY)") in done.stdout.splitlines()
    refused = subprocess.run([sys.executable, "-m", "ninferkit", "run", str(RTX3090)], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120, env=env)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "serve.api_key_env names NINFER_API_KEY, but it is not set; export NINFER_API_KEY=<key> first" in \
        refused.stderr, refused.stderr
    assert list(tmp_path.iterdir()) == []
    keyed = subprocess.run([sys.executable, "-m", "ninferkit", "run", str(RTX3090), "--dry-run"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120, env=env | {"NINFER_API_KEY": "k" * 16})
    assert "names NINFER_API_KEY, which the run reads from its machine's environment and refuses before anything is " \
           "written where it is unset; here it is set" in keyed.stdout


def test_a_plan_that_cannot_finish_is_refused_as_the_run_refuses_it(tmp_path: Path) -> None:
    done = dry_run(tmp_path, str(LOCAL_CPU), "-p", "sweeps.context.targets=[100000]")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "100000" in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_variants_power_limit_is_planned_without_the_gpu_and_refused_by_the_run_itself(tmp_path: Path) -> None:
    """Seed 003's profile sets 350 W for its w350 variant, seed 000's 200 W for its base: on a machine without
    nvidia-smi (PATH holds none here) both plan, each saying what it could not check; the run itself refuses the
    variant's limit before anything is written (no runs/ folder)."""
    bare = tmp_path / "bin"
    bare.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "NINFER_API_KEY": "k" * 16, "PATH": str(bare)}
    outputs = {}
    for profile in (RTX3090, NVFP4):
        done = subprocess.run([sys.executable, "-m", "ninferkit", "run", str(profile), "--dry-run"], cwd=work,
                              capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0, done.stderr
        assert "not checked by a dry run: the machine (the setup step probes its GPU" in done.stdout
        outputs[profile] = done.stdout
    said = [line for line in outputs[RTX3090].splitlines() if "variant 'w350'" in line]
    assert len(said) == 1 and said[0].startswith(
        "not checked by a dry run: variant 'w350' sets the power limit to 350 W for its launch (nvidia-smi, as root); "
        "this machine could not: ")
    assert "power limit 200 W" in outputs[NVFP4]  # the base's, which the setup probe compares
    refused = subprocess.run([sys.executable, "-m", "ninferkit", "run", str(RTX3090)], cwd=work,
                             capture_output=True, text=True, timeout=120, env=env)
    assert refused.returncode == 2 and "variant 'w350': gpu.power_limit_w = 350: " in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    assert list(work.iterdir()) == []
