"""The vLLM adapter on log lines quoted in the reference documents (vLLM cannot run here).

"CM §2" is reference/capacity-model.md section 2 (log lines and memory errors, "verbatim shapes");
where it gives a shape with placeholders (X, N, C.CC), the numbers below are illustrative. Lines
not quoted in the reference say where they come from instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ninferkit.engines import get_adapter
from ninferkit.engines.vllm.adapter import metrics_deltas, parse_metrics
from ninferkit.errors import ProfileError
from ninferkit.params import load_profile
from ninferkit.params.load import validate_profile
from ninferkit.params.profile import Profile
from tests.conftest import DATA, REPO

VLLM_LIVE = DATA / "vllm-live"


def live_body(name: str) -> str:
    """The body of one HTTP answer of the live vLLM 0.26.0 (session 2 of tests/data/vllm-live)."""
    return str(json.loads((VLLM_LIVE / "session2" / "http" / f"{name}.json").read_text())["body"])
GIB = 1024**3
ADAPTER = get_adapter("vllm")


def profile(arch: str | None = "sm_70", **serve: Any) -> Profile:
    return validate_profile({"name": "v", "engine": {"kind": "vllm", "binary": "vllm"},
                             "artifact": {"url": "https://example.invalid/ckpt"}, "gpu": {"arch": arch},
                             "serve": {"max_context": 8192, **serve}})


def argv_of(p: Profile) -> list[str]:
    return ADAPTER.argv(p, Path("/models/ckpt"), Path("python3"))


STARTUP_LOG = "\n".join([
    "INFO [gpu_model_runner.py] Model loading took 15.2448 GiB memory and 31.541 seconds",  # CM §2 shape
    "INFO [gpu_worker.py] Available KV cache memory: 10.53 GiB",  # CM §2 shape
    "INFO [kv_cache_utils.py] GPU KV cache size: 12,544 tokens",  # CM §2 shape (N comma-grouped)
    "INFO [kv_cache_utils.py] Maximum concurrency for 8,192 tokens per request: 1.53x",  # CM §2 shape
    # CM §2: the hybrid-model lines (784 and 0.13% are the real figures quoted there for Qwen3.6-27B):
    "INFO [config.py] Setting attention block size to 784 tokens to ensure that attention page size is >= mamba "
    "page size.",
    "INFO [config.py] Padding mamba page size by 0.13% to ensure that mamba page size and attention page size are "
    "exactly equal.",
])


def test_ledger_every_number() -> None:
    assert ADAPTER.parse_ledger(STARTUP_LOG) == {
        "weights_bytes": round(15.2448 * GIB), "weights_bytes_resolution_bytes": round(GIB / 10**4),
        "weights_load_s": 31.541, "kv_cache_bytes": round(10.53 * GIB),
        "kv_cache_bytes_resolution_bytes": round(GIB / 100), "kv_tokens": 12544, "kv_capacity_mode": "auto",
        "max_concurrency_request_tokens": 8192, "max_concurrency_x": 1.53, "attention_block_tokens": 784,
        "mamba_page_padding_pct": 0.13,
    }


def test_ledger_version_variants() -> None:
    # CM §2 "Version variants": v0 executor blocks line, and the merged KV-size/concurrency line.
    v0 = ADAPTER.parse_ledger("INFO # GPU blocks: 784, # CPU blocks: 2048\n"
                              "INFO Maximum concurrency for 8192 tokens per request: 1.53x")
    assert v0 == {"gpu_blocks": 784, "cpu_blocks": 2048, "max_concurrency_request_tokens": 8192,
                  "max_concurrency_x": 1.53}
    assert ADAPTER.parse_ledger("INFO # GPU blocks: 1000") == {"gpu_blocks": 1000}
    merged = ADAPTER.parse_ledger("INFO GPU KV cache size: 262,144 tokens, Maximum concurrency for 131,072 tokens "
                                  "per request: 2.00x")
    assert (merged["kv_tokens"], merged["max_concurrency_request_tokens"], merged["max_concurrency_x"]) == (
        262144, 131072, 2.0)


NOT_ENOUGH_KV = (  # CM §2, verbatim shape including the "models's" typo; L, X, Y, Z rendered
    "ValueError: To serve at least one request with the models's max seq len (131072), (8.50 GiB KV cache is needed, "
    "which is larger than the available KV cache memory (6.25 GiB). Based on the available memory, the estimated "
    "maximum model length is 96320. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
    "initializing the engine.")


@pytest.mark.parametrize(("line", "code"), [
    (NOT_ENOUGH_KV, "kv_cache_too_small_for_max_len"),
    (NOT_ENOUGH_KV.replace("models's", "model's"), "kv_cache_too_small_for_max_len"),  # other versions (CM §2)
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
     "initializing the engine.", "no_kv_cache_memory"),  # CM §2
    ("ValueError: Free memory on device (28.1/31.73 GiB) on startup is less than desired GPU memory utilization "
     "(0.92, 29.19 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
     "free_memory_below_utilization"),  # CM §2, values rendered
    ("AssertionError: Error in memory profiling. Initial free memory 30.1 GiB, current free memory 30.5 GiB. "
     "This happens when other processes sharing the same container release GPU memory while vLLM is profiling.",
     "memory_profiling_error"),  # CM §2 (prefix quoted there; the rest rendered)
    # Not in the reference: vLLM's dtype check (vllm/config, `_check_valid_dtype`), quoted from vLLM's source.
    ("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla "
     "V100-PCIE-32GB GPU has compute capability 7.0. You can use float16 instead by explicitly setting the`dtype` "
     "flag in CLI, for example: --dtype=half.", "bfloat16_unsupported"),
    # Not in the reference: PyTorch's OOM message (CM §2 names OOM during CUDA-graph capture as the unchecked case).
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
     "31.73 GiB of which 1.02 GiB is free.", "cuda_out_of_memory"),
    # Not in the reference: Python's argparse and uvicorn/asyncio messages.
    ("vllm serve: error: unrecognized arguments: --kv-capacity 8192", "unknown_argument"),
    ("OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): address already in use",
     "port_in_use"),
])
def test_diagnosis(line: str, code: str) -> None:
    found = ADAPTER.diagnose(STARTUP_LOG + "\n" + line + "\n")
    assert found is not None and found.code == code and found.cause and found.fix
    assert ADAPTER.diagnose(STARTUP_LOG) is None


def test_diagnosis_names_values() -> None:
    found = ADAPTER.diagnose(NOT_ENOUGH_KV)
    assert found is not None and "131072" in found.cause


def test_refusal_not_enough_kv() -> None:
    out = ADAPTER.parse_refusal(NOT_ENOUGH_KV)
    assert out == {"kind": "kv_cache_for_max_len", "max_model_len": 131072, "estimated_max_model_len": 96320,
                   "required_bytes": round(8.5 * GIB), "available_bytes": round(6.25 * GIB),
                   "required_bytes_resolution_bytes": round(GIB / 100),
                   "available_bytes_resolution_bytes": round(GIB / 100),
                   "short_by_bytes": round(8.5 * GIB) - round(6.25 * GIB)}


def test_refusal_free_memory() -> None:
    out = ADAPTER.parse_refusal("Free memory on device (28.1/31.73 GiB) on startup is less than desired GPU memory "
                                "utilization (0.92, 29.19 GiB).")
    assert out is not None
    assert (out["kind"], out["required_bytes"], out["available_bytes"]) == ("free_below_utilization",
                                                                           round(29.19 * GIB), round(28.1 * GIB))
    assert out["available_bytes_resolution_bytes"] == round(GIB / 10) and out["gpu_memory_utilization"] == 0.92
    assert out["total_bytes"] == round(31.73 * GIB)
    assert ADAPTER.parse_refusal(STARTUP_LOG) is None


def test_argv_every_option() -> None:
    p = profile(max_num_seqs=4, gpu_memory_utilization=0.9, swap_space_gib=4, weights_dtype="float16",
                kv={"dtype": "fp8"}, prefill_chunk=2048, tensor_parallel=2, gpu_devices=[0, 1],
                extra_args=["--enforce-eager"], model_id="qwen3.8-27b", trust_remote_code=True)
    assert argv_of(p) == ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/ckpt",
                          "--host", "127.0.0.1", "--port", "8088",
                          "--served-model-name", "qwen3.8-27b", "--max-model-len", "8192", "--max-num-seqs", "4",
                          "--gpu-memory-utilization", "0.9", "--swap-space", "4", "--dtype", "float16",
                          "--kv-cache-dtype", "fp8", "--max-num-batched-tokens", "2048",
                          "--tensor-parallel-size", "2", "--trust-remote-code", "--enforce-eager"]


def _max_num_seqs(argv: list[str]) -> str | None:
    return argv[argv.index("--max-num-seqs") + 1] if "--max-num-seqs" in argv else None


def test_the_profiles_concurrency_reaches_vllm_as_max_num_seqs() -> None:
    """Issue 42 item 1: a capacity search "at C = 32" ran at vLLM's default batch limit, the concurrency a comment."""
    assert _max_num_seqs(argv_of(profile(max_concurrency=32))) == "32"
    assert _max_num_seqs(argv_of(profile())) == "1"  # max_concurrency's own default
    assert _max_num_seqs(argv_of(profile(max_concurrency=32, max_num_seqs=8))) == "8"  # said outright, it wins
    assert _max_num_seqs(argv_of(profile(max_concurrency=32, max_num_seqs="vllm_default"))) is None
    seed_001 = load_profile(REPO / "params" / "vllm-v100-baseline.yaml").profile
    assert seed_001.serve.model_dump()["max_num_seqs"] == "vllm_default"  # report 001's command has no such flag


@pytest.mark.parametrize(("serve", "match"), [
    # Another engine's options are unknown fields of a vLLM profile's serve section.
    ({"spec": {"method": "mtp", "draft_tokens": 3}}, "serve.spec.draft_tokens: unknown field"),
    ({"kv": {"capacity": "auto"}}, "sizes its pool from serve.gpu_memory_utilization unless told a size"),
    ({"kv": {"dtype": "int8"}}, "serve.kv.dtype = 'int8'"),
    ({"weights_dtype": "bfloat16"}, "sm_70 has no bfloat16"),
    ({"weights_dtype": "fp4"}, "allowed: auto, half"),
    ({"pending_timeout_ms": 600000}, "serve.pending_timeout_ms: unknown field"),
    ({"cors": True}, "serve.cors: unknown field; an option of ninfer, not of vllm"),
    ({"gpu_devices": [0, 1]}, "exactly serve.tensor_parallel"),
    # Every pool ninferkit sizes, searches and fits is in vLLM's default 16-token blocks.
    ({"extra_args": ["--block-size", "32"]}, "serve.extra_args: --block-size: ninferkit sizes vLLM's KV pool in "
                                              "16-token blocks"),
    ({"extra_args": ["--block-size=32"]}, "another block size would put each of them off by its pages"),
])
def test_validation_rejects(serve: dict[str, Any], match: str) -> None:
    with pytest.raises(ProfileError, match=match):
        argv_of(profile(**serve))


def test_an_installed_engine_has_no_build_and_refuses_one() -> None:
    """vLLM runs as pip installed it: its profile records no engine.build (so no default 'cpu' backend is written
    up), and a build section is refused by name before anything runs; a built engine keeps its default build."""
    assert profile().engine.build is None
    with pytest.raises(ProfileError, match=r"engine\.build: vllm runs as installed .* so it has no build: remove "
                       r"engine\.build"):
        validate_profile({"name": "v", "engine": {"kind": "vllm", "build": {"backend": "cuda"}},
                          "artifact": {"url": "https://example.invalid/ckpt"}})
    llama = validate_profile({"name": "l", "engine": {"kind": "llama_server"},
                              "artifact": {"url": "https://example.invalid/m.gguf"}})
    assert llama.engine.built.backend == "cpu"


def test_bfloat16_on_ampere_is_fine() -> None:
    assert "bfloat16" in argv_of(profile(arch="sm_86", weights_dtype="bfloat16"))


def test_env_carries_key_and_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("T_VLLM_KEY", "k3y")
    p = profile(api_key_env="T_VLLM_KEY", gpu_devices=[1])
    assert ADAPTER.env(p) == {"VLLM_API_KEY": "k3y", "CUDA_VISIBLE_DEVICES": "1"}
    assert "k3y" not in argv_of(p)
    monkeypatch.delenv("T_VLLM_KEY")
    assert ADAPTER.env(profile()) == {}


def test_request_side() -> None:
    assert ADAPTER.reported_context({"data": [{"id": "m", "max_model_len": 8192}]}) == 8192
    assert ADAPTER.tokenize_request("hi") == ("/tokenize", {"prompt": "hi", "add_special_tokens": False})
    assert ADAPTER.token_count({"count": 3, "tokens": [1, 2, 3], "max_model_len": 8192}) == 3
    assert ADAPTER.output_pin_fields() == {"ignore_eos": True}
    assert ADAPTER.server_timings({"usage": {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 4}}}) \
        == {"cached_tokens_server": 4}
    assert ADAPTER.server_timings({"usage": {"prompt_tokens": 10}}) == {}


def test_parse_metrics() -> None:
    # vLLM 0.26.0's own /metrics on the H200 (tests/data/vllm-live/README.md), after one identical prompt twice.
    values = parse_metrics(live_body("metrics_after_prefix_second"))
    assert "vllm:prompt_tokens_created" not in values and "vllm:prompt_tokens" in values
    assert values["vllm:prefix_cache_hits"] <= values["vllm:prefix_cache_queries"]
    assert values["vllm:spec_decode_num_accepted_tokens"] <= values["vllm:spec_decode_num_draft_tokens"]


def test_metrics_deltas_of_one_request_from_the_live_server() -> None:
    """Around the second of two identical 4,390-token prompts (the first seeded the prefix cache), the deltas are
    that request's: vLLM's counters agree with the response's own usage, and the cache served whole blocks."""
    deltas = metrics_deltas(live_body("metrics_after_prefix_first"), live_body("metrics_after_prefix_second"))
    usage = json.loads(live_body("prefix_second"))["usage"]
    assert deltas["requests_server"] == 1
    assert deltas["prompt_tokens_server"] == usage["prompt_tokens"]
    assert deltas["generated_tokens_server"] == usage["completion_tokens"]
    cached = deltas["cached_tokens_server"]
    assert cached % 16 == 0 and usage["prompt_tokens"] - 16 < cached < usage["prompt_tokens"]  # whole 16-token blocks
    assert deltas["decode_tokens_server"] == usage["completion_tokens"] - 1
    assert deltas["decode_tok_s_server"] == pytest.approx(deltas["decode_tokens_server"] / deltas["decode_s_server"])
    assert 0 < deltas["ttft_s_server"] <= deltas["e2e_s_server"]
    assert deltas["accepted_tokens_server"] <= deltas["drafted_tokens_server"]
    accepted, drafted = deltas["accepted_tokens_server"], deltas["drafted_tokens_server"]
    assert deltas["acceptance_server"] == pytest.approx(accepted / drafted)


def test_metrics_deltas_without_spec_or_requests() -> None:
    before = "vllm:prompt_tokens_total 10\n"
    after = "vllm:prompt_tokens_total 30\nvllm:generation_tokens_total 5\n"
    assert metrics_deltas(before, after) == {"prompt_tokens_server": 20, "generated_tokens_server": 5}


def test_metrics_the_parser_cannot_read_give_no_deltas_and_say_why() -> None:
    after = live_body("metrics_after_prefix_second") + "vllm:num_requests_running two\n"
    found = ADAPTER.request_metrics_deltas(live_body("metrics_after_prefix_first"), after)
    assert found is not None and set(found) == {"server_note"}
    assert found["server_note"].startswith("no /metrics deltas: /metrics is not Prometheus text that "
                                           "prometheus_client's parser reads: could not convert string to float: 'two'")


def test_docker_files_pin_the_image() -> None:
    data = {"name": "v", "engine": {"kind": "vllm", "version": "0.11.0"}, "artifact": {"url": "https://x.invalid/c"},
            "gpu": {"power_limit_w": 250}}
    files = ADAPTER.docker_files(validate_profile(data))
    assert "FROM vllm/vllm-openai:v0.11.0" in files["Dockerfile"]
    assert "ExecStart=/usr/local/bin/nvidia-powerlimit.sh 250" in files["nvidia-powerlimit.service"]


def test_the_reports_start_lines_read_as_a_healthy_start() -> None:
    # seed 001 §5.4 "启动成功的标志", verbatim as the report prints them (its post joined the lines).
    from ninferkit.server.diagnose import diagnose_log

    seed = (DATA / "seeds" / "001_14cad6f44f36910c.txt").read_text()
    quoted = next(line for line in seed.splitlines() if "Uvicorn running on" in line)
    assert quoted == ("INFO: Started server process [12345] INFO: Waiting for application startup. INFO: Application "
                      "startup complete. INFO: Uvicorn running on http://0.0.0.0:8000")
    assert ADAPTER.parse_ledger(quoted)["listen_url"] == "http://0.0.0.0:8000"
    report = diagnose_log(quoted, ADAPTER)
    assert report["healthy"] and report["verdict"] == "healthy start (listening on http://0.0.0.0:8000)"


def test_the_oom_fix_carries_report_001s_advice() -> None:
    """Report 001's debugging list on torch.OutOfMemoryError: "调低--max-model-len" (tests/data/seeds/001_*.txt)."""
    seed = (DATA / "seeds" / "001_14cad6f44f36910c.txt").read_text()
    assert "torch.OutOfMemoryError" in seed and "调低--max-model-len" in seed
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    found = ADAPTER.diagnose(f"{STARTUP_LOG}\n{oom}\n")
    assert found is not None and found.code == "cuda_out_of_memory"
    assert found.fix.startswith("lower serve.max_context (--max-model-len")
