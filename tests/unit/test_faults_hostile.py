"""The second round of hostile inputs (issue 29), one test or more per family, against a real HTTP server on
loopback that misbehaves as a broken or hostile engine would (`Misbehaving`, below: raw sockets, so it can
send what no well-behaved framework would): bodies that never end, SSE streams that never finish, lines
with no end, keys echoed in other encodings, fields of the wrong type and impossible numbers. And the
files a run is handed: planted symlinks, a stale server.json naming a file outside the run, another run's
run_id, profiles with control characters or duplicated keys, a FIFO or /dev/zero named as a file.

Each case ends as an errored row or one clear error (exit 2 for a bad input), with nothing grown, leaked
or written outside its folder."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import pytest

from ninferkit.engines import get_adapter
from ninferkit.errors import BadInput, ProfileError, RequestFailed
from ninferkit.measure.client import RequestResult, RequestSpec, StreamingClient
from ninferkit.redaction import REDACTED, remember, scrub, scrub_data
from ninferkit.rundir.records import RequestRow
from ninferkit.rundir.runs import RunDir, append_jsonl, open_for_write, open_run, read_rows, write_text_atomic
from ninferkit.server import process as server
from tests.conftest import LOCAL_CPU, REPO

ADAPTER = get_adapter("llama_server")
HELLO = RequestSpec("chat", [{"role": "user", "content": "Say hello."}], 8)
KEY = 'sk-hostile"key/with+signs=29'


@pytest.fixture(autouse=True)
def _own_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The secrets a test remembers stay its own (redaction keeps them for the process)."""
    from ninferkit import redaction

    monkeypatch.setattr(redaction, "_known", {})


def _ninferkit(*args: str | bytes, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ninferkit", *args], capture_output=True, text=True,
                          cwd=cwd or REPO, timeout=120)


# -- a server that misbehaves ----------------------------------------------------------------------------------

Behaviour = Callable[[socket.socket, bytes], None]
"""What the server does with one connection, given the request it read (head and body)."""


class Misbehaving:
    """An HTTP server on a free loopback port; each connection is handled by `behaviour` in a thread, and the
    bytes it managed to send are counted (`sent`), so a test can tell a cut read from a grown one."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.sent = 0
        self.requests: list[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._stop = threading.Event()

    def __enter__(self) -> Misbehaving:
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._listener.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                part = conn.recv(65536)
                if not part:
                    return
                request += part
            head, _, body = request.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:
                body += conn.recv(65536)
            self.requests.append(request)
            try:
                self.behaviour(_Counting(conn, self), head + b"\r\n\r\n" + body)  # type: ignore[arg-type]
            except OSError:
                pass  # the client closed the connection: what a cut read does


class _Counting:
    def __init__(self, conn: socket.socket, server: Misbehaving) -> None:
        self.conn, self.server = conn, server

    def sendall(self, data: bytes) -> None:
        self.conn.sendall(data)
        self.server.sent += len(data)


def _head(status: int = 200, content_type: str = "application/json", length: int | None = None) -> bytes:
    sized = f"Content-Length: {length}\r\n" if length is not None else ""
    return f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n{sized}Connection: close\r\n\r\n".encode()


def endless(status: int, content_type: str = "text/plain") -> Behaviour:
    """A body with no length that never ends (64 KiB at a time, as fast as the client takes it)."""
    def behave(conn: socket.socket, request: bytes) -> None:
        conn.sendall(_head(status, content_type))
        while True:
            conn.sendall(b"x" * 65536)
    return behave


def sse_forever(line: bytes, every_s: float = 0.2) -> Behaviour:
    """An SSE stream that sends `line` every `every_s` seconds and never finishes."""
    def behave(conn: socket.socket, request: bytes) -> None:
        conn.sendall(_head(200, "text/event-stream"))
        while True:
            conn.sendall(line)
            time.sleep(every_s)
    return behave


def sse(*events: dict[str, object]) -> Behaviour:
    """A whole SSE stream of these chat events, then [DONE]."""
    def behave(conn: socket.socket, request: bytes) -> None:
        body = b"".join(b"data: " + json.dumps(event).encode() + b"\n\n" for event in events) + b"data: [DONE]\n\n"
        conn.sendall(_head(200, "text/event-stream", len(body)) + body)
    return behave


def _send(url: str, spec: RequestSpec = HELLO, timeout_s: float = 30.0,
          headers: dict[str, str] | None = None) -> RequestResult:
    async def go() -> RequestResult:
        async with StreamingClient(url, ADAPTER, "m", timeout_s=timeout_s, headers=headers) as client:
            return await client.send(spec)
    return asyncio.run(go())


# -- unbounded reads from a server ------------------------------------------------------------------------------

def test_an_error_page_that_never_ends_is_cut_into_an_errored_row() -> None:
    with Misbehaving(endless(500)) as bad:
        started = time.monotonic()
        result = _send(bad.url)
    assert time.monotonic() - started < 20
    assert result.status == "errored" and result.http_status == 500
    assert result.error is not None and "error body cut at 65,536 bytes" in result.error
    assert len(result.error) < 2200
    assert bad.sent < 64 * 1024 * 1024  # the socket buffers, not gigabytes


@pytest.mark.parametrize("line", [b": keep-alive\n\n",
                                  b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'],
                         ids=["comment-every-200ms", "token-every-200ms"])
def test_a_stream_that_never_finishes_ends_at_the_request_deadline(line: bytes) -> None:
    """Never silent for the read timeout, so only a deadline per request ends it: timeout_s = 2, a deadline
    of 4 s."""
    with Misbehaving(sse_forever(line)) as bad:
        started = time.monotonic()
        result = _send(bad.url, timeout_s=2.0)
    assert 3.9 < time.monotonic() - started < 12
    assert result.status == "errored" and result.error is not None
    assert result.error.startswith("RequestDeadline: the request was still going after 4 s")
    RequestRow.model_validate(result.row())


def test_an_sse_line_with_no_end_is_an_errored_row_not_a_growing_buffer() -> None:
    with Misbehaving(endless(200, "text/event-stream")) as bad:
        result = _send(bad.url)
    assert result.status == "errored" and result.error is not None
    assert "an SSE line over 1,048,576 bytes with no end" in result.error
    assert bad.sent < 64 * 1024 * 1024


def test_a_metrics_body_that_never_ends_is_not_read() -> None:
    async def scrape(url: str) -> str:
        async with StreamingClient(url, ADAPTER, "m", timeout_s=30.0) as client:
            return await client.get_text("/metrics")
    with Misbehaving(endless(200)) as bad:
        with pytest.raises(RequestFailed, match=r"GET /metrics not read: its body was cut at 16,777,216 bytes"):
            asyncio.run(scrape(bad.url))
    assert bad.sent < 80 * 1024 * 1024


def test_telemetry_stops_scraping_an_endless_metrics_body(tmp_path: Path) -> None:
    from ninferkit.measure.telemetry import Telemetry

    with Misbehaving(endless(200)) as bad:
        telemetry = Telemetry(tmp_path / "telemetry.jsonl", ADAPTER, None, bad.url)
        with telemetry:
            deadline = time.monotonic() + 30
            while not telemetry.metrics_status.startswith("not read") and time.monotonic() < deadline:
                time.sleep(0.1)
    assert telemetry.metrics_status == ("not read: the /metrics body was cut at 16,777,216 bytes: the server "
                                        "sent more and was not read further")
    assert len(bad.requests) == 1  # not asked again


@pytest.mark.parametrize("named", ["/dev/zero", "a-fifo", "a-folder"])
def test_a_log_that_is_not_a_regular_file_is_refused(tmp_path: Path, named: str) -> None:
    """diagnose and capacity fit of /dev/zero read until memory ran out; a FIFO with no writer blocked."""
    target = Path(named) if named.startswith("/") else tmp_path / named
    if named == "a-fifo":
        os.mkfifo(target)
    elif named == "a-folder":
        target.mkdir()
    for command in (["diagnose", str(target)], ["capacity", "fit", str(target)]):
        done = _ninferkit(*command)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "not a regular file" in done.stderr and str(target) in done.stderr


def test_verify_file_says_what_a_path_is_that_is_not_a_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, said in ((tmp_path, "is a directory"), (fifo, "is a FIFO")):
        done = _ninferkit("verify", "--file", str(path))
        assert said in done.stdout + done.stderr and "file not found" not in done.stdout + done.stderr


# -- secrets in another form ------------------------------------------------------------------------------------

def test_a_key_echoed_json_escaped_url_encoded_or_base64_is_stored_without_it(tmp_path: Path) -> None:
    forms = [KEY, json.dumps(KEY)[1:-1], urllib.parse.quote(KEY, safe=""), urllib.parse.quote_plus(KEY),
             *(base64.b64encode(lead.encode() + KEY.encode()).decode() for lead in ("", "B", "Be"))]

    def echo(conn: socket.socket, request: bytes) -> None:
        body = json.dumps({"error": {"message": f"bad key {json.dumps(KEY)} in {urllib.parse.quote(KEY)}; "
                                                f"basic {base64.b64encode(b'u:' + KEY.encode()).decode()}"}}).encode()
        conn.sendall(_head(401, length=len(body)) + body)
    with Misbehaving(echo) as bad:
        result = _send(bad.url, headers={"Authorization": f"Bearer {KEY}"})
    assert KEY.encode() in bad.requests[0]  # the server had it, and echoed it
    append_jsonl(tmp_path / "requests.jsonl", result.row())
    stored = (tmp_path / "requests.jsonl").read_text()
    assert REDACTED in stored
    leaked = [form for form in forms if form[4:-4] in stored]
    assert leaked == []


def test_field_names_are_never_scrubbed() -> None:
    remember("completion")  # a key that is also part of a field name
    row = scrub_data({"completion_tokens": 3, "status": "ok", "text": "completion of it"})
    assert row == {"completion_tokens": 3, "status": "ok", "text": f"{REDACTED} of it"}


def test_a_key_too_short_to_scrub_is_refused_before_the_run(tmp_path: Path) -> None:
    env = {**os.environ, "NINFERKIT_SHORT_KEY": "ok"}
    done = subprocess.run([sys.executable, "-m", "ninferkit", "run", str(LOCAL_CPU), "--run-dir", str(tmp_path / "r"),
                           "-p", "serve.api_key_env=NINFERKIT_SHORT_KEY"], capture_output=True, text=True,
                          cwd=REPO, timeout=120, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "NINFERKIT_SHORT_KEY is 2 characters long" in done.stderr and "at least 8 characters" in done.stderr
    assert not (tmp_path / "r").exists()
    assert scrub("status ok") == "status ok"


# -- paths taken from files someone sent ------------------------------------------------------------------------

def test_a_stale_server_json_log_outside_the_run_is_never_rewritten(tmp_path: Path) -> None:
    """server.json names a shell rc file holding the key as its log: stopping reads and rewrites only the
    run's own logs/server.log, and the rc file keeps its text and its mode 0600."""
    remember(KEY)
    rc = tmp_path / "home" / ".bashrc"
    rc.parent.mkdir()
    rc.write_text(f"export KEY='{KEY}'\n")
    rc.chmod(0o600)
    run_dir = RunDir(tmp_path / "run")
    run_dir.path.mkdir()
    process = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        run_dir.server.write_text(json.dumps({"state": "ready", "pid": process.pid, "pgid": process.pid,
                                              "process": server.process_identity(process.pid), "log": str(rc)}))
        assert server.stop(run_dir, grace_s=5) is True
    finally:
        process.kill()
        process.wait()
    assert rc.read_text() == f"export KEY='{KEY}'\n" and stat.S_IMODE(rc.stat().st_mode) == 0o600
    assert json.loads(run_dir.server.read_text())["log"] == str(run_dir.server_log)


def test_compare_writes_inside_the_run_whatever_the_other_run_id_says(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    for hostile in ("../../..", "a/../../b", ".hidden", "x\ny"):
        folder = run.comparison(hostile)
        assert folder.parent == run.report and "/" not in folder.name and "\n" not in folder.name


def test_symlinks_planted_in_a_run_are_refused_or_replaced(tmp_path: Path) -> None:
    run = open_run(LOCAL_CPU, tmp_path / "run")
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("keep me\n")
    run.dir.report.symlink_to(outside)  # report/ planted as a link
    with pytest.raises(BadInput, match=r"report is a symbolic link inside the run directory"):
        write_text_atomic(run.dir.write_up, "# the write-up\n")
    run.dir.requests.symlink_to(victim)  # requests.jsonl planted as a link
    with pytest.raises(BadInput, match=r"requests.jsonl is a symbolic link to .*victim.txt"):
        append_jsonl(run.dir.requests, {"status": "ok"})
    run.dir.logs.mkdir()
    run.dir.server_log.symlink_to(victim)  # the server's log: replaced by the log itself
    with open_for_write(run.dir.server_log) as log:
        log.write(b"server output\n")
    assert not run.dir.server_log.is_symlink() and run.dir.server_log.read_text() == "server output\n"
    run.dir.manifest.unlink()
    run.dir.manifest.symlink_to(victim)  # an atomic write replaces the link, never its target
    write_text_atomic(run.dir.manifest, "{}\n")
    assert victim.read_text() == "keep me\n" and list(outside.iterdir()) == [victim]


def test_a_file_ninferkit_rewrites_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("private\n")
    path.chmod(0o600)
    write_text_atomic(path, "still private\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# -- one odd server field, impossible numbers -------------------------------------------------------------------

DONE_USAGE = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 8}}


@pytest.mark.parametrize(("events", "said"), [
    ([{"id": "c1", "choices": [{"delta": {"content": "hi"}, "finish_reason": {"why": "length"}}]}, DONE_USAGE],
     "finish_reason is {'why': 'length'}, not a text"),
    ([{"id": 12345, "choices": [{"delta": {"content": "hi"}}]}, DONE_USAGE], "response_id is 12345, not a text"),
    ([{"id": "c1", "choices": [{"delta": {"content": "hi"}}]},
      {**DONE_USAGE, "timings": {"predicted_n": 8, "predicted_per_second": "fast"}}],
     "decode_tok_s_server is 'fast', not a number"),
    ([{"id": "c1", "choices": [{"delta": {"content": "hi"}}]},
      {**DONE_USAGE, "timings": {"predicted_n": 8, "predicted_ms": -1600.0, "predicted_per_second": -5.0}}],
     "decode_tok_s_server is -5.0, below 0"),
    ([{"id": "c1", "choices": [{"delta": {"content": "hi"}}]}, {"choices": [], "usage": {
        "prompt_tokens": 5, "completion_tokens": 10 ** 30}}], "completion_tokens is 10000000000"),
], ids=["finish-reason-object", "numeric-id", "rate-as-text", "negative-timings", "1e30-tokens"])
def test_an_odd_server_field_is_an_errored_row_the_reader_accepts(tmp_path: Path, events: list[dict[str, object]],
                                                                   said: str) -> None:
    with Misbehaving(sse(*events)) as bad:
        result = _send(bad.url)
    row = result.row()
    assert row["status"] == "errored" and said in row["error"], row["error"]
    path = tmp_path / "requests.jsonl"
    append_jsonl(path, row)
    append_jsonl(path, row)
    assert [read.status for read in read_rows(path, RequestRow)] == ["errored", "errored"]  # never "damaged"


def test_a_well_formed_stream_is_still_measured() -> None:
    """The control: the same server with ordinary fields gives an ok row."""
    events = [{"id": "c1", "choices": [{"delta": {"content": "hi"}, "finish_reason": "length"}]},
              {**DONE_USAGE, "timings": {"predicted_n": 8, "predicted_ms": 80.0, "predicted_per_second": 100.0}}]
    with Misbehaving(sse(*events)) as bad:
        row = _send(bad.url).row()
    assert row["status"] == "ok" and row["decode_tok_s_server"] == 100.0 and row["finish_reason"] == "length"


# -- text that is not text --------------------------------------------------------------------------------------

def _profile(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("edit", "said"), [
    (lambda text: text.replace("name: local-cpu", 'name: "local-cpu\\n"'), "name ends in a newline"),
    (lambda text: text.replace("name: local-cpu", 'name: "local\\x07cpu"'), "name holds the control character U+0007"),
    (lambda text: text + "\nserve:\n  port: 9999\n", "key 'serve' is written twice in one mapping"),
], ids=["trailing-newline", "control-character", "duplicate-section"])
def test_a_profile_with_text_that_is_not_text_is_one_clear_error(tmp_path: Path, edit: Callable[[str], str],
                                                                 said: str) -> None:
    text = LOCAL_CPU.read_text()
    assert "name: local-cpu" in text
    done = _ninferkit("launch", str(_profile(tmp_path, edit(text))), "--dry-run")
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_an_override_with_a_byte_that_is_not_utf8_is_one_clear_error(tmp_path: Path) -> None:
    argv = [sys.executable.encode(), b"-m", b"ninferkit", b"launch", str(LOCAL_CPU).encode(), b"--dry-run",
            b"-p", b"report.title=caf\xe9"]
    done = subprocess.run(argv, capture_output=True, cwd=REPO, timeout=120)
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 2 and "report.title holds the byte 0xe9" in stderr and "Traceback" not in stderr


def test_a_duplicated_key_inside_a_section_is_refused() -> None:
    from ninferkit.params.load import parse_yaml

    with pytest.raises(ProfileError, match=r"key 'port' is written twice in one mapping \(lines 2 and 3\)"):
        parse_yaml("serve:\n  port: 1\n  port: 2\n", "p.yaml")
    assert parse_yaml("a: &x {b: 1}\nc:\n  <<: *x\n  d: 2\n", "p.yaml") == {"a": {"b": 1}, "c": {"b": 1, "d": 2}}


# -- a lab's environment ----------------------------------------------------------------------------------------

def test_loopback_metrics_bypass_a_proxy_from_the_environment(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """http_proxy names a proxy that is not there: the engine on loopback is scraped all the same."""
    from ninferkit.measure.telemetry import Telemetry
    from ninferkit.transports import proxy_note

    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    body = b"vllm:num_requests_running 1\n"

    def metrics(conn: socket.socket, request: bytes) -> None:
        conn.sendall(_head(200, "text/plain", len(body)) + body)
    with Misbehaving(metrics) as engine:
        telemetry = Telemetry(tmp_path / "telemetry.jsonl", ADAPTER, None, engine.url)
        with telemetry:
            deadline = time.monotonic() + 20
            while telemetry.metrics_status != "scraping" and time.monotonic() < deadline:
                time.sleep(0.1)
    assert telemetry.metrics_status == "scraping" and engine.requests
    assert proxy_note(engine.url) == ""
    assert proxy_note("http://gpu-box.lab:8000") == " (sent through the proxy http://127.0.0.1:9, from the " \
                                                    "environment's http_proxy)"


# -- every OSError names its path -------------------------------------------------------------------------------

def test_an_os_error_names_its_path_or_says_none_was_named() -> None:
    from ninferkit.os_errors import os_error_words

    assert os_error_words(FileNotFoundError(2, "No such file or directory", "/x/tables/context.csv")) == \
        "No such file or directory: /x/tables/context.csv"
    assert os_error_words(FileNotFoundError(2, "No such file or directory")) == \
        "No such file or directory (errno 2; the OS named no file)"
