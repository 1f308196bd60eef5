"""The fit on startup logs captured from the embedded llama-server at several -c / -np / cache types.

Logs: tests/data/llama_server_logs (README there says how they were captured). The slope must come
out as the architecture's exactly, from the KV lines alone; every observation must contain the
fitted formula's prediction for it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ninferkit.capacity import Setting, fit, from_log
from ninferkit.capacity.gather import fit_logs
from ninferkit.engines import get_adapter
from ninferkit.engines.llama_server.kv_layout import llama_cpp_kv_layout
from ninferkit.params import load_profile
from tests.conftest import DATA, GENERATED_CPU

LOGS = sorted((DATA / "llama_server_logs").glob("*.log"))
RULE = get_adapter("llama_server").capacity_pool
NAME = re.compile(r"c(?P<s>\d+)-np(?P<c>\d+)-(?P<t>\w+)\.log")
# The generated model's shape, as tests/data/profiles/generated-cpu.yaml makes it (4 layers, 2 KV heads x 64).
EMBEDDED = {"general.architecture": "qwen3", "qwen3.block_count": 4, "qwen3.embedding_length": 256,
            "qwen3.attention.head_count": 4, "qwen3.attention.head_count_kv": 2,
            "qwen3.attention.key_length": 64, "qwen3.attention.value_length": 64}


def observations():
    out = []
    for log in LOGS:
        # assume nothing: each log's own lines say its slots, context and cache type
        found = from_log("llama_server", log.read_text(), Setting(1, 1, None), RULE, log.name)
        assert found is not None, log
        out.append(found)
    return out


def test_logs_cover_several_settings() -> None:
    settings = {NAME.match(log.name).groups() for log in LOGS}  # type: ignore[union-attr]
    assert len({s for s, _, _ in settings}) >= 3 and {c for _, c, _ in settings} >= {"1", "2"}
    assert {t for _, _, t in settings} >= {"f16", "q8_0", "q4_0"}


def test_each_log_reports_its_own_setting() -> None:
    for obs in observations():
        s, c, t = NAME.match(Path(obs.source).name).groups()  # type: ignore[union-attr]
        assert (obs.setting.context_per_slot, obs.setting.concurrency, obs.setting.kv_dtype) == (int(s), int(c), t)
        assert obs.kv_tokens == int(s) * int(c)  # -c is the pool of all slots
        assert obs.started and obs.runtime is not None and obs.available is not None


@pytest.mark.parametrize("known_architecture", [True, False])
def test_fitted_bytes_per_token_equals_the_architecture_exactly(known_architecture: bool) -> None:
    obs = observations()
    result = fit(obs, (lambda d: llama_cpp_kv_layout(EMBEDDED, d, d)) if known_architecture else (lambda d: None),
                 RULE)
    assert result.conflicts == []
    for dtype in ("f16", "q8_0", "q4_0"):
        arch = llama_cpp_kv_layout(EMBEDDED, dtype, dtype).bytes_per_token
        payload = result.payload_slopes[dtype]
        assert payload is not None and payload.integers() == (arch, arch)  # the KV lines pin one integer
        slope = result.slopes[dtype]
        assert slope is not None and slope.low == slope.high == arch
    if not known_architecture:
        assert set(result.slope_sources.values()) == {"KV payload lines"}


def test_fixed_part_interval_is_inside_every_observation() -> None:
    obs = observations()
    result = fit(obs, lambda d: llama_cpp_kv_layout(EMBEDDED, d, d), RULE)
    assert len(result.families) == 3
    for family in result.families.values():
        assert family.consistent
        for o in family.observations:
            predicted = family.runtime(o.setting.concurrency, o.setting.context_per_slot, o.kv_tokens)
            assert predicted.bounded and o.runtime is not None and o.runtime.contains(predicted), o.source


def test_fit_separates_per_slot_and_per_context_terms() -> None:
    """f16 has logs at two slot counts and four contexts, so both terms are pinned; the per-slot
    term must contain the logits buffer the model implies (n_vocab x 4 B per slot)."""
    result = fit(observations(), lambda d: llama_cpp_kv_layout(EMBEDDED, d, d), RULE)
    f16 = next(f for f in result.families.values() if f.family[0] == "f16")
    per_slot = f16.parameter("per_slot_bytes")
    assert per_slot.bounded and per_slot.holds(151_936 * 4)
    assert f16.parameter("per_context_token_bytes").bounded
    q4 = next(f for f in result.families.values() if f.family[0] == "q4_0")
    _, unpinned = result.terms()
    assert not q4.parameter("per_slot_bytes").bounded  # one slot count per context: not separable
    assert any("q4_0" in term and "per extra slot" in term for term in unpinned)


def test_budget_turns_into_a_largest_pool_and_short_verdicts() -> None:
    """With a 120 MiB budget (weights are 80.2 MiB) the big cells must come out short."""
    profile = load_profile(GENERATED_CPU, ["capacity.memory_budget_bytes=125829120",
                                       "capacity.contexts=[4096, 32768]"]).profile
    summary = fit_logs(profile, LOGS)
    verdicts = {(r.kv_dtype, r.concurrency, r.context_per_slot): r for r in summary.decision_table
                if r.reading == "starts"}
    assert verdicts[("f16", 1, 4096)].fits is True
    short = verdicts[("f16", 2, 32768)]
    assert short.fits is False and str(short.verdict).startswith("short by")
    sure, possible = summary.max_kv_tokens_interval
    assert 0 < sure <= possible and sure % 256 == 0


def test_refusal_parser_on_llama_cpp_format_strings() -> None:
    """No refusal with numbers can be provoked on this host quickly (a 2 TB -c fails in
    std::bad_alloc after a minute, printing no sizes), so these lines are rendered from the format
    strings of the pinned llama.cpp source (common/fit.cpp, ggml/src/ggml-backend.cpp)."""
    log = ("0.00.100.000 I common_params_fit_impl: projected to use 30000 MiB of device memory vs. 24000 MiB "
           "of free device memory\n"
           "0.01.000.000 I load_tensors:        CUDA0 model buffer size =  4096.00 MiB\n"
           "0.02.000.000 E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 25000.00 MiB on device 0: "
           "cudaMalloc failed: out of memory\n"
           "0.02.000.001 E alloc_tensor_range: failed to allocate CUDA0 buffer of size 26214400000\n")
    refusal = get_adapter("llama_server").parse_refusal(log)
    assert refusal is not None
    assert refusal["failed_buffer_bytes"] == 26_214_400_000
    assert refusal["runtime_reservation_bytes"] == round(30000.5 * 2**20 - 4096 * 2**20)
    assert refusal["available_bytes"] == round(24000.5 * 2**20)
    assert all(get_adapter("llama_server").parse_refusal(log.read_text()) is None for log in LOGS)
