"""`--url` against a live llama-server that this test starts by hand, as a lab's shared server is: ninferkit
measures it, diagnoses it and writes it up, and never starts, stops or signals it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from ninferkit.artifact.paths import model_path
from ninferkit.engines.llama_server.amx import repack_argv
from ninferkit.params import load_profile
from tests.conftest import LOCAL_CPU, REPO, free_port

KEY_VAR = "NINFERKIT_TEST_URL_KEY"
KEY = "sk-url-test-5521"


@dataclass
class HandStarted:
    url: str
    process: subprocess.Popen[bytes]
    log: Path


@pytest.fixture(scope="module")
def hand_started(tmp_path_factory: pytest.TempPathFactory, llama_server: Path) -> Iterator[HandStarted]:
    """llama-server started the way a person would (its own session, an API key from a file), not by ninferkit."""
    folder = tmp_path_factory.mktemp("by-hand")
    (folder / "key").write_text(KEY + "\n")
    port = free_port()
    log = folder / "server.log"
    profile = load_profile(LOCAL_CPU).profile
    model = model_path(profile)
    # A person on an AMX CPU adds --no-repack as ninferkit's setup finding tells them; the test takes the same
    # decision from the one place every start of llama-server takes it, so it holds on any x86-64 CPU.
    argv = [str(llama_server), "-m", str(model), "--alias", "smol-by-hand",
            "--host", "127.0.0.1", "--port", str(port), "-c", "4096", "-np", "2", "--metrics", "-t", "1",
            "--api-key-file", str(folder / "key"), *repack_argv(profile, model)]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    else:
        process.kill()
        pytest.fail(f"llama-server started by hand did not become ready:\n{log.read_text()[-2000:]}")
    yield HandStarted(url, process, log)
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=30)


def ninferkit(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, KEY_VAR: KEY, "NINFERKIT_PROGRESS": "lines"}
    return subprocess.run([sys.executable, "-m", "ninferkit", *args], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=900)


def test_sweep_url_measures_a_server_ninferkit_did_not_start(hand_started: HandStarted, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    served_before = hand_started.log.read_text().count("stop processing")  # llama-server logs each request's end
    done = ninferkit("sweep", "--url", hand_started.url + "/v1", "--api-key-env", KEY_VAR, "--log",
                     str(hand_started.log), "--run-dir", str(run_dir), "--only", "context,concurrency",
                     "-p", "sweeps.context.targets=[256]", "-p", "sweeps.context.repetitions=2",
                     "-p", "sweeps.context.warmup=0", "-p", "sweeps.concurrency.levels=[2]",
                     "-p", "sweeps.concurrency.requests_per_client=1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not started by ninferkit, so it is left running" in done.stdout.replace("\n  ", " ")
    # what it says it sent is what the server served: the measured four, the concurrency level's warm-up and the
    # attach's acceptance check (issue 44: that check was the request more than the sweep said)
    served = hand_started.log.read_text().count("stop processing") - served_before
    assert served == 6 and "requests sent to the server: 6 (4 measured, 1 warm-up, 1 acceptance check" in done.stdout
    latency = done.stdout.split("latency per cell in ms", 1)[1]
    assert "context target_prompt_tokens=256" in latency and "concurrency concurrency=2" in latency
    assert all(len(line) <= 100 for line in done.stdout.splitlines() if not line.startswith(("tables:", "run dir")))
    record = json.loads((run_dir / "server.json").read_text())
    assert record["external"] is True and record.get("pid") is None and not record.get("argv")
    assert record["engine"] == "llama_server" and not record["engine_given"]
    assert record["model_id"] == "smol-by-hand" and record["url"] == hand_started.url
    assert record["ledger"]["slots"] == 2  # read from the log given with --log
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["profile"]["serve"]["max_context"] == 2048  # per slot, as /v1/models reports it
    rows = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    ok = [row for row in rows if row["http_status"] == 200 and row["error"] is None]
    measured = [row for row in ok if row["repetition"] >= 0]  # a warm-up request is -1
    assert len(ok) == len(rows) and len(measured) == 2 + 2  # two context requests, two concurrent clients
    assert all(row["decode_tok_s_server"] > 0 and row["engine_version"] == "b11434-unknown" for row in measured)
    every_file = "".join(path.read_text(errors="replace") for path in run_dir.rglob("*") if path.is_file()
                         and path.suffix in (".json", ".jsonl", ".md", ".csv", ".txt"))
    assert KEY not in every_file + done.stdout + done.stderr

    stopped = ninferkit("stop", str(run_dir))
    assert stopped.returncode == 0 and "was not started by ninferkit: nothing was signalled" in stopped.stdout
    assert hand_started.process.poll() is None  # still running, still serving
    assert httpx.get(hand_started.url + "/health", timeout=5).status_code == 200

    report = ninferkit("report", str(run_dir), "--format", "markdown")
    assert report.returncode == 0, report.stderr
    text = (run_dir / "report" / "index.md").read_text()
    assert f"ninferkit did not start this server: it measured the one already running at {hand_started.url}" in text
    assert "| engine build (as the server reports it) | b11434" in text


def test_diagnose_url_of_a_live_server(hand_started: HandStarted) -> None:
    done = ninferkit("diagnose", "--url", hand_started.url, "--api-key-env", KEY_VAR, str(hand_started.log))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verdict: serving" in done.stdout and "engine: llama_server (from its answers" in done.stdout
    assert "models: smol-by-hand" in done.stdout and "chat: served" in done.stdout
    assert "llamacpp:requests_processing 0" in done.stdout
    assert "verdict: healthy start" in done.stdout  # the log, read as llama-server's
    refused = ninferkit("diagnose", "--url", hand_started.url)  # no key: the server refuses /v1/models
    assert refused.returncode == 2 and "HTTP 401" in refused.stderr and "Traceback" not in refused.stderr
    assert hand_started.process.poll() is None


def test_run_url_executes_the_notebooks_against_it(hand_started: HandStarted, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = ninferkit("run", "--url", hand_started.url, "--api-key-env", KEY_VAR, "--log", str(hand_started.log),
                     "--run-dir", str(run_dir), "-p", "sweeps.context.targets=[256]", "-p",
                     "sweeps.context.repetitions=1", "-p", "sweeps.concurrency.levels=[2]", "-p",
                     "sweeps.concurrency.requests_per_client=1", "-p", "sweeps.prefix_reuse.repetitions=1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line.split()[1] for line in done.stdout.splitlines() if line.startswith("[") and " ok " in line] == [
        "sweeps", "capacity", "writeup"]
    steps = json.loads((run_dir / "manifest.json").read_text())["steps"]
    assert "launch" not in steps and "verify" not in steps and steps["attach"]["status"] == "ok"
    assert sorted(path.name for path in (run_dir / "notebooks").iterdir()) == [
        "03_sweeps.ipynb", "04_capacity_fit.ipynb", "05_writeup.ipynb"]
    capacity = json.loads((run_dir / "capacity.json").read_text())
    assert [o["kv_tokens"] for o in capacity["observations"]] == [4096]  # -c 4096: the log's books, once
    assert not (run_dir / "capacity" / "launches").exists()
    assert hand_started.process.poll() is None  # the runner's final stop signalled nothing
    assert "(a server ninferkit did not start)" in (run_dir / "report" / "index.md").read_text().splitlines()[0]


def test_lab_url_opens_the_notebooks_on_a_run_of_that_server_and_reopening_keeps_it(
        hand_started: HandStarted, tmp_path: Path) -> None:
    run_dir, port = tmp_path / "run", free_port()
    env = {**os.environ, KEY_VAR: KEY, "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt")}
    lab = subprocess.Popen([sys.executable, "-m", "ninferkit", "lab", "--url", hand_started.url, "--api-key-env",
                            KEY_VAR, "--run-dir", str(run_dir), "--port", str(port), "--no-browser"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=env)
    try:
        assert lab.stdout is not None
        seen: list[str] = []
        for line in lab.stdout:  # JupyterLab prints its URL with the token once it listens
            seen.append(line)
            if f"127.0.0.1:{port}/lab?token=" in line:
                break
        assert any(f"127.0.0.1:{port}/lab?token=" in line for line in seen), "".join(seen)
    finally:
        lab.terminate()
        lab.communicate(timeout=30)
    said = "".join(seen)
    assert f"the run measures {hand_started.url}" in said and "ninferkit did not start it" in said
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["profile"]["engine"]["kind"] == "llama_server"
    assert manifest["profile"]["serve"]["model_id"] == "smol-by-hand"  # read from the server, not url.yaml's
    assert json.loads((run_dir / "server.json").read_text())["external"] is True
    assert sorted(p.name for p in (run_dir / "lab").glob("*.ipynb"))[0] == "00_setup.ipynb"
    # reopening with the profile file alone would drop what the server said: refused, the run kept as it was
    again = ninferkit("lab", "params/url.yaml", "--run-dir", str(run_dir), "--no-browser")
    assert again.returncode == 2 and "would change this run's profile" in again.stderr
    assert json.loads((run_dir / "manifest.json").read_text())["profile_hash"] == manifest["profile_hash"]
    assert hand_started.process.poll() is None
