"""The launch step against the live embedded llama-server: ledger, checks, diagnosis, clean stop."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from ninferkit import steps
from ninferkit.engines import get_adapter
from ninferkit.errors import ProfileError, ServerStartError
from ninferkit.rundir.runs import Run, open_run
from ninferkit.server import process as server
from tests.conftest import LOCAL_CPU, free_port


def _run(tmp_path: Path, *overrides: str) -> Run:
    return open_run(LOCAL_CPU, tmp_path / "run", [f"serve.port={free_port()}", *overrides])


def test_launch_parses_the_ledger_and_passes_the_checks(live_run: Run) -> None:
    record = json.loads(live_run.dir.server.read_text())
    serve = live_run.profile.serve
    ledger = record["ledger"]
    assert record["state"] == "ready"
    assert ledger["n_ctx_per_slot"] == serve.max_context
    assert ledger["kv_cells"] * ledger["kv_streams"] == serve.max_context * serve.max_concurrency
    assert ledger["slots"] == serve.max_concurrency
    assert ledger["kv_type_k"] == serve.kv.dtype
    assert ledger["kv_cache_bytes"] == ledger["kv_k_bytes"] + ledger["kv_v_bytes"]
    assert ledger["listen_url"] == record["url"]
    checks = {check["name"]: check for check in record["checks"]}
    assert all(check["ok"] for check in checks.values())
    assert checks["models"]["detail"]["context_reported"] == serve.max_context
    usage = checks["chat"]["detail"]["usage"]
    timings = checks["chat"]["detail"]["server_timings"]
    assert usage["completion_tokens"] == timings["decode_tokens_server"] > 0


def test_stop_leaves_no_process_and_is_idempotent(tmp_path: Path, llama_server: Path) -> None:
    run = _run(tmp_path)
    record = steps.launch(run, progress=False)
    assert record.pgid is not None and server._group_alive(record.pgid)
    assert server.stop(run.dir) is True
    assert not server._group_alive(record.pgid)
    assert server.stop(run.dir) is False
    assert json.loads(run.dir.server.read_text())["state"] == "stopped"


def test_occupied_port_is_diagnosed(tmp_path: Path, llama_server: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        run = open_run(LOCAL_CPU, tmp_path / "run", [f"serve.port={port}"])
        with pytest.raises(ServerStartError) as err:
            steps.launch(run, progress=False)
    assert err.value.diagnosis is not None
    assert err.value.diagnosis.code == "port_in_use"
    assert str(port) in err.value.diagnosis.cause
    assert not server._group_alive(json.loads(run.dir.server.read_text())["pgid"])


def test_missing_model_is_diagnosed(tmp_path: Path, llama_server: Path) -> None:
    run = _run(tmp_path)
    with pytest.raises(ServerStartError) as err:
        server.launch(run, tmp_path / "absent.gguf", progress=False)
    assert err.value.diagnosis is not None and err.value.diagnosis.code == "model_missing"
    assert "absent.gguf" in err.value.diagnosis.cause


def test_unknown_flag_is_refused_before_the_launch_and_diagnosed_in_a_log(tmp_path: Path, llama_server: Path) -> None:
    """The binary's --help decides before anything starts (issue 39: a variant's flag the build lacks); a server
    someone started by hand with such a flag is still diagnosed from what it printed."""
    run = _run(tmp_path, "serve.extra_args=[--no-such-flag]")
    with pytest.raises(ProfileError, match="serve.extra_args: --no-such-flag: not an option of this llama-server"):
        steps.launch(run, progress=False)
    assert not run.dir.server.exists()
    printed = subprocess.run([str(llama_server), "--no-such-flag"], capture_output=True, text=True, timeout=60)
    diagnosis = get_adapter("llama_server").diagnose(printed.stdout + printed.stderr)
    assert diagnosis is not None and diagnosis.code == "unknown_argument" and "--no-such-flag" in diagnosis.fix


def test_api_key_is_used_but_never_written(tmp_path: Path, llama_server: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "test-secret-0123456789abcdef"
    monkeypatch.setenv("NINFERKIT_TEST_KEY", secret)
    run = _run(tmp_path, "serve.api_key_env=NINFERKIT_TEST_KEY")
    try:
        record = steps.launch(run, progress=False)
        assert all(check.ok for check in record.checks)  # the checks sent the key
        import httpx

        refused = httpx.post(f"{record.url}/v1/chat/completions", json={"messages": []})
        assert refused.status_code == 401
    finally:
        server.stop(run.dir)
    for path in run.dir.path.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path
