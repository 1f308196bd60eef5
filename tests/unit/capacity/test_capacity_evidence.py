"""Issue 37: every launch narrows the capacity answer; nothing a launch of the run refuted is called "fits".

Data: docs/examples/h200-vllm/h200-vllm-search (a real vLLM capacity search on an H200, its README): launch 03
reserved 6,397,328 tokens at 32 x 8,192 and died at its first request (out_of_memory_at_first_use); launch 06
served 6,395,136; launch 01 served 2,514,992 at 32 x 2,048. Its recorded capacity.json (made before this
rule) gives the fit's "pool up to 6,397,328". Copied to tmp_path before `ninferkit report` rewrites it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ninferkit.capacity.evidence import launch_evidence, narrowed
from ninferkit.cli import main as cli_main
from tests.conftest import REPO

SEARCH = REPO / "docs" / "examples" / "h200-vllm" / "h200-vllm-search"
REFUTED = 6_397_328


def recorded() -> dict:
    return json.loads((SEARCH / "capacity.json").read_text())


def test_the_launches_at_each_setting() -> None:
    found = launch_evidence(recorded()["observations"])
    at_8192 = found[(None, 32, 8192)]
    assert (at_8192.served_max, at_8192.served_by, at_8192.refuted_min) == (6_395_136, "launch 06", REFUTED)
    assert "launch 03" in str(at_8192.refuted_by) and "died at first use" in str(at_8192.refuted_by)
    assert found[(None, 32, 2048)].served_max == 2_514_992 and found[(None, 32, 2048)].refuted_min is None


def test_no_row_says_a_refuted_pool_fits_and_the_interval_is_the_launches() -> None:
    fields = narrowed(recorded())
    starts = {row["context_per_slot"]: row for row in fields["decision_table"] if row["reading"] == "starts"}
    assert starts[8192]["max_pool_tokens"] == [6_395_136, REFUTED - 16]  # served .. below the refuted, one page
    assert starts[2048]["max_pool_tokens"][0] == 2_514_992  # first use unknown: only what served is sure
    for row in fields["decision_table"]:
        assert not row.get("max_pool_tokens") or row["max_pool_tokens"][0] < REFUTED
        assert "pool up to 6,397,328" not in row["verdict"] and "pool up to 6,397,280" not in row["verdict"]
    assert "not shown to serve at 6,397,328 tokens or more: launch 03" in starts[2048]["verdict"]
    assert narrowed(json.loads(json.dumps(fields))) == fields  # idempotent: a second report changes nothing


def test_report_rederives_capacity_json_and_what_fits_agrees_with_the_launches(tmp_path: Path) -> None:
    copy = tmp_path / "search"
    shutil.copytree(SEARCH, copy)
    assert cli_main(["report", str(copy)]) == 0
    written = json.loads((copy / "capacity.json").read_text())
    assert written["derived_by"]["ninferkit"] and written["narrowed_by_launches"]
    index = (copy / "report" / "index.md").read_text()
    fits = next(line for line in index.splitlines() if line.startswith("| engine default | 32 | 2,514,992"))
    assert fits.startswith("| engine default | 32 | 2,514,992 – 6,395,136 |")
