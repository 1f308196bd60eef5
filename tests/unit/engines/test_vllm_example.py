"""The published vLLM run (docs/examples/h200-vllm/, its README says how it was made on an H200): the write-up
and the A/B regenerate from its raw files, and their figures trace to them (no GPU needed here)."""

from __future__ import annotations

import gzip
import json
import shutil
import statistics
from pathlib import Path

import pandas as pd

from ninferkit.cli import main
from ninferkit.report import write_report
from tests.conftest import REPO, assert_regenerates

EXAMPLE = REPO / "docs" / "examples" / "h200-vllm"


def unpacked(tmp_path: Path) -> Path:
    """The example as the H200 wrote it: a copy with its two gzip'd files restored."""
    run = tmp_path / "h200-vllm"
    shutil.copytree(EXAMPLE, run, ignore=shutil.ignore_patterns("report", "compare"))
    for packed in run.rglob("*.gz"):
        packed.with_suffix("").write_bytes(gzip.decompress(packed.read_bytes()))
        packed.unlink()
    return run


def test_the_published_write_up_regenerates_from_the_raw_files(tmp_path: Path) -> None:
    run = unpacked(tmp_path)
    write_report(run)
    text = "\n".join((run / "report" / f"{stem}.md").read_text() for stem in ("index", "appendix"))
    rows = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    context = [r for r in rows if r["sweep"] == "context" and r["status"] == "ok" and not r["warmup"]]
    for length in (256, 2_048, 8_000):
        decode = [r["decode_tok_s_server"] for r in context if r["cell"]["target_prompt_tokens"] == length]
        assert f"| {length:,} | {statistics.median(decode):,.0f} (" in text, length
    capacity = json.loads((run / "capacity.json").read_text())
    low, high = capacity["max_kv_tokens_interval"]
    assert f"| Memory: largest KV pool (capacity fit) | tokens | {low:,} | {low:,} – {high:,} |" in text
    assert "| engine backend | none: vllm runs as installed" in text and "| None |" not in text
    # vLLM's prompt time stays at 17-21 ms from 256 to 8,000 tokens: the headline says prefill is not measured, and
    # the Benchmarks table prints no rate beside it (it printed 462,229 tok/s at 8,000 tokens)
    prompt = {length: statistics.median(r["prompt_s_server"] for r in context
                                        if r["cell"]["target_prompt_tokens"] == length) for length in (256, 8_000)}
    assert prompt[8_000] < 2 * prompt[256]
    assert "| prefill | not measured: the prompt time is a fixed overhead" in text
    assert "No prefill rate: the engine's prompt time stays between" in text and "462,229" not in text
    assert "| 43.5 |" not in text  # a median between two output-token counts shows the counts
    # vLLM attributes no numbers to a request while another is in flight: the lanes of its concurrent cells would
    # show only the client's wall, so no lane table (it was 16 rows of it), one line saying why
    post = (run / "report" / "index.md").read_text()
    assert "Requests at once, lane by lane" not in post and "| 8 clients at 1,024 prompt tokens | L1" not in post
    assert ("lanes: no table: no lane of 8 clients at 1,024 prompt tokens, 32 clients at 1,024 prompt tokens has "
            "the engine's own numbers (another request was in flight at the same time") in text
    # the speculation table: accepted / drafted as the engine's counts summed over each task's requests (one form,
    # never a range on one side: "136 – 191 / 270"), decode to 0.1 tok/s as the task tables print the same figure
    tasks = [r for r in rows if r["sweep"] == "tasks" and r["status"] == "ok" and not r["warmup"]
             and r["cell"]["task"] == "summarization" and r["cell"].get("speculation") != "off"]
    accepted, drafted = (sum(r[f"{name}_tokens_server"] for r in tasks) for name in ("accepted", "drafted"))
    decode = statistics.median(r["decode_tok_s_server"] for r in tasks)
    share = f"{100 * accepted / drafted:.0f}%"
    assert f"| summarization | 512 | creative | ngram | {accepted:,} / {drafted:,} | {share} | {decode:.1f} | 63.5 |" \
        in text
    assert "136 – 191" not in text and f"| {decode:.1f} / " in text  # the coding-and-agent table: the same decode
    # capacity: a one-sided interval in words, and a setting whose two readings are one pool is one row
    assert "–?" not in text and "| engine default | 1 | 2,048 | starts and full | 2,048 | yes | at least 137.23 | " \
        "leftover at least 6,395,280 tokens (137.23 GiB) |" in text
    assert_regenerates(EXAMPLE, run, "gunzip the example's two files (its README), run `ninferkit report "
                       "docs/examples/h200-vllm` and commit report/")


def test_the_ab_against_llama_server_regenerates(tmp_path: Path) -> None:
    run = unpacked(tmp_path)
    out = tmp_path / "compare"
    assert main(["compare", str(run / "h200-llamacpp-smollm2"), str(run), "--out", str(out)]) == 0
    assert (out / "table.csv").read_text() == (EXAMPLE / "compare" / "table.csv").read_text()
    # Both sweeps ran each task with speculation on and off: one label per cell, so no row of the per-cell
    # delta table stands twice and the off side (no drafts) carries no acceptance of the on side's.
    table = pd.read_csv(out / "table.csv")
    assert table.groupby(["candidate", "sweep", "cell"])["cell_id"].nunique().max() == 1
    assert not table.duplicated(["candidate", "sweep", "cell", "metric"]).any()
    off = table[table["cell"].str.contains("speculation=off")]
    assert off["cell"].nunique() == 8 and off["acceptance_a"].isna().all() and off["acceptance_b"].isna().all()
    assert "| tasks: task=reasoning, context_depth=512, speculation=off, api=chat |" in (out / "index.md").read_text()
    # the post's rule holds in compare too: vLLM's context prefill is a fixed overhead, so no cell says it got better
    # (the concurrency and prefix-reuse cells' prompts are no longer than the context sweep's: the same overhead)
    prefill = table[table["metric"] == "prefill_tok_s_server"]
    assert set(prefill["sweep"]) >= {"context", "concurrency", "prefix_reuse"}
    # and where either engine served most of the prompt from its cache, the prompt time is over the few tokens left
    # (llama-server's identical resend: 2,077 of 2,078 cached, 2 ms, "453 tok/s"): no rate on either side either
    cached = prefill[prefill["from_cache_a"].fillna(False).astype(bool)]
    assert set(cached["cell"]) == {f"scenario={name}, api=chat" for name in
                                   ("identical_resend", "max_tokens_changed", "sentence_appended")}
    assert set(cached["verdict"]) == {"prompt mostly from the cache: no prefill rate"}
    assert set(prefill.drop(cached.index)["verdict"]) == {"prompt time is a fixed overhead: no prefill rate"}
    shown = (out / "index.md").read_text()
    assert not prefill["comparable"].any() and "+811.7%" not in shown and "prefill +" not in shown
    assert "| 50,697 / 669 / 100% | — (overhead) / 117 / 59% |" in shown
    assert ("| prefix_reuse: scenario=identical_resend, api=chat | — (cache hit) / 672 / — | — (cache hit) / 163 / "
            "81% |") in shown
    assert "| 453 |" not in shown and "453 /" not in shown  # the resend's division is in table.csv only


def test_client_and_vllms_own_decode_agree_on_requests_that_ran_alone() -> None:
    """The README's figure: client decode over vLLM's TPOT-histogram decode, per request vLLM's /metrics
    deltas could attribute (server_source metrics_delta), at the median within 1%."""
    rows = [json.loads(line) for line in (EXAMPLE / "requests.jsonl").read_text().splitlines()]
    alone = [r for r in rows if r["status"] == "ok" and not r["warmup"] and r.get("decode_tok_s_server")
             and r.get("decode_tok_s_client") and r.get("server_source") == "metrics_delta"]
    ratios = [r["decode_tok_s_client"] / r["decode_tok_s_server"] for r in alone]
    assert len(ratios) >= 50 and abs(statistics.median(ratios) - 1) < 0.01


def test_the_search_answer_is_a_pool_that_served_beside_one_that_did_not() -> None:
    """h200-vllm-search/ (the capacity search against vLLM 0.26.0 on an H200): the answer is a launch that served,
    the next pool up a launch that started and did not, each read from its own server log, and vLLM's own figure
    for filling the GPU (its launches at 0.4, less its 150 MiB buffer) lies below the answer."""
    search_run = EXAMPLE / "h200-vllm-search"
    record = json.loads((search_run / "capacity.json").read_text())
    (found,) = record["searches"]
    steps = {step["kv_tokens"]: step for step in found["results"]}
    answer = found["answer_kv_tokens"]
    above = min(pool for pool, step in steps.items() if not step["fits"] and pool > answer)
    assert steps[answer]["served"] and found["verified_by_request"]
    assert not steps[above]["served"] and steps[above]["started"]
    log_of = {pool: (REPO / step["log"].replace("/tmp/runs/", "docs/examples/h200-vllm/")).read_text()
              for pool, step in steps.items() if step["log"]}
    assert f"GPU KV cache size: {answer:,} tokens" in log_of[answer]
    assert "CUDA out of memory" in log_of[above] and "Application startup complete" not in log_of[above]
    suggestions = [int(line.split("`--kv-cache-memory=")[2].split("`")[0]) for text in log_of.values()
                   for line in text.splitlines() if "to fully utilize gpu memory" in line]
    assert suggestions and max(suggestions) // record["bytes_per_token"] < answer
