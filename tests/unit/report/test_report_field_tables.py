"""Every table of field report 000 (§0–§2.7) held by its columns against the post ninferkit writes.

Data: the recorded live NInfer run tests/data/ninfer_live/g1-h200-v100flags/ (a copy of
shared/ninfer-live/g1-h200-v100flags: its README.md), with its tables rebuilt by the sweeps step's own table
code, and the published H200 example docs/examples/h200-llamacpp/ (llama-server), each copied to tmp_path
and written there. Report 000's tables are in tests/data/seeds/000_77605b501239fca0.txt; below, each is
named by its section with the columns it has, as the post's header that holds the same number (or the
line that says which plan would fill it where the run has no data for it).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from ninferkit.report import write_report
from ninferkit.report.compare import compare_runs
from ninferkit.report.data import RunData, load_run
from ninferkit.report.document import Table
from ninferkit.report.field_tables import decode_windows, tasks_by_depth
from ninferkit.report.fmt import number
from ninferkit.report.views import sweep_view
from ninferkit.rundir.runs import RunDir
from ninferkit.rundir.servings import run_servings
from ninferkit.sweeps.kinds import kinds
from ninferkit.sweeps.tables import ab_table, counted_rows, latest_outcomes, save_tables, sweep_table
from tests.conftest import DATA, REPO, whole

LIVE = DATA / "ninfer_live" / "g1-h200-v100flags"
EXAMPLE = REPO / "docs" / "examples" / "h200-llamacpp"
SEED_000 = DATA / "seeds" / "000_77605b501239fca0.txt"

# Report 000's tables: section -> (the report's own header words, the post's headers that hold those numbers,
# or the line the post writes instead where the run has no data for the table).
REPORT_000: dict[str, tuple[tuple[str, ...], tuple[str, ...], str | None]] = {
    "0": (("项", "值"), ("fact", "value"), None),
    "2.1": (("目标上下文", "prompt token", "prefill tok/s", "TTFT", "decode tok/s", "MTP 接受率"),
            ("prompt tokens", "prompt tokens (measured)", "prefill, tok/s (server)",
             "TTFT, s (server: prompt time, without queueing)", "decode, tok/s (server)",
             "acceptance (server): accepted / drafted"), None),
    "2.3": (("任务", "输出 token", "decode / MTP"), ("task", "output tokens", "decode tok/s (server) / acceptance"),
            None),
    "2.4a": (("路", "prompt token", "TTFT（服务端）", "其中排队", "prefill tok/s", "输出", "wall"),
             ("lane", "prompt tokens", "prompt time, s (server)", "queued, s (server)", "TTFT incl. queue, s (engine)",
              "prefill tok/s (server)", "output tokens", "wall, s (client)"),
             "lanes: no cell ran two or more requests at once"),
    "2.4b": (("batch", "聚合 decode tok/s", "相对 batch=1"),
             ("batch (engine)", "aggregate decode tok/s (engine)", "against batch 1"), "batching: no table,"),
    "2.4c": (("服务端并发", "客户端路数", "单路端到端", "聚合端到端", "加速比"),
             ("server slots", "client lanes", "per lane, tok/s (client)", "aggregate, tok/s (client)", "speed-up"),
             None),
    "2.5": (("groupwise-int", "nvfp4"), ("KV dtype", "slots", "largest pool, tokens"), None),
    "2.6": (("场景", "prompt token", "命中前缀 token", "TTFT"),
            ("scenario", "prompt tokens", "hit tokens", "cached share", "TTFT, s (client)"), None),
    "2.7": (("项", "值"), ("power median, W", "power max, W", "SM clock median, MHz", "SM clock max, MHz",
                          "idle: temperature, °C / power median, W"), None),
}


NO_ENGINE_QUEUE = ("prompt time, s (server)", "TTFT incl. queue, s (engine)", "queued, s (server)")
"""§2.4(a)'s engine columns that llama-server's record leaves empty for the example's lanes: a column no row has a
value in is not written (issue 38)."""
SPECULATIVE = "acceptance (server): accepted / drafted"
"""Shown where the run decoded speculatively (the live run: MTP); the example's llama-server drafts nothing."""
WITHOUT_ACCEPTANCE = {"decode tok/s (server) / acceptance": "decode tok/s (server)"}
"""§2.3's header where no task drafted (the example): decode alone, never a column of "/ —"."""


def tables_of(text: str) -> list[tuple[str, list[str]]]:
    """(caption, header) of every pipe table of a Markdown write-up; a header value moved into the caption
    ("in every cell: acceptance (server) …") counts as a column."""
    found = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("|") and index + 1 < len(lines) and lines[index + 1].startswith("|---"):
            caption = next((lines[j] for j in range(index - 1, max(index - 4, -1), -1) if lines[j].startswith("*")), "")
            found.append((caption, [cell.strip() for cell in line.strip("|").split("|")]))
    return found


def has_columns(text: str, columns: tuple[str, ...]) -> bool:
    for caption, header in tables_of(text):
        shown = set(header) | {column for column in columns if f" {column} " in caption or f"{column}:" in caption}
        if all(any(column == h or h.endswith(column) for h in shown) for column in columns):
            return True
    return False


def live_post(tmp_path: Path) -> str:
    run_dir = tmp_path / "live"
    shutil.copytree(LIVE, run_dir)
    folder = RunDir(run_dir)
    outcomes = latest_outcomes(folder, run_servings(folder))
    rows, telemetry = counted_rows(folder, outcomes), folder.read_telemetry()
    save_tables(folder, {kind.name: sweep_table(kind.name, rows, outcomes, telemetry, "mtp") for kind in kinds()})
    return whole(write_report(run_dir))


def example_post(tmp_path: Path) -> str:
    run_dir = tmp_path / "example"
    shutil.copytree(EXAMPLE, run_dir, ignore=shutil.ignore_patterns("report"))
    return whole(write_report(run_dir))


@pytest.fixture(scope="module")
def posts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    where = tmp_path_factory.mktemp("posts")
    return {"live": live_post(where), "example": example_post(where)}


def test_the_report_has_the_tables_named_here() -> None:
    seed = SEED_000.read_text()
    for section, (words, _, _) in REPORT_000.items():
        assert all(word in seed for word in words), section
    assert "2.2 nvfp4 vs groupwise-int" in seed and "（d）服务端日志里的两个并发现象（原文）" in seed


@pytest.mark.parametrize("post", ["live", "example"])
@pytest.mark.parametrize("section", REPORT_000)
def test_each_table_of_report_000_has_its_columns_in_the_post(posts: dict[str, str], post: str, section: str) -> None:
    _, columns, instead = REPORT_000[section]
    text = posts[post]
    if post == "example":
        columns = tuple(WITHOUT_ACCEPTANCE.get(column, column) for column in columns
                        if column not in (SPECULATIVE, *NO_ENGINE_QUEUE))
    assert has_columns(text, columns) or (instead is not None and instead in text), (section, post)


def test_the_live_post_shows_the_engines_numbers(posts: dict[str, str]) -> None:
    text = posts["live"]
    # §2.1: the engine's prompt time (69.02 s at 126,976 tokens, the client saw 69.1), the counts beside 0%; rates to
    # 0.1 tok/s and the prompt time to 0.01 s, as the report prints them (1,019.0 tok/s, 250.27 s)
    assert "| 126,976 | 126,976 | 1 | 1,839.8 | 69.02 | 33.7 |" in text and "0% (0 / 87)" in text
    # §2.4(a): the second-admitted lane's 51.45 s queue behind the first one's prefill, both lanes' prompt time (the
    # report's TTFT), and the engine's TTFT with the queue in it (seed 000's "8m8.7s"; seed 003's second request:
    # queue + own prefill) in its own column, then the engine's decode; a time under 0.1 s to 0.001 s (the first
    # lane's 0.048 s); the cell named in the row
    assert re.search(r"\| 2 clients at 100,000 prompt tokens \| L1 \(client 1\) \| 100,000 \| 0\.048 \| 50\.51 \| "
                     r"50\.56 \| 1,979\.8 \| 35\.0 \| 32 \| 79\.01 \(1 m 19\.0 s\) \|", text)
    assert re.search(r"\| 2 clients at 100,000 prompt tokens \| L2 \(client 0\) \| 100,000 \| 51\.45 \| 50\.51 \| "
                     r"101\.95 \(1 m 42\.0 s\) \| 1,979\.9 \| 35\.0 \| 32 \| 102\.85 \(1 m 42\.8 s\) \|", text)
    # a stalled stream is shown with the client's rate beside the engine's
    assert "| 35.0; client 18.0 |" in text and "decode 1.09 tok/s at the client, 35.02 tok/s by the engine" in text
    # §2.6: the engine's hit count where the chat usage has none; the Messages usage's 0 is named beside it
    assert "| identical_resend | chat | 1 | 16,384 | 16,378 (engine) | 100% |" in text
    assert "16,378 (engine (usage: 0))" in text
    # §2.4(d): the engine's own lines, as printed
    assert "throughput interval=5.000s prefill=819.2tok/s decode=0.0tok/s running=1 prefilling=1 decode_ready=0 " \
           "waiting=1" in text
    # §2.7: idle beside load
    assert "37.0 – 53.0 / 212 (155 samples)" in text
    # §2.3: each task's prompt time (the server's, 0.01 s) beside its decode and acceptance
    assert "| coding | 16 | 3.37 | 41.1 / 0% |" in text
    assert "after 8,192 document tokens: prompt time, s (server)" in text
    # 004: no cell had a window of decode alone (its 32-token outputs end before one fills), so no peak sets off an
    # average: no table of "0 / 1" rows, one line that says why instead of a number 25 times below the request's rate
    assert "| base (mtp 3, 2 slots) | 2 clients on 2 slots: aggregate output (client)" not in text
    assert ("Average decode against the best engine window: No table: 6 cells decoded only in engine windows that "
            "also prefilled, so no peak of decode alone sets off their average") in text


def test_the_examples_ab_reads_like_2_2(tmp_path: Path) -> None:
    """Seed 000 §2.2: per shape, each run's prefill / decode / acceptance side by side, and whether each move
    is inside the run-to-run spread (the example's A/B: the default prompt cache against --cache-ram 0)."""
    document = compare_runs([EXAMPLE / "cache-ram-default", EXAMPLE]).document()
    section = next(s for s in document.sections if s.title == "Side by side")
    table = section.blocks[0]
    sides = ("cache-ram-default: prefill / decode / acceptance", "run: prefill / decode / acceptance")
    assert table.columns[1:3] == sides  # type: ignore[union-attr]
    rows = {row[0]: row for row in table.rows}  # type: ignore[union-attr]
    assert list(rows)[:2] == ["context: target_prompt_tokens=1024, api=chat",
                              "context: target_prompt_tokens=4096, api=chat"]  # in numeric order
    first = rows["context: target_prompt_tokens=1024, api=chat"]
    assert first[1:3] == ("22,341 / 233 / —", "23,234 / 228 / —")
    assert "prefill +4.0% (inside run-to-run spread)" in first[3] and "decode -2.2% (worse, beyond spread)" in first[3]


def test_the_ab_table_reads_like_2_2() -> None:
    """Seed 000 §2.2's layout of tables/ab.csv (sweeps.ab), not the raw frame: per cell, each side's prefill / decode
    / MTP, and B over A judged against the report's ±3%. The table is the sweeps step's own ab_table of the recorded
    example pair (the default prompt cache as A, --cache-ram 0 as B)."""
    frame = ab_table(RunDir(EXAMPLE / "cache-ram-default"), RunDir(EXAMPLE))
    [table] = sweep_view("ab", frame)
    assert isinstance(table, Table)
    assert table.columns == ("cell", "A, baseline: prefill / decode tok/s / MTP",
                             "B, this run: prefill / decode tok/s / MTP", "B / A")
    assert not any("_a" in column or "hash" in column or "cell_id" in column for column in table.columns)
    assert len(table.rows) == len(frame) > 0
    for row, raw in zip(table.rows, frame.to_dict("records"), strict=True):
        assert row[0] == f"{raw['sweep']}: {raw['cell']}"
        for side, shown in (("a", row[1]), ("b", row[2])):  # llama-server drafts nothing here: no acceptance
            prefill, decode = raw[f"prefill_tok_s_server_{side}"], raw[f"decode_tok_s_server_{side}"]
            assert shown == f"{number(prefill, 1)} / {number(decode, 1)} / —"  # 0.1 tok/s, as §2.2 prints
        for words, metric in (("prefill", "prefill_tok_s_server"), ("decode", "decode_tok_s_server")):
            ratio = raw[f"{metric}_ratio_b_over_a"]
            said = "inside" if abs(ratio - 1) <= 0.03 else "beyond"
            assert f"{words} {ratio:.2f}x ({said} ±3%)" in row[3]
    said = " ".join(row[3] for row in table.rows)
    assert "(inside ±3%)" in said and "(beyond ±3%)" in said  # the recorded pair has moves of both kinds


LIVE_2X120K = DATA / "ninfer_live" / "g1-h200-2x120k" / "run"


def test_tasks_at_their_own_depths_name_their_document_in_the_row(tmp_path: Path) -> None:
    """Seed 000 §2.3's layout where the tasks did not share their depths (`sweeps.tasks.task_depths`: its summary
    after the document, the others alone): one row per task and depth, the document named in the task's row as the
    report's "摘要（5.9K 文档）" does, never a half-empty column per depth. Data: two recorded runs of the same engine
    build and artifact, whose tasks ran at different depths: g1-h200-2x120k's coding and chit-chat at 4,096 document
    tokens, and g1-h200-v100flags' summary at 8,192 (their tables/tasks.csv as the sweeps step wrote them)."""
    short = pd.read_csv(LIVE_2X120K / "tables" / "tasks.csv")
    long = pd.read_csv(LIVE / "tables" / "tasks.csv")
    tasks = pd.concat([short, long[long["task"] == "summarization"]], ignore_index=True)
    [table] = tasks_by_depth(RunData(dir=RunDir(tmp_path), tables={"tasks": tasks}))
    assert isinstance(table, Table)
    assert table.columns == ("task", "output tokens", "prompt time, s (server)", "decode tok/s (server) / acceptance")
    summary = long[long["task"] == "summarization"].iloc[0]
    assert table.rows == (
        ("coding (after 4,096 document tokens)", "16", "1.82", "41.7 / 0%"),
        ("chit_chat (after 4,096 document tokens)", "16", "1.67", "41.7 / 0%"),
        ("summarization (after 8,192 document tokens)", "16", f"{summary['prompt_s_server_median']:.2f}",
         f"{summary['decode_tok_s_server_median']:.1f} / 0%"))


def test_tasks_at_the_same_depths_keep_a_column_pair_per_depth(tmp_path: Path) -> None:
    """Every task at every depth (the recorded v100flags run: eight tasks at 8,192): the report's columns per depth,
    each the server's prompt time and the decode / acceptance, one row per task."""
    tasks = pd.read_csv(LIVE / "tables" / "tasks.csv")
    blocks = tasks_by_depth(RunData(dir=RunDir(tmp_path), tables={"tasks": tasks}))
    table = blocks[0]
    assert isinstance(table, Table)
    assert table.columns[2:] == ("after 8,192 document tokens: prompt time, s (server)",
                                 "after 8,192 document tokens: decode tok/s (server) / acceptance")
    assert [row[0] for row in table.rows] == list(tasks["task"])
    for row, (_, raw) in zip(table.rows, tasks.iterrows(), strict=True):
        assert row[2] == f"{raw['prompt_s_server_median']:.2f}"


def test_the_abs_concurrent_cells_give_the_batch_as_2_2_prints_it() -> None:
    """Seed 000 §2.2's "双并发（8K，均缓存命中）" row prints each side's batch: "批 wall 3.84 s / 188 tok / 48.9
    tok/s". The A/B of two recorded runs of the same profile (tests/data/run_dirs/embedded-2 as A, embedded-1 as B,
    the embedded default's real runs: run_dirs/README.md) pairs their concurrency cells; each side's wall and aggregate
    equal what that run's own sweeps step wrote in its tables/concurrency.csv, and the view prints them."""
    a_side, b_side = DATA / "run_dirs" / "embedded-2", DATA / "run_dirs" / "embedded-1"
    frame = ab_table(RunDir(a_side), RunDir(b_side))
    paired = frame[frame["sweep"] == "concurrency"]
    assert len(paired) == 3
    for label, run_dir in (("a", a_side), ("b", b_side)):
        own = pd.read_csv(run_dir / "tables" / "concurrency.csv")
        for _, row in paired.iterrows():
            level = int(row["cell"].split("concurrency=")[1].split()[0])
            recorded = own[own["concurrency"] == level].iloc[0]
            assert row[f"wall_s_{label}"] == pytest.approx(recorded["wall_s"])
            assert row[f"aggregate_output_tok_s_client_{label}"] == pytest.approx(
                recorded["aggregate_output_tok_s_client"])
            assert row[f"output_tokens_{label}"] == level * 2 * 32  # 2 requests a client, 32 tokens each
    assert frame[frame["sweep"] != "concurrency"]["wall_s_a"].isna().all()  # one request at a time: no batch
    [table] = sweep_view("ab", frame)
    rows = {row[0]: row for row in table.rows}  # type: ignore[union-attr]
    two = rows["concurrency: concurrency=2 requests_per_client=2 prompt_tokens_target=256 api=chat"]
    assert two[1].endswith("; batch wall 6.76 s / 128 tok / 18.9 tok/s")
    assert two[2].endswith("; batch wall 2.02 s / 128 tok / 63.4 tok/s")
    assert "aggregate 3.35x (beyond ±3%)" in two[3]
    assert "批 wall / tok / tok/s" in table.caption  # type: ignore[union-attr]
    context = next(row for label, row in rows.items() if label.startswith("context"))
    assert "batch" not in context[1] and "aggregate" not in context[3]


def test_seed_004s_table_prints_averages_to_two_decimals_and_the_peak_to_one(tmp_path: Path) -> None:
    """Seed 004 §四 (config / mode / average decode / 5 s peak: 151.45 and 176.0). Data: the recorded run
    g1-h200-2x120k with the tables its sweeps step wrote: the concurrent cell's aggregate (0.4766 tok/s, client) and
    its engine windows (best 1.2, mean 1.033 over 6, the engine's 5 s lines)."""
    seed = (DATA / "seeds" / "004_976b9d3921b6cb81.txt").read_text()
    assert "| 配置 | 模式 | 平均 decode (tok/s) | 5 秒峰值 (tok/s) |" in seed and "| 151.45 | 176.0 |" in seed
    run_dir = tmp_path / "run"
    shutil.copytree(LIVE_2X120K, run_dir)
    [table] = decode_windows(load_run(run_dir))
    assert isinstance(table, Table)
    assert table.columns[:4] == ("config", "mode", "average decode, tok/s", "5 s peak, tok/s (engine)")
    assert table.rows[0] == ("base (mtp 3, 2 slots)", "2 clients on 2 slots: aggregate output (client)", "0.48",
                             "1.2", "1.03", "6 / —")  # the table predates the count of mixed windows: unknown
    assert all(row[1].endswith("decode per request (server)") and re.fullmatch(r"\d+\.\d\d", row[2])
               for row in table.rows[1:])


def test_the_lane_caption_says_what_its_columns_are_and_only_those(posts: dict[str, str]) -> None:
    """§2.4(a): llama-server's record has each lane's prompt time and decode but no queue wait, so the example's lane
    table has no queue or TTFT-with-queue column, its caption does not describe them, and its rows are in client
    order, not "in the order the engine admitted them" (which only the queue says); the live run's has all three."""
    example, live = posts["example"], posts["live"]
    [(caption, header)] = [(c, h) for c, h in tables_of(example) if "lane" in h]
    assert "queued, s (server)" not in header and "TTFT incl. queue, s (engine)" not in header
    assert "Queued is" not in caption and "TTFT incl. queue" not in caption
    assert "Prompt time is the field reports' TTFT" in caption and "Decode is the engine's" in caption
    assert "Requests at once, lane by lane: each lane's first request, by client (the engine recorded no queue " \
           "wait)." in example
    [(caption, header)] = [(c, h) for c, h in tables_of(live) if "lane" in h]
    assert {"queued, s (server)", "TTFT incl. queue, s (engine)"} <= set(header)
    assert "Queued is the wait before the lane's own prefill (" in caption and "TTFT incl. queue is" in caption
    assert "in the order the engine admitted them (its queue)." in live
