"""The fit on NInfer ledger and refusal lines of every generation in the reference.

Lines: tests/data/ninfer_capacity (its README says which section each came from and which numbers
are recorded rather than illustrative). They are read through the NInfer adapter, as the capacity
step reads a real log; the recorded byte counts are B_min for the 27B at S = 262,144, C = 1
(capacity-model.md §1.7, from ashalliants/ninfer-3090 TODO.md).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from ninferkit.capacity import Interval, Setting, fit, from_ledger, from_log, from_refusal
from ninferkit.capacity.fit import Priors
from ninferkit.capacity.search import search
from ninferkit.capacity.table import Cell, decision_table
from ninferkit.engines import get_adapter
from ninferkit.engines.ninfer.kv_layout import ninfer_kv_layout
from tests.conftest import DATA

CAPTURED = DATA / "ninfer_capacity"
RULE = get_adapter("ninfer").capacity_pool
S = 262_144
INT8 = Setting(1, S, "int8", S, None, None, 1024)
INT8_MTP3 = Setting(1, S, "int8", "auto", "mtp", 3, 1024)


def read(name: str, setting: Setting):
    found = from_log("ninfer", (CAPTURED / name).read_text(), setting, RULE, name)
    assert found is not None
    return found


def layout_27b(spec: str | None):
    return lambda dtype: ninfer_kv_layout("qwen3.8-27b", dtype or "bf16", spec)


def test_recorded_refusals_pin_the_fixed_part_to_the_byte() -> None:
    explicit = read("g1_refusal_explicit_int8.log", INT8)
    auto = read("g2_refusal_auto_mtp3.log", INT8_MTP3)
    assert not explicit.started and not auto.started
    assert explicit.kv_tokens == auto.kv_tokens == S  # M_min = max(ceil(S/64), C) = 4096 pages
    plain = fit([explicit], layout_27b(None), RULE).families[INT8.family]
    mtp = fit([auto], layout_27b("mtp"), RULE).families[INT8_MTP3.family]
    # capacity-model.md §1.7: "a fixed part of 323 MiB and 406 MiB at C = 1"
    assert plain.fixed(1, S) == Interval.exact(9_197_389_568 - S * 33_792)
    assert mtp.fixed(1, S) == Interval.exact(9_838_038_272 - S * 35_904)
    assert round(9_197_389_568 - S * 33_792) // 2**20 == 323 and (9_838_038_272 - S * 35_904) // 2**20 == 406
    # auto's refusal: free after weights is the message's, the headroom is not part of the runtime
    assert auto.available == Interval.exact(6_000_000_000)


def test_g0_refusal_subtracts_the_weights_from_free_before_loading() -> None:
    obs = read("g0_refusal_budget.log", Setting(1, 8192, "bf16"))
    assert obs.runtime == Interval.exact(2_504_634_112)
    assert obs.available == Interval.exact(19_000_000_000 - 17_495_365_888)


def test_g1_ledger_is_an_interval_and_the_fit_contains_it() -> None:
    obs = read("g1_ledger_explicit.log", Setting(1, 8192, "int8", 8192, "mtp", 3))
    assert obs.started and obs.kv_tokens == 8192
    assert obs.runtime is not None and obs.runtime.width == 10_737_418  # "2.73 GiB": +- 0.005 GiB
    fam = fit([obs], layout_27b("mtp"), RULE).families[obs.setting.family]
    predicted = fam.runtime(1, 8192, 8192)
    assert obs.runtime.contains(predicted) and predicted.bounded
    # slack printed (2.37 GiB) = free after weights (5.10) - runtime (2.73), within the rounding
    assert obs.slack is not None and obs.available is not None
    assert (obs.available - obs.runtime).intersect(obs.slack) is not None


def test_g3_example_is_flagged_as_impossible_for_int8() -> None:
    """The reference's rendered G3 line prints runtime 7.12 GiB for 262,144 int8 tokens: less than
    their KV payload alone (8.25 GiB). The fit must say no formula with a non-negative fixed part
    explains it, instead of returning a negative fixed part."""
    obs = read("g3_capacity_auto.log", Setting(1, S, "int8", "auto"))
    assert obs.kv_tokens == S and obs.auto
    result = fit([obs], layout_27b(None), RULE)
    assert not result.families[obs.setting.family].consistent
    assert result.conflicts and "no single formula" in result.conflicts[0]
    # with the slope unknown it is explainable (b < 7.12 GiB / 262,144), and the fit says b is not pinned
    free = fit([obs], lambda d: None, RULE)
    assert free.families[obs.setting.family].consistent
    assert free.slopes["int8"] is not None and free.slopes["int8"].high is not None
    assert free.slopes["int8"].high <= 7.125 * 2**30 / S


def test_unknown_architecture_fits_both_terms_from_two_pool_sizes() -> None:
    """Two exact runtimes at the same setting, different pools (rendered from the recorded MTP3
    B_min plus k pages of the architecture's step): slope and fixed part both come back exact."""
    b, f = 35_904, 9_838_038_272 - S * 35_904
    obs = []
    for pages in (4096, 4200):
        k = pages * 64
        setting = Setting(2, S, "int8", k, "mtp", 3, 1024)  # legal pages for C=2: [4096, 8192]
        refusal = {"runtime_reservation_bytes": f + b * k, "available_bytes": 5_000_000_000,
                   "required_bytes_resolution_bytes": 1, "available_bytes_resolution_bytes": 1}
        obs.append(from_refusal(refusal, setting, RULE, f"rendered {pages} pages"))
    result = fit(obs, lambda d: None, RULE)
    fam = next(iter(result.families.values()))
    assert fam.parameter("bytes_per_token") == Interval.exact(b)
    assert fam.fixed(*fam.reference) == Interval.exact(f)


@pytest.fixture
def seed_table():
    """27B int8 + MTP3 (the RTX 3090 seed system's spec, int8 instead of rk8v4): the fixed part
    from the recorded refusal; the per-slot term from the measured "a second lane adds a flat
    0.38 GiB" (ashalliants README, 2 decimals); free after weights stated (24 GiB card minus the
    18,210,531,328 B artifact minus 0.3-0.5 GiB CUDA context) - an assumption, not a measurement."""
    obs = read("g2_refusal_auto_mtp3.log", INT8_MTP3)
    priors = Priors(Interval.of(int(0.375 * 2**30), int(0.385 * 2**30)), Interval.of(0, 1),
                    "ashalliants README (0.38 GiB per lane) and TODO.md (1/16-1/8 B per context token)")
    result = fit([obs], layout_27b("mtp"), RULE, priors)
    available = Interval.of(24 * 2**30 - 18_210_531_328 - int(0.5 * 2**30), 24 * 2**30 - 18_210_531_328
                            - int(0.3 * 2**30))
    cells = [Cell("int8", c, s) for c in (1, 2) for s in (131_072, 184_320, 262_144)]
    return decision_table(result, RULE, cells, INT8_MTP3.family, available, available)  # NInfer reports no U


def test_seed_decision_table_from_recorded_lines(seed_table) -> None:
    rows = {(r["concurrency"], r["context_per_slot"], r["reading"]): r for r in seed_table}
    one_long = rows[(1, 262_144, "starts")]
    assert one_long["fits"] is False and one_long["verdict"].startswith("short by")
    # pool of a shared-pool engine: "starts" = max(L, C) pages, "full" = C x L pages
    assert rows[(2, 131_072, "starts")]["pool_tokens"] == 131_072
    assert rows[(2, 131_072, "full")]["pool_tokens"] == 262_144
    assert rows[(2, 131_072, "starts")]["fits"] is True
    assert rows[(2, 131_072, "full")]["fits"] is False
    auto = rows[(2, 131_072, "starts")]["auto"]
    assert auto["headroom_gib"] == 1.0 and auto["kv_tokens"][0] % 64 == 0
    for row in seed_table:  # every margin is an interval that the verdict respects
        low, high = row["margin_gib_interval"]
        assert low is not None and high is not None and low <= high
        assert row["fits"] is (True if low >= 0 else False if high < 0 else None)


def test_auto_slack_search_needs_two_launches() -> None:
    """NInfer cannot run here, so the engine is stood in for by its own sizing rule
    (capacity-model.md §1.4) with the recorded MTP3 fixed part and a stated free memory: auto
    resolves M = min(M_max, M_min + floor((A - R - B_min) / B_step)) and prints slack = A - B(M)."""
    b, f, free, headroom = 35_904, 9_838_038_272 - S * 35_904, 7_100_000_000, 2**30
    base = Setting(2, 131_072, "int8", None, "mtp", 3, 1024)
    launches = []

    def engine(setting: Setting):
        launches.append(setting)
        low, high = RULE.pool_range(setting.concurrency, setting.context_per_slot)
        if setting.kv_capacity == "auto":
            pages = min(high // 64, low // 64 + (free - headroom - (f + b * low)) // (b * 64))
        else:
            pages = RULE.pages(int(setting.kv_capacity))  # type: ignore[arg-type]
        runtime = f + b * pages * 64
        ledger = {"kv_tokens": pages * 64, "runtime_bytes": runtime, "free_after_weights_bytes": free,
                  "slack_bytes": free - runtime, "kv_capacity_mode": "auto" if setting.kv_capacity == "auto"
                  else "explicit"}
        obs = from_ledger(ledger, setting, "rule")
        assert obs is not None and runtime <= free
        return replace(obs, served=True)

    def refit(observations):
        return fit(observations, layout_27b("mtp"), RULE)

    result = search(base, RULE, engine, refit, [], max_launches=4)
    assert result.mode == "auto-slack" and result.launches == 2 and result.verified
    expected = 64 * ((free - f) // (b * 64))  # the largest explicit pool: runtime <= free
    assert result.answer_tokens == expected
    assert launches[1].kv_capacity == expected
