"""The capacity each variant leaves (issue 39 item 2): each variant's startup books are an observation at its own
setting, fitted with the run's other launches, and both the capacity step and the post say it.

Data: tests/data/run_dirs/embedded-variants/ (its README says how it was made: real llama-server launches of the
embedded default, the base and two variants, `ub32` with `--ubatch-size 32` and `spec-off`), copied to a scratch
folder; the capacity step runs on it with no launches of its own (fit_launches and search off), so it reads the
three launches' logs alone. The profile's `capacity.memory_budget_bytes` (256 MiB) stands in for device memory.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ninferkit.capacity.observations import Setting, from_log_file
from ninferkit.engines import get_adapter
from ninferkit.params.variants import BASE
from ninferkit.report.build import build_document
from ninferkit.report.data import load_run
from ninferkit.report.document import Table
from ninferkit.report.fmt import number
from ninferkit.report.variants import TITLE
from ninferkit.rundir.identity import variant_profile
from ninferkit.rundir.runs import Run, open_run
from ninferkit.steps.capacity import capacity
from tests.conftest import DATA, LOCAL_CPU

RECORDED = DATA / "run_dirs" / "embedded-variants"


def recorded_run(tmp_path: Path) -> Run:
    folder = tmp_path / "run"
    shutil.copytree(RECORDED, folder)
    overrides = json.loads((folder / "manifest.json").read_text())["profile_overrides"]
    return open_run(LOCAL_CPU, folder, [*overrides, "capacity.fit_launches=false", "capacity.search=false"])


def test_each_variant_launch_is_an_observation_at_its_own_setting(tmp_path: Path) -> None:
    run = recorded_run(tmp_path)
    said: list[str] = []
    record = capacity(run, say=said.append)
    assert [each.name for each in record.variants] == ["ub32", "spec-off"]
    rule = get_adapter("llama_server").capacity_pool
    runtime = {BASE: from_log_file("llama_server", run.dir.server_log, Setting.from_profile(run.profile), rule)}
    for variant in run.profile.variants:
        leaves = next(each for each in record.variants if each.name == variant.name)
        folder = run.dir.variant(variant.name)
        ledger = json.loads(folder.server.read_text())["ledger"]
        assert leaves.kv_tokens == ledger["kv_tokens"] and leaves.served is True  # its own launch's books
        assert leaves.setting.as_dict()["other"] == list(variant_profile(run.profile, variant).serve.extra_args)
        assert leaves.max_kv_tokens is not None and leaves.max_kv_tokens_bounded_by == "memory"
        assert leaves.free_after_weights_bytes == record.free_after_weights_bytes  # the same budget as the base's
        runtime[variant.name] = from_log_file("llama_server", folder.server_log,
                                              Setting.from_profile(variant_profile(run.profile, variant)), rule)
        assert any(line.startswith(f"variant {variant.name} (") and f"{leaves.max_kv_tokens} tokens" in line
                   for line in said)
    # one budget, one slope: the launch whose server took less beyond the weights leaves the larger pool
    largest = {BASE: record.max_kv_tokens, **{each.name: each.max_kv_tokens for each in record.variants}}
    by_runtime = sorted(runtime, key=lambda name: runtime[name].runtime.low)  # type: ignore[union-attr]
    pools = [largest[name] for name in by_runtime]
    assert pools == sorted(pools, reverse=True)  # type: ignore[type-var]
    assert len(set(pools)) == 3  # the three launches' runtimes differ by more than a page of KV


def test_the_post_says_the_capacity_each_variant_leaves(tmp_path: Path) -> None:
    run = recorded_run(tmp_path)
    before = next(block for block in _section(run.dir.path).blocks if isinstance(block, Table))
    assert "largest KV pool (tokens)" not in before.columns  # no capacity step yet: absent, not 0
    record = capacity(run, say=lambda line: None)
    launches = next(block for block in _section(run.dir.path).blocks if isinstance(block, Table))
    column = launches.columns.index("largest KV pool (tokens)")
    shown = {row[0]: row[column] for row in launches.rows}
    assert shown[BASE] == f"{number(record.max_kv_tokens)} (memory)"
    for each in record.variants:
        assert shown[each.name] == f"{number(each.max_kv_tokens)} ({each.max_kv_tokens_bounded_by})"


def _section(path: Path):  # type: ignore[no-untyped-def]
    document = build_document(load_run(path), {})
    return next(section for section in document.sections if section.title == TITLE)
