"""The fit on startup logs captured from the embedded llama-server at several -c / -np / cache types.

Logs: tests/data/llama_server_logs (README there says how they were captured). The slope must come
out as the architecture's exactly, from the KV lines alone; every observation must contain the
fitted formula's prediction for it.
"""

from __future__ import annotations

from ninferkit.capacity.gather import fit_logs
from ninferkit.params import load_profile
from tests.conftest import DATA, GENERATED_CPU

LOGS = sorted((DATA / "llama_server_logs").glob("*.log"))


def test_decision_table_for_the_local_profile() -> None:
    profile = load_profile(GENERATED_CPU, ["capacity.memory_budget_bytes=null"]).profile
    summary = fit_logs(profile, LOGS)
    assert summary.free_after_weights_source == "the launches' own logs"
    rows = summary.decision_table
    cap = profile.capacity
    assert len(rows) == len(cap.kv_dtypes) * len(cap.concurrencies) * len(cap.contexts) * 2
    for row in rows:  # a per-slot pool: "starts" and "full" are the same pool
        assert row.pool_tokens == row.concurrency * row.context_per_slot
        assert row.fits is True and row.margin_gib > 0
    assert summary.bytes_per_token == 2048 and summary.bytes_per_token_source == "architecture"
    low, high = summary.fixed_bytes
    assert 0 < low <= high
