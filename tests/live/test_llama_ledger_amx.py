"""The capacity fit over the AMX CPU's startup logs agrees with the fit over a CPU without AMX, for the
generated model (its shape needs the llama.cpp vocabulary, so it is built here; the logs and the ledger
checks: tests/unit/engines/test_llama_ledger_amx.py)."""

from __future__ import annotations

from ninferkit.capacity.gather import fit_logs
from ninferkit.params import load_profile
from ninferkit.rundir.records import CapacityRecord
from tests.conftest import DATA, GENERATED_CPU

AMX = sorted((DATA / "llama_server_cpu_amx").glob("c*-np*.log"))  # the generated model's (the README's table)


def test_the_fit_over_amx_logs_agrees_with_the_fit_over_plain_logs() -> None:
    profile = load_profile(GENERATED_CPU).profile
    amx = fit_logs(profile, AMX)
    plain = fit_logs(profile, sorted((DATA / "llama_server_logs").glob("*.log")))
    assert amx.conflicts == [] == plain.conflicts
    assert amx.bytes_per_token == plain.bytes_per_token == 2048  # f16 K+V: 4 layers x 2 heads x 64 x 2 x 2 B
    assert amx.fixed_bytes == plain.fixed_bytes  # f16, 1 slot of 2048: the same interval to the byte
    for dtype in ("f16", "q8_0"):
        low_a, high_a = _per_extra_slot(amx, dtype)
        low_p, high_p = _per_extra_slot(plain, dtype)
        assert max(low_a, low_p) <= min(high_a, high_p), dtype  # the intervals overlap


def _per_extra_slot(summary: CapacityRecord, dtype: str) -> tuple[int, int]:
    term = next(t for t in summary.terms_pinned if t.startswith(f"kv={dtype}: fixed part per extra slot"))
    low, high = term.partition("[")[2].rstrip("] B").split(", ")
    return int(low.replace(",", "")), int(high.replace(",", ""))
