"""Faults between the client and the real llama-server: a fault-injecting proxy on loopback
(tests/fault_proxy.py) in front of the live embedded server drops connections, cuts and stalls
streams, answers HTTP errors, and rewrites the server's own SSE events into malformed ones. Every
case ends as a row that says what happened (or one clear error), never a traceback, a hang, a
retried request that had received a byte, or a stored API key."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ninferkit.engines import get_adapter
from ninferkit.errors import RequestFailed
from ninferkit.measure.client import RequestResult, RequestSpec, StreamingClient
from ninferkit.measure.workloads import Tokenizer
from ninferkit.rundir.runs import Run
from ninferkit.server import process as server
from tests.fault_proxy import Fault, FaultProxy

ADAPTER = get_adapter("llama_server")
HELLO = RequestSpec("chat", [{"role": "user", "content": "Say hello."}], 8, extra={"ignore_eos": True})
KEY = "sk-fault-proxy-key-5521"


@pytest.fixture()
def proxy(live_run: Run) -> Iterator[FaultProxy]:
    port = int(json.loads(live_run.dir.server.read_text())["url"].rsplit(":", 1)[1])
    with FaultProxy(port) as running:
        yield running


def _send(proxy: FaultProxy, *specs: RequestSpec, keep_alive: bool = False, timeout_s: float = 120.0,
          headers: dict[str, str] | None = None) -> list[RequestResult]:
    async def go() -> list[RequestResult]:
        async with StreamingClient(proxy.url, ADAPTER, "embedded", keep_alive=keep_alive, timeout_s=timeout_s,
                                   headers=headers) as client:
            return [await client.send(spec) for spec in specs]
    return asyncio.run(go())


def test_a_dropped_keep_alive_connection_is_retried_once_and_recorded(proxy: FaultProxy) -> None:
    """The second request on a kept-alive connection meets a closed connection before any response byte
    (what llama-server does to an idle connection): it is sent again, once, and its row says so."""
    proxy.queue(Fault("drop", reused_only=True))
    first, second = _send(proxy, HELLO, HELLO, keep_alive=True)
    assert first.status == second.status == "ok" and second.completion_tokens == 8
    assert first.retried is None
    assert second.retried is not None and "RemoteProtocolError" in second.retried
    assert second.row()["retried"] == second.retried
    assert [(seen.fault, seen.on_connection) for seen in proxy.log] == [("pass", 1), ("drop", 2), ("pass", 1)]


def test_a_request_that_got_a_byte_is_never_retried(proxy: FaultProxy) -> None:
    proxy.queue(Fault("cut_after", after_bytes=40))
    (result,) = _send(proxy, HELLO)
    assert result.status == "errored" and result.retried is None and result.http_status == 200
    assert result.error is not None and "RemoteProtocolError" in result.error
    assert len(proxy.log) == 1


def test_a_stalled_stream_ends_at_the_read_timeout(proxy: FaultProxy) -> None:
    proxy.queue(Fault("stall"))
    started = time.monotonic()
    (result,) = _send(proxy, HELLO, timeout_s=2.0)
    assert time.monotonic() - started < 30
    assert result.status == "errored" and result.error is not None and "ReadTimeout" in result.error
    assert result.retried is None and len(proxy.log) == 1


def test_a_key_echoed_url_encoded_or_json_escaped_is_stored_without_it(proxy: FaultProxy, tmp_path: Path) -> None:
    """The error page names the key as a careless server's would in a URL or a JSON string (issue 29: the
    scrubber matched the raw value only)."""
    from urllib.parse import quote

    from ninferkit.rundir.runs import append_jsonl

    key = 'sk-fault/proxy+"key"=5521'
    page = f'{{"error": {{"message": "bad key {json.dumps(key)[1:-1]} at /v1?key={quote(key, safe="")}"}}}}'
    proxy.queue(Fault("status", status=401, body=page.encode()))
    (result,) = _send(proxy, HELLO, headers={"Authorization": f"Bearer {key}"})
    append_jsonl(tmp_path / "requests.jsonl", result.row())
    stored = (tmp_path / "requests.jsonl").read_text()
    assert result.http_status == 401 and stored.count("<redacted>") == 2
    assert json.dumps(key)[1:-1] not in stored and quote(key, safe="") not in stored


@pytest.mark.parametrize(("rewrite", "said"), [
    (lambda payload: payload.replace(b'"finish_reason":"length"', b'"finish_reason":{"why":"length"}'),
     "finish_reason is {'why': 'length'}, not a text"),
    (lambda payload: re.sub(rb'"predicted_per_second":[0-9.e+-]+', b'"predicted_per_second":-5.0', payload),
     "decode_tok_s_server is -5.0, below 0"),
    (lambda payload: payload.replace(b'"completion_tokens":8', b'"completion_tokens":' + b"1" + b"0" * 30),
     "completion_tokens is 1000000000000000000000000000000, above 100,000,000 tokens"),
], ids=["finish-reason-object", "negative-rate", "1e30-tokens"])
def test_an_odd_field_in_the_servers_own_stream_is_an_errored_row_its_reader_reads(
        proxy: FaultProxy, tmp_path: Path, rewrite: object, said: str) -> None:
    from ninferkit.rundir.records import RequestRow
    from ninferkit.rundir.runs import append_jsonl, read_rows

    proxy.queue(Fault("rewrite", rewrite=rewrite))  # type: ignore[arg-type]
    (result,) = _send(proxy, HELLO)
    row = result.row()
    assert row["status"] == "errored" and said in row["error"], row["error"]
    append_jsonl(tmp_path / "requests.jsonl", row)
    assert [read.status for read in read_rows(tmp_path / "requests.jsonl", RequestRow)] == ["errored"]


def test_an_error_page_that_echoes_the_key_is_stored_without_it(proxy: FaultProxy) -> None:
    proxy.queue(Fault("status", status=500, body=b'{"error": {"message": "bad request from ', echo_auth=True))
    (result,) = _send(proxy, HELLO, headers={"Authorization": f"Bearer {KEY}"})
    assert proxy.log[0].authorization == f"Bearer {KEY}"  # the proxy saw it, and echoed it
    assert result.status == "errored" and result.http_status == 500
    assert result.error is not None and "<redacted>" in result.error and KEY not in json.dumps(result.row())


@pytest.mark.parametrize(("rewrite", "said"), [
    (lambda payload: b"[1, 2, 3]", "a JSON list, not an object"),
    (lambda payload: b'"just a string"', "a JSON str, not an object"),
    (lambda payload: payload[:-3], "an event that is not JSON"),
    (lambda payload: payload.replace(b'"completion_tokens":8', b'"completion_tokens":"8"'),
     "usage completion_tokens is '8', not a token count"),
    (lambda payload: payload.replace(b'"choices":[', b'"choices":"x","was":['), "cannot read"),
], ids=["list", "string", "torn-json", "string-usage", "string-choices"])
def test_a_malformed_stream_is_an_errored_row_that_says_why(proxy: FaultProxy, rewrite: object, said: str) -> None:
    proxy.queue(Fault("rewrite", rewrite=rewrite))  # type: ignore[arg-type]
    (result,) = _send(proxy, HELLO)
    assert result.status == "errored" and result.error is not None and said in result.error, result.error
    assert result.retried is None
    json.dumps(result.row())  # the row is whole and serialisable


def test_the_unchanged_stream_through_the_proxy_is_measured(proxy: FaultProxy) -> None:
    """The control: the same proxy with a rewrite that changes nothing gives a normal measurement."""
    proxy.queue(Fault("rewrite", rewrite=lambda payload: payload))
    (result,) = _send(proxy, HELLO)
    assert result.status == "ok" and result.completion_tokens == 8 and result.server["decode_tokens_server"] == 8


def test_a_tokenizer_answer_without_its_key_is_a_clear_error(proxy: FaultProxy) -> None:
    proxy.queue(Fault("status", status=200, path="/tokenize", body=b'{"ids": [1, 2, 3]}'))
    with Tokenizer(proxy.url, ADAPTER) as tokenizer:
        with pytest.raises(RequestFailed, match=r"answered without a token count \(KeyError: 'tokens'\)"):
            tokenizer.count("hello")
        assert tokenizer.count("hello") > 0  # the next answer is the server's own


def test_launch_never_calls_another_server_ready(live_run: Run, tmp_path: Path, llama_server: Path) -> None:
    """A second launch on the port the live server holds: that server answers /health at once, but it
    is not the process this launch started; ours fails to bind and is diagnosed as a port clash."""
    from ninferkit import steps
    from ninferkit.errors import ServerStartError
    from ninferkit.rundir.runs import open_run
    from tests.conftest import LOCAL_CPU

    port = int(json.loads(live_run.dir.server.read_text())["url"].rsplit(":", 1)[1])
    run = open_run(LOCAL_CPU, tmp_path / "second", [f"serve.port={port}"])
    with pytest.raises(ServerStartError) as err:
        steps.launch(run, progress=False)
    assert err.value.diagnosis is not None and err.value.diagnosis.code == "port_in_use"
    assert json.loads(run.dir.server.read_text())["state"] == "stopped"
    assert server.ensure_running(live_run.dir).state == "ready"  # the other server was left alone


# -- whole sweeps through the faults --------------------------------------------------------------------------

SMALL = ["sweeps.context.targets=[64, 96]", "sweeps.context.output_tokens=4", "sweeps.context.repetitions=1",
         "sweeps.context.warmup=0", "sweeps.max_errors_per_cell=1", "sweeps.telemetry=false"]


@pytest.fixture()
def small_run(tmp_path: Path, llama_server: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Run]:
    from ninferkit import steps
    from ninferkit.rundir.runs import open_run
    from tests.conftest import LOCAL_CPU, free_port

    monkeypatch.setenv("NINFERKIT_FAULT_KEY", KEY)
    run = open_run(LOCAL_CPU, tmp_path / "run", [f"serve.port={free_port()}", "serve.api_key_env=NINFERKIT_FAULT_KEY",
                                                 *SMALL])
    steps.launch(run, progress=False)
    yield run
    server.stop(run.dir)


def _through(run: Run, proxy: FaultProxy) -> None:
    """Point the run's server record at the proxy (the server behind it is the run's own)."""
    record = json.loads(run.dir.server.read_text())
    record["url"] = proxy.url
    run.dir.server.write_text(json.dumps(record))


def test_a_sweep_against_error_pages_that_echo_the_key_fails_and_stores_no_key(small_run: Run) -> None:
    from ninferkit.errors import SweepFailed
    from ninferkit.report import write_report
    from ninferkit.steps.sweeps import sweeps

    port = int(json.loads(small_run.dir.server.read_text())["url"].rsplit(":", 1)[1])
    with FaultProxy(port) as proxy:
        proxy.queue(*[Fault("status", status=500, path="/v1/chat/completions", echo_auth=True,
                            body=b'{"error": {"message": "rejected ') for _ in range(4)])
        _through(small_run, proxy)
        with pytest.raises(SweepFailed, match="2 of 2 cells measured nothing") as failed:
            sweeps(small_run, only="context", progress=False)
    assert KEY not in str(failed.value) and "<redacted>" in str(failed.value)
    write_report(small_run.dir.path)
    stored = {path: path.read_text(errors="replace") for path in small_run.dir.path.rglob("*") if path.is_file()}
    assert not [path for path, text in stored.items() if KEY in text]
    assert "<redacted>" in stored[small_run.dir.requests]


def test_a_full_disk_mid_sweep_is_clear_and_the_rerun_completes(small_run: Run) -> None:
    from ninferkit.errors import DiskFull
    from ninferkit.rundir.runs import read_jsonl
    from ninferkit.steps.sweeps import sweeps

    small_run.dir.requests.symlink_to("/dev/full")  # the kernel answers every write with ENOSPC
    with pytest.raises(DiskFull, match="requests.jsonl: No space left on device"):
        sweeps(small_run, only="context", progress=False)
    small_run.dir.requests.unlink()
    table = sweeps(small_run, only="context", progress=False)["context"]
    assert list(table["status"]) == ["done", "done"] and list(table["n_ok"]) == [1, 1]
    assert len(list(read_jsonl(small_run.dir.requests))) == 2


# -- issue 29: a server that dies mid-request, a lab's proxy --------------------------------------------------

LONGER = ["sweeps.context.targets=[64, 96]", "sweeps.context.output_tokens=48", "sweeps.context.repetitions=2",
          "sweeps.context.warmup=0", "sweeps.telemetry=false"]


def test_a_server_killed_mid_request_fails_that_cell_and_the_rerun_completes(tmp_path: Path,
                                                                            llama_server: Path) -> None:
    """The server is killed (SIGKILL) once the first cell's first row is stored and its /slots says a slot is
    generating: the second request is on the wire, mid-stream. That cell fails, saying the server died during
    it; the next cell is not blamed (it has no entry); after a new launch the rerun runs the failed cell again
    and counts each request once. Before issue 29 the cell was recorded `done` with 1 of 2 and the death was
    blamed on the next cell."""
    from ninferkit import steps
    from ninferkit.rundir.runs import open_run
    from ninferkit.steps.sweeps import sweeps
    from tests.conftest import LOCAL_CPU, free_port
    from tests.live.conftest import sweep_with_the_server_killed

    run = open_run(LOCAL_CPU, tmp_path / "run", [f"serve.port={free_port()}", *LONGER])
    record = steps.launch(run, progress=False)

    def generating_after_the_first_row() -> bool:
        if not (run.dir.requests.exists() and run.dir.requests.read_bytes().count(b"\n") >= 1):
            return False
        return any(slot.get("is_processing") for slot in httpx.get(record.url + "/slots", timeout=5.0).json())

    try:
        sweep_with_the_server_killed(run, "context", generating_after_the_first_row)
        ledger = run.dir.read_cells()
        assert [(entry.cell["target_prompt_tokens"], entry.status) for entry in ledger] == [(64, "failed")]
        assert (ledger[0].reason or "").startswith("the server died during this cell")
        assert (ledger[0].requests_ok, ledger[0].requests_sent) == (1, 2)  # the second broke off mid-stream
        steps.launch(run, progress=False)
        table = sweeps(run, only="context", progress=False)["context"]
        assert list(table["status"]) == ["done", "done"] and list(table["n_ok"]) == [2, 2]
        rows = run.dir.read_requests()
        assert len({row.request_uid for row in rows}) == len(rows) == 6  # 2 of the failed attempt, kept, not counted
    finally:
        server.stop(run.dir)


def test_a_whole_run_with_a_proxy_in_the_environment_never_sends_loopback_to_it(
        tmp_path: Path, llama_server: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lab's http_proxy (here a port nothing listens on): launch's readiness, its checks, the tokenizer, /props
    and every request go to the engine on loopback, so the sweep completes (before issue 29 the launch waited
    out its startup timeout)."""
    from ninferkit import steps
    from ninferkit.rundir.runs import open_run
    from ninferkit.steps.sweeps import sweeps
    from tests.conftest import LOCAL_CPU, free_port

    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    run = open_run(LOCAL_CPU, tmp_path / "run", [f"serve.port={free_port()}", *SMALL])
    try:
        steps.launch(run, progress=False)
        table = sweeps(run, only="context", progress=False)["context"]
        assert list(table["status"]) == ["done", "done"] and list(table["n_ok"]) == [1, 1]
    finally:
        server.stop(run.dir)
