"""Issue 40, the third round of hostile inputs: one test or more per family fixed here (families 2 and 8, merge
and fleet files, are other engineers' areas). Against real servers on loopback (test_faults_hostile.Misbehaving:
raw sockets, so they can send what no framework would; test_url.replaying: the engines' recorded answers, one
field changed where the case says), real files and real subprocesses of `ninferkit` (a SIGTERM, a kill -9).

FAULTS is this round's fault table, as test_faults_rows.FAULTS is round two's: every case, its family, and what it
ends as now (the test named asserts that outcome)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

from ninferkit.bounded import JSON_NESTING, loads_json
from ninferkit.engines import get_adapter
from ninferkit.errors import BadInput, ProfileError
from ninferkit.measure import agent_tools
from ninferkit.measure.agent_tools import run_calls
from ninferkit.measure.client import StreamedCall
from ninferkit.measure.traces import MAX_GAP_MS, TraceRequest, read_trace
from ninferkit.measure.workloads import Tokenizer
from ninferkit.redaction import REDACTED, remember
from ninferkit.rundir.runs import append_jsonl
from ninferkit.server.detect import Answers, Detection, ask
from ninferkit.server.target import Target, reach
from ninferkit.steps.attach import served_overrides
from ninferkit.sweeps.kinds.trace import _prompts
from tests.conftest import DATA, LOCAL_CPU, REPO
from tests.unit.steps.test_url import replaying, vllm_answers
from tests.unit.test_faults_hostile import Misbehaving, _head, _send, sse
from tests.unit.test_faults_rows import FAILURES

RECORDED = DATA / "run_dirs" / "embedded-spec-ab"
AIPERF = DATA / "peers" / "aiperf-0.13.0"
KEY = "sk-round3/key+with~signs=40"
FAULTS: dict[str, tuple[str, str, str]] = {
    # case: (family, outcome, the test that asserts it)
    "nested powers ((((9**64)**64)**64)**64)**64": (
        "1 agent tools", "handled", "test_a_hostile_tool_call_is_the_models_error_and_the_loop_keeps_running"),
    "100,000 `+` terms, 100,000 unary minus": (
        "1 agent tools", "handled", "test_a_hostile_tool_call_is_the_models_error_and_the_loop_keeps_running"),
    "a tool call's arguments of the wrong JSON type": (
        "1 agent tools", "handled", "test_a_call_whose_fields_are_of_the_wrong_json_type_is_a_parse_failure"),
    "merge -o naming one of its inputs, or inside one": (
        "2 merge", "clear error", "test_merge_refuses_its_own_input_and_a_run_twice"),
    "the same folder twice": ("2 merge", "clear error", "test_merge_refuses_its_own_input_and_a_run_twice"),
    "a run merged with its copy": ("2 merge", "clear error", "test_merge_refuses_a_run_merged_with_its_copy"),
    "a trace gap of 10^15 ms": ("3 trace replay", "clear error", "test_a_trace_gap_over_an_hour_is_refused"),
    "planning: tokenize round trips one at a time": (
        "3 trace replay", "handled", "test_trace_planning_asks_each_block_once_and_several_at_a_time"),
    "trace --block-tokens 0": ("3 trace replay", "clear error", "test_trace_block_tokens_0_is_refused"),
    "an import killed midway": ("4 cut import", "handled", "test_an_import_killed_midway_never_looks_finished"),
    "deep JSON at /v1/models under --url": (
        "5 deep JSON", "handled", "test_deep_json_from_a_server_or_a_file_is_a_clear_error"),
    "deep JSON in a vllm-bench or AIPerf file": (
        "5 deep JSON", "clear error", "test_deep_json_from_a_server_or_a_file_is_a_clear_error"),
    "a given key refused": ("6 --url messages", "clear error", "test_a_refused_key_that_was_given_is_named_so"),
    "a server-reported context of 10^15, -5 or text": (
        "6 --url messages", "clear error", "test_an_absurd_reported_context_is_blamed_on_the_server"),
    "a redirect at /v1/models": (
        "6 --url messages", "clear error", "test_a_redirect_or_a_cut_model_list_is_named_as_such"),
    "a /v1/models cut at its cap": (
        "6 --url messages", "clear error", "test_a_redirect_or_a_cut_model_list_is_named_as_such"),
    "a complete stream whose connection stays open": (
        "6 --url messages", "handled", "test_a_complete_stream_on_a_connection_left_open_is_ok"),
    "a key echoed URL-encoded (any safe set, either hex case)": (
        "7 scrubber", "handled", "test_a_key_echoed_url_encoded_in_any_form_is_not_stored"),
    "fleet run_root with '..', absolute (Slurm) or a symlink out": (
        "8 fleet files", "clear error", "test_a_run_root_leaving_the_state_folder_is_refused_naming_the_field"),
    "#SBATCH --output/--chdir under a folder with a space": (
        "8 fleet files", "handled", "test_sbatch_paths_are_quoted_for_sbatchs_own_reader"),
    "fleet task STATE 99 (or x)": ("8 fleet files", "clear error", "test_fleet_task_out_of_range_names_the_range"),
    "a 5,000-digit integer in a profile, -p or --fixed": (
        "9 edges", "clear error", "test_a_5000_digit_number_is_a_clear_error"),
    "a 300-character run-dir name": ("9 edges", "clear error", "test_a_run_dir_name_too_long_is_one_clear_error"),
    "report on an empty folder": (
        "9 edges", "clear error", "test_report_on_an_empty_folder_and_a_fit_of_nothing_exit_2"),
    "capacity fit with nothing to fit": (
        "9 edges", "clear error", "test_report_on_an_empty_folder_and_a_fit_of_nothing_exit_2"),
    "SIGTERM during the write-up": ("10 signals", "handled", "test_sigterm_during_the_write_up_prints_no_traceback"),
    "deploy --dry-run (systemd)": ("11 deploy", "handled", "test_the_dry_run_shows_the_binary_that_will_run"),
}


@pytest.fixture(autouse=True)
def _own_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The secrets a test remembers stay its own (redaction keeps them for the process)."""
    from ninferkit import redaction

    monkeypatch.setattr(redaction, "_known", {})
    monkeypatch.setattr(redaction, "_url_encoded", {})


def test_the_fault_table_has_a_test_per_case_and_no_failure_left() -> None:
    for case, (_, outcome, test) in FAULTS.items():
        assert outcome in ("clear error", "handled", *FAILURES), case
        assert callable(globals().get(test)), case
    assert not [case for case, (_, outcome, _) in FAULTS.items() if outcome in FAILURES]


def _ninferkit(*args: str, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ninferkit", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


def _clear_error(done: subprocess.CompletedProcess[str], says: str, code: int = 2) -> None:
    assert done.returncode == code, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and says in done.stderr, done.stderr


# -- 1. the agent's tools ---------------------------------------------------------------------------------------

def _call(expression: str) -> StreamedCall:
    return StreamedCall("c1", "calculate", json.dumps({"expression": expression}))


def test_a_hostile_tool_call_is_the_models_error_and_the_loop_keeps_running() -> None:
    """Each of the issue's calls answers an error at once; the event loop keeps running while tools run (a
    ticker on it keeps ticking), and a tool that raises anything is its answer, not the sweep's."""
    hostile = ["((((9**64)**64)**64)**64)**64", "+".join(["1"] * 100_000), "-" * 100_000 + "1", "(-8) ** 0.5",
               "(" * 40 + "1" + ")" * 40 + "**" + "9" * 400]

    async def go() -> tuple[list[agent_tools.ToolRun], int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)
        task = asyncio.create_task(ticker())
        runs = await run_calls([_call(e) for e in hostile] + [_call("17.4 / 0.19")])
        task.cancel()
        return runs, ticks

    started = time.monotonic()
    runs, ticks = asyncio.run(go())
    assert time.monotonic() - started < agent_tools.TOOL_SECONDS
    assert [run.result.startswith("error: ") for run in runs] == [True] * len(hostile) + [False]
    assert json.loads(runs[-1].result) == {"result": 17.4 / 0.19}
    assert ticks > 1  # the loop ran while the tools did


def test_a_tool_that_raises_or_hangs_answers_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def raises(_: str) -> str:
        raise MemoryError("as 100,000 unary minus did")

    def hangs(_: str) -> str:
        time.sleep(0.5)
        return "late"
    monkeypatch.setitem(agent_tools._RUN, "calculate", raises)
    [run] = asyncio.run(run_calls([_call("1")]))
    assert run.parsed and run.result == "error: MemoryError: as 100,000 unary minus did"
    monkeypatch.setitem(agent_tools._RUN, "calculate", hangs)
    monkeypatch.setattr(agent_tools, "TOOL_SECONDS", 0.1)
    [run] = asyncio.run(run_calls([_call("1")]))
    assert run.result == "error: the tool did not answer within 0.1 s"


def test_a_call_whose_fields_are_of_the_wrong_json_type_is_a_parse_failure() -> None:
    """A server streams a call whose arguments are a number, whose name is a list and whose index is text: the
    reply reads, and the loop answers the model why the call could not run."""
    behave = sse({"choices": [{"delta": {"tool_calls": [
        {"index": "0", "id": "c1", "function": {"name": ["calculate"], "arguments": 5}}]}}]},
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 3,
                                                                             "completion_tokens": 2}})
    with Misbehaving(behave) as bad:
        result = _send(bad.url)
    assert result.status == "ok", result.error
    [call] = result.reply.tool_calls
    assert (call.name, call.arguments) == ('["calculate"]', "5")
    [run] = asyncio.run(run_calls([call]))
    assert not run.parsed and run.result.startswith("error: no tool named")


# -- 2. merge (paths in cli/merge.py, copies by their request ids in report/merge.py) --------------------------

def test_merge_refuses_its_own_input_and_a_run_twice(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RECORDED, run)
    rows = (run / "requests.jsonl").read_bytes()
    for args, says in ((["-o", str(run)], "is the input"), (["-o", str(run / "merged")], "is inside the input"),
                       (["-o", str(tmp_path)], "holds the input")):
        _clear_error(_ninferkit("merge", str(run), *args), says)
    _clear_error(_ninferkit("merge", str(run), str(tmp_path / "." / "run"), "-o", str(tmp_path / "m1")),
                 "given twice")
    assert (run / "requests.jsonl").read_bytes() == rows and not (run / "merged").exists()
    assert not (tmp_path / "m1").exists()


def test_merge_refuses_a_run_merged_with_its_copy(tmp_path: Path) -> None:
    """The same rows under another folder (and under another host's name) are one run: named, nothing written;
    `fleet collect -o` goes through the same check (report/merge.py). A copy given ids of its own is another
    run, and merges."""
    from tests.run_copies import copy_as_another_run

    run, copy = tmp_path / "run", tmp_path / "elsewhere" / "copy"
    shutil.copytree(RECORDED, run)
    shutil.copytree(RECORDED, copy)
    (copy / "fleet-task.json").write_text(json.dumps({"schema_version": 1, "host": "other-host", "fleet": "f"}))
    done = _ninferkit("merge", str(run), str(copy), "-o", str(tmp_path / "m"))
    _clear_error(done, f"{run} and {copy} are the same run: ")
    assert "measured requests of" in done.stderr and "(the same request ids)" in done.stderr
    assert not (tmp_path / "m").exists()
    copy_as_another_run(RECORDED, tmp_path / "another")
    assert _ninferkit("merge", str(run), str(tmp_path / "another"), "-o", str(tmp_path / "m2")).returncode == 0


# -- 3. trace replay --------------------------------------------------------------------------------------------

def _trace(tmp_path: Path, *stamps: float) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": stamp, "input_length": 100, "output_length": 8,
                                        "hash_ids": [1, 2]}) + "\n" for stamp in stamps))
    return path


def test_a_trace_gap_over_an_hour_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="line 2: timestamp .* ms after the previous line's: a gap over 3,600,000"):
        read_trace(_trace(tmp_path, 0, 10**15), 64)
    assert len(read_trace(_trace(tmp_path, 10**15, 10**15 + MAX_GAP_MS), 64)) == 2  # where it starts is no gap


class CountingTokenizer:
    """A /tokenize on loopback (one token per 4 characters, as a tokenizer's order of magnitude) that counts the
    round trips and the most in flight at once, each answered after `delay_s` as a busy server would."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s, self.calls, self.in_flight, self.peak = delay_s, 0, 0, 0
        self._lock = threading.Lock()

    def __call__(self, conn: socket.socket, request: bytes) -> None:
        with self._lock:
            self.calls += 1
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        time.sleep(self.delay_s)
        text = json.loads(request.partition(b"\r\n\r\n")[2])["content"]
        body = json.dumps({"tokens": list(range(len(text) // 4))}).encode()
        with self._lock:
            self.in_flight -= 1
        conn.sendall(_head(200, length=len(body)) + body)


def test_trace_planning_asks_each_block_once_and_several_at_a_time() -> None:
    """200 requests over 10 distinct two-block prefixes: each distinct block is built once, and round trips
    overlap (before issue 40: one at a time)."""
    trace = [TraceRequest(float(i), 100, 8, (i % 10, 100 + i % 10)) for i in range(200)]
    counting = CountingTokenizer(0.01)
    with Misbehaving(counting) as server, Tokenizer(server.url, get_adapter("llama_server")) as tokenizer:
        prompts = _prompts(tokenizer, trace, 64)
    assert len(prompts) == 200 and all(count > 0 for _, count in prompts)
    assert prompts[0] == prompts[10] and prompts[0] != prompts[1]  # one prefix, one text
    assert counting.peak > 1
    assert counting.calls < 20 * 10 + 200  # 20 distinct blocks, a few round trips each, then 10 distinct prompts


def test_trace_block_tokens_0_is_refused(tmp_path: Path) -> None:
    _clear_error(_ninferkit("trace", str(RECORDED), "--block-tokens", "0"), "--block-tokens 0: allowed: at least 1")


# -- 4. a cut import --------------------------------------------------------------------------------------------

def test_an_import_killed_midway_never_looks_finished(tmp_path: Path) -> None:
    """A real `ninferkit import` of 20,000 AIPerf records killed with SIGKILL once rows are on disk: whenever it
    died, the manifest says done only with every row written, `report` refuses it otherwise, and importing
    into it again is refused naming the cut."""
    lines = (AIPERF / "profile_export.jsonl").read_text().splitlines()
    source = tmp_path / "aiperf"
    source.mkdir()
    (source / "profile_export.jsonl").write_text("\n".join(lines[i % len(lines)] for i in range(20_000)) + "\n")
    shutil.copy(AIPERF / "profile_export_aiperf.json", source)
    whole = _ninferkit("import", "--format", "aiperf", "-o", str(tmp_path / "whole"), str(source))
    assert whole.returncode == 0, whole.stderr
    total = len((tmp_path / "whole" / "requests.jsonl").read_text().splitlines())
    out = tmp_path / "cut"
    process = subprocess.Popen([sys.executable, "-m", "ninferkit", "import", "--format", "aiperf", "-o", str(out),
                                str(source)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = out / "requests.jsonl"
    while process.poll() is None and not (rows.exists() and rows.stat().st_size):
        time.sleep(0.001)
    process.kill()
    process.wait()
    status = json.loads((out / "manifest.json").read_text())["steps"]["import"]["status"]
    written = len(rows.read_text().splitlines())
    if status == "done":
        assert written == total
    else:
        assert status == "writing" and written < total
        _clear_error(_ninferkit("report", str(out)), "an import cut short (its manifest says import: writing)")
    _clear_error(_ninferkit("import", "--format", "aiperf", "-o", str(out), str(source)), "cut short by a kill")


# -- 5. deep JSON -----------------------------------------------------------------------------------------------

def test_deep_json_from_a_server_or_a_file_is_a_clear_error(tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ValueError, match=f"nested deeper than {JSON_NESTING}"):
        loads_json(deep)
    with pytest.raises(ValueError, match=f"nested deeper than {JSON_NESTING}"):
        loads_json("[" * 500 + "]" * 500)  # within Python's reader, past what anything should walk
    # read by json's scanner straight where it reads the text whole, else by json.loads, in its words
    assert loads_json('{"a": [1, "x"]}') == {"a": [1, "x"]} and loads_json(' {"a": 1}\n') == {"a": 1}
    assert loads_json(b'{"a": 1}') == {"a": 1}
    for text, said in (('{"a": 1} x', "Extra data"), ("", "Expecting value"), ("\ufeff{}", "BOM"),
                       ('{"a": ', "Expecting value")):
        with pytest.raises(ValueError, match=said):
            loads_json(text)

    def models(conn: socket.socket, request: bytes) -> None:
        body = b'{"data": ' + deep.encode() + b"}"
        conn.sendall(_head(200, length=len(body)) + body)
    with Misbehaving(models) as bad:
        answers = ask(bad.url, {})
    assert answers.models is None and "nested deeper" in answers.notes["/v1/models"]
    bench = tmp_path / "bench.json"
    bench.write_text('{"duration": 1, "completed": 1, "x": ' + deep + "}")
    _clear_error(_ninferkit("import", "--format", "vllm-bench", "-o", str(tmp_path / "a"), str(bench)),
                 "nested deeper than")
    source = tmp_path / "aiperf"
    shutil.copytree(AIPERF, source)
    (source / "profile_export.jsonl").write_text('{"metadata": ' + deep + "}\n")
    _clear_error(_ninferkit("import", "--format", "aiperf", "-o", str(tmp_path / "b"), str(source)),
                 "nested deeper than")


# -- 6. --url messages ------------------------------------------------------------------------------------------

def test_a_refused_key_that_was_given_is_named_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NINFERKIT_ROUND3_KEY", KEY)
    refusing = {("GET", path): (401, {"Content-Type": "application/json"}, b'{"error": "bad key"}')
                for path in ("/health", "/v1/models")}
    with replaying(refusing) as url:
        with pytest.raises(BadInput, match="refused the key in NINFERKIT_ROUND3_KEY; check its value"):
            reach(Target(url, api_key_env="NINFERKIT_ROUND3_KEY"))
        with pytest.raises(BadInput, match="wants an API key; export it"):
            reach(Target(url))


@pytest.mark.parametrize("context", [10**15, -5, "many"])
def test_an_absurd_reported_context_is_blamed_on_the_server(context: object) -> None:
    """vLLM's recorded /v1/models with its max_model_len changed: the error names the server, not params/url.yaml;
    a -p of the field is the way past it."""
    answers = vllm_answers()
    status, headers, body = answers[("GET", "/v1/models")]
    models = json.loads(body)
    models["data"][0]["max_model_len"] = context
    answers[("GET", "/v1/models")] = (status, headers, json.dumps(models).encode())
    with replaying(answers) as url:
        url, found, detection = reach(Target(url))
    with pytest.raises(BadInput) as refused:
        served_overrides(Target(url), found, detection, [])
    assert url in str(refused.value) and "params/url.yaml" not in str(refused.value)
    assert "-p serve.max_context=N" in str(refused.value)
    if isinstance(context, int):
        assert served_overrides(Target(url), found, detection, ["serve.max_context=4096"])[-1] == \
            "serve.max_context=4096"


def test_a_redirect_or_a_cut_model_list_is_named_as_such() -> None:
    answers = vllm_answers()
    answers[("GET", "/v1/models")] = (302, {"Location": "http://elsewhere:9/v1/models"}, b"")
    with replaying(answers) as url:
        with pytest.raises(BadInput, match="/v1/models gave no model list \\(HTTP 302, a redirect to "
                                           "http://elsewhere:9/v1/models \\(not followed"):
            served_overrides(Target(url), *reach(Target(url))[1:], [])
    cut = Answers("http://x", notes={"/v1/models": "the answer was cut at 16,777,216 bytes"})
    with pytest.raises(BadInput, match="gave no model list \\(the answer was cut at 16,777,216 bytes\\)"):
        served_overrides(Target("http://x"), cut, Detection("vllm", {}, True, None), [])


def test_a_complete_stream_on_a_connection_left_open_is_ok() -> None:
    """Every event and [DONE], with no length and no close: the request is ok, not a read timeout."""
    done = threading.Event()

    def open_after(conn: socket.socket, request: bytes) -> None:
        events = [{"choices": [{"delta": {"content": "hi"}}]},
                  {"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3,
                                                                                  "completion_tokens": 1}}]
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" +
                     b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n")
        done.wait(10)
    with Misbehaving(open_after) as bad:
        result = _send(bad.url, timeout_s=2.0)
        done.set()
    assert result.status == "ok", result.error
    assert result.t_done - result.t_send < 2.0


# -- 7. the scrubber --------------------------------------------------------------------------------------------

def test_a_key_echoed_url_encoded_in_any_form_is_not_stored(tmp_path: Path) -> None:
    remember(KEY)
    forms = [urllib.parse.quote("Bearer " + KEY), urllib.parse.quote("Bearer " + KEY).lower(),
             urllib.parse.quote(KEY, safe="~"), urllib.parse.quote(KEY, safe="").replace("~", "%7E"),
             urllib.parse.quote_plus(KEY), json.dumps(KEY).replace("/", "\\/")]

    def echo(conn: socket.socket, request: bytes) -> None:
        body = " | ".join(forms).encode()
        conn.sendall(_head(401, "text/plain", len(body)) + body)
    with Misbehaving(echo) as bad:
        result = _send(bad.url)
    append_jsonl(tmp_path / "requests.jsonl", result.row())
    stored = (tmp_path / "requests.jsonl").read_text()
    assert stored.count(REDACTED) == len(forms)
    assert not [form for form in forms if form.removeprefix("Bearer%20")[2:-2] in stored]


# -- 8. fleet files --------------------------------------------------------------------------------------------

FLEET = REPO / "params" / "fleets" / "embedded-three.yaml"


def _fleet_file(tmp_path: Path, run_root: str) -> Path:
    import yaml

    data = yaml.safe_load(FLEET.read_text())
    data["state_dir"] = str(tmp_path / "state")
    data["hosts"][0]["run_root"] = run_root
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_run_root_leaving_the_state_folder_is_refused_naming_the_field(tmp_path: Path) -> None:
    """`..` (the issue's case), an absolute path on a Slurm host and a symlink out: refused before anything is
    written or submitted, naming hosts.0.run_root."""
    for run_root, says in (("runs/../../escape", "hosts.0.run_root: 'runs/../../escape': a run_root may not "
                                                 "contain '..'"),
                           ("/tmp/escape", "host slurm-a runs via slurm: its run_root is a folder under the "
                                           "fleet's state folder (which the cluster shares), not the absolute path "
                                           "'/tmp/escape'")):
        done = _ninferkit("fleet", "submit", str(_fleet_file(tmp_path, run_root)))
        _clear_error(done, says)
        assert "hosts.0" in done.stderr and not (tmp_path / "state").exists()
    (tmp_path / "state").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "state" / "runs").symlink_to(tmp_path / "outside")
    done = _ninferkit("fleet", "submit", str(_fleet_file(tmp_path, "runs")))
    _clear_error(done, f"hosts.0.run_root: 'runs': host slurm-a's run_root resolves to {tmp_path / 'outside'}, "
                       f"outside the fleet's state folder {tmp_path / 'state'} (a symlink)")
    assert sorted(path.name for path in (tmp_path / "state").iterdir()) == ["runs"]


def test_sbatch_paths_are_quoted_for_sbatchs_own_reader(tmp_path: Path) -> None:
    """sbatch reads #SBATCH lines itself: a space ends a value, an unquoted # starts a comment. The generated
    lines hold such a folder whole (tests/live/test_fleet.py submits one to a real sbatch and reads back what
    Slurm parsed)."""
    from ninferkit.fleet.slurm import batch_script, sbatch_quote
    from ninferkit.fleet.spec import load_fleet
    from ninferkit.fleet.tasks import StateDir, plan_tasks, write_tasks

    assert sbatch_quote('a b#"c\\d') == '"a b#\\"c\\\\d"'
    folder = tmp_path / "lab runs #2"
    folder.mkdir()
    fleet = load_fleet(_fleet_file(folder, "runs"), root=REPO)
    tasks = plan_tasks(fleet, lambda host: host.run_root)
    write_tasks(fleet, tasks)
    script = batch_script(StateDir(fleet.state_dir), tasks[:2], folder / "work dir", python="/v env/python")
    assert f'#SBATCH --output="{folder}/state/logs/task-%a.log"\n' in script
    assert f'#SBATCH --chdir="{folder}/work dir"\n' in script
    assert f"exec '/v env/python' -m ninferkit fleet task '{folder}/state' \"$SLURM_ARRAY_TASK_ID\"" in script


def test_fleet_task_out_of_range_names_the_range(tmp_path: Path) -> None:
    from ninferkit.fleet.spec import load_fleet
    from ninferkit.fleet.tasks import plan_tasks, write_tasks

    fleet = load_fleet(_fleet_file(tmp_path, "runs"), root=REPO)
    write_tasks(fleet, plan_tasks(fleet, lambda host: host.run_root))
    for given in ("99", "3", "-1", "x", "1.5", "\u0662"):
        done = _ninferkit("fleet", "task", str(tmp_path / "state"), given)
        _clear_error(done, f"task {given!r}: {tmp_path / 'state' / 'tasks.json'} has tasks 0..2; give one of those")
    assert not (tmp_path / "state" / "status").exists()  # no task ran, none wrote a status


# -- 9. numbers and names at the edges --------------------------------------------------------------------------

def test_a_5000_digit_number_is_a_clear_error(tmp_path: Path) -> None:
    digits = "9" * 5000
    profile = tmp_path / "big.yaml"
    profile.write_text(LOCAL_CPU.read_text().replace("max_context: 4096", f"max_context: {digits}", 1))
    assert digits in profile.read_text()
    for args in (["sweep", str(LOCAL_CPU), "-p", f"serve.max_context={digits}", "--run-dir", str(tmp_path / "r")],
                 ["sweep", str(profile), "--run-dir", str(tmp_path / "r2")],
                 ["capacity", "fit", "--fixed", digits, "--bytes-per-token", "35904"]):
        _clear_error(_ninferkit(*args), "a value no profile holds (Exceeds the limit (4300 digits)")
    assert not (tmp_path / "r").exists() and not (tmp_path / "r2").exists()


def test_a_run_dir_name_too_long_is_one_clear_error(tmp_path: Path) -> None:
    done = _ninferkit("sweep", str(LOCAL_CPU), "--run-dir", str(tmp_path / ("a" * 300)))
    _clear_error(done, "File name too long", code=1)
    assert "a name in the path is over 255 bytes" in done.stderr and done.stderr.count("\n") == 1


def test_report_on_an_empty_folder_and_a_fit_of_nothing_exit_2(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    _clear_error(_ninferkit("report", str(tmp_path / "empty")), "holds no run: neither manifest.json nor")
    _clear_error(_ninferkit("capacity", "fit", str(LOCAL_CPU)), "nothing to fit: ")
    _clear_error(_ninferkit("capacity", "fit"), "give startup logs, typed terms")


# -- 10. signals ------------------------------------------------------------------------------------------------

def test_sigterm_during_the_write_up_prints_no_traceback(tmp_path: Path) -> None:
    """The write-up step of a recorded run, a SIGTERM once its kernel runs: "interrupted" and nothing else on the
    terminal; the kernel's own log (ipykernel's socket errors as it dies) is kept in logs/kernel-writeup.log."""
    run = tmp_path / "run"
    shutil.copytree(RECORDED, run)
    process = subprocess.Popen([sys.executable, "-m", "ninferkit", "run", str(LOCAL_CPU), "--run-dir", str(run),
                                "--steps", "writeup"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    deadline = time.monotonic() + 120
    while not (run / "logs" / "kernel-writeup.log").exists() or not _children(process.pid):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=120)
    assert not [word for word in ("Traceback", "ZMQError", "DeadKernelError") if word in out], out
    if process.returncode == 130:  # the SIGTERM came while the step ran
        assert out.rstrip().endswith("ninferkit run: interrupted")
        assert json.loads((run / "manifest.json").read_text())["steps"]["writeup"]["status"] == "interrupted"
    else:  # it came as the step ended: the run finished
        assert process.returncode == 0, out


def _children(pid: int) -> list[int]:
    found = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(line) for line in found.split()]


# -- 11. deploy --dry-run ---------------------------------------------------------------------------------------

def test_the_dry_run_shows_the_binary_that_will_run(tmp_path: Path) -> None:
    from ninferkit.params import load_profile

    binary = get_adapter("llama_server").found_binary(load_profile(LOCAL_CPU).profile)
    done = _ninferkit("deploy", str(LOCAL_CPU), "--dry-run")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("ExecStart=")]
    if binary is not None:  # the embedded build is in the cache (it is wherever the live tests ran)
        assert line.startswith(f"ExecStart={binary} ") and os.path.isabs(str(binary))
    else:
        assert "llama-server is not built or on PATH here yet" in done.stdout
