"""Issue 29, the families test_faults_hostile.py left: rows that are not this run's, damaged tables, links
planted where a table, figure or error log is written, server reads and log reads that would not end, a lab's
proxy and host names, and OSErrors without a path or an action. Against a real HTTP server on loopback that
misbehaves (test_faults_hostile.Misbehaving), a recorded run of the embedded llama-server
(tests/data/run_dirs/embedded-spec-ab) and real files: FIFOs, /dev/zero, removed folders.

FAULTS is the fault table: every case, its family, and what it ends as now (the test of the case asserts that
outcome). Outcomes: "clear error" (one message naming the file or field and the fix, no traceback), "handled"
(the right result, said where something was left out), and the failures the issue counts, none of which any
case ends as: "misleading error", "traceback", "wrong", "hang", "traversal", "loss", "leak". The live cases
(tests/live/test_faults_live.py) are listed here too, so the table is the whole round.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from ninferkit.engines import get_adapter
from ninferkit.errors import BadInput, ProfileError, RequestFailed
from ninferkit.rundir.runs import RunDir, append_jsonl
from ninferkit.rundir.servings import run_servings
from tests.conftest import DATA, LOCAL_CPU, REPO
from tests.unit.test_faults_hostile import Misbehaving, _head, endless

ADAPTER = get_adapter("llama_server")
RECORDED = DATA / "run_dirs" / "embedded-spec-ab"

ROWS, DAMAGED, LINKS = ("test_rows_of_another_run_or_profile_and_copies_are_left_out_and_said",
                        "test_a_damaged_table_is_rebuilt_from_the_rows_for_the_write_up",
                        "test_links_planted_at_a_table_a_figure_or_the_error_log_are_replaced_never_written_through")
FAULTS: dict[str, tuple[str, str, str]] = {
    # case: (family, outcome, the test that asserts it)
    "a row from another run": ("rows not this run's", "handled", ROWS),
    "a row from another profile hash": ("rows not this run's", "handled", ROWS),
    "a row written twice": ("rows not this run's", "handled", ROWS),
    "an empty tables/*.csv": ("text that is not text", "handled", DAMAGED),
    "a tables/*.csv cut mid-line": ("text that is not text", "handled", DAMAGED),
    "a tables/*.csv that is not UTF-8": ("text that is not text", "handled", DAMAGED),
    "a tables/*.csv cut at a line end": ("text that is not text", "handled", DAMAGED),
    "a FIFO at tables/*.csv": (
        "text that is not text", "clear error",
        "test_a_fifo_planted_as_a_table_is_one_clear_error"),
    "a line break in an argument of a systemd unit": (
        "text that is not text", "handled",
        "test_a_line_break_in_an_argument_cannot_add_a_directive_to_a_systemd_unit"),
    "a link planted at tables/context.csv": ("paths from files someone sent", "handled", LINKS),
    "a link planted at report/figures/*.png": ("paths from files someone sent", "handled", LINKS),
    "a link planted at logs/ninferkit-errors.log": ("paths from files someone sent", "handled", LINKS),
    "a /tokenize body that never ends": (
        "unbounded reads", "clear error",
        "test_a_tokenizer_answer_that_never_ends_is_cut_into_a_clear_error"),
    "a /props body that never ends": ("unbounded reads", "handled", "test_a_props_answer_that_never_ends_is_not_read"),
    "a server log that is a FIFO": (
        "unbounded reads", "clear error",
        "test_a_server_log_that_never_ends_is_refused_where_it_is_read"),
    "a server log linked to /dev/zero": (
        "unbounded reads", "clear error",
        "test_a_server_log_that_never_ends_is_refused_where_it_is_read"),
    "a server log over the read cap": (
        "unbounded reads", "handled",
        "test_a_log_over_the_cap_is_read_at_its_start_and_end"),
    "a log line that never ends, tailed by telemetry": (
        "unbounded reads", "handled",
        "test_a_log_line_that_never_ends_is_skipped_by_the_tail_not_buffered"),
    "a FIFO as the log telemetry tails": ("unbounded reads", "handled", "test_a_fifo_as_the_tailed_log_is_not_opened"),
    "/dev/zero or a FIFO handed to import (3 formats)": (
        "unbounded reads", "clear error",
        "test_a_file_handed_to_import_that_never_ends_is_refused"),
    "a FIFO named as a trace": ("unbounded reads", "clear error", "test_a_trace_that_never_ends_is_refused"),
    "/dev/zero or a FIFO as the engine's request log": (
        "unbounded reads", "handled",
        "test_an_engine_request_log_that_never_ends_is_a_note_on_each_row"),
    "http_proxy set, the tokenizer on loopback": (
        "environment", "handled",
        "test_the_tokenizer_on_loopback_bypasses_a_proxy_from_the_environment"),
    "serve.host with a path, query and fragment": (
        "environment", "clear error",
        "test_a_host_that_is_no_host_is_one_clear_error"),
    "deploy.publish_host that is not a host": (
        "environment", "clear error",
        "test_a_host_that_is_no_host_is_one_clear_error"),
    "serve.host an IPv6 address or a host name": (
        "environment", "handled",
        "test_a_host_name_or_an_ipv6_address_is_reached_by_its_url"),
    "a step meets an OSError naming a path": (
        "OSError without path or action", "clear error",
        "test_a_step_that_meets_an_os_error_names_the_path_the_step_and_the_fix"),
    "an OSError that names no file": (
        "OSError without path or action", "clear error",
        "test_an_os_error_that_names_no_file_says_so"),
    "a command meets an OSError": (
        "OSError without path or action", "clear error",
        "test_a_command_that_meets_an_os_error_names_it_and_keeps_the_traceback"),
    "an OSError in an executed notebook and the post": (
        "OSError without path or action", "clear error",
        "test_an_os_error_in_a_notebook_is_its_message_and_the_post_carries_its_fix"),
    "the live server killed mid-request": (
        "server death", "handled",
        "live:test_a_server_killed_mid_request_fails_that_cell_and_the_rerun_completes"),
    "http_proxy set, a whole launch and sweep of the live server": (
        "environment", "handled",
        "live:test_a_whole_run_with_a_proxy_in_the_environment_never_sends_loopback_to_it"),
}
FAILURES = ("misleading error", "traceback", "wrong", "hang", "traversal", "loss", "leak")


def test_the_fault_table_has_a_test_per_case_and_no_failure_left() -> None:
    """Every case names the test that asserts its outcome (here, or live: in tests/live/test_faults_live.py)."""
    live = (REPO / "tests" / "live" / "test_faults_live.py").read_text()
    for case, (_, outcome, test) in FAULTS.items():
        assert outcome in ("clear error", "handled", *FAILURES), case
        name = test.removeprefix("live:")
        assert (f"def {name}(" in live) if test.startswith("live:") else callable(globals().get(name)), case
    assert not [case for case, (_, outcome, _) in FAULTS.items() if outcome in FAILURES]


def _ninferkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ninferkit", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300)


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(RECORDED, target)
    return target


# -- rows that are not this run's -------------------------------------------------------------------------------

def _context_table(path: Path) -> pd.DataFrame:
    from ninferkit.sweeps.tables import counted_rows, latest_outcomes, sweep_table

    folder = RunDir(path)
    outcomes = latest_outcomes(folder, run_servings(folder))
    return sweep_table("context", counted_rows(folder, outcomes), outcomes, None)


def test_rows_of_another_run_or_profile_and_copies_are_left_out_and_said(tmp_path: Path) -> None:
    """A 21st request in a cell of 20, a decode of 99,999 tok/s from a pasted row, a request counted twice."""
    from ninferkit.report import load_run
    from ninferkit.report.caveats import caveats

    path = _copy(tmp_path)
    before = _context_table(path)
    row = json.loads((path / "requests.jsonl").read_text().splitlines()[0])
    for edit in ({"run_id": "another-run", "request_uid": "f" * 32, "decode_tok_s_server": 99_999.0},
                 {"profile_hash": "0" * 12, "request_uid": "e" * 32, "decode_tok_s_server": 99_999.0},
                 {}):  # the first row again, as it is: a copy
        append_jsonl(path / "requests.jsonl", {**row, **edit})
    after = _context_table(path)
    assert list(after["n_ok"]) == list(before["n_ok"])
    assert after["decode_tok_s_server_max"].max() == before["decode_tok_s_server_max"].max() < 1000
    run = load_run(path)
    assert (run.counted.other_run, run.counted.other_profile, run.counted.duplicates) == (1, 1, 1)
    assert len(run.requests) == len(load_run(RECORDED).requests)
    note = next(text for text in caveats(run) if "left out" in text)
    assert "1 name another run (run_id); 1 name another profile hash; 1 repeat a request_uid" in note


# -- damaged tables ---------------------------------------------------------------------------------------------

def _cut_mid_line(text: bytes) -> bytes:
    return text[:len(text) - 20]


def _cut_at_a_line_end(text: bytes) -> bytes:
    return b"".join(text.splitlines(keepends=True)[:-1])


@pytest.mark.parametrize(("damage", "said"), [
    (lambda text: b"", "EmptyDataError"),
    (_cut_mid_line, "its last line is cut short"),
    (lambda text: b"\xff\xfe" + text[2:], "UnicodeDecodeError"),
    (_cut_at_a_line_end, "it holds 3 cells where sweeps/cells.jsonl has 4"),
], ids=["empty", "cut mid-line", "not UTF-8", "cut at a line end"])
def test_a_damaged_table_is_rebuilt_from_the_rows_for_the_write_up(tmp_path: Path, damage: object,
                                                                  said: str) -> None:
    path = _copy(tmp_path)
    table = path / "tables" / "context.csv"
    whole = pd.read_csv(table)
    table.write_bytes(damage(table.read_bytes()))  # type: ignore[operator]
    done = _ninferkit("report", "--as-recorded", str(path))  # the tables as they are: re-deriving would rewrite it
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    from ninferkit.report import load_run

    rebuilt = load_run(path).tables["context"]
    for column in ("target_prompt_tokens", "n_ok", "status", "decode_tok_s_server_median", "ttft_client_s_median"):
        assert list(rebuilt[column]) == pytest.approx(list(whole[column])) if whole[column].dtype != object \
            else list(rebuilt[column]) == list(whole[column])
    text = (path / "report" / "index.md").read_text()
    assert f"tables/context.csv was damaged ({said}" in text and "built again from requests.jsonl" in text
    assert _ninferkit("report", str(path)).returncode == 0  # re-derived: the table is whole again
    assert list(pd.read_csv(table)["n_ok"]) == list(whole["n_ok"])


def test_a_fifo_planted_as_a_table_is_one_clear_error(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    table = path / "tables" / "context.csv"
    table.unlink()
    os.mkfifo(table)
    done = _ninferkit("report", "--as-recorded", str(path))  # re-deriving replaces what stands there
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"reading a sweep table: {table} is a FIFO" in done.stderr


# -- links planted where ninferkit writes -----------------------------------------------------------------------

def test_links_planted_at_a_table_a_figure_or_the_error_log_are_replaced_never_written_through(
        tmp_path: Path) -> None:
    from ninferkit.os_errors import keep_traceback
    from ninferkit.report import write_report
    from ninferkit.sweeps.tables import save_tables

    path = _copy(tmp_path)
    outside = {name: tmp_path / name for name in ("table", "figure", "errors")}
    for target in outside.values():
        target.write_text("not ninferkit's\n")
    links = {"table": path / "tables" / "context.csv", "figure": path / "report" / "figures" / "context_speed.png",
             "errors": path / "logs" / "ninferkit-errors.log"}
    for name, link in links.items():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(outside[name])
    save_tables(RunDir(path), {"context": _context_table(path)})
    write_report(path)
    try:
        raise FileNotFoundError(2, "No such file or directory", "/gone")
    except FileNotFoundError as exc:
        kept = keep_traceback(path, exc)
    assert all(target.read_text() == "not ninferkit's\n" for target in outside.values())
    assert not links["table"].is_symlink() and pd.read_csv(links["table"])["n_ok"].sum() > 0
    assert not links["figure"].is_symlink() and links["figure"].read_bytes().startswith(b"\x89PNG")
    assert kept != links["errors"] and "FileNotFoundError" in kept.read_text()


# -- reads that would not end -----------------------------------------------------------------------------------

def test_a_tokenizer_answer_that_never_ends_is_cut_into_a_clear_error() -> None:
    from ninferkit.measure.workloads import Tokenizer

    with Misbehaving(endless(200, "application/json")) as bad, Tokenizer(bad.url, ADAPTER) as tokenizer:
        started = time.monotonic()
        with pytest.raises(RequestFailed, match="answered more than a token count: cut at 16,777,216 bytes"):
            tokenizer.count("hello")
    assert bad.sent < 80 * 1024 * 1024 and time.monotonic() - started < 60


def test_a_props_answer_that_never_ends_is_not_read() -> None:
    from ninferkit.steps.sweeps import served

    with Misbehaving(endless(200, "application/json")) as bad:
        assert served(ADAPTER, bad.url, {}) is None
    assert bad.sent < 80 * 1024 * 1024


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_server_log_that_never_ends_is_refused_where_it_is_read(tmp_path: Path, kind: str) -> None:
    from ninferkit.bounded import read_log

    log = tmp_path / "server.log"
    if kind == "fifo":
        os.mkfifo(log)
    else:
        log.symlink_to(kind)
    with pytest.raises(BadInput, match=r"diagnosing: .*server.log is a (FIFO|device).*not a regular file"):
        read_log(log, "diagnosing")


def test_a_log_over_the_cap_is_read_at_its_start_and_end(tmp_path: Path) -> None:
    from ninferkit.bounded import read_log

    log = tmp_path / "server.log"
    log.write_bytes(b"llama_context: n_ctx = 4096\n" + b"x" * 5000 + b"\nsrv operator(): cleaning up\n")
    text = read_log(log, "reading", cap=1000)
    assert text.startswith("llama_context: n_ctx = 4096\n") and text.endswith("cleaning up\n")
    assert "[ninferkit: 4,057 bytes of server.log not read: the log is over 1,000 bytes" in text
    assert len(text) < 1200


NINFER_THROUGHPUT = (b"[2026-08-20 10:05:00.000] [info] ninfer-serve: throughput interval=5.002s prefill=0.0tok/s "
                     b"decode=71.2tok/s running=1 prefilling=0 decode_ready=1 waiting=0 avg_decode_batch=1.00")
"""NInfer's throughput line as its interface spec gives it (IF §2.2; tests/unit/engines/test_engine_ninfer.py)."""


def test_a_log_line_that_never_ends_is_skipped_by_the_tail_not_buffered(tmp_path: Path) -> None:
    from ninferkit.bounded import LOG_LINE_BYTES
    from ninferkit.measure.telemetry import Telemetry

    log = tmp_path / "server.log"
    log.write_bytes(b"")
    samples = tmp_path / "telemetry.jsonl"
    with Telemetry(samples, get_adapter("ninfer"), log, None):
        with log.open("ab") as handle:  # a line 300 times the longest kept, then a real one
            for _ in range(300):
                handle.write(NINFER_THROUGHPUT[:100] + b"x" * (LOG_LINE_BYTES - 100))
                handle.flush()
            handle.write(b"\n" + NINFER_THROUGHPUT + b"\n")
        deadline = time.monotonic() + 30
        while not (samples.exists() and samples.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    assert [(row["source"], row["decode_tok_s"]) for row in rows] == [("engine_log", 71.2)]


def test_a_fifo_as_the_tailed_log_is_not_opened(tmp_path: Path) -> None:
    from ninferkit.measure.telemetry import Telemetry

    log = tmp_path / "server.log"
    os.mkfifo(log)
    started = time.monotonic()
    with Telemetry(tmp_path / "telemetry.jsonl", ADAPTER, log, None):
        time.sleep(1.0)  # a few polls of the tail: each would block opening a FIFO with no writer
    assert time.monotonic() - started < 5


# -- a lab's environment ----------------------------------------------------------------------------------------

def test_the_tokenizer_on_loopback_bypasses_a_proxy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from ninferkit.measure.workloads import Tokenizer

    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    body = b'{"tokens": [1, 2, 3]}'

    def tokenize(conn: socket.socket, request: bytes) -> None:
        conn.sendall(_head(200, "application/json", len(body)) + body)
    with Misbehaving(tokenize) as engine, Tokenizer(engine.url, ADAPTER) as tokenizer:
        assert tokenizer.count("hello") == 3
    assert engine.requests[0].startswith(b"POST /tokenize ")


@pytest.mark.parametrize(("field", "value"), [("serve.host", "127.0.0.1/x?#"), ("serve.host", "gpu box"),
                                              ("serve.host", "-lead.lab"), ("deploy.publish_host", "0.0.0.0;id")])
def test_a_host_that_is_no_host_is_one_clear_error(field: str, value: str) -> None:
    from ninferkit.params import load_profile

    with pytest.raises(ProfileError, match=f"{field}: must be a host name or an IP address") as refused:
        load_profile(LOCAL_CPU, [f"{field}={value}"])
    assert repr(value) in str(refused.value)


def test_a_host_name_or_an_ipv6_address_is_reached_by_its_url() -> None:
    from ninferkit.params import load_profile
    from ninferkit.server import process as server

    assert server.base_url(load_profile(LOCAL_CPU, ["serve.host=::1"]).profile) == "http://[::1]:8088"
    assert server.base_url(load_profile(LOCAL_CPU, ["serve.host=gpu-box.lab"]).profile) == "http://gpu-box.lab:8088"
    assert server.base_url(load_profile(LOCAL_CPU, ["serve.host=0.0.0.0"]).profile) == "http://127.0.0.1:8088"


# -- OSErrors name their path and what ninferkit was doing ------------------------------------------------------

def test_a_step_that_meets_an_os_error_names_the_path_the_step_and_the_fix(tmp_path: Path) -> None:
    """The H200's bare `[Errno 2] No such file or directory`, from a step: the notebook shows this message
    (a NinferkitError), the runner records it for the post, the traceback stays in logs/."""
    from ninferkit import steps
    from ninferkit.os_errors import FileProblem
    from ninferkit.rundir.runs import open_run

    path = _copy(tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["profile_source"] = str(REPO / "tests" / "data" / "profiles" / "generated-cpu.yaml")
    (path / "manifest.json").write_text(json.dumps(manifest))
    run = open_run(REPO / "tests" / "data" / "profiles" / "generated-cpu.yaml", path)
    shutil.rmtree(path / "report", ignore_errors=True)
    (path / "report").write_text("a file where the write-up's folder goes\n")
    with pytest.raises(FileProblem) as met:
        steps.writeup(run)
    said = str(met.value)
    assert said.startswith("the writeup step, in ") and "(ninferkit/" in said
    assert str(path / "report") in said and "Fix: " in said
    log = path / "logs" / "ninferkit-errors.log"
    assert f"the traceback is in {log}" in said and "Traceback (most recent call last)" in log.read_text()


def test_an_os_error_that_names_no_file_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ninferkit.os_errors import FileProblem, os_errors_named

    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()  # the working directory removed under the process: getcwd fails naming no file
    with pytest.raises(FileProblem) as met, os_errors_named("the sweeps step", tmp_path):
        os.getcwd()
    said = str(met.value)
    assert "No such file or directory (errno 2; the OS named no file)" in said
    assert "Fix: the OS named no file: a program ninferkit starts is not installed, or the working directory " \
           "was removed" in said


def test_a_command_that_meets_an_os_error_names_it_and_keeps_the_traceback(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    shutil.rmtree(path / "report", ignore_errors=True)
    (path / "report").write_text("a file\n")
    done = _ninferkit("report", str(path))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    # the error is a line of its own, after what the re-derivation said
    assert ("\n" + done.stderr).count("\nninferkit report, in ") == 1 and str(path / "report") in done.stderr
    assert "Fix: " in done.stderr and "the traceback is in " in done.stderr



def test_an_os_error_in_a_notebook_is_its_message_and_the_post_carries_its_fix(tmp_path: Path) -> None:
    """The runner's executed notebook shows the named error (not a bare errno under a long traceback), the
    manifest records it with its fix, and the post's "Errors met" shows that fix (it said "—")."""
    from ninferkit.errors import StepFailed
    from ninferkit.report import write_report
    from ninferkit.steps.runner import run_runbook

    path = _copy(tmp_path)
    shutil.rmtree(path / "report", ignore_errors=True)
    (path / "report").write_text("a file where the write-up's folder goes\n")
    with pytest.raises(StepFailed):
        run_runbook(REPO / "tests" / "data" / "profiles" / "generated-cpu.yaml", path, ["writeup"], say=lambda _: None)
    executed = json.loads((path / "notebooks" / "05_writeup.ipynb").read_text())
    errors = [output for cell in executed["cells"] for output in cell.get("outputs", ())
              if output["output_type"] == "error"]
    assert [error["ename"] for error in errors] == ["FileProblem"]
    assert errors[0]["evalue"].startswith("the writeup step, in ") and str(path / "report") in errors[0]["evalue"]
    recorded = json.loads((path / "manifest.json").read_text())["steps"]["writeup"]["error"]
    assert "Fix: " in recorded and "ninferkit-errors.log" in recorded
    (path / "report").unlink()
    write_report(path)
    text = (path / "report" / "index.md").read_text()
    errors_met = text[text.index("## Errors met"):]
    row = next(line for line in errors_met.splitlines() if line.startswith("| step writeup"))
    assert "FileProblem: the writeup step" in row and "| report already exists where ninferkit makes a folder" in row


def test_a_line_break_in_an_argument_cannot_add_a_directive_to_a_systemd_unit(tmp_path: Path) -> None:
    """A profile's text may hold a newline inside a value (text is text: here the public model id); in ExecStart
    a raw one ended the line, and what followed was a directive of its own (a command run before the server)."""
    from ninferkit.deploy import service
    from tests.unit.deploy.test_deploy import V100

    profile = service.load(V100, ["deploy.mode=systemd", "engine.binary=/usr/bin/true", "serve.docker=false",
                                  'serve.model_id="a\\nExecStartPre=/usr/bin/id"']).profile
    unit = service.plan(profile)[1].files["ninfer.service"]
    assert not [line for line in unit.splitlines() if line.startswith("ExecStartPre")]
    [exec_start] = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert '--model-id "a\\nExecStartPre=/usr/bin/id"' in exec_start
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed: the unit's text was checked, its syntax was not")
    (tmp_path / "ninfer.service").write_text(unit)
    checked = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "ninfer.service")], capture_output=True,
                             text=True)
    assert checked.returncode == 0 and "Unknown" not in checked.stderr, checked.stderr


@pytest.mark.parametrize(("tool", "named"), [("vllm-bench", "/dev/zero"), ("vllm-bench", "a-fifo"),
                                             ("guidellm", "/dev/zero"), ("guidellm", "a-fifo"),
                                             ("aiperf", "profile_export.jsonl")])
def test_a_file_handed_to_import_that_never_ends_is_refused(tmp_path: Path, tool: str, named: str) -> None:
    """AIPerf's file is found by its name (another name is taken as its folder), so its FIFO bears that name."""
    target = Path(named) if named.startswith("/") else tmp_path / named
    if not named.startswith("/"):
        os.mkfifo(target)
    done = _ninferkit("import", str(target), "--format", tool, "-o", str(tmp_path / "imported"))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "not a regular file" in done.stderr and str(target) in done.stderr


def test_a_trace_that_never_ends_is_refused(tmp_path: Path) -> None:
    from ninferkit.measure.traces import read_trace

    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(ProfileError, match=r"trace reading a trace: .*trace.jsonl is a FIFO"):
        read_trace(fifo, 64)


@pytest.mark.parametrize("named", ["/dev/zero", "a-fifo"])
def test_an_engine_request_log_that_never_ends_is_a_note_on_each_row(tmp_path: Path, named: str) -> None:
    """NInfer's --request-log-jsonl (a path from the profile) was read whole: /dev/zero grew until memory ran out."""
    from ninferkit.params import load_profile

    target = Path(named) if named.startswith("/") else tmp_path / named
    if not named.startswith("/"):
        os.mkfifo(target)
    profile = load_profile(REPO / "params" / "ninfer-v100-pcie-nvfp4.yaml",
                           [f"serve.request_log_jsonl={target}"]).profile
    started = time.monotonic()
    notes = get_adapter("ninfer").server_log_truth(profile, [{"request_uid": "a"}, {"request_uid": "b"}])
    assert notes is not None and len(notes) == 2 and time.monotonic() - started < 10
    assert all(note["server_note"].startswith(f"request log {target} (serve.request_log_jsonl) not read: reading "
                                              "NInfer's request log: ") and "not a regular file" in note["server_note"]
               for note in notes)
