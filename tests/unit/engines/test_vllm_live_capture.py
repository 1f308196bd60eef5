"""vLLM as it really ran: the recorded output of vLLM 0.26.0 on an H200 (tests/data/vllm-live/README.md says how
each file was made), replayed through the adapter. Nothing here is written by hand: the expected numbers are read
from the recorded lines and answers themselves."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from ninferkit.capacity.gather import fit_observations
from ninferkit.capacity.observations import Observation, Setting, from_log_file, with_served
from ninferkit.capacity.search import search
from ninferkit.cli import main
from ninferkit.engines import get_adapter
from ninferkit.engines.vllm.adapter import check_against_vllm
from ninferkit.engines.vllm.facts import recorded_facts
from ninferkit.errors import ProfileError
from ninferkit.params.load import load_profile, validate_profile

LIVE = Path(__file__).parents[2] / "data" / "vllm-live"
ADAPTER = get_adapter("vllm")
FACTS = recorded_facts("0.26.0")


def answer(name: str) -> dict[str, object]:
    return dict(json.loads((LIVE / "session2" / "http" / f"{name}.json").read_text()))


@pytest.mark.parametrize(("log", "code", "in_cause"), [
    ("session1/startup-errors/unknown_argument_swap_space.log", "unknown_argument", "--swap-space"),
    ("session1/startup-errors/attention_backend_dflash2.log", "attention_backend_unknown", "DFLASH2"),
    ("session1/startup-errors/model_path_missing.log", "model_path_missing", "/tmp/models/no-such-model"),
    ("session1/startup-errors/max_model_len_above_model.log", "max_model_len_above_model", "1000000"),
    ("session1/startup-errors/flashinfer_missing.log", "package_missing", "flashinfer"),
    ("session1/healthy.log", "package_missing", "flashinfer"),
    ("session2/startup-errors/port_in_use.log", "port_in_use", "port"),
    ("session2/startup-errors/free_memory_below_utilization.log", "free_memory_below_utilization", "82.66 of 139.8"),
    ("session3/startup-errors/kv_cache_below_max_len.log", "kv_cache_too_small_for_max_len", "max_model_len 8192"),
])
def test_every_recorded_failure_is_diagnosed_with_its_fix(log: str, code: str, in_cause: str) -> None:
    text = (LIVE / log).read_text()
    argv = (LIVE / log).with_suffix(".argv")
    if "startup-errors" in log:
        assert re.search(r"^exit [1-9]", argv.read_text(), re.MULTILINE)  # each of these starts failed
    found = ADAPTER.diagnose(text)
    assert found is not None and found.code == code
    assert in_cause in found.cause and found.fix


def test_the_healthy_start_is_not_diagnosed_and_its_ledger_is_read() -> None:
    text = (LIVE / "session2" / "healthy.log").read_text()
    assert ADAPTER.diagnose(text) is None
    ledger = ADAPTER.parse_ledger(text)
    printed = re.search(r"GPU KV cache size: ([\d,]+) tokens", text)
    assert printed is not None and ledger["kv_tokens"] == int(printed[1].replace(",", ""))
    concurrency = re.search(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", text)
    assert concurrency is not None and ledger["max_concurrency_x"] == float(concurrency[2])
    assert ledger["max_concurrency_request_tokens"] == 8192 == answer_models_context()
    assert ledger["weights_bytes"] > 0 and ledger["kv_cache_bytes"] > ledger["weights_bytes"]


def answer_models_context() -> int | None:
    return ADAPTER.reported_context(json.loads(str(answer("models")["body"])))


def test_the_recorded_answers_read_as_the_adapter_expects() -> None:
    assert answer("health")["status"] == 200 and answer("health")["body"] == ""  # 200 and no body
    tokenized = json.loads(str(answer("tokenize")["body"]))
    assert ADAPTER.token_count(tokenized) == len(tokenized["tokens"])
    chat = json.loads(str(answer("chat")["body"]))
    checked = ADAPTER.chat_check(chat)
    assert checked["ok"] and checked["reply"]  # a real reply: the checkpoint is a causal LM
    assert ADAPTER.server_timings(chat) == {}  # usage.prompt_tokens_details is null: no cached count rides on it
    assert answer("wrong_model")["status"] == 404 and answer("over_context")["status"] == 400


def test_the_recorded_facts_match_the_recorded_help() -> None:
    """Every option the facts list appears in the server's own --help text, captured on the same machine."""
    assert FACTS is not None and FACTS.version == "0.26.0"
    help_text = (LIVE / "session1" / "api-server-help.txt").read_text()
    missing = [option for option in FACTS.options if option not in help_text and option != "--help"]
    assert missing == []
    assert "--swap-space" not in FACTS.options and "--speculative-config" in FACTS.options
    assert "FLASH_ATTN" in FACTS.attention_backends and "dflash" in FACTS.speculative_methods


def vllm_profile(**serve: object) -> object:
    return validate_profile({"name": "v", "engine": {"kind": "vllm", "version": "0.26.0"},
                             "artifact": {"filename": "m", "local_dir": "/models"},
                             "gpu": {"arch": "sm_90"}, "serve": serve})


def test_a_backend_that_is_a_speculative_method_says_so() -> None:
    profile = vllm_profile(attention_backend="dflash2")
    with pytest.raises(ProfileError, match=r"'dflash' is a speculative-decoding method in vLLM 0.26.0"):
        check_against_vllm(profile, ["python3", "-m", "x", "--attention-backend", "dflash2"], FACTS)  # type: ignore[arg-type]


def test_a_method_or_version_it_lacks_is_refused() -> None:
    with pytest.raises(ProfileError, match=r"serve.spec.method = 'lookahead': not a speculative method"):
        check_against_vllm(vllm_profile(spec={"method": "lookahead"}), ["python3", "-m", "x"], FACTS)  # type: ignore[arg-type]
    assert FACTS is not None
    older = validate_profile({"name": "v", "engine": {"kind": "vllm", "version": "0.11.0"},
                              "artifact": {"filename": "m", "local_dir": "/models"}})
    with pytest.raises(ProfileError, match=r"engine.version = '0.11.0', but engine.binary's vLLM is 0.26.0"):
        check_against_vllm(older, ["python3", "-m", "x"], FACTS)


def test_diagnose_names_the_cause_and_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    log = LIVE / "session1" / "startup-errors" / "unknown_argument_swap_space.log"
    code = main(["diagnose", str(log), "--profile", str(Path(__file__).parents[3] / "params" / "h200-vllm.yaml")])
    out = capsys.readouterr().out
    assert code == 1 and "--swap-space" in out


def test_the_memory_line_gives_capacity_its_free_memory_and_runtime() -> None:
    """vLLM 0.26.0's gpu_worker line (session3: the runbook's own launch) states the device's free memory and
    what it took beside the weights; the ledger's runtime is their sum with the KV cache, within the printed
    digits of the requested budget (0.4 of the device)."""
    text = (LIVE / "session3" / "launch-server.log").read_text()
    ledger = ADAPTER.parse_ledger(text)
    line = re.search(r"Free memory on device \(([\d.]+)/([\d.]+) GiB\).*?is \(([\d.]+), ([\d.]+) GiB\)", text)
    assert line is not None
    assert ledger["device_free_bytes"] == round(float(line[1]) * 2**30)
    assert ledger["gpu_memory_utilization"] == float(line[3])
    assert ledger["free_after_weights_bytes"] == ledger["device_free_bytes"] - ledger["weights_bytes"]
    requested = round(float(line[4]) * 2**30)
    slack = ledger["runtime_bytes_resolution_bytes"] + ledger["requested_bytes_resolution_bytes"]
    assert abs(ledger["runtime_bytes"] + ledger["weights_bytes"] - requested) <= slack
    assert ledger["engine_init_s"] > 100  # the first start on a fresh machine: 126 s of kernel compilation


def test_the_capacity_fit_of_the_recorded_launches_agrees_with_vllms_own_answer(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The capacity step's four launches (session3/capacity-launches: C=1 and 32 at 2,048 and 8,192 tokens, each
    started and served), fitted as `ninferkit capacity fit` reads them: the largest pool memory allows must hold
    vLLM's own answer for filling the GPU, `--kv-cache-memory=N (...) to fully utilize gpu memory`, which is the
    free memory less weights, activations, non-torch memory, CUDA graphs and a 150 MiB buffer (gpu_worker.py of
    vllm 0.26.0): N + 150 MiB is the pool memory allows, in bytes."""
    logs = sorted((LIVE / "session3" / "capacity-launches").glob("*.log"))
    suggested = {int(m[1]) for log in logs
                 for m in re.finditer(r"--kv-cache-memory=(\d+)` \([\d.]+ GiB\) to fully", log.read_text())}
    assert len(logs) == 4 and len(suggested) >= 1  # the free memory each start read differed by < 1 MiB
    code = main(["capacity", "fit", "--profile", "params/h200-vllm.yaml", "-p",
                 f"capacity.vllm_config={LIVE / 'session3' / 'config.json'}", "--json", *map(str, logs)])
    assert code == 0
    fitted = json.loads(capsys.readouterr().out)
    assert fitted["bytes_per_token"] == 23040  # 30 layers x 2 x 3 KV heads x 64 x 2 B, from config.json
    low, high = fitted["max_kv_tokens_interval"]
    for to_fill_gpu in suggested:
        assert low <= (to_fill_gpu + 150 * 2**20) / fitted["bytes_per_token"] <= high
    assert high - low < 0.01 * low


def test_a_pool_in_tokens_is_vllms_kv_cache_memory_bytes() -> None:
    """vLLM takes an explicit pool as `--kv-cache-memory-bytes` (in its recorded --help); the bytes are whole
    16-token blocks at the model's bytes per token, so the pool vLLM makes is the one asked for."""
    assert "--kv-cache-memory-bytes" in (LIVE / "session1" / "api-server-help.txt").read_text()
    profile = load_profile("params/h200-vllm.yaml", [f"capacity.vllm_config={LIVE / 'session3' / 'config.json'}",
                                                     "serve.kv.capacity=6397330"]).profile
    argv = ADAPTER.argv(profile, Path("/tmp/models/smollm2-135m-instruct"), Path("python3"))
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(6397344 * 23040)  # 399,834 blocks of 16
    with pytest.raises(ProfileError, match="allowed: null .* or a token count"):
        ADAPTER.validate(load_profile("params/h200-vllm.yaml", ["serve.kv.capacity=auto"]).profile)


def test_an_explicit_pool_start_states_the_free_memory_it_saw() -> None:
    """The start with --kv-cache-memory-bytes (session3): no memory profiling, so no memory line; its
    'Initial free memory' line gives capacity the device's free memory, and its refusal the shortfall."""
    text = (LIVE / "session3" / "startup-errors" / "kv_cache_below_max_len.log").read_text()
    ledger = ADAPTER.parse_ledger(text)
    assert ledger["device_free_bytes"] == round(139.29 * 2**30) and ledger["kv_cache_bytes"] == round(0.05 * 2**30)
    assert ledger["free_after_weights_bytes"] == ledger["device_free_bytes"] - ledger["weights_bytes"]
    refusal = ADAPTER.parse_refusal(text)
    assert refusal is not None and refusal["estimated_max_model_len"] == 2160


def test_the_search_for_vllm_is_not_capped_at_slots_times_context() -> None:
    """vLLM's pool is shared and bounded by memory alone (2,515,040 tokens at 0.4 of the GPU for 64 x 8,192
    planned): from the runbook's own launch (session3), the search's first launch is the fit's sure answer,
    millions of tokens above C x S, not C x S."""
    profile = load_profile("params/h200-vllm.yaml", [f"capacity.vllm_config={LIVE / 'session3' / 'config.json'}"])
    rule = ADAPTER.capacity_pool
    base = Setting.from_profile(profile.profile)
    observed = [with_served(o, True) for o in
                [from_log_file("vllm", LIVE / "session3" / "launch-server.log", base, rule)] if o is not None]
    assert observed and observed[0].kv_tokens == 2_515_040
    launched: list[int] = []

    def launch(setting: Setting) -> None:
        launched.append(int(setting.kv_capacity or 0))
        return None  # no GPU here: the launch is not made

    search(base, rule, launch, lambda obs: fit_observations(profile.profile, obs), observed, max_launches=1)
    fitted = fit_observations(profile.profile, observed)
    family = fitted.family_for(base.family)
    available = fitted.room(fitted.available)
    assert family is not None and available is not None
    sure = family.max_pool(base.concurrency, base.context_per_slot, available, rule).low
    assert sure is not None and launched == [int(sure) // 16 * 16]
    assert launched[0] > 10 * base.concurrency * base.context_per_slot


SEARCH = LIVE / "session4" / "h200-vllm-search" / "capacity" / "launches"


def test_an_explicit_pool_that_dies_at_warm_up_is_memory_at_first_use() -> None:
    """session4's search launches reserved their pool, then the n-gram rejection sampler's first run asked
    192 MiB more with 193 MiB free: out of memory at first use (a memory answer the search and a rerun settle
    on), with the allocation that failed kept."""
    text = (SEARCH / "03" / "logs" / "server.log").read_text()
    diagnosis = ADAPTER.diagnose(text)
    assert diagnosis is not None and diagnosis.code == "out_of_memory_at_first_use"
    assert "192.00 MiB" in diagnosis.cause
    profile = load_profile("params/h200-vllm.yaml", [f"capacity.vllm_config={LIVE / 'session3' / 'config.json'}"])
    obs = from_log_file("vllm", SEARCH / "03" / "logs" / "server.log", Setting.from_profile(profile.profile),
                        ADAPTER.capacity_pool)
    assert obs is not None and obs.kv_tokens == 6_397_328 and obs.out_of_memory
    assert obs.extra["failed_allocation_bytes"] == 192 * 2**20


def test_the_search_steps_below_a_warm_up_failure_by_what_it_asked_for() -> None:
    """On the H200 (session4) the search stepped down 1, 2 and 4 pages below the fit's sure answer and every
    launch died the same way, 192 MiB short: the stride now starts at the allocation that failed, 192 MiB of
    23,040-byte tokens in whole 16-token blocks, so the second launch is that far below the first."""
    profile = load_profile("params/h200-vllm.yaml", [f"capacity.vllm_config={LIVE / 'session3' / 'config.json'}",
                                                     "capacity.concurrencies=[32]", "serve.max_context=8192"])
    rule = ADAPTER.capacity_pool
    base = replace(Setting.from_profile(profile.profile), concurrency=32, context_per_slot=8192)
    observed = [with_served(o, True) for o in
                (from_log_file("vllm", SEARCH / n / "logs" / "server.log", base, rule) for n in ("01", "02"))
                if o is not None]
    misses = (from_log_file("vllm", SEARCH / n / "logs" / "server.log", base, rule) for n in ("03", "04", "05", "06"))
    recorded = {o.kv_tokens: with_served(o, False) for o in misses if o is not None}
    launched: list[int] = []

    def launch(setting: Setting) -> Observation | None:
        launched.append(int(setting.kv_capacity or 0))
        return recorded.get(launched[-1])  # the H200's own launch where one was made; no launch otherwise

    search(base, rule, launch, lambda obs: fit_observations(profile.profile, obs), observed, max_launches=2)
    assert launched[0] == 6_397_328  # the fit's sure answer, as on the H200
    stride = -(-math.ceil(192 * 2**20 / 23_040) // 16) * 16
    assert launched[0] - launched[1] == stride == 8_752
