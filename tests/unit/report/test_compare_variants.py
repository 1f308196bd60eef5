"""`ninferkit compare` of runs with variants (issue 39): a variant pairs with the other run's variant of its name,
and a variant only one run has is said to be.

Data: tests/data/run_dirs/embedded-variants/ (base, `ub32`, `spec-off`) and embedded-variants-search/ (base and
`slots-1/2/4/8`), real llama-server runs of the embedded default (README there). A run compared with its own copy
pairs every launch's cells with a difference of zero; the medians are checked against requests.jsonl's raw lines.
"""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

from ninferkit.report.compare import compare_runs
from tests.conftest import DATA

AB = DATA / "run_dirs" / "embedded-variants"
SEARCH = DATA / "run_dirs" / "embedded-variants-search"


def _median(variant: str, concurrency: int, metric: str) -> float:
    """The median of the cell's repeats (sweeps.repeats = 2), each the median over its repetitions' medians."""
    rows = [json.loads(line) for line in (AB / "requests.jsonl").read_text().splitlines()]
    by: dict[int, dict[int, list[float]]] = {}
    for row in rows:
        if (row["status"] == "ok" and not row.get("warmup") and row["cell"].get("variant", "base") == variant
                and row["cell"]["concurrency"] == concurrency and row.get(metric) is not None):
            by.setdefault(row["cell"].get("repeat", 0), {}).setdefault(row["repetition"], []).append(row[metric])
    return statistics.median(statistics.median(statistics.median(values) for values in repeat.values())
                             for repeat in by.values())


def test_each_variant_pairs_with_its_namesake(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(AB, copy)
    comparison = compare_runs([AB, copy])
    table = comparison.table
    assert set(table["variant"]) == {"base", "ub32", "spec-off"} and not comparison.unpaired
    assert (table["delta"] == 0).all()
    for name in ("ub32", "spec-off"):
        own = table[(table["variant"] == name) & (table["metric"] == "decode_tok_s_server")]
        assert all(cell.startswith(f"variant {name}: ") for cell in own["cell"])
        for _, row in own.iterrows():
            level = int(row["cell"].split("concurrency=")[1].split(",")[0])
            assert row["median_a"] == _median(name, level, "decode_tok_s_server")
    assert any(f"variant {name} against the baseline's: same serving" in line for line in comparison.serving
               for name in ("ub32", "spec-off"))


def test_a_variant_only_one_run_has_is_named_not_paired() -> None:
    comparison = compare_runs([AB, SEARCH])
    ub32 = [line for line in comparison.unpaired if "variant ub32:" in line]
    assert len(ub32) == 2 and all("whose variant ub32 run2 does not have" in line for line in ub32)
    assert any("variant slots-4 only in run2 (run1 has no variant of that name)" in line
               for line in comparison.serving)
    assert comparison.table.empty or "ub32" not in set(comparison.table["variant"])


def _acceptance(variant: str, concurrency: int) -> float | None:
    """A cell's acceptance over its measured rows, by hand, as the post gives it: the engine's accepted over drafted
    tokens summed over the rows where every row with a share counted both, else the median share."""
    rows = [json.loads(line) for line in (AB / "requests.jsonl").read_text().splitlines()]
    cell = [row for row in rows
            if row["status"] == "ok" and not row.get("warmup") and row["cell"].get("variant", "base") == variant
            and row["cell"]["concurrency"] == concurrency]
    found = [row["acceptance_server"] for row in cell if row.get("acceptance_server") is not None]
    counted = [row for row in cell if row.get("accepted_tokens_server") is not None
               and row.get("drafted_tokens_server") is not None]
    drafted = sum(row["drafted_tokens_server"] for row in counted)
    if counted and len(counted) >= len(found) and drafted > 0:
        return sum(row["accepted_tokens_server"] for row in counted) / drafted
    return statistics.median(found) if found else None


def test_each_launch_keeps_its_own_acceptance(tmp_path: Path) -> None:
    """spec-off drafts nothing and the base drafts n-grams: keyed by the cell's label alone, the two were pooled into
    one acceptance for both (and the variant's cells got none, so its decode was always 'comparable')."""
    copy = tmp_path / "copy"
    shutil.copytree(AB, copy)
    table = compare_runs([AB, copy]).table
    decode = table[table["metric"] == "decode_tok_s_server"]
    for _, row in decode.iterrows():
        level = int(row["cell"].split("concurrency=")[1].split(",")[0])
        expected = _acceptance(row["variant"], level)
        assert (row["acceptance_a"] is None or row["acceptance_a"] != row["acceptance_a"]) if expected is None \
            else row["acceptance_a"] == expected, (row["variant"], level, row["acceptance_a"], expected)
    base = decode[decode["variant"] == "base"]["acceptance_a"]
    assert base.notna().all() and (base > 0).all()
