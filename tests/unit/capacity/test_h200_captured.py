"""The CUDA llama-server on an NVIDIA H200, from what two real runs there captured (no GPU needed here).

tests/data/llama_server_cuda_h200/ comes from the first run of params/h200-llamacpp.yaml, when the
generated model had head size 80; it pins device-only memory accounting, the quantised-cache
head-size refusal, the trained-context cap on a slot, and the prompt-cache copies before prefill.
tests/data/llama_server_cuda_h200_capacity/ and the published run in docs/examples/h200-llamacpp/
come from the second (head size 128, --cache-ram 0; see that folder's README.md); they pin the
compute buffer a quantised cache adds on CUDA, and why the capacity step stops the launch step's
server before its launches.
"""

from __future__ import annotations

import json
import shutil
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from ninferkit.capacity.fit import CapacityFit, fit
from ninferkit.capacity.gather import fit_logs, fit_observations
from ninferkit.capacity.interval import hull
from ninferkit.capacity.launches import recorded
from ninferkit.capacity.observations import Observation, Setting, from_log_file, with_served
from ninferkit.capacity.search import search
from ninferkit.engines import get_adapter
from ninferkit.engines.base import OUT_OF_MEMORY_AT_FIRST_USE
from ninferkit.engines.llama_server.kv_layout import llama_cpp_kv_layout
from ninferkit.errors import ProfileError
from ninferkit.params import load_profile
from ninferkit.report import write_report
from ninferkit.rundir.runs import append_jsonl, open_run
from ninferkit.units import GIB, MIB
from tests.conftest import DATA, REPO, assert_regenerates

LOGS = DATA / "llama_server_cuda_h200"
EXAMPLE = REPO / "docs" / "examples" / "h200-llamacpp"
PROFILE = load_profile(REPO / "params" / "h200-llamacpp.yaml").profile
ADAPTER = get_adapter("llama_server")
GRID = ["c16384-np1-f16.log", "c65536-np1-f16.log", "c16384-np8-f16.log", "c65536-np8-f16.log"]
# the profile's model as its GGUF header states it (generated: 36 layers, 2560 wide, 32 heads, 8 KV heads)
META = {"general.architecture": "qwen3", "qwen3.block_count": 36, "qwen3.embedding_length": 2560,
        "qwen3.attention.head_count": 32, "qwen3.attention.head_count_kv": 8}


@pytest.fixture(autouse=True)
def _no_generated_h200_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The profile's model is looked up in the cache: one generated there (by a run of this profile on
    this machine) would give the fit today's head size, not the size these logs were captured with."""
    monkeypatch.setenv("NINFERKIT_CACHE", str(tmp_path / "cache"))


CAPACITY = DATA / "llama_server_cuda_h200_capacity"
META_128 = {**META, "qwen3.attention.key_length": 128, "qwen3.attention.value_length": 128}


def test_cuda_startup_ledger_counts_device_memory_only() -> None:
    ledger = ADAPTER.parse_ledger((LOGS / "launch-c81920-np8-f16.log").read_text())
    assert ledger["kv_tokens"] == 8 * 81_920 and ledger["kv_streams"] == 8
    assert ledger["kv_cache_bytes"] == 57_600 * MIB
    # the token embeddings (741.88 MiB CPU_Mapped) stay in host memory: not device weights
    assert ledger["weights_bytes"] == round(6997.61 * MIB)
    # KV + the CUDA0 compute buffer; the 100.02 MiB CUDA_Host staging buffer is host memory
    assert ledger["runtime_bytes"] == round((57_600 + 157.01) * MIB)
    free = ledger["free_after_weights_bytes"]  # CUDA0: 142,629 MiB free before loading
    assert abs(free - (142_629.5 * MIB - round(6997.61 * MIB))) < 1


def test_kv_bytes_per_token_from_the_architecture_match_the_server() -> None:
    layout = llama_cpp_kv_layout(META, "f16", "f16")
    ledger = ADAPTER.parse_ledger((LOGS / "launch-c81920-np8-f16.log").read_text())
    assert layout.bytes_per_token == 92_160 == ledger["kv_cache_bytes"] // ledger["kv_tokens"]


def test_quantised_cache_that_does_not_divide_the_head_size_is_a_profile_error() -> None:
    with pytest.raises(ProfileError, match=r"'q8_0'.*head size \(80\).*allowed for this model: f32, f16, bf16"):
        llama_cpp_kv_layout(META, "q8_0", "q8_0")


def test_the_refusal_it_replaces_is_diagnosed_from_the_log() -> None:
    diagnosis = ADAPTER.diagnose((LOGS / "q8_0-head80-refused.log").read_text())
    assert diagnosis is not None and diagnosis.code == "cache_type_head_size"
    assert "head size 80" in diagnosis.cause and "f16" in diagnosis.fix


def test_fit_over_the_h200_launches() -> None:
    summary = fit_logs(PROFILE, [LOGS / name for name in GRID])
    assert summary.bytes_per_token == 92_160 and summary.conflicts == []
    # device-only accounting: one more slot costs nothing fixed, one more token of slot context ~1 KiB
    pinned = " ".join(summary.terms_pinned)
    assert "per extra slot [0, 2,997] B" in pinned  # never below 0: a fixed part does not shrink with more slots
    assert "per token of per-slot context [1,023, 1,025] B" in pinned


def test_the_fit_predicts_the_largest_pool_that_started() -> None:
    """8 slots: the fit over the grid predicts the pool, and the real launch just under it started."""
    summary = fit_logs(PROFILE, [LOGS / name for name in GRID])
    largest_predicted = summary.max_kv_tokens
    started = ADAPTER.parse_ledger((LOGS / "c190976-np8-f16.log").read_text())
    assert started["kv_tokens"] == 1_527_808 <= largest_predicted < 1_527_808 * 1.02


def test_a_slot_beyond_the_trained_context_is_capped_not_refused() -> None:
    text = (LOGS / "c1500160-np1-f16-capped.log").read_text()
    assert "exceeds the training context of the model (1048576) - capping" in text
    ledger = ADAPTER.parse_ledger(text)
    assert ledger["kv_tokens"] == 1_500_160  # memory was there: the pool was allocated


def test_search_with_the_trained_context_cap_spends_no_launch_above_it() -> None:
    """Replays the 1-slot search on the recorded grid: with the cap known it launches at the cap."""
    rule = ADAPTER.capacity_pool
    base = Setting(1, 16_384, "f16")
    observed = [o for o in (from_log_file("llama_server", LOGS / name, base, rule) for name in GRID) if o]
    launched: list[int] = []

    def launch(setting: Setting) -> None:
        launched.append(setting.context_per_slot)
        return None  # no GPU here: the launch is not made, and the search stops after recording it

    search(base, rule, launch, lambda obs: fit_observations(PROFILE, obs), observed, max_launches=1,
           slot_context_cap=1_048_576)
    assert launched == [1_048_576]


def test_prompt_cache_copies_are_named_with_their_sizes() -> None:
    note = ADAPTER.work_before_prefill((LOGS / "prompt-cache-saves.log").read_text())
    assert note is not None and "--cache-ram 0" in note
    assert "saved 7 prompts" in note and "up to 5.64 GiB each" in note  # the 7 prompt_save lines of the excerpt


def test_published_example_regenerates_and_traces_to_its_raw_files(tmp_path: Path) -> None:
    run = tmp_path / "h200-llamacpp"
    shutil.copytree(EXAMPLE, run, ignore=shutil.ignore_patterns("report"))
    report = write_report(run)
    text = (run / "report" / "index.md").read_text() + (run / "report" / "appendix.md").read_text()
    assert report.files
    rows = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    context = [r for r in rows if r["sweep"] == "context" and r["status"] == "ok" and not r["warmup"]]
    for length in (1_024, 65_536):  # the headline's decode per prompt length: median (range) of its requests
        decode = [r["decode_tok_s_server"] for r in context if r["cell"]["target_prompt_tokens"] == length]
        assert (f"| {length:,} | {statistics.median(decode):,.0f} ({min(decode):,.0f} – {max(decode):,.0f}) |"
                in text), length
    assert "-ngl 999 --cache-ram 0" in text and "Add `--cache-ram 0`" not in text
    # its CUDA build predates LLAMA_BUILD_NUMBER; the recipe says so rather than naming build 0
    assert ("| engine build (as its log names it) | build number not recorded (0), commit not recorded "
            "(GNU 13.3.0, Linux x86_64) |") in text
    bench = json.loads((run / "llama_bench.json").read_text())["comparison"]
    assert "| 65,536 | 9,698 | 9,741 | 0.996 | 118 | 127 | 0.930 |" in text  # its last row, as printed
    assert bench[-1]["prompt_tokens"] == 65_536 and round(bench[-1]["decode_ratio"], 3) == 0.930
    assert_regenerates(EXAMPLE, run, "run `ninferkit report docs/examples/h200-llamacpp` and commit "
                       "docs/examples/h200-llamacpp/report/")


def test_the_examples_ab_run_with_the_default_prompt_cache_is_flagged(tmp_path: Path) -> None:
    """The A/B half with llama-server's default --cache-ram: the write-up names the copies and their cost."""
    run = tmp_path / "cache-ram-default"
    shutil.copytree(EXAMPLE / "cache-ram-default", run, ignore=shutil.ignore_patterns("report"))
    write_report(run)
    text = (run / "report" / "index.md").read_text()
    rows = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    timed = [r for r in rows if r["status"] == "ok" and not r["warmup"] and r.get("prefix_role") != "seed"
             and r["sweep"] != "concurrency" and r["ttft_client_s"] is not None and r["prompt_s_server"] is not None]
    alone = [r["ttft_client_s"] - r["prompt_s_server"] for r in timed
             if r["ttft_client_s"] - r["prompt_s_server"] > max(0.25, r["prompt_s_server"])]
    assert f"wait: median {statistics.median(alone):.3g} s" in text
    assert "host-RAM prompt cache" in text and "Add `--cache-ram 0`" in text
    assert "CPU run" not in text  # no setup step ran, but NVML sampled the GPU


def ledger_compute(log: Path) -> int:
    ledger = ADAPTER.parse_ledger(log.read_text())
    return int(ledger["runtime_bytes"] - ledger["kv_cache_bytes"])


def _observed(*names: str) -> list[Observation]:
    found = [from_log_file("llama_server", CAPACITY / name, Setting(1, 16_384, "f16"), ADAPTER.capacity_pool)
             for name in names]
    assert all(found)
    return [o for o in found if o is not None]


def test_a_quantised_cache_on_cuda_grows_the_compute_buffer_per_pool_token() -> None:
    """8 slots x 16,384 tokens: f16 reserves 93 MiB of compute buffer, q8_0 and q4_0 564 MiB each."""
    compute = {}
    for name in ("f16-c16384-np8.log", "q8_0-c16384-np8.log", "q4_0-c16384-np8.log"):
        ledger = ADAPTER.parse_ledger((CAPACITY / name).read_text())
        compute[name.split("-")[0]] = round((ledger["runtime_bytes"] - ledger["kv_cache_bytes"]) / MIB, 2)
    assert compute == {"f16": 93.01, "q8_0": 564.09, "q4_0": 564.09}
    layout = llama_cpp_kv_layout(META_128, "q8_0", "q8_0", cuda=True)
    assert layout.bytes_per_token == 78_336  # the KV line's share: 36 layers x 2 x 8 heads x 128 at 34 B per 32
    assert layout.compute_bytes_per_token == 4_096  # one layer's K and V in f16: 2 x 8 x 128 x 2 B
    # q8_0 at 16,384 tokens per slot, 1 slot against 8: the buffer grows by exactly that per added pool token
    one_slot = ADAPTER.parse_ledger((CAPACITY / "q8_0-c16384-np1.log").read_text())
    grown = ledger_compute(CAPACITY / "q8_0-c16384-np8.log") - ledger_compute(CAPACITY / "q8_0-c16384-np1.log")
    assert grown == 4_096 * (8 * 16_384 - one_slot["kv_tokens"])
    assert llama_cpp_kv_layout(META_128, "f16", "f16", cuda=True).compute_bytes_per_token == 0
    assert llama_cpp_kv_layout(META_128, "q8_0", "q8_0").compute_bytes_per_token == 0  # the CPU backend


@pytest.mark.parametrize("dtype", ["q8_0", "q4_0"])
def test_the_fit_over_quantised_cuda_launches_holds_with_the_compute_term(dtype: str) -> None:
    names = [f"{dtype}-c16384-np1.log", f"{dtype}-c65536-np1.log", f"{dtype}-c16384-np8.log"]
    names += {"q8_0": ["q8_0-c32768-np1.log", "q8_0-c32768-np8.log"],  # the search's, above 16K of pool
              "q4_0": ["q4_0-c65536-np8.log"]}[dtype]  # four settings for three terms: the fit can fail
    observed = _observed(*names)
    with_compute = fit(observed, lambda d: llama_cpp_kv_layout(META_128, d or "f16", d or "f16", cuda=True),
                       ADAPTER.capacity_pool)
    (family,) = with_compute.families.values()
    assert family.consistent and with_compute.conflicts == []
    assert with_compute.slopes[dtype].low == {"q8_0": 78_336, "q4_0": 41_472}[dtype] + 4_096
    per_slot = family.parameter("per_slot_bytes")
    per_context_token = family.parameter("per_context_token_bytes")
    assert per_slot.low is not None and per_slot.high is not None
    assert -3_000 < per_slot.low <= 0 <= per_slot.high < 3_000  # one more slot costs nothing fixed
    assert per_context_token.low is not None and 1_020 < per_context_token.low <= per_context_token.high < 1_030
    # with the KV line's bytes alone, no formula fits the same launches
    cache_only = fit(observed, lambda d: llama_cpp_kv_layout(META_128, d or "f16", d or "f16"), ADAPTER.capacity_pool)
    assert not next(iter(cache_only.families.values())).consistent


def test_a_small_pool_sits_off_the_line() -> None:
    """Below about 16K tokens of pool another graph sets the compute buffer (llama_cpp_kv_layout's
    docstring): a launch there contradicts the line the larger ones agree on, and the fit says so."""
    observed = _observed("q8_0-c16384-np1.log", "q8_0-c65536-np1.log", "q8_0-c16384-np8.log", "q8_0-c8192-np1.log")
    result = fit(observed, lambda d: llama_cpp_kv_layout(META_128, d or "f16", d or "f16", cuda=True),
                 ADAPTER.capacity_pool)
    assert not next(iter(result.families.values())).consistent
    assert any("q8_0-c8192-np1.log" in conflict for conflict in result.conflicts)


def test_capacity_launches_beside_the_runbooks_server_saw_its_memory_taken() -> None:
    """The second H200 run's capacity launches ran while the launch step's server (98 GiB) still held
    the GPU: 41,935 MiB free where that server had started with 142,629. The capacity step now stops it."""
    launch = ADAPTER.parse_ledger((CAPACITY / "launch-c81920-np8-f16.log").read_text())
    grid = ADAPTER.parse_ledger((CAPACITY / "f16-c16384-np1.log").read_text())
    held = launch["free_after_weights_bytes"] - grid["free_after_weights_bytes"]
    assert round(held / MIB) == 142_629 - 41_935
    # its weights and runtime, plus what its CUDA context held beside them (no log line prints that)
    assert 0 < held - (launch["weights_bytes"] + launch["runtime_bytes"]) < GIB
    summary = fit_logs(PROFILE, [CAPACITY / "launch-c81920-np8-f16.log", CAPACITY / "f16-c16384-np1.log"])
    assert any("free memory after weights drifted" in note for note in summary.notes)


def test_a_search_without_a_prediction_starts_above_what_already_served() -> None:
    """On the H200 the q8_0 fit had no prediction and the 1-slot search doubled from 1,024 tokens,
    spending its 6 launches below the 65,536 the grid had already served. It starts there now."""
    observed = [with_served(o, True) for o in _observed(
        "q8_0-c16384-np1.log", "q8_0-c65536-np1.log", "q8_0-c16384-np8.log", "q8_0-c8192-np1.log")]
    rule = ADAPTER.capacity_pool

    def refit(obs: list[Observation]) -> CapacityFit:
        return fit(obs, lambda d: llama_cpp_kv_layout(META_128, d or "f16", d or "f16", cuda=True), rule)

    assert not next(iter(refit(observed).families.values())).consistent  # the small pool: no prediction
    launched: list[int] = []

    def launch(setting: Setting) -> None:
        launched.append(setting.context_per_slot)
        return None  # no GPU here: the launch is not made

    result = search(Setting(1, 81_920, "q8_0"), rule, launch, refit, observed, max_launches=1)
    assert launched == [131_072]  # doubling from the 65,536 that served
    assert result.launches == 1 and result.steps[0]["why"] == "an earlier launch at this setting"
    assert result.steps[0]["kv_tokens"] == 65_536 and result.steps[0]["settled"]


def _beside_server_launches() -> list[Observation]:
    """The second run's f16 1-slot launches as its capacity/observations.jsonl recorded them."""
    rows = (CAPACITY / "beside-server-f16-np1-observations.jsonl").read_text().splitlines()
    return [Observation.from_dict(json.loads(row)) for row in rows]


def test_a_search_starts_between_what_earlier_launches_settled() -> None:
    """The second run's f16 1-slot launches: 233,728 tokens served, 241,408 was refused (all of them
    beside the runbook's server, so with the same 41,935 MiB free). A search there starts between them."""
    observed = _beside_server_launches()
    launched: list[int] = []

    def launch(setting: Setting) -> None:
        launched.append(setting.context_per_slot)
        return None

    result = search(observed[0].setting, ADAPTER.capacity_pool, launch, lambda obs: fit_observations(PROFILE, obs),
                    observed, max_launches=1)
    settled = [(step["kv_tokens"], step["fits"]) for step in result.steps if step["settled"]]
    assert settled == [(233_728, True), (241_408, False)]
    assert result.launches == len(launched) == 1 and 233_728 < launched[0] < 241_408


def test_launches_that_saw_other_free_memory_settle_nothing() -> None:
    """The same launches beside the launch step's own (which saw 142,629 MiB free, not 41,935): their
    refusal says nothing about an empty GPU, so the search does not start from it."""
    own = from_log_file("llama_server", CAPACITY / "launch-c81920-np8-f16.log",
                        Setting(8, 81_920, "f16", other=("--cache-ram", "0")), ADAPTER.capacity_pool)
    assert own is not None
    observed = [with_served(own, True), *_beside_server_launches()]
    result = search(observed[1].setting, ADAPTER.capacity_pool, lambda setting: None,
                    lambda obs: fit_observations(PROFILE, obs), observed, max_launches=1)
    assert not any(step["settled"] for step in result.steps)


# The third run (docs/examples/h200-llamacpp/ as published now): the capacity launches on an empty H200.
# tests/data/llama_server_cuda_h200_first_use/ holds its logs as captured; the launch step's server log
# is cut to its startup and its exit (the 4,700 request lines between them removed).
FIRST_USE = DATA / "llama_server_cuda_h200_first_use"
F16_GRID = ["f16-c16384-np1.log", "f16-c65536-np1.log", "f16-c16384-np8.log", "f16-c65536-np8.log"]


def _first_use_observed(*names: str) -> list[Observation]:
    found = [from_log_file("llama_server", FIRST_USE / name, Setting(1, 16_384, "f16"), ADAPTER.capacity_pool)
             for name in names]
    assert all(found)
    return [with_served(o, True) for o in found if o is not None]


def _refit(observed: list[Observation]) -> CapacityFit:
    return fit(observed, lambda d: llama_cpp_kv_layout(META_128, d or "f16", d or "f16", cuda=True),
               ADAPTER.capacity_pool)


def test_memory_taken_at_first_use_is_read_from_the_exit_report() -> None:
    """At exit llama.cpp prints total = free + self + unaccounted per GPU. Of the unaccounted, the CUDA
    context (526 MiB: total - free before loading) was held before the books; the rest was taken to run."""
    served = ADAPTER.parse_ledger((FIRST_USE / "f16-c924416-np1.log").read_text())
    assert served["first_use_bytes"] == round(174.5 * MIB)  # 700 - (143,155 - 142,629), +- 1.5 MiB
    assert served["first_use_bytes_resolution_bytes"] == 3 * MIB
    # the launch step's server after the sweeps (long prompts, 8 clients) had taken a little more
    swept = ADAPTER.parse_ledger((FIRST_USE / "launch-c81920-np8-f16-after-sweeps.log").read_text())
    assert swept["first_use_bytes"] == round(181.5 * MIB)
    crashed = ADAPTER.parse_ledger((FIRST_USE / "f16-c952320-np1-warmup-oom.log").read_text())
    assert "first_use_bytes" not in crashed and crashed["kv_tokens"] == 952_320  # its books were all allocated


@pytest.mark.parametrize(("name", "where"), [
    ("f16-c952320-np1-warmup-oom.log", "out of memory in ggml_cuda_compute_forward"),  # MUL_MAT at warm-up
    ("q8_0-c214016-np8-cublas-oom.log", "the resource allocation failed in cublas_handle"),  # the first chat
])
def test_a_start_that_ran_out_at_its_first_computation_is_diagnosed(name: str, where: str) -> None:
    text = (FIRST_USE / name).read_text()
    diagnosis = ADAPTER.diagnose(text)
    assert diagnosis is not None and diagnosis.code == OUT_OF_MEMORY_AT_FIRST_USE
    assert where in diagnosis.cause and "taken at first use" in diagnosis.fix
    found = from_log_file("llama_server", FIRST_USE / name, Setting(1, 16_384, "f16"), ADAPTER.capacity_pool)
    assert found is not None and found.started and found.out_of_memory  # it counts against the pool


def test_the_fit_with_first_use_predicts_between_what_served_and_what_did_not() -> None:
    """1 slot: the books alone put the limit at 952,320 tokens, which started and then ran out at warm-up;
    less the first-use memory the grid's launches reported, the prediction falls between that and the
    924,416 that served. 8 slots: 956,416 served with 95 MiB left at exit, and stays the prediction."""
    observed = _first_use_observed("launch-c81920-np8-f16-after-sweeps.log", *F16_GRID)
    fitted = _refit(observed)
    assert fitted.first_use is not None and fitted.first_use.as_bytes() == [172 * MIB, 183 * MIB]
    family = fitted.family_for(observed[1].setting.family)
    assert family is not None and fitted.available is not None
    rule = ADAPTER.capacity_pool
    books_only = family.max_pool(1, 16_384, fitted.available, rule)
    assert books_only.low == 952_320  # the pool that failed
    one_slot = family.max_pool(1, 16_384, fitted.room(fitted.available), rule)
    assert one_slot.low is not None and 924_416 < one_slot.low < 952_320
    eight = family.max_pool(8, 16_384, fitted.room(fitted.available), rule)
    served = ADAPTER.parse_ledger((FIRST_USE / "f16-c119552-np8.log").read_text())
    assert eight.low == served["kv_tokens"] == 956_416


def test_below_a_sure_answer_that_did_not_serve_the_search_steps_down_doubling() -> None:
    """Without the first-use term (as in that run) the fit's sure answer, 952,320, ran out at warm-up,
    and bisection from the grid's 65,536 spent the search's other 5 launches to stop 3% short. The
    search now steps down from the failed pool by 1, 2, 4 steps (here none of them fit: no GPU)."""
    recorded = _first_use_observed(*F16_GRID) + [
        o for o in (from_log_file("llama_server", FIRST_USE / "f16-c952320-np1-warmup-oom.log",
                                  Setting(1, 16_384, "f16"), ADAPTER.capacity_pool),) if o is not None]
    books_only = [replace(o, first_use=None) for o in recorded]
    launched: list[int] = []

    def launch(setting: Setting) -> None:
        launched.append(setting.context_per_slot)
        return None

    result = search(Setting(1, 81_920, "f16"), ADAPTER.capacity_pool, launch, _refit, books_only, max_launches=3)
    settled = [(step["kv_tokens"], step["fits"]) for step in result.steps if step["settled"]]
    assert settled == [(65_536, True), (952_320, False)]  # the failed start settles the upper side
    assert launched == [952_320 - 256, 952_320 - 3 * 256, 952_320 - 7 * 256]
    # with the first-use term the sure answer is 951,040, below that failure: if it failed too, the
    # stride starts again at one step (a miss above the sure answer does not count)
    launched.clear()
    search(Setting(1, 81_920, "f16"), ADAPTER.capacity_pool, launch, _refit, recorded, max_launches=3)
    assert launched == [951_040, 951_040 - 256, 951_040 - 3 * 256]


def test_a_rerun_reads_recorded_launches_again_from_their_logs(tmp_path: Path) -> None:
    """observations.jsonl rows written before ninferkit read first-use memory get it from their logs."""
    run = open_run(REPO / "params" / "local-cpu.yaml", tmp_path / "run")
    log = tmp_path / "f16-c924416-np1.log"
    shutil.copy(FIRST_USE / log.name, log)
    old = from_log_file("llama_server", log, Setting(1, 16_384, "f16"), ADAPTER.capacity_pool)
    assert old is not None
    row = {**replace(old, first_use=None, served=True, extra={"note": "kept"}).as_dict(), "first_use_bytes": None}
    append_jsonl(run.dir.capacity_observations, row)
    (again,) = recorded(run)
    assert again.first_use == old.first_use and again.served and again.extra["note"] == "kept"


def test_the_published_capacity_answers_are_launches_that_served() -> None:
    """Every search answer in the example is a launch whose log shows that pool allocated and a clean
    exit (its first-use memory reported), and the refit's prediction at that setting is the answer."""
    summary = json.loads((EXAMPLE / "capacity.json").read_text())
    assert summary["first_use_bytes"] is not None
    for found in summary["searches"]:
        (at_answer,) = [step for step in found["results"] if step["kv_tokens"] == found["answer_kv_tokens"]]
        log = EXAMPLE / at_answer["log"].split("/run/", 1)[1]  # recorded as /tmp/job/run/...
        ledger = ADAPTER.parse_ledger(log.read_text())
        assert at_answer["fits"] and ledger["kv_tokens"] == found["answer_kv_tokens"] == found["server_kv_tokens"]
        assert "first_use_bytes" in ledger
    one_slot_f16 = next(f for f in summary["searches"] if f["setting"]["concurrency"] == 1
                        and f["setting"]["kv_dtype"] == "f16")
    assert one_slot_f16["answer_kv_tokens"] == 951_040 and "951,296 does not, shown by a launch" in one_slot_f16["note"]


def test_a_startup_refusal_stays_a_refusal_not_a_first_use_failure() -> None:
    """The second run's 8 x 64K f16 launch beside the launch step's server: cudaMalloc refused its
    72 GiB KV buffer at startup. It never listened, so it reports no first-use memory either."""
    text = (CAPACITY / "f16-c65536-np8-refused-beside-server.log").read_text()
    diagnosis = ADAPTER.diagnose(text)
    assert diagnosis is not None and diagnosis.code == "out_of_memory"
    assert "first_use_bytes" not in ADAPTER.parse_ledger(text)
    found = from_log_file("llama_server", CAPACITY / "f16-c65536-np8-refused-beside-server.log",
                          Setting(8, 65_536, "f16"), ADAPTER.capacity_pool)
    assert found is not None and not found.started and found.out_of_memory


def test_the_fits_projection_row_before_loading_is_not_first_use() -> None:
    """llama.cpp prints the same breakdown row before loading (--fit's projection, a negative
    'unaccounted'); a log cut before the server listened must not turn it into first-use memory."""
    text = (FIRST_USE / "f16-c16384-np1.log").read_text()
    cut = text[: text.index("listening on")]
    assert "first_use_bytes" not in ADAPTER.parse_ledger(cut)
    assert ADAPTER.parse_ledger(text)["first_use_bytes"] > 0


def test_a_moved_run_folder_reads_its_recorded_launches_where_they_are_now(tmp_path: Path) -> None:
    """The published example's launches were recorded at /tmp/job/run; its first 33 rows predate the
    first-use term. Read in place of that folder, they give the published U and the failed starts."""
    run_dir = tmp_path / "h200-llamacpp"
    shutil.copytree(EXAMPLE, run_dir, ignore=shutil.ignore_patterns("report", "cache-ram-default"))
    run = open_run(REPO / "params" / "h200-llamacpp.yaml", run_dir)
    rows = recorded(run)
    assert rows[0].source.startswith("/tmp/job/run/") and not Path(rows[0].source).exists()
    first_use = [o.first_use for o in rows if o.first_use is not None]
    assert len(first_use) == 33 and hull(first_use).as_bytes() == [171 * MIB, 178 * MIB]
    # with the launch step's server after the sweeps (181.5 MiB) the fit's range is the published one
    published = json.loads((EXAMPLE / "capacity.json").read_text())
    assert published["first_use_bytes"] == [171 * MIB, 183 * MIB]
    failed = sorted(o.kv_tokens for o in rows if o.started and o.out_of_memory)
    assert failed == [951_296, 952_320, 1_712_128, 3_094_528]


@pytest.mark.parametrize(("dtype", "memory"), [("q8_0", 1_692_672), ("q4_0", 3_032_320)])
def test_a_slot_at_the_trained_context_is_the_engines_limit_with_what_memory_would_allow(
        tmp_path: Path, dtype: str, memory: int) -> None:
    """The published 1-slot q8_0 and q4_0 answers are llama-server's cap on a slot (the model's trained context,
    1,048,576), settled by earlier launches. Replayed from the example's recorded launches and its launch step's
    log, the search says so, with what memory would allow: the figures the example's README gives."""
    run_dir = tmp_path / "h200-llamacpp"
    shutil.copytree(EXAMPLE, run_dir, ignore=shutil.ignore_patterns("report", "cache-ram-default"))
    run = open_run(REPO / "params" / "h200-llamacpp.yaml", run_dir)
    own = from_log_file("llama_server", run_dir / "logs" / "server.log", Setting.from_profile(run.profile),
                        ADAPTER.capacity_pool)
    assert own is not None
    launches = [o for o in recorded(run) if o.setting.kv_dtype == dtype]  # the launch step's own is f16
    result = search(Setting(1, 81_920, dtype, other=("--cache-ram", "0")), ADAPTER.capacity_pool, lambda setting: None,
                    _refit, [with_served(own, True), *launches], max_launches=1, slot_context_cap=1_048_576)
    assert result.launches == 0 and result.answer_tokens == 1_048_576 and result.bounded_by == "engine"
    assert f"memory allows {memory:,}" in (EXAMPLE / "README.md").read_text()
    assert result.note == ("1,048,576 tokens: the engine's limit for 1 slot (at most 1,048,576 tokens per slot); "
                           f"memory is not the limit here: it would allow ~{memory:,} tokens; raise "
                           "serve.max_concurrency to use it")
