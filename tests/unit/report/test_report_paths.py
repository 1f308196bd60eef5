"""A write-up names no folder of the machine that made the run: paths relative to the run, the checkout or
the cache ($NINFERKIT_CACHE), else bare file names.

Data: the recorded run directories as they came back, with the paths their machines wrote into them:
tests/data/run_dirs/ (the development VM: /root/.cache/ninferkit, /tmp/rpt-*, /work/main/params), the
published H200 run docs/examples/h200-llamacpp/ (NINFERKIT_CACHE=/tmp/ninferkit-cache, run in /tmp/job/run)
and tests/data/ninfer_live/ (a NInfer build in /opt/ninfer-build or /root/nf, the model in /root/art).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from ninferkit.report import load_run, write_report
from ninferkit.report.paths import machine_paths
from tests.conftest import DATA, REPO, whole

EXAMPLE = REPO / "docs" / "examples" / "h200-llamacpp"
LIVE = DATA / "ninfer_live"
RUNS = [*sorted((DATA / "run_dirs").glob("*/")), EXAMPLE, LIVE / "g1-h200" / "run", LIVE / "g1-h200-v100flags"]
MACHINE = re.compile(r"(?<![\w.~+-])/(?:root|home|tmp|opt|work)\b[^\s|<>`'\")]*")
"""An absolute path under the folders these runs' machines used."""


def copy(run: Path, where: Path) -> Path:
    target = where / run.name
    shutil.copytree(run, target, ignore=shutil.ignore_patterns("report"))
    return target


def shown(report: Path) -> str:
    """The post and its appendix, as Markdown and as the text of the HTML (its <wbr> break points removed: they split
    a path)."""
    return "".join((report / f"{stem}.md").read_text() + (report / f"{stem}.html").read_text().replace("<wbr>", "")
                   for stem in ("index", "appendix"))


@pytest.mark.parametrize("run", RUNS, ids=lambda path: "/".join(path.parts[-2:]))
def test_no_write_up_names_a_folder_of_the_machine(run: Path, tmp_path: Path) -> None:
    recorded = (run / "manifest.json").read_text() + (run / "server.json").read_text()
    assert MACHINE.search(recorded), "the run records no machine path; the check would be vacuous"
    copied = copy(run, tmp_path)
    text = shown(write_report(copied).folder)
    assert MACHINE.findall(text) == []
    assert str(tmp_path) not in text  # nor where it is read now


def test_the_h200_recipe_names_the_cache_and_the_checkout() -> None:
    """As published: the embedded build and the generated model under $NINFERKIT_CACHE (the run's was
    /tmp/ninferkit-cache), the profile under the checkout's params/."""
    text = "".join((EXAMPLE / "report" / f"{stem}.md").read_text() for stem in ("index", "appendix"))
    argv = json.loads((EXAMPLE / "server.json").read_text())["argv"]
    assert argv[0].startswith("/tmp/ninferkit-cache/build/") and argv[2].startswith("/tmp/ninferkit-cache/models/")
    command = " ".join(["$NINFERKIT_CACHE/build/llama.cpp-11434.0.0-cuda-sm90/bin/llama-server", "-m",
                        "$NINFERKIT_CACHE/models/embedded-qwen3-36x2560-f16-94e4aff8097a.gguf", *argv[3:]])
    assert f"```\n{command}\n```" in text
    assert "(comments of params/h200-llamacpp.yaml (recorded in the manifest))" in text
    assert "$NINFERKIT_CACHE is ninferkit's cache (default ~/.cache/ninferkit)" in text


def test_a_file_outside_run_checkout_and_cache_is_its_bare_name_beside_its_sha256(tmp_path: Path) -> None:
    run = LIVE / "g1-h200-v100flags"
    server = json.loads((run / "server.json").read_text())
    assert server["binary"] == "/root/nf/build/apps/ninfer-serve"
    text = whole(write_report(copy(run, tmp_path)))
    assert "\nninfer-serve q36_27b_random.ninfer --host 127.0.0.1 " in text
    assert "--request-log-jsonl engine-requests-v100cfg.jsonl --no-thinking\n" in text
    assert f"| engine binary sha256 | ninfer-serve: {server['binary_sha256']} (hashed at launch) |" in text
    assert "(comments of h200-ninfer-g1-v100cfg.yaml (recorded in the manifest))" in text
    assert "a file outside those is its bare name" in text


def test_the_engines_own_lines_and_the_runs_logs_are_shortened_alike() -> None:
    """A line llama-server printed when a capacity launch ran out of memory names the cache's source tree;
    capacity.json names each launch's log where the run was made (/tmp/job/run)."""
    log = (EXAMPLE / "capacity" / "launches" / "13" / "logs" / "server.log").read_text()
    line = next(line for line in log.splitlines() if "ggml-cuda.cu:109" in line)
    launch_log = json.loads((EXAMPLE / "capacity.json").read_text())["searches"][0]["results"][0]["log"]
    paths = machine_paths(load_run(EXAMPLE))
    assert paths.shorten(line) == line.replace("/tmp/ninferkit-cache/", "$NINFERKIT_CACHE/")
    assert line.startswith("/tmp/ninferkit-cache/src/") and "$NINFERKIT_CACHE/src/" in paths.shorten(line)
    assert launch_log.startswith("/tmp/job/run/capacity/launches/")
    assert paths.shorten(f"read from {launch_log}.") == f"read from {launch_log.removeprefix('/tmp/job/run/')}."
    # a folder whose name only starts like a known one is not cut
    assert paths.shorten("/tmp/job/runs/x.log and /tmp/ninferkit-cache2/y") == \
        "/tmp/job/runs/x.log and /tmp/ninferkit-cache2/y"
    assert paths.shorten("POST /v1/chat/completions") == "POST /v1/chat/completions"
