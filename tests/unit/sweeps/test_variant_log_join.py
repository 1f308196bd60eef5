"""Each variant's rows are joined to its own server's record, never to the base's (issue 39).

Data: the live NInfer capture (tests/data/ninfer_live/g1-h200/run, SOURCE.md there): its client rows and the
engine's stderr (`[req N] submitted` / `done` lines), which that run's single server printed. It is split where no
request was in flight into the two servers a run with a variant has: the base's log (the startup lines and the
requests before the split) in logs/server.log, and the variant's (the same startup lines and the requests after it)
in variants/chunk-2048/logs/server.log; the rows after the split are written as the variant's (its cell parameter,
its serving id). Nothing of the engine's lines is edited; the split only decides which server printed them.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from ninferkit.engines import get_adapter
from ninferkit.report.derive import JOIN, rederive
from ninferkit.rundir.runs import Run, open_run, read_jsonl
from ninferkit.rundir.servings import run_servings
from ninferkit.server.process import keep_earlier_log
from ninferkit.sweeps.truth import record_log_truth
from tests.conftest import DATA, REPO

CAPTURE = DATA / "ninfer_live" / "g1-h200" / "run"
PROFILE = REPO / "params" / "ninfer-rtx3090-groupwise.yaml"
VARIANT = "chunk-2048"
ADAPTER = get_adapter("ninfer")
REQUEST = re.compile(r"\[req (\d+)\] (?:.*→ submitted|done )")


def captured_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (CAPTURE / "requests.jsonl").read_text().splitlines()]


def split_point(lines: list[str]) -> tuple[int, int]:
    """The line index and request id of the submitted line nearest the middle before which every earlier request
    is done: the capture's one server, cut into two launches with nothing in flight at the cut."""
    open_ids: set[int] = set()
    candidates = []
    for index, line in enumerate(lines):
        found = REQUEST.search(line)
        if found is None:
            continue
        request = int(found.group(1))
        if "submitted" in line:
            if not open_ids:
                candidates.append((index, request))
            open_ids.add(request)
        else:
            open_ids.discard(request)
    middle = len(lines) // 2
    return min(candidates[1:], key=lambda candidate: abs(candidate[0] - middle))


def run_with_a_variant(tmp_path: Path, overrides: tuple[str, ...] = ()) -> tuple[Run, int]:
    """The split run: the base's rows and log, the variant's rows and log; returns the run and the first request
    id the variant's server answered."""
    run = open_run(PROFILE, tmp_path / "run", list(overrides))
    lines = (CAPTURE / "logs" / "server.log").read_text().splitlines(keepends=True)
    startup = [line for line in lines[:lines.index(next(x for x in lines if "listening on" in x)) + 1]]
    cut, first_variant = split_point(lines)
    run.dir.server_log.parent.mkdir(parents=True, exist_ok=True)
    run.dir.server_log.write_text("".join(lines[:cut]))
    variant_log = run.dir.variant(VARIANT).server_log
    variant_log.parent.mkdir(parents=True)
    variant_log.write_text("".join(startup + lines[cut:]))

    rows = captured_rows()
    whole = ADAPTER.server_log_truth(run.profile, rows, [CAPTURE / "logs" / "server.log"],  # one server, as captured
                                     CAPTURE / "engine-request-log.jsonl" if overrides else None)
    assert whole is not None
    servings = run_servings(run.dir)
    written = []
    for row, fields in zip(rows, whole, strict=True):
        on_variant = fields.get("server_request_id") is not None and fields["server_request_id"] >= first_variant
        serving = servings.variants[VARIANT] if on_variant else servings.main
        cell = {**row["cell"], "variant": VARIANT} if on_variant else row["cell"]
        written.append({**row, "cell": cell, "run_id": run.dir.run_id(), "profile_hash": run.profile_hash,
                        "serving_id": serving.id, "expected_request_id": fields.get("server_request_id")})
    run.dir.requests.write_text("".join(json.dumps(row) + "\n" for row in written))
    return run, first_variant


def test_each_launch_rows_join_its_own_server_log(tmp_path: Path) -> None:
    run, first_variant = run_with_a_variant(tmp_path)
    assert record_log_truth(run, ADAPTER) > 0
    truth = {entry["request_uid"]: entry for entry in read_jsonl(run.dir.server_truth)}
    rows = [json.loads(line) for line in run.dir.requests.read_text().splitlines()]
    on_variant = [row for row in rows if row["cell"].get("variant") == VARIANT]
    on_base = [row for row in rows if row not in on_variant]
    assert len(on_variant) >= 10 and len(on_base) >= 10
    for row in rows:  # every row finds the request the one captured server's log gave it
        assert truth[row["request_uid"]].get("server_request_id") == row["expected_request_id"], row["request_uid"]
    assert all(truth[row["request_uid"]]["server_request_id"] >= first_variant for row in on_variant)
    # and only its own server's log has it: the base's log alone pairs none of the variant's rows
    against_base = ADAPTER.server_log_truth(run.profile, on_variant, [run.dir.server_log])
    assert against_base is not None and all(fields.get("server_join") is None for fields in against_base)


def test_a_join_stands_when_its_launch_log_is_replaced(tmp_path: Path) -> None:
    """The base's server launched again after the variants writes a new logs/server.log: a later pass finds no
    partner there for the earlier rows, and keeps the joins made while their log was current."""
    run, _ = run_with_a_variant(tmp_path)
    record_log_truth(run, ADAPTER)
    before = run.dir.server_truth.read_text()
    lines = run.dir.server_log.read_text().splitlines(keepends=True)
    run.dir.server_log.write_text("".join(lines[:lines.index(next(x for x in lines if "listening on" in x)) + 1]))
    assert record_log_truth(run, ADAPTER) == 0
    assert run.dir.server_truth.read_text() == before


def test_rederiving_the_join_reads_each_launch_log(tmp_path: Path) -> None:
    """`ninferkit report` rebuilds server_truth.jsonl from the raw files: the variant's rows again from its own log,
    and derived.json's inputs name that log (a change to it makes the join stale)."""
    run, first_variant = run_with_a_variant(tmp_path)
    result = rederive(run.dir)
    assert JOIN in result.changed
    truth = {entry["request_uid"]: entry for entry in read_jsonl(run.dir.server_truth)}
    rows = [json.loads(line) for line in run.dir.requests.read_text().splitlines()]
    for row in rows:
        assert truth[row["request_uid"]].get("server_request_id") == row["expected_request_id"], row["request_uid"]
    inputs = json.loads((run.dir.path / "derived.json").read_text())["files"]
    assert any(f"variants/{VARIANT}/logs/server.log" in entry["inputs"] for entry in inputs.values())


def test_with_a_request_log_each_launch_keeps_its_own_copy_and_joins_its_rows(tmp_path: Path) -> None:
    """With `serve.request_log_jsonl` (the capture's run set it) every launch appends to the one file the profile
    names (`--request-log-jsonl appends`, the engine's --help): each launch's folder keeps its copy of it, and each
    launch's rows join the requests the capture's own join found."""
    named = CAPTURE / "engine-request-log.jsonl"
    run, _ = run_with_a_variant(tmp_path, (f"serve.request_log_jsonl={named}",))
    assert record_log_truth(run, ADAPTER) > 0
    copy = run.dir.variant(VARIANT).engine_request_log
    assert copy.read_bytes() == named.read_bytes() == run.dir.engine_request_log.read_bytes()
    truth = {entry["request_uid"]: entry for entry in read_jsonl(run.dir.server_truth)}
    rows = [json.loads(line) for line in run.dir.requests.read_text().splitlines()]
    assert sum(row["cell"].get("variant") == VARIANT for row in rows) >= 10
    for row in rows:
        entry = truth[row["request_uid"]]
        assert entry.get("server_request_id") == row["expected_request_id"], row["request_uid"]
        assert entry.get("server_join") is None or entry["server_source"] == "request_log"


def test_rederiving_after_a_relaunch_joins_the_first_launch_rows_to_its_kept_log(tmp_path: Path) -> None:
    """The base started again after the variants (steps/sweeps.py) moves its first launch's log aside as
    logs/server.1.log (server.keep_earlier_log) and writes a new logs/server.log, which holds only the startup
    lines: no request of the first launch is in it. Re-derived from the raw files with no join recorded, every row
    still finds the request the captured log gave it (the base's from server.1.log, the variant's from its own
    log), and derived.json's inputs hash server.1.log, so a change to it makes the join stale."""
    run, _ = run_with_a_variant(tmp_path)
    startup = run.dir.server_log.read_text().splitlines(keepends=True)
    startup = startup[:startup.index(next(x for x in startup if "listening on" in x)) + 1]
    assert keep_earlier_log(run.dir.server_log) == run.dir.logs / "server.1.log"
    run.dir.server_log.write_text("".join(startup))  # the relaunched server's log
    assert run.dir.server_logs() == [run.dir.logs / "server.1.log", run.dir.server_log]
    assert not run.dir.server_truth.exists()

    assert JOIN in rederive(run.dir).changed
    truth = {entry["request_uid"]: entry for entry in read_jsonl(run.dir.server_truth)}
    rows = [json.loads(line) for line in run.dir.requests.read_text().splitlines()]
    on_base = [row for row in rows if row["cell"].get("variant") != VARIANT]
    assert len(on_base) >= 10 and sum(row["expected_request_id"] is not None for row in on_base) >= 10
    for row in rows:
        assert truth[row["request_uid"]].get("server_request_id") == row["expected_request_id"], row["request_uid"]
    kept = run.dir.logs / "server.1.log"
    inputs = json.loads((run.dir.path / "derived.json").read_text())["files"][JOIN]["inputs"]
    assert inputs["logs/server.1.log"] == hashlib.sha256(kept.read_bytes()).hexdigest()
    assert inputs["logs/server.log"] == hashlib.sha256(run.dir.server_log.read_bytes()).hexdigest()
