"""`sweeps.concurrency.cached` against the live embedded llama-server: seed 000 §2.2's two concurrent 8K requests
served from the prefix cache, at a small size. The warm-up sends the one prompt every lane then sends. Whether a lane
finds it cached is the engine's to decide, and each row records the engine's own count: NInfer's pool is shared
(seed 000 §2.2: both lanes hit), while llama-server keeps a slot's cache to that slot, so here the lane on the
warm-up's slot finds the prompt cached and the lane on the other slot prefills it afresh (found on this machine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ninferkit import steps
from ninferkit.report.data import load_run
from ninferkit.report.document import Table
from ninferkit.report.field_tables import concurrency_blocks
from ninferkit.rundir.runs import open_run, read_jsonl
from ninferkit.server import process as server
from ninferkit.steps.sweeps import sweeps
from ninferkit.sweeps.tables import ab_table
from tests.conftest import LOCAL_CPU, free_port

pytestmark = pytest.mark.live

PROMPT = 256


def test_every_lane_of_a_cached_cell_is_served_from_the_prefix_cache(tmp_path: Path, llama_server: Path) -> None:
    run = open_run(LOCAL_CPU, tmp_path / "cached", [
        f"serve.port={free_port()}", "sweeps.concurrency.levels=[2]", "sweeps.concurrency.requests_per_client=1",
        f"sweeps.concurrency.prompt_tokens={PROMPT}", "sweeps.concurrency.output_tokens=4",
        "sweeps.concurrency.warmup=1", "sweeps.concurrency.cached=true"])
    steps.launch(run, progress=False)
    try:
        table = sweeps(run, only="concurrency", progress=False)["concurrency"]
    finally:
        server.stop(run.dir)
    assert list(table["n_ok"]) == [2]
    rows = [row for row in read_jsonl(run.dir.requests) if row["sweep"] == "concurrency"]
    assert all(row["cell"]["cached"] is True for row in rows)
    warm = [row for row in rows if row["warmup"]]
    lanes = [row for row in rows if not row["warmup"]]
    assert len(warm) == 1 and {row["client_index"] for row in lanes} == {0, 1}
    # the warm-up found nothing of its prompt cached (a fresh salt at its front); the lane on its slot found nearly
    # all of it, which a cold cell's lanes never do (each prompt has its own salt: only the chat template's tokens)
    assert warm[0]["cached_tokens_server"] < PROMPT // 2
    hits = sorted(row["cached_tokens_server"] for row in lanes)
    assert hits[-1] >= PROMPT * 9 // 10, hits
    # the write-up and the A/B say the cell's prompt was a cached one (its table keys alone read like a cold cell's)
    [slots] = [block for block in concurrency_blocks(load_run(run.dir.path))
               if isinstance(block, Table) and "server slots" in block.columns]
    assert [row[2] for row in slots.rows] == [f"{PROMPT} (cached)"]
    assert "cached=True" in ab_table(run.dir, run.dir)["cell"].iloc[0]
