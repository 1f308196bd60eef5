"""Mooncake-style traces offline: the shipped trace is its generator's output, a bad trace is one clear
error naming the line before anything is sent, and a run's requests.jsonl becomes a trace that reads back
(the recorded sessions run, tests/data/run_dirs/embedded-sessions, whose later turns share their session's
blocks)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from ninferkit.cli import main as cli_main
from ninferkit.engines import get_adapter
from ninferkit.errors import ProfileError
from ninferkit.measure.traces import (
    SHIPPED_BLOCK_TOKENS,
    from_requests,
    generate,
    read_trace,
    shipped_trace,
    trace_lines,
)
from ninferkit.rundir.runs import RunDir, open_run
from ninferkit.sweeps.plan import build_plan
from tests.conftest import DATA, LOCAL_CPU

SESSIONS = RunDir(DATA / "run_dirs" / "embedded-sessions")
GOOD = {"timestamp": 0, "input_length": 100, "output_length": 8, "hash_ids": [0, 1]}


def test_the_shipped_trace_is_its_generators_output() -> None:
    assert shipped_trace().read_text().splitlines() == trace_lines(generate())
    trace = read_trace(shipped_trace(), SHIPPED_BLOCK_TOKENS, max_context=4096)
    assert len(trace) == 12 and any(a.hash_ids[0] == b.hash_ids[0] for a in trace for b in trace if a is not b)
    assert generate(seed=1) != generate() and generate() == generate()


def write(tmp_path: Path, *lines: object) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


@pytest.mark.parametrize(("line", "says"), [
    ("{not json", "line 2: not JSON"),
    ([1, 2], "line 2: a list, not a JSON object"),
    ({"timestamp": 5, "input_length": 10}, "line 2: missing output_length, hash_ids"),
    ({**GOOD, "timestamp": -1}, "timestamp -1 is not milliseconds >= 0"),
    ({**GOOD, "input_length": "100"}, "input_length '100' is not a token count"),
    ({**GOOD, "output_length": 0}, "output_length 0 is not a token count from 1"),
    ({**GOOD, "input_length": 10**9, "hash_ids": list(range(math.ceil(10**9 / 64)))}, "not a token count"),
    ({**GOOD, "hash_ids": [0]}, "hash_ids must be 2 block ids (input_length 100 in blocks of 64 tokens)"),
])
def test_a_bad_line_is_one_error_naming_it(tmp_path: Path, line: object, says: str) -> None:
    with pytest.raises(ProfileError, match=f"line 2: .*{re.escape(says.removeprefix('line 2: '))}"):
        read_trace(write(tmp_path, {**GOOD, "timestamp": 0}, line), 64)


def test_unsorted_times_and_a_request_over_the_context_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="line 2: timestamp 5 is before the previous line's 10.0"):
        read_trace(write(tmp_path, {**GOOD, "timestamp": 10}, {**GOOD, "timestamp": 5}), 64)
    with pytest.raises(ProfileError, match="line 1: input_length \\+ output_length = 108 exceed serve.max_context"):
        read_trace(write(tmp_path, GOOD), 64, max_context=100)
    with pytest.raises(ProfileError, match="no request in it"):
        read_trace(write(tmp_path, ""), 64)


def test_the_plan_checks_the_trace_before_anything_is_sent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {**GOOD, "timestamp": 10}, {**GOOD, "timestamp": 5})
    run = open_run(LOCAL_CPU, tmp_path / "run", ["sweeps.trace.path=t.jsonl", "sweeps.trace.block_tokens=64"])
    with pytest.raises(ProfileError, match="sweeps.trace.path: trace .*t.jsonl line 2: timestamp 5 is before"):
        build_plan(run.profile, get_adapter("llama_server"), ["trace"], explicit=True)
    with pytest.raises(ProfileError, match="no leading /, no .."):
        open_run(LOCAL_CPU, tmp_path / "run2", ["sweeps.trace.path=../t.jsonl"])
    shipped = open_run(LOCAL_CPU, tmp_path / "run3", [])
    cell = build_plan(shipped.profile, get_adapter("llama_server"), ["trace"], explicit=True)[0]
    assert (cell.params.trace, cell.params.block_tokens, cell.params.requests) == ("shipped:small.jsonl", 64, 12)


def test_a_runs_requests_become_a_trace_that_reads_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = SESSIONS.read_requests()
    trace, notes = from_requests(rows, 64)
    assert len(trace) == notes.requests == 24 and notes.left_out == 0
    assert notes.shared == 18  # turns 2-4 of 2 sessions on 3 APIs repeat their previous turn
    by_send = sorted(rows, key=lambda r: float(r.t_send or 0))
    assert [t.input_length for t in trace] == [r.prompt_tokens for r in by_send]
    first_turns = {t.hash_ids[0] for t, r in zip(trace, by_send, strict=True) if r.turn == 1}
    assert len(first_turns) == 6  # no two sessions share a block
    assert cli_main(["trace", str(SESSIONS.path), "--block-tokens", "64"]) == 0
    out, err = capsys.readouterr()
    (tmp_path / "t.jsonl").write_text(out)
    assert read_trace(tmp_path / "t.jsonl", 64) == trace
    assert "18 share their leading blocks with an earlier turn of their session" in err
