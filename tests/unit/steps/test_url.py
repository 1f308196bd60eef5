"""`--url`: a server ninferkit did not start, measured, diagnosed and never signalled.

The servers here replay what real engines answered, over real HTTP on loopback (a `ThreadingHTTPServer`
serving the recorded status, headers and body of each path; a path with no recording answers 404, which is
the replay's own answer, not an engine's):
- vLLM 0.26.0 on an H200: tests/data/vllm-live/session2/http/ (its README says how it was captured);
- NInfer G1 (`ninfer-serve` of the RTX 3090 fork) on an H200: tests/data/ninfer_live/g1-h200/http/http_probe.json,
  a copy of /work/shared/ninfer-live/g1-h200/http/ (its /metrics answered 404, recorded);
- llama-server b11434 on this CPU machine: tests/data/llama-server-live/http/ (its README).
A live llama-server, which this machine runs, is tests/live/test_url.py's.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ninferkit.capacity.gather import served_observations
from ninferkit.engines import get_adapter
from ninferkit.errors import BadInput, ProfileError, ServerExited
from ninferkit.params import load_profile
from ninferkit.report import write_report
from ninferkit.server import process as server
from ninferkit.server.detect import Answers, ask, checked_url, detect
from ninferkit.server.diagnose_url import diagnose_server
from ninferkit.server.target import Target, reach
from ninferkit.steps import preflight
from ninferkit.steps.attach import URL_PROFILE, open_url_run, served_overrides
from ninferkit.steps.capacity import capacity
from ninferkit.steps.runner import url_steps
from ninferkit.steps.sweeps import sweeps
from tests.conftest import REPO

DATA = REPO / "tests" / "data"
Recorded = dict[tuple[str, str], tuple[int, dict[str, str], bytes]]
"""(method, path) -> (status, headers, body) as an engine answered."""


def vllm_answers() -> Recorded:
    found: Recorded = {}
    for name in ("health", "models", "metrics_before", "chat"):
        item = json.loads((DATA / "vllm-live/session2/http" / f"{name}.json").read_text())
        found[(item["method"], item["path"])] = (item["status"], item["headers"], item["body"].encode())
    return found


def ninfer_answers() -> Recorded:
    probe = json.loads((DATA / "ninfer_live/g1-h200/http/http_probe.json").read_text())
    paths = {"health": ("GET", "/health"), "models": ("GET", "/v1/models"), "metrics": ("GET", "/metrics"),
             "chat_ok": ("POST", "/v1/chat/completions")}
    return {key: (probe[name][0], probe[name][1], probe[name][2].encode()) for name, key in paths.items()}


def ninfer_refusing() -> Recorded:
    """NInfer started with --api-key, asked without one (`models_noauth`)."""
    probe = json.loads((DATA / "ninfer_live/g1-h200/http/http_probe.json").read_text())
    status, headers, body = probe["models_noauth"]
    return {("GET", "/health"): tuple(probe["health"][:2]) + (probe["health"][2].encode(),),  # type: ignore[dict-item]
            ("GET", "/v1/models"): (status, headers, body.encode())}


def llama_answers() -> Recorded:
    folder = DATA / "llama-server-live/http"
    found: Recorded = {}
    for name, path in (("health", "/health"), ("v1_models", "/v1/models"), ("props", "/props"),
                       ("metrics", "/metrics")):
        lines = (folder / f"{name}.headers").read_text().splitlines()
        status = int(lines[0].split()[1])
        headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
        found[("GET", path)] = (status, headers, (folder / f"{name}.body").read_bytes())
    return found


@contextmanager
def replaying(recorded: Recorded) -> Iterator[str]:
    """A real HTTP server on loopback answering each recorded request as the engine did; its base URL."""

    class Replay(BaseHTTPRequestHandler):
        def _answer(self, method: str) -> None:
            if method == "POST":
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
            status, headers, body = recorded.get((method, self.path), (404, {}, b""))
            self.send_response_only(status)
            for name, value in headers.items():
                if name.lower() not in ("content-length", "connection", "date", "keep-alive"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (the handler's API)
            self._answer("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._answer("POST")

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Replay)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize(("recorded", "kind", "sign"), [
    (vllm_answers, "vllm", "/v1/models owned_by 'vllm'"),
    (ninfer_answers, "ninfer", "/v1/models owned_by 'ninfer'"),
    (llama_answers, "llama_server", "/props has build_info and total_slots"),
])
def test_each_engine_is_told_from_its_own_recorded_answers(recorded: object, kind: str, sign: str) -> None:
    with replaying(recorded()) as url:  # type: ignore[operator]
        found = detect(ask(url, {}))
    assert found.kind == kind and not found.given
    assert list(found.signs) == [kind]  # no other engine claims these answers
    assert sign in found.signs[kind]


def test_each_sign_is_the_one_the_engine_gave() -> None:
    with replaying(vllm_answers()) as url:
        vllm = ask(url, {})
    with replaying(llama_answers()) as url:
        llama = ask(url, {})
    with replaying(ninfer_answers()) as url:
        ninfer = ask(url, {})
    assert detect(vllm).signs["vllm"] == ["/v1/models owned_by 'vllm'", "/metrics names start 'vllm:'"]
    assert vllm.server_header == "uvicorn"  # generic: no engine's sign
    assert detect(llama).signs["llama_server"] == [
        "/v1/models owned_by 'llamacpp'", "/metrics names start 'llamacpp:'", "Server header 'llama.cpp'",
        "/props has build_info and total_slots"]
    assert detect(llama).version == "b11434-unknown"
    assert ninfer.metrics is None and ninfer.notes["/metrics"] == "HTTP 404"  # recorded: G1 serves no /metrics
    assert detect(ninfer).version is None  # not reported: absent, not invented


def test_an_engine_given_is_checked_against_the_answers() -> None:
    with replaying(vllm_answers()) as url:
        answers = ask(url, {})
    assert detect(answers, "vllm").given
    with pytest.raises(BadInput, match="--engine llama_server, but .* answers as vllm"):
        detect(answers, "llama_server")
    with pytest.raises(BadInput, match="--engine 'tgi' is not an engine ninferkit drives; allowed: llama_server"):
        detect(answers, "tgi")


def test_answers_that_name_no_engine_ask_for_one() -> None:
    bare = Answers("http://127.0.0.1:9", health_status=200)
    with pytest.raises(BadInput, match="cannot tell which engine .* name it with --engine"):
        detect(bare)
    assert detect(bare, "ninfer").kind == "ninfer"  # nothing contradicts it


def test_a_server_that_wants_a_key_says_which_option_gives_it() -> None:
    with replaying(ninfer_refusing()) as url, pytest.raises(BadInput, match="HTTP 401.*--api-key-env"):
        ask(url, {})


def test_nothing_answering_is_one_clear_error() -> None:
    with replaying({}) as url:
        pass  # shut down: the port no longer answers
    with pytest.raises(BadInput, match="does not answer /health or /v1/models"):
        ask(url, {})


@pytest.mark.parametrize(("typed", "base"), [
    ("http://10.0.0.5:8000", "http://10.0.0.5:8000"), ("http://10.0.0.5:8000/", "http://10.0.0.5:8000"),
    ("http://10.0.0.5:8000/v1", "http://10.0.0.5:8000"), ("https://box.lab/llm/v1/", "https://box.lab/llm"),
])
def test_a_url_is_its_base(typed: str, base: str) -> None:
    assert checked_url(typed) == base


@pytest.mark.parametrize(("typed", "says"), [
    ("10.0.0.5:8000", "not a server's URL"), ("ftp://box", "not a server's URL"),
    ("http://user:secret@box:8000", "must not carry credentials"),
])
def test_a_bad_url_is_refused(typed: str, says: str) -> None:
    with pytest.raises(BadInput, match=says):
        checked_url(typed)


def test_the_key_comes_only_from_the_variable_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NINFERKIT_TEST_URL_KEY", raising=False)
    with pytest.raises(BadInput, match="--api-key-env names NINFERKIT_TEST_URL_KEY, but it is not set"):
        reach(Target("http://127.0.0.1:9", api_key_env="NINFERKIT_TEST_URL_KEY"))


def test_the_server_s_model_and_context_become_the_profile_s() -> None:
    with replaying(vllm_answers()) as url:
        url, answers, detection = reach(Target(url))
    found = served_overrides(Target(url), answers, detection, ["serve.max_context=4096"])
    assert found == ["engine.kind=vllm", "artifact={served: true}", 'serve.model_id="smollm2-135m"',
                     "serve.max_context=8192", "serve.max_context=4096"]  # the user's -p last: it wins
    several = Answers(url, models={"data": [{"id": "a"}, {"id": "b"}]})
    with pytest.raises(BadInput, match="lists 2 models at /v1/models \\(a, b\\); name one with --model"):
        served_overrides(Target(url), several, detection, [])
    assert 'serve.model_id="b"' in served_overrides(Target(url, model="b"), several, detection, [])


def test_a_url_run_records_an_external_server_that_stop_never_signals(tmp_path: Path) -> None:
    with replaying(vllm_answers()) as url:
        run = open_url_run(Target(url), run_dir=tmp_path / "run")
        record = run.dir.read_server()
        assert record is not None and record.external and record.pid is None and record.argv == []
        assert record.engine == "vllm" and record.model_id == "smollm2-135m"
        assert record.engine_signs["vllm"][0] == "/v1/models owned_by 'vllm'"
        assert [check.ok for check in record.checks] == [True, True, True]  # the recorded chat answer has usage
        assert run.profile.serve.max_context == 8192 and run.profile.artifact.served
        assert server.ensure_running(run.dir).url == url  # answers its health path
        assert server.stop(run.dir) is False
        assert server.read_record(run.dir).state == "ready"  # stop changed nothing
        assert "launch" not in run.dir.read_manifest().steps
        assert run.dir.read_manifest().steps["attach"].status == "ok"
    with pytest.raises(ServerExited, match="not started by ninferkit\\) does not answer /health"):
        server.ensure_running(run.dir)


def test_the_write_up_says_ninferkit_did_not_start_the_server(tmp_path: Path) -> None:
    with replaying(vllm_answers()) as url:
        run = open_url_run(Target(url), run_dir=tmp_path / "run")
    write_report(run.dir.path, formats=["markdown"])
    text = (run.dir.path / "report" / "index.md").read_text()
    assert "(a server ninferkit did not start)" in text.splitlines()[0]
    assert f"ninferkit did not start this server: it measured the one already running at {url}" in text
    assert "vllm (read from the server's answers: vllm: /v1/models owned_by 'vllm'" in text
    assert "No server.json" not in text


def test_diagnose_url_of_a_recorded_server() -> None:
    with replaying(ninfer_answers()) as url:
        report = diagnose_server(Target(url))
    assert report["engine"] == "ninfer" and report["healthy"] and report["verdict"] == "serving"
    assert report["models"] == ["qwen3.6-27b"] and report["chat"]["ok"]
    assert report["load"] is None  # no /metrics: no gauges, not zeros
    with replaying(llama_answers()) as url:
        report = diagnose_server(Target(url))
    assert not report["healthy"]  # the llama-server recording has no chat answer: the replay's 404
    assert report["verdict"].startswith("not serving: the chat request failed")
    assert report["load"] == {"llamacpp:requests_processing": 0.0, "llamacpp:requests_deferred": 0.0,
                              "llamacpp:n_busy_slots_per_decode": 0.0}  # recorded before any request


def test_each_engine_reports_its_pool_in_its_own_words() -> None:
    with replaying(vllm_answers()) as url:
        vllm = ask(url, {})
    with replaying(llama_answers()) as url:
        llama = ask(url, {})
    with replaying(ninfer_answers()) as url:
        ninfer = ask(url, {})
    # vLLM 0.26.0's cache_config_info: kv_cache_size_tokens="2515040" (157,190 blocks of 16), cache_dtype="auto"
    assert get_adapter("vllm").served_pool(vllm.props, vllm.metrics) == {
        "kv_tokens": 2_515_040, "source": "/metrics vllm:cache_config_info"}
    # llama-server -c 4096 -np 2: /props total_slots 2, n_ctx 2048 per slot
    assert get_adapter("llama_server").served_pool(llama.props, llama.metrics) == {
        "kv_tokens": 4096, "max_concurrency": 2, "max_context": 2048,
        "source": "/props total_slots x default_generation_settings.n_ctx"}
    assert get_adapter("ninfer").served_pool(ninfer.props, ninfer.metrics) is None  # G1 reports none over HTTP


def test_capacity_of_a_url_run_observes_the_reported_pool_and_launches_nothing(tmp_path: Path) -> None:
    with replaying(vllm_answers()) as url:
        run = open_url_run(Target(url), run_dir=tmp_path / "run")
    record = capacity(run, say=lambda line: None)
    [observation] = record.observations
    assert observation.kv_tokens == 2_515_040 and observation.served is True and observation.runtime_bytes is None
    assert observation.source == f"{url} /metrics vllm:cache_config_info"
    assert record.free_after_weights_bytes is None  # a server says no memory over HTTP: unknown, not 0
    assert not (run.dir.path / "capacity" / "launches").exists()
    with replaying(vllm_answers()) as url:
        run = open_url_run(Target(url), run_dir=tmp_path / "run2", overrides=["capacity.search=true"])
    with pytest.raises(ProfileError, match="capacity.search launch servers, but this run's server .* was not "
                                           "started by ninferkit"):
        capacity(run, say=lambda line: None)


def test_capacity_fit_url_keeps_the_log_s_books_and_not_a_second_copy_of_its_pool(tmp_path: Path) -> None:
    """The log and the answers are one llama-server's (tests/data/llama-server-live/: -c 4096 -np 2): its /props
    pool (4,096 tokens at 2 slots) is the log's books again, so one observation, the log's, with its bytes."""
    log = DATA / "llama-server-live/server.log"
    with replaying(llama_answers()) as url:
        url, answers, detection = reach(Target(url))
    profile = load_profile(URL_PROFILE, served_overrides(Target(url), answers, detection, [])).profile
    pool = get_adapter("llama_server").served_pool(answers.props, answers.metrics)
    [observation] = served_observations(profile, url, pool, [log], None)
    assert observation.source == str(log) and observation.runtime is not None
    assert observation.kv_tokens == 4096 and observation.available is not None
    other = DATA / "llama_server_logs/c4096-np2-f16.log"  # another start (-c 8192): its pool is not this one's
    assert [o.kv_tokens for o in served_observations(profile, url, pool, [other], None)] == [8192, 4096]
    [alone] = served_observations(profile, url, pool, [], None)
    assert alone.kv_tokens == 4096 and alone.setting.concurrency == 2 and alone.setting.context_per_slot == 2048


def test_a_url_run_verifies_and_launches_nothing() -> None:
    assert url_steps(None) == ["sweeps", "capacity", "writeup"]
    assert url_steps(["setup", "sweeps"]) == ["setup", "sweeps"]
    with pytest.raises(ProfileError, match="--steps verify,launch with --url: .* allowed: setup, sweeps"):
        url_steps(["verify", "launch", "sweeps"])


def test_the_preflight_of_a_served_profile_checks_no_command_and_refuses_launching_capacity() -> None:
    base = ["engine.kind=vllm", "serve.model_id=smollm2-135m"]
    assert preflight.problems(load_profile(URL_PROFILE, base).profile, ["sweeps", "capacity", "writeup"]) == []
    assert "nothing to verify or launch; measure that server with --url URL" in preflight.problems(
        load_profile(URL_PROFILE, base).profile, ["verify", "sweeps"])[0]
    found = preflight.problems(load_profile(URL_PROFILE, [*base, "capacity.search=true"]).profile, ["capacity"])
    assert found == ["capacity.search: true launches servers, and a --url run's server is someone else's; "
                     "allowed: false"]


def test_a_url_run_refuses_the_speculation_ab_before_sending_anything(tmp_path: Path) -> None:
    with replaying(vllm_answers()) as url:
        run = open_url_run(Target(url), run_dir=tmp_path / "run", overrides=[
            "sweeps.tasks.enabled=true", "sweeps.tasks.speculation_ab=true", "serve.spec.method=ngram",
            "sweeps.tasks.depths=[512]"])
        with pytest.raises(ProfileError, match="speculation_ab runs its cells on a second server"):
            sweeps(run, only="tasks", progress=False)
    assert not run.dir.requests.exists()
