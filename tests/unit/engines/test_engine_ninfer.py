"""The NInfer adapter on lines quoted in the reference documents (NInfer cannot run here).

Every log line below names its source: "IF §x" is reference/ninfer-interface.md section x, "FR §x"
is reference/field-reports.md, "CM §x" is reference/capacity-model.md. "verbatim" lines are copied
as printed there; "rendered" lines are built from a format the reference documents, with the
illustrative values stated (the reference itself marks many of its examples that way).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from ninferkit.engines import get_adapter
from ninferkit.engines.ninfer.builds import BUILDS, containers_from_log, detect_build
from ninferkit.engines.ninfer.diagnoses import parse_refusal
from ninferkit.engines.ninfer.logs import log_format_of, message
from ninferkit.engines.ninfer.numbers import byte_value, duration_s
from ninferkit.engines.ninfer.request_log import (
    join_client_rows,
    ledger_from_events,
    read_events,
    request_rows,
    throughput_rows,
)
from ninferkit.errors import NinferkitError, ProfileError, ToolMissing
from ninferkit.params.load import validate_profile
from ninferkit.params.profile import Profile
from ninferkit.server.process import docker_argv
from tests.conftest import DATA

NINFER_DATA = DATA / "ninfer"
LIVE = DATA / "ninfer_live" / "g1-h200"
GIB, MIB = 1024**3, 1024**2
ADAPTER = get_adapter("ninfer")


# One build of the table per interface the reference documents (IF §0).
G0_BUILD, G1_BUILD, G2_BUILD, G3_BUILD = ("Neroued/ninfer", "geoffwatts/ninfer-v100", "mylordmonkeyman/ninfer-v100",
                                          "zhongpei/ninfer-4090")


def profile(fork: str = G1_BUILD, arch: str | None = "sm_70", version: str | None = None, **serve: Any) -> Profile:
    """A NInfer profile with the given serve fields (artifact by URL: the argv does not need a pin)."""
    data = {"name": "t", "engine": {"kind": "ninfer", "binary": "ninfer-serve", "fork": fork, "version": version},
            "artifact": {"url": "https://example.invalid/m.ninfer"}, "gpu": {"arch": arch},
            "serve": {"max_context": 8192, **serve}}
    return validate_profile(data)


def argv_of(p: Profile) -> list[str]:
    return ADAPTER.argv(p, Path("/m/x.ninfer"), Path("ninfer-serve"))


# ---------------------------------------------------------------------------------------------
# A build described from outside: log format, options, readers
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "fmt"), [
    # First stderr lines, verbatim from IF §0 "How to tell the generation from outside".
    ("ninfer-serve: loading model...", "plain"),
    ("[2026-08-20 10:00:00.123] [info] ninfer-serve: loading model...", "bracketed"),
    ("[2026-09-01 12:00:00.123] [info] [ninfer-serve] startup phase=engine-startup status=begin", "keyvalue"),
    ("2026-10-01 12:00:00.123  INFO  starting engine", "pipe"),
    # seed 000 §1.4 and §1.6 quote the V100 fork's lines without their timestamps.
    ("ERROR startup failed | inspecting artifact | 31.4 ms", "pipe"),
    ("INFO  engine ready | qwen3.8-27b/nvfp4 | total 18.2s | weights 19.7 GiB", "pipe"),
    ("llama_model_loader: loaded meta data", None),
])
def test_log_format_of_the_first_line(text: str, fmt: str | None) -> None:
    assert log_format_of(text) == fmt


def test_a_build_described_by_its_own_help_and_log() -> None:
    # The live G1 build's --help and its refusal of a v3 file (ninfer-live/g1-h200).
    help_text = (LIVE / "help.txt").read_text()
    build = detect_build(help_text, (LIVE / "startup-errors" / "v3_header.log").read_text())
    table = BUILDS["ziworkslab/ninfer-3090-ubuntu"]
    assert (build.options, build.log_format, build.containers) == (table.options, "bracketed", frozenset({1, 2}))
    assert build.kv_dtypes == ("bf16", "int8") and set(build.spec_draft) == {"mtp", "dflash"}
    assert build.apis == {"chat", "messages", "responses"} and build.paged_pool
    with pytest.raises(ProfileError, match="not ninfer-serve's"):
        detect_build("usage: llama-server [options]")


@pytest.mark.parametrize(("line", "versions"), [
    ("FATAL server failed during startup | artifact magic is not NInfer v2", {2}),  # seed 000 §1.4 verbatim
    ("[2026-12-01 14:24:18.493] [error] ninfer-serve: artifact magic is not NInfer v1 or v2", {1, 2}),  # live
    ("x.ninfer: NInfer v2 artifact is not supported. Upgrade to v3 with: …", {3}),  # IF §3.1
    ("INFO  engine ready | qwen3.8-27b/nvfp4", None),
])
def test_containers_from_a_readers_refusal(line: str, versions: set[int] | None) -> None:
    assert containers_from_log(line) == (None if versions is None else frozenset(versions))


def test_message_strips_each_generation_prefix() -> None:
    assert message("ninfer-serve: warming up...") == "warming up..."
    assert message("[2026-08-20 10:00:00.123] [warning] ninfer-serve: warming up...") == "warming up..."
    assert message("[2026-09-01 12:00:00.123] [info] [ninfer-serve] server status=ready") == "server status=ready"
    assert message("2026-10-01 12:00:00.123  ERROR server stopped") == "server stopped"


# ---------------------------------------------------------------------------------------------
# Number formats
# ---------------------------------------------------------------------------------------------

def test_byte_value_keeps_the_printed_resolution() -> None:
    assert byte_value("7.12", "GiB") == (round(7.12 * GIB), round(GIB / 100))
    assert byte_value("17.3", "GiB") == (round(17.3 * GIB), round(GIB / 10))  # G3: 1 decimal when >= 10
    assert byte_value("60.00", "MiB") == (60 * MIB, round(MIB / 100))
    assert byte_value("0", "B") == (0, 1)


@pytest.mark.parametrize(("text", "seconds"), [
    # The G3 duration formats, IF §2.4 "Value formatting".
    ("850 us", 850e-6), ("12.3 ms", 0.0123), ("4.5s", 4.5), ("3m 2.1s", 182.1), ("1h 5m", 3900.0),
])
def test_duration(text: str, seconds: float) -> None:
    assert duration_s(text) == pytest.approx(seconds)


# ---------------------------------------------------------------------------------------------
# Startup ledgers
# ---------------------------------------------------------------------------------------------

G0_LOG = "\n".join([
    "ninfer-serve: loading model...",  # IF §2.1 startup order (verbatim)
    "ninfer-serve: model loaded in 23.4567 s",  # IF §2.1, verbatim example of the seconds format
    "ninfer-serve: warming up...",  # IF §2.1 (verbatim)
    "ninfer-serve: listening on http://127.0.0.1:8080 (model id: qwen3.6-27b, auth: disabled)",  # IF §2.1 verbatim
])


def test_ledger_g0() -> None:
    assert ADAPTER.parse_ledger(G0_LOG) == {"ready_s": 23.4567, "listen_url": "http://127.0.0.1:8080",
                                            "model_id": "qwen3.6-27b", "auth": "disabled"}


G1_LOG = "\n".join([
    "[2026-08-20 10:00:00.100] [info] ninfer-serve: loading model...",  # IF §2.2 sequence (prefix per IF §2.2)
    "[2026-08-20 10:00:31.000] [info] ninfer-serve: model loaded in 30.9 s",  # IF §2.2 sequence; 30.9 illustrative
    # IF §2.2 capacity line, verbatim (the reference's rendered example):
    "[2026-08-20 10:00:00.123] [info] ninfer-serve: KV capacity explicit resolved=8192 tokens pages=128/128 "
    "runtime=2.73 GiB free-after-weights=5.10 GiB free-after-startup=2.30 GiB headroom=0.00 MiB slack=2.37 GiB "
    "graphs=60.00 MiB/96.00 MiB",
    "[2026-08-20 10:00:33.000] [info] ninfer-serve: warming up...",
    # IF §2.2 listening line (verbatim after the prefix the reference elides with '…'):
    "[2026-08-20 10:00:34.000] [info] ninfer-serve: listening on http://127.0.0.1:8080 "
    "(model id: qwen3.8-27b, auth: bearer)",
])


def test_ledger_g1_every_number() -> None:
    ledger = ADAPTER.parse_ledger(G1_LOG)
    centi_gib, centi_mib = round(GIB / 100), round(MIB / 100)
    assert ledger == {
        "ready_s": 30.9, "kv_capacity_mode": "explicit", "kv_tokens": 8192, "kv_pages": 128, "kv_max_pages": 128,
        "runtime_bytes": round(2.73 * GIB), "runtime_bytes_resolution_bytes": centi_gib,
        "free_after_weights_bytes": round(5.10 * GIB), "free_after_weights_bytes_resolution_bytes": centi_gib,
        "free_after_startup_bytes": round(2.30 * GIB), "free_after_startup_bytes_resolution_bytes": centi_gib,
        "headroom_bytes": 0, "headroom_bytes_resolution_bytes": centi_mib,
        "slack_bytes": round(2.37 * GIB), "slack_bytes_resolution_bytes": centi_gib,
        "graphs_observed_bytes": 60 * MIB, "graphs_observed_bytes_resolution_bytes": centi_mib,
        "graphs_allowance_bytes": 96 * MIB, "graphs_allowance_bytes_resolution_bytes": centi_mib,
        "listen_url": "http://127.0.0.1:8080", "model_id": "qwen3.8-27b", "auth": "bearer",
    }
    # The engine's own identity slack = free after weights - runtime holds within the printed rounding.
    assert abs(ledger["free_after_weights_bytes"] - ledger["runtime_bytes"] - ledger["slack_bytes"]) <= 2 * centi_gib


G2_LOG = "\n".join([
    # IF §2.3 lines; the reference elides the numbers ('…'), so these values are rendered and illustrative
    # (capacity numbers as in CM §1.6: 27B int8 + MTP, C = 2, S = 131072 -> 4096 page groups at most).
    '[2026-09-01 12:00:00.123] [info] [ninfer-serve] startup phase=engine-startup status=begin',
    '[2026-09-01 12:00:20.000] [info] [ninfer-serve] engine status=ready target="qwen3_6_27b" '
    'model_id="qwen3.6-27b" weights_id="groupwise-int" target_load_ms=19876.500 materialization_pipeline_ms=9000.0 '
    'artifact_bytes_read=18210531328 host_to_device_bytes=18200000000 peak_staging_bytes=268435456 tensors=1124 '
    'resources=4',
    '[2026-09-01 12:00:20.100] [info] [ninfer-serve] engine capacity kv_capacity_mode=auto kv_capacity_tokens=188416 '
    'kv_page_groups=2944 kv_max_page_groups=4096 runtime_reservation_bytes=8500000000 '
    'available_after_weights_bytes=9700000000 available_after_startup_bytes=1150000000 kv_headroom_bytes=1073741824 '
    'planned_slack_bytes=1200000000 cuda_graph_allowance_bytes=171966464 some_future_key="x y"',
    '[2026-09-01 12:00:25.000] [info] [ninfer-serve] startup phase=serve-warmup status=complete duration_ms=812.250',
    # IF §2.3 ready line, verbatim:
    '[2026-09-01 12:00:25.100] [info] [ninfer-serve] server status=ready host="127.0.0.1" port=8080 '
    'model_id="qwen3.8-27b" auth_enabled=false',
])


def test_ledger_g2_every_number() -> None:
    assert ADAPTER.parse_ledger(G2_LOG) == {
        "weights_bytes": 18200000000, "weights_bytes_resolution_bytes": 1, "ready_s": 19.8765,
        "model_id": "qwen3.8-27b", "weights_id": "groupwise-int", "target": "qwen3_6_27b",
        "kv_capacity_mode": "auto", "kv_tokens": 188416, "kv_pages": 2944, "kv_max_pages": 4096,
        "runtime_bytes": 8500000000, "runtime_bytes_resolution_bytes": 1,
        "free_after_weights_bytes": 9700000000, "free_after_weights_bytes_resolution_bytes": 1,
        "free_after_startup_bytes": 1150000000, "free_after_startup_bytes_resolution_bytes": 1,
        "headroom_bytes": 1073741824, "headroom_bytes_resolution_bytes": 1,
        "slack_bytes": 1200000000, "slack_bytes_resolution_bytes": 1,
        "graphs_allowance_bytes": 171966464, "graphs_allowance_bytes_resolution_bytes": 1,
        "warmup_s": 0.81225, "listen_url": "http://127.0.0.1:8080", "auth": "disabled",
        "unread": ["some_future_key=x y (line 3)"],  # a key no rule knows is listed, not dropped
    }


G3 = "2026-10-01 12:00:00.123  INFO  "  # IF §2.4 prefix: timestamp, two spaces, 5-char level, one space
G3_LOG = "\n".join([
    G3 + "starting engine",  # IF §2.4 (verbatim)
    G3 + "loading weights | 17.3 GiB",  # IF §2.4 (verbatim)
    G3 + "  loading weights 42.0% | 7.27 GiB/17.3 GiB | 1.70 GiB/s | ETA 5.7s",  # IF §2.4 (verbatim)
    G3 + "weights ready | 17.3 GiB | 9.8s | 1.70 GiB/s",  # IF §2.4 (verbatim)
    # IF §2.4 format `engine ready | <model_name> | total <duration> | weights <bytes> | CUDA sync <mode>`;
    # rendered: total 12.3s, weights 17.3 GiB, mode 'default' (the modes are an open question, IF §9).
    G3 + "engine ready | qwen3.8-27b/groupwise-int | total 12.3s | weights 17.3 GiB | CUDA sync default",
    # IF §2.4 capacity example, verbatim:
    G3 + "capacity | KV 262,144 tokens, int8, auto | pages 4,096/4,096 | runtime 7.12 GiB | free 1.02 GiB",
    # IF §2.4 DEBUG memory ledger (segments named there; values rendered):
    "2026-10-01 12:00:00.124  DEBUG memory ledger | after weights 9.23 GiB | after startup 1.02 GiB | "
    "headroom 1.00 GiB | slack 2.11 GiB | CUDA graphs 60.0 MiB/96.0 MiB",
    G3 + "warmup complete | 850 ms",  # IF §2.4 `warmup complete | <duration>` rendered with 850 ms
    G3 + "listening on http://127.0.0.1:8080 | model qwen3.8-27b | auth disabled",  # IF §2.4 (verbatim)
])


def test_ledger_g3_every_number() -> None:
    deci_gib, centi_gib, deci_mib = round(GIB / 10), round(GIB / 100), round(MIB / 10)
    assert ADAPTER.parse_ledger(G3_LOG) == {
        "weights_bytes": round(17.3 * GIB), "weights_bytes_resolution_bytes": deci_gib, "weights_load_s": 9.8,
        "model_name": "qwen3.8-27b/groupwise-int", "ready_s": 12.3, "cuda_sync": "default",
        "kv_tokens": 262144, "kv_dtype": "int8", "kv_capacity_mode": "auto", "kv_pages": 4096, "kv_max_pages": 4096,
        "runtime_bytes": round(7.12 * GIB), "runtime_bytes_resolution_bytes": centi_gib,
        "free_after_startup_bytes": round(1.02 * GIB), "free_after_startup_bytes_resolution_bytes": centi_gib,
        "free_after_weights_bytes": round(9.23 * GIB), "free_after_weights_bytes_resolution_bytes": centi_gib,
        "headroom_bytes": GIB, "headroom_bytes_resolution_bytes": centi_gib,
        "slack_bytes": round(2.11 * GIB), "slack_bytes_resolution_bytes": centi_gib,
        "graphs_observed_bytes": 60 * MIB, "graphs_observed_bytes_resolution_bytes": deci_mib,
        "graphs_allowance_bytes": 96 * MIB, "graphs_allowance_bytes_resolution_bytes": deci_mib,
        "warmup_s": 0.85, "listen_url": "http://127.0.0.1:8080", "model_id": "qwen3.8-27b", "auth": "disabled",
    }


def test_ledger_tolerates_short_and_extended_lines() -> None:
    # JGamboa's observed short form (IF §2.4) and an unknown extra segment (a later fork).
    log = "\n".join([G3 + "engine ready | qwen3.8-27b/groupwise-int",
                     G3 + "capacity | KV 65,536 tokens, rk8v4, explicit | pages 1,024/2,048 | runtime 2.50 GiB "
                          "| free 3.40 GiB | lanes 2"])
    ledger = ADAPTER.parse_ledger(log)
    assert ledger["model_name"] == "qwen3.8-27b/groupwise-int"
    assert (ledger["kv_tokens"], ledger["kv_dtype"], ledger["kv_capacity_mode"]) == (65536, "rk8v4", "explicit")
    assert (ledger["kv_pages"], ledger["kv_max_pages"]) == (1024, 2048)
    assert ledger["runtime_bytes"] == round(2.5 * GIB) and ledger["free_after_startup_bytes"] == round(3.4 * GIB)
    assert "ready_s" not in ledger
    assert ledger["unread"] == ["lanes 2 (line 2)"]  # the unknown segment is listed, not dropped


def test_ledger_g1_derives_slack_when_missing() -> None:
    line = ("[2026-08-20 10:00:00.123] [info] ninfer-serve: KV capacity auto resolved=4096 tokens pages=64/128 "
            "runtime=1.50 GiB free-after-weights=3.00 GiB")  # IF §2.2 format, fields cut short (rendered)
    ledger = ADAPTER.parse_ledger(line)
    assert ledger["slack_bytes"] == round(3.0 * GIB) - round(1.5 * GIB)
    assert ledger["slack_bytes_resolution_bytes"] == 2 * round(GIB / 100)


# ---------------------------------------------------------------------------------------------
# Throughput lines
# ---------------------------------------------------------------------------------------------

def test_throughput_g1() -> None:
    line = ("[2026-08-20 10:05:00.000] [info] ninfer-serve: throughput interval=5.002s prefill=0.0tok/s "
            "decode=71.2tok/s running=1 prefilling=0 decode_ready=1 waiting=0 avg_decode_batch=1.00")  # IF §2.2
    assert ADAPTER.parse_throughput(line) == {"interval_s": 5.002, "prefill_tok_s": 0.0, "decode_tok_s": 71.2,
                                              "running": 1, "prefilling": 0, "decode_ready": 1, "waiting": 0,
                                              "batch": 1.0}
    idle = line.replace("avg_decode_batch=1.00", "avg_decode_batch=n/a")  # IF §2.2: `n/a` without rounds
    assert ADAPTER.parse_throughput(idle)["batch"] is None


def test_throughput_g2() -> None:
    line = ("[2026-09-01 12:05:00.000] [info] [ninfer-serve] throughput interval_ms=5000.123 computed_prefill_tokens=0 "
            "committed_decode_tokens=356 prefill_tokens_per_second=0.000 decode_tokens_per_second=71.200 running=1 "
            "prefilling=0 decode_ready=1 waiting=0 materializing=0 capture_pending=0 terminal_pending=0 "
            "host_active_ms=155.000 average_decode_batch=1.000")  # IF §2.3, verbatim after the prefix
    out = ADAPTER.parse_throughput(line)
    assert out == {"interval_s": pytest.approx(5.000123), "prefill_tok_s": 0.0, "decode_tok_s": 71.2,
                   "prefill_tokens": 0, "decode_tokens": 356, "running": 1, "prefilling": 0, "decode_ready": 1,
                   "waiting": 0, "materializing": 0, "capture_pending": 0, "terminal_pending": 0, "batch": 1.0,
                   "host_s": 0.155,
                   "host_pct": pytest.approx(3.09992, rel=1e-5)}


def test_throughput_g3() -> None:
    line = G3 + ("throughput | 5.0s | prefill 2.34k tok/s (11,712 tok) | decode 71.2 tok/s (356 tok) | running 1 "
                 "(decode-ready 1) | waiting 2 | batch 1.00 | host 3.1% (155 ms)")  # IF §2.4, verbatim
    assert ADAPTER.parse_throughput(line) == {
        "interval_s": 5.0, "prefill_tok_s": 2340.0, "prefill_tokens": 11712, "decode_tok_s": 71.2,
        "decode_tokens": 356, "running": 1, "prefilling": 0, "decode_ready": 1, "waiting": 2, "batch": 1.0,
        "host_pct": 3.1, "host_s": 0.155, "materializing": 0, "terminal_pending": 0}


def test_throughput_g3_omitted_clauses_mean_zero() -> None:
    # IF §2.4 clause rules: prefill/decode/waiting/materializing/terminal-pending only when nonzero, batch only
    # with decode rounds, `(prefill X, decode-ready Y)` parts only when nonzero (rendered).
    line = G3 + "throughput | 5.0s | prefill 812.4 tok/s (4,062 tok) | running 1 (prefill 1) | host 0.9% (45.0 ms)"
    out = ADAPTER.parse_throughput(line)
    assert out["prefill_tok_s"] == 812.4 and out["prefill_tokens"] == 4062
    assert (out["decode_tok_s"], out["decode_tokens"], out["waiting"], out["batch"]) == (0.0, 0, 0, None)
    assert (out["materializing"], out["terminal_pending"], out["decode_ready"]) == (0, 0, 0)
    assert out["prefilling"] == 1 and out["running"] == 1 and out["host_s"] == pytest.approx(0.045)
    assert "unread" not in out


def test_non_throughput_lines_are_not_throughput() -> None:
    assert ADAPTER.parse_throughput(G3 + "warmup complete | 850 ms") is None
    assert ADAPTER.parse_throughput("ninfer-serve: warming up...") is None


# ---------------------------------------------------------------------------------------------
# Diagnosis
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "code"), [
    # FR §2.5 error table, symptoms verbatim:
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", "driver_missing"),
    ("not supported by open nvidia.ko ... (GSP)", "open_kernel_module"),
    ("ninfer-serve: error while loading shared libraries: libcudart.so.12: cannot open shared object file: "
     "No such file or directory", "cuda_runtime_missing"),
    ("CUDA error: cudaErrorCompatNotSupportedOnDevice", "compat_libcuda"),
    ("error: artifact magic is not NInfer v2", "artifact_container_mismatch"),
    ("error: artifact magic is not NInfer v1 or v2", "artifact_container_mismatch"),
    ("error: minimum Engine runtime reservation requires 9838038272 bytes in addition to 1073741824 bytes of "
     "automatic headroom, but only 10000000000 bytes are available after weights", "insufficient_memory"),
    ('{"error":{"message":"inference request expired before submission","type":"server_error","param":null,'
     '"code":"request_queue_timeout"}}', "request_queue_timeout"),  # FR §2.5 `503 request_queue_timeout`; body IF §3.2
    ("400 context_length_exceeded: prepared prompt exceeds Engine max_context 131072", "context_length_exceeded"),
    # IF §3 engine errors (verbatim patterns, values rendered):
    ("error: failed to bind 127.0.0.1:8080", "port_in_use"),
    ('[2026-09-01 12:00:00.123] [error] [ninfer-serve] server status=failed phase=bind host="127.0.0.1" port=8080',
     "port_in_use"),
    (G3 + "cannot bind 127.0.0.1:8080", "port_in_use"),
    ("error: unknown argument: --kv-capacity", "unknown_argument"),
    ("ninfer-serve: unknown argument: --log-level", "unknown_argument"),
    ("/models/q.ninfer: NInfer v2 artifact is not supported. Upgrade to v3 with: python3 "
     "tools/upgrade_ninfer_v2_to_v3.py INPUT.ninfer OUTPUT.ninfer", "artifact_v2_on_v3_reader"),
    ("NInfer artifact v1 is no longer supported; migrate it with: python3 -m tools.artifact.migrate_v1_to_v2 "
     "<artifact>", "artifact_v1_on_v2_reader"),
    ("/models/q.ninfer: expected NInfer v3 entry magic", "artifact_not_v3"),
    ("NInfer accepts only .ninfer artifacts", "artifact_extension"),
    ("declared JSON or payload start extends beyond the file", "artifact_corrupt"),
    ("artifact identity 'qwen3.8-27b/nvfp4' has no registered target for this device", "no_target"),
    ("Qwen3.6 family runtime requires compute capability 12.0", "wrong_gpu"),
    ("model weights and requested context require 20000000000 bytes of device memory (weights 17490001920, "
     "sequence/workspace/graphs 2509998080), but only 19000000000 bytes are free before loading weights",
     "insufficient_memory"),
    ("model weights require 21474836480 bytes of device memory, but only 16000000000 bytes are free before "
     "loading weights", "insufficient_memory"),
    ("requested Engine runtime reservation requires 12000000000 bytes, but only 11000000000 bytes are available "
     "for runtime capacity", "insufficient_memory"),
    ("cudaMallocHost failed: out of memory", "pinned_host_memory"),
    ("--kv-capacity must be at least --max-context", "kv_capacity_too_small"),
    ("kv_capacity is outside the usable range for max_context and max_concurrency", "kv_capacity_range"),
    ("--spec mtp requires --draft-tokens in [1,5]", "option_invalid"),
    ("--prefill-chunk must be a positive multiple of 128", "option_invalid"),
    ("--draft-tokens and --lm-head-draft require --spec mtp|dflash", "option_invalid"),
    ("failed to open request JSONL log for append: /runs/x/ninfer.jsonl", "request_log_open"),
    ("ninfer-serve: warmup failed (continuing): CUDA error", "warmup_failed_continuing"),
    (G3 + "req#7 rejected during prepare | openai-chat non-stream | HTTP 429 | server overloaded | messages 2",
     "server_overloaded"),  # IF §2.4 (verbatim)
    ("[2026-08-20 10:00:00.123] [warning] ninfer-serve: [req 4] rejected phase=prepare protocol=openai_chat_completions"
     " non-stream msgs=2 media=0 tools=0 status=503 code=request_queue_timeout message=inference request expired "
     "before submission", "request_queue_timeout"),  # IF §2.2 rejected-line format, rendered
    ('{"error":{"message":"model \'gpt-4\' not found","type":"invalid_request_error","param":"model",'
     '"code":"model_not_found"}}', "model_not_found"),  # IF §3.2
    ('{"error":{"message":"Vision is disabled for this server","type":"invalid_request_error","param":"messages",'
     '"code":"vision_disabled"}}', "vision_disabled"),  # IF §3.2
    ('{"error":{"message":"missing or invalid API key","type":"invalid_request_error","param":null,'
     '"code":"invalid_api_key"}}', "invalid_api_key"),  # IF §3.2
    ("prepared prompt has 140000 tokens, exceeding Engine max_context 131072", "context_length_exceeded"),
    ('{"error":{"message":"inference request queue is full","type":"rate_limit_error","param":null,'
     '"code":"server_overloaded"}}', "server_overloaded"),  # IF §3.2
    ("inference engine is unavailable", "service_unavailable"),
])
def test_diagnosis(line: str, code: str) -> None:
    found = ADAPTER.diagnose(f"ninfer-serve: loading model...\n{line}\n")
    assert found is not None and found.code == code
    assert found.cause and found.fix and found.evidence == line


def test_no_diagnosis_on_a_clean_start() -> None:
    assert ADAPTER.diagnose(G3_LOG) is None and ADAPTER.diagnose(G1_LOG) is None


def test_unknown_argument_names_the_flag() -> None:
    found = ADAPTER.diagnose("error: unknown argument: --kv-capacity\nusage: ninfer-serve ARTIFACT [options]")
    assert found is not None and "--kv-capacity" in found.cause


# ---------------------------------------------------------------------------------------------
# Memory refusals
# ---------------------------------------------------------------------------------------------

def test_refusal_auto_minimum() -> None:
    # IF §3.1 / CM §1.4 message; B_min 9,838,038,272 is the ashalliants figure (CM §1.7); available illustrative.
    log = ("error: minimum Engine runtime reservation requires 9838038272 bytes in addition to 1073741824 bytes of "
           "automatic headroom, but only 10000000000 bytes are available after weights")
    out = parse_refusal(log)
    assert out is not None
    assert (out["kind"], out["runtime_reservation_bytes"], out["headroom_bytes"]) == ("auto_minimum", 9838038272,
                                                                                       1073741824)
    assert (out["required_bytes"], out["available_bytes"]) == (9838038272 + 1073741824, 10000000000)
    assert out["short_by_bytes"] == 9838038272 + 1073741824 - 10000000000
    assert out["required_bytes_resolution_bytes"] == out["available_bytes_resolution_bytes"] == 1
    assert ADAPTER.parse_refusal(log) == out


def test_refusal_kinds() -> None:
    explicit = parse_refusal("requested Engine runtime reservation requires 12000000000 bytes, but only "
                             "11000000000 bytes are available for runtime capacity")
    assert explicit is not None and (explicit["kind"], explicit["required_bytes"], explicit["available_bytes"],
                                     explicit["runtime_reservation_bytes"]) == ("explicit", 12000000000, 11000000000,
                                                                                12000000000)
    g0 = parse_refusal("model weights and requested context require 20000000000 bytes of device memory (weights "
                       "17490001920, sequence/workspace/graphs 2509998080), but only 19000000000 bytes are free "
                       "before loading weights")
    assert g0 is not None and (g0["kind"], g0["required_bytes"], g0["available_bytes"], g0["weights_bytes"],
                               g0["runtime_reservation_bytes"]) == ("sequence_budget", 20000000000, 19000000000,
                                                                    17490001920, 2509998080)
    headroom = parse_refusal("automatic KV headroom requires 1073741824 bytes, but only 900000000 bytes are "
                             "available after weights")
    assert headroom is not None and (headroom["kind"], headroom["required_bytes"],
                                     headroom["available_bytes"]) == ("auto_headroom", 1073741824, 900000000)
    graphs = parse_refusal("CUDA Graph preparation consumed 180000000 bytes, exceeding the planned allowance of "
                           "171966464 bytes")  # CM §1.4 (program_impl.h), values rendered
    assert graphs is not None and (graphs["required_bytes"], graphs["available_bytes"]) == (180000000, 171966464)
    assert parse_refusal(G3_LOG) is None


def test_refusal_last_one_wins() -> None:
    log = ("model weights require 2 bytes of device memory, but only 1 bytes are free before loading weights\n"
           "requested Engine runtime reservation requires 5 bytes, but only 4 bytes are available for runtime capacity")
    out = parse_refusal(log)
    assert out is not None and out["kind"] == "explicit" and out["required_bytes"] == 5


# ---------------------------------------------------------------------------------------------
# Validation (each rule has a failing case) and argv
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "match"), [
    ({"fork": G0_BUILD, "kv": {"capacity": 8192}}, "serve.kv.capacity needs --kv-capacity, which Neroued/ninfer@"),
    ({"fork": G1_BUILD, "log_level": "debug"}, "serve.log_level needs --log-level, which geoffwatts/ninfer-v100 "),
    ({"fork": G1_BUILD, "extra_args": ["--log-level", "debug"]}, "serve.extra_args has --log-level"),
    ({"fork": G2_BUILD, "arch": "sm_86", "kv": {"dtype": "rk8v4"}}, "serve.kv.dtype = 'rk8v4': must be one of bf16"),
    ({"fork": G1_BUILD, "arch": "sm_86", "kv": {"dtype": "k8v4"}}, "must be one of bf16, int8"),
    ({"fork": "Don-Chad/ninfer-3090", "arch": "sm_86", "kv": {"dtype": "fp8"}},
     r"must be one of bf16, int8, nvfp4, k8v4, rk8v4, rk4v4 \(Don-Chad/ninfer-3090@0.6.1 on sm_86\)"),
    ({"fork": "hamawang/ninfer-v100-20260916", "kv": {"dtype": "fp8"}}, "must be one of bf16, int8"),
    ({"kv": {"capacity": 4096}}, "must be at least serve.max_context"),
    ({"max_concurrency": 2, "kv": {"capacity": 8192 * 2 + 64}}, "must lie in 8192..16384 tokens"),
    ({"max_concurrency": 9}, "must be in 1..8"),
    ({"fork": G0_BUILD, "max_concurrency": 2}, "which Neroued/ninfer@5ea3242 does not have"),
    ({"spec": {"method": "mtp", "draft_tokens": 6}}, "must be in 1..5 for --spec mtp"),
    ({"spec": {"method": "mtp"}}, "must be in 1..5 for --spec mtp"),
    ({"spec": {"method": "dflash2", "draft_tokens": 4}}, "must be one of mtp, dflash"),
    ({"spec": {"lm_head_draft": True}}, "serve.spec.lm_head_draft = true: needs serve.spec.method"),
    ({"spec": {"draft_tokens": 3}}, "needs serve.spec.method"),
    ({"prefill_chunk": 1000}, "multiple of 128"),
    ({"max_context": 300000, "kv": {"capacity": 300000}}, "native context"),
    ({"fork": "plus1998/NInfer-V100-Duo", "vision_max_tokens": 2048}, "needs serve.vision: true"),
    # seed 004 §六.5: on the TP2 fork, image requests fail silently without the budget beside --vision
    ({"fork": "plus1998/NInfer-V100-Duo", "vision": True}, "serve.vision = true: needs serve.vision_max_tokens on "
     "this build, or its image requests fail silently .seed 004 §六.5"),
    ({"tensor_parallel": 2, "gpu_devices": [0, 1]},
     "needs --tp, which geoffwatts/ninfer-v100 does not have; builds that have it: ValerioDolci/ninfer-tp2, "
     "plus1998/NInfer-V100-Duo@19bf15b"),
    ({"fork": "plus1998/NInfer-V100-Duo", "tensor_parallel": 2, "gpu_devices": [0]}, "two device indices"),
    ({"fork": "ValerioDolci/ninfer-tp2", "tensor_parallel": 2, "gpu_devices": [0, 1], "arch": "sm_120",
      "kv": {"dtype": "k8v4"}}, "serve.kv.dtype = 'k8v4'"),
    ({"gpu_devices": [0, 1]}, "must name one device without tensor parallel"),
])
def test_validation_rejects(kwargs: dict[str, Any], match: str) -> None:
    head = {key: kwargs.pop(key) for key in ("fork", "arch") if key in kwargs}
    p = profile(**head, **kwargs)
    with pytest.raises(ProfileError, match=match):
        argv_of(p)


def test_a_vllm_field_in_a_ninfer_profile_is_an_unknown_field() -> None:
    with pytest.raises(ProfileError, match="serve.gpu_memory_utilization: unknown field; an option of vllm, not of "
                                           "ninfer; allowed: "):
        profile(gpu_memory_utilization=0.9)


def test_fork_widens_ranges() -> None:
    # Flo5k5 allows MTP windows to 7 and FP8 KV on sm_70 (IF §1.1, §8).
    p = profile(fork="Flo5k5/ninfer-v100-sm70", spec={"method": "mtp", "draft_tokens": 7}, kv={"dtype": "fp8"})
    assert argv_of(p)[-6:] == ["--kv-dtype", "fp8", "--spec", "mtp", "--draft-tokens", "7"]


def test_one_option_spelled_three_ways() -> None:
    # The image token budget: --vision-max-tokens (plus1998), --max-vision-tokens (ValerioDolci), IF §1.3.
    duo = argv_of(profile(fork="plus1998/NInfer-V100-Duo", vision=True, vision_max_tokens=2048))
    tp2 = argv_of(profile(fork="ValerioDolci/ninfer-tp2", arch="sm_120", vision=True, vision_max_tokens=2048))
    assert duo[-3:] == ["--vision", "--vision-max-tokens", "2048"]
    assert tp2[-3:] == ["--vision", "--max-vision-tokens", "2048"]


def test_queue_timeout_trap_warns() -> None:
    p = profile(max_context=131072, max_concurrency=2, kv={"capacity": 262144})
    with pytest.warns(UserWarning, match="503 request_queue_timeout"):
        argv_of(p)
    with pytest.warns(UserWarning, match="pending_timeout_ms is 30000"):
        argv_of(profile(max_context=131072, max_concurrency=2, pending_timeout_ms=30000))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        argv_of(profile(max_context=131072, max_concurrency=2, pending_timeout_ms=600000))
        argv_of(profile(max_context=131072, max_concurrency=1))  # one slot: nothing queues behind a prefill
        argv_of(profile(max_context=8192, max_concurrency=2))  # short contexts prefill within the deadline


def test_argv_of_a_single_sequence_build_has_no_pool_flags() -> None:
    assert argv_of(profile(fork=G0_BUILD, kv={"dtype": "int8"}, model_id="qwen3.6-27b")) == [
        "ninfer-serve", "/m/x.ninfer", "--host", "127.0.0.1", "--port", "8088", "--model-id", "qwen3.6-27b",
        "--max-context", "8192", "--kv-dtype", "int8"]


def test_argv_auto_capacity_and_request_log(tmp_path: Path) -> None:
    p = profile(fork=G3_BUILD, kv={"capacity": "auto"}, request_log_jsonl=str(tmp_path / "r.jsonl"),
                log_stats_interval_ms=5000, gpu_devices=[1], thinking=False)
    assert argv_of(p) == ["ninfer-serve", "/m/x.ninfer", "--host", "127.0.0.1", "--port", "8088",
                          "--device", "1", "--max-context", "8192", "--kv-capacity", "auto",
                          "--max-concurrency", "1", "--log-stats-interval-ms", "5000", "--no-thinking",
                          "--request-log-jsonl", str(tmp_path / "r.jsonl")]


def test_api_key_is_in_argv_and_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("T_NINFER_KEY", "s3cret")
    argv = argv_of(profile(api_key_env="T_NINFER_KEY"))
    assert argv[-2:] == ["--api-key", "s3cret"]
    assert "s3cret" not in ADAPTER.redact(argv) and ADAPTER.redact(argv)[-1] == "***"


def test_a_build_and_a_binary_are_required() -> None:
    data = {"name": "t", "engine": {"kind": "ninfer"}, "artifact": {"url": "https://example.invalid/m.ninfer"}}
    bare = validate_profile(data)
    with pytest.raises(ProfileError, match="engine.fork is not set and no ninfer-serve binary is at hand"):
        ADAPTER.build(bare)
    unknown = validate_profile({**data, "engine": {"kind": "ninfer", "fork": "someone/ninfer-x"}})
    with pytest.raises(ProfileError, match="'someone/ninfer-x' is not in the NInfer build table"):
        ADAPTER.build(unknown)
    with pytest.raises(ProfileError, match="engine.binary is not set"):
        ADAPTER.binary(bare)
    missing = validate_profile({**data, "engine": {"kind": "ninfer", "binary": "/nonexistent/ninfer-serve"}})
    with pytest.raises(ToolMissing, match="/nonexistent/ninfer-serve"):
        ADAPTER.binary(missing)


def test_a_build_outside_the_table_is_read_from_its_help(tmp_path: Path) -> None:
    fake = tmp_path / "ninfer-serve"  # a real executable printing the live G1 build's --help
    fake.write_text(f"#!/bin/sh\ncat '{LIVE / 'help.txt'}'\n")
    fake.chmod(0o755)
    data = {"name": "t", "engine": {"kind": "ninfer", "binary": str(fake)},
            "artifact": {"url": "https://example.invalid/m.ninfer"}}
    build = ADAPTER.build(validate_profile(data))
    assert build.name == "detected from --help" and build.options == BUILDS["ziworkslab/ninfer-3090-ubuntu"].options


# ---------------------------------------------------------------------------------------------
# Readiness, containers, per-request data, Docker
# ---------------------------------------------------------------------------------------------

def test_readiness() -> None:
    assert ADAPTER.is_ready(200, '{"status":"ok"}')  # IF §4
    # IF §3.1: G3 answers 503 with this body while loading.
    assert not ADAPTER.is_ready(503, '{"error":{"message":"The model is still loading. Retry shortly.",'
                                     '"type":"service_unavailable","param":null,"code":"model_loading"}}')
    assert not ADAPTER.is_ready(200, "<html>")


def test_reported_context() -> None:
    body = {"object": "list", "data": [{"id": "qwen3.8-27b", "object": "model", "created": 1, "owned_by": "ninfer",
                                        "max_model_len": 131072}]}  # IF §4, G2/G3
    assert ADAPTER.reported_context(body) == 131072
    assert ADAPTER.reported_context({"data": [{"id": "qwen3.6-27b"}]}) is None  # G0/G1


@pytest.mark.parametrize(("fork", "versions"), [
    (G0_BUILD, {1}), (G1_BUILD, {2}), (G2_BUILD, {2}), (G3_BUILD, {3}), ("ziworkslab/ninfer-3090-ubuntu", {1, 2}),
    ("hamawang/ninfer-v100-20260916", {2}), ("Don-Chad/ninfer-3090", {1, 2}), ("Flo5k5/ninfer-v100-sm70", {3}),
])
def test_accepted_container_versions(fork: str, versions: set[int]) -> None:
    assert ADAPTER.accepted_container_versions(profile(fork=fork)) == versions


def test_apis_per_build() -> None:
    assert ADAPTER.served_apis(profile(fork=G0_BUILD)) == {"chat", "messages"}
    assert ADAPTER.served_apis(profile(fork=G1_BUILD)) == {"chat", "messages", "responses"}


def test_server_timings_g3() -> None:
    # IF §4: G3 `timings` object; cache_n + prompt_n = usage.prompt_tokens; values rendered.
    body = {"usage": {"prompt_tokens": 1234, "completion_tokens": 256,
                      "prompt_tokens_details": {"cached_tokens": 1000}},
            "timings": {"cache_n": 1000, "prompt_n": 234, "prompt_ms": 100.0, "prompt_per_token_ms": 0.427,
                        "prompt_per_second": 2340.0, "predicted_n": 256, "predicted_ms": 3581.0,
                        "predicted_per_token_ms": 13.99, "predicted_per_second": 71.2, "draft_n": 300,
                        "draft_n_accepted": 200}}
    assert ADAPTER.server_timings(body) == {
        "cached_tokens_server": 1000, "prompt_tokens_server": 234, "prompt_s_server": 0.1,
        "prefill_tok_s_server": 2340.0, "decode_tokens_server": 256, "decode_s_server": 3.581,
        "decode_tok_s_server": 71.2, "drafted_tokens_server": 300, "accepted_tokens_server": 200,
        "acceptance_server": pytest.approx(2 / 3)}


def test_server_timings_g2_and_g0() -> None:
    g2 = {"usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
                    "prompt_tokens_details": {"cached_tokens": 8},
                    "completion_tokens_details": {"reasoning_tokens": 0}}}  # IF §4 G2/G3 usage
    assert ADAPTER.server_timings(g2) == {"cached_tokens_server": 8}
    responses = {"usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 3}}
    assert ADAPTER.server_timings(responses) == {"cached_tokens_server": 4}
    assert ADAPTER.server_timings({"usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}) == {}


def test_token_count_endpoint() -> None:
    path, body = ADAPTER.tokenize_request("hello")
    assert path == "/v1/messages/count_tokens" and body["messages"] == [{"role": "user", "content": "hello"}]
    assert ADAPTER.token_count({"input_tokens": 9}) == 9  # IF §4: count -> {"input_tokens":N}


def test_docker_files() -> None:
    files = ADAPTER.docker_files(profile(arch="sm_70"))
    assert "FROM nvidia/cuda:12.8.0-runtime-ubuntu24.04" in files["Dockerfile"]
    assert "compat" not in files["Dockerfile"].split("FROM", 1)[1]
    assert set(files) == {"Dockerfile"}  # no power cap, no unit
    data = {"name": "g", "engine": {"kind": "ninfer", "fork": G3_BUILD, "cuda_runtime": "13.1.0"},
            "artifact": {"url": "https://example.invalid/m.ninfer"},
            "gpu": {"name": "NVIDIA GeForce RTX 5090", "power_limit_w": 450}, "serve": {"gpu_devices": [1]}}
    files = ADAPTER.docker_files(validate_profile(data))
    assert "FROM nvidia/cuda:13.1.0-runtime-ubuntu24.04" in files["Dockerfile"]
    assert "RUN rm -rf /usr/local/cuda-13.1/compat /usr/local/cuda/compat" in files["Dockerfile"]
    unit = files["nvidia-powerlimit.service"]
    assert "Type=oneshot" in unit and "ExecStart=/usr/local/bin/nvidia-powerlimit.sh 450" in unit
    assert "WantedBy=multi-user.target" in unit and 'nvidia-smi -i 1 -pl "${1:-450}"' in files["nvidia-powerlimit.sh"]


def test_docker_argv_renumbers_devices_and_mounts(tmp_path: Path) -> None:
    data = {"name": "tp", "engine": {"kind": "ninfer", "fork": "plus1998/NInfer-V100-Duo",
                                     "docker_image": "img:1"},
            "artifact": {"url": "https://example.invalid/m.ninfer"}, "gpu": {"arch": "sm_70"},
            "serve": {"docker": True, "tensor_parallel": 2, "gpu_devices": [2, 3], "max_context": 8192,
                      "request_log_jsonl": str(tmp_path / "logs" / "req.jsonl")}}
    argv = docker_argv(validate_profile(data), ADAPTER, Path("/data/models/m.ninfer"))
    assert argv[argv.index("--gpus") + 1] == '"device=2,3"'
    assert f"{tmp_path / 'logs'}:/logs" in argv and "/data/models:/models:ro" in argv
    assert argv[argv.index("--entrypoint") + 1:argv.index("--entrypoint") + 4] == ["ninfer-serve", "img:1",
                                                                                  "/models/m.ninfer"]
    assert argv[argv.index("--devices") + 1] == "0,1" and argv[argv.index("--host") + 1] == "0.0.0.0"
    assert argv[argv.index("--request-log-jsonl") + 1] == "/logs/req.jsonl"


# ---------------------------------------------------------------------------------------------
# --request-log-jsonl (fixtures built from the IF §5 schema tables; see tests/data/ninfer/README.md)
# ---------------------------------------------------------------------------------------------

def test_request_log_v2() -> None:
    events = read_events(NINFER_DATA / "request_log_v2.jsonl")
    rows = request_rows(events)
    assert [(r["request_id"], r["status"]) for r in rows] == [(1, "ok"), (2, "errored")]
    done = rows[0]
    assert done["prompt_tokens_server"] == 25 and done["cached_tokens_server"] == 0
    assert done["prompt_s_server"] == 0.08 and done["prefill_tok_s_server"] == pytest.approx(312.5)
    assert done["decode_tokens_server"] == 56 and done["decode_s_server"] == 0.7264
    assert done["decode_tok_s_server"] == pytest.approx(77.09, abs=0.01)  # the stderr example says 77.1
    assert done["ttft_s_server"] == pytest.approx(0.082) and done["e2e_s_server"] == 0.81
    assert done["queue_s_server"] is None  # v2 has no queue timing
    assert (done["drafted_tokens_server"], done["accepted_tokens_server"]) == (51, 39)
    assert done["acceptance_server"] == pytest.approx(39 / 51) and done["spec_rounds_server"] == 17
    assert done["accepted_per_position_server"] == [16, 13, 10] and done["finish_reason"] == "stop_token"
    assert (done["started_unix_ms"], done["ended_unix_ms"]) == (1753350100000, 1753350100810)
    assert rows[1]["error"] == "prepared prompt exceeds Engine context capacity" and rows[1]["protocol"] == \
        "anthropic_messages"
    ledger = ledger_from_events(events)
    assert ledger["weights_bytes"] == 17490001920 and ledger["kv_dtype"] == "int8-group64"
    assert ledger["kv_payload_bytes"] == 276824064 and ledger["max_context"] == 8192
    assert ledger["listen_url"] == "http://127.0.0.1:8080" and ledger["weights_bytes_resolution_bytes"] == 1


def test_request_log_v9() -> None:
    events = read_events(NINFER_DATA / "request_log_v9.jsonl")
    rows = request_rows(events)
    assert [(r["request_id"], r["status"], r["http_status"]) for r in rows] == [(1, "ok", 200), (2, "errored", 503),
                                                                               (3, "ok", 200)]
    assert rows[1]["error_code"] == "request_queue_timeout"
    cold, warm = rows[0], rows[2]
    assert cold["ttft_s_server"] == 16.47 and warm["ttft_s_server"] == 0.13  # v9 reports ttft itself
    assert cold["prefill_tok_s_server"] == pytest.approx(16384 / 16.38)
    assert warm["cached_tokens_server"] == 16384 and warm["prefill_tok_s_server"] == pytest.approx(16 / 0.12)
    assert warm["prefix_reuse_path"] == "append_frontier" and warm["acceptance_server"] == pytest.approx(0.5)
    assert cold["decode_tok_s_server"] == pytest.approx(127 / 1.905)
    ledger = ledger_from_events(events)
    assert (ledger["kv_tokens"], ledger["kv_pages"], ledger["kv_max_pages"], ledger["kv_capacity_mode"]) == (
        262144, 4096, 4096, "explicit")
    assert ledger["runtime_min_bytes"] == 9838038272 and ledger["kv_page_group_bytes"] == 2297856
    assert ledger["free_after_weights_bytes"] == 12000000000 and ledger["slack_bytes"] == 2161961728
    assert ledger["weights_bytes"] == 21474836480 and ledger["draft_tokens"] == 3
    assert throughput_rows(events) == [{"t_unix_ms": 1755680105000, "interval_s": 5.002, "prefill_tokens": 0,
                                        "decode_tokens": 356, "prefill_tok_s": 0.0, "decode_tok_s": 71.2,
                                        "running": 1, "prefilling": 0, "decode_ready": 1, "waiting": 0, "batch": 1.0}]


def test_g1_queue_is_the_engines_ttft_less_its_parts() -> None:
    """NInfer G1 writes no queue field; its TTFT runs from arrival. In the captured run (tests/data/ninfer_live/
    g1-h200-2x120k: a real ninfer-serve, two 122,880-token prompts on two lanes) the TTFT less prepare, vision and
    prefill is under 1 ms for every request served alone and 67.11 s for the second lane, which waited out the
    first one's 66.2 s prefill (the server log's waiting=1 lines span that minute)."""
    rows = {row["request_id"]: row for row in request_rows(read_events(
        DATA / "ninfer_live" / "g1-h200-2x120k" / "run" / "engine-request-log.jsonl"))}
    assert rows[7]["queue_s_server"] == pytest.approx(67.1107, abs=1e-3)
    assert all(row["queue_s_server"] < 0.001 for request_id, row in rows.items() if request_id != 7)


def test_request_log_v21_and_torn_tail() -> None:
    events = read_events(NINFER_DATA / "request_log_v21.jsonl")  # its last line is cut mid-write
    rows = request_rows(events)
    assert len(rows) == 1
    row = rows[0]
    assert row["queue_s_server"] == 49.0 and row["reasoning_tokens_server"] == 700
    assert row["computed_prefill_tokens_server"] == 200 and row["prefill_tok_s_server"] == pytest.approx(500.0)
    assert row["decode_tok_s_server"] == pytest.approx(100.0) and row["acceptance_server"] == pytest.approx(7 / 9)
    assert ledger_from_events(events) == {}


def test_request_log_refuses_other_files(tmp_path: Path) -> None:
    other = tmp_path / "x.jsonl"
    other.write_text(json.dumps({"t_mono": 1.0, "source": "nvml"}) + "\n" + json.dumps({"t": 2}) + "\n")
    with pytest.raises(NinferkitError, match="artifact_type"):
        read_events(other)
    other.write_text("not json\n{}\n")
    with pytest.raises(NinferkitError, match="line 1 is not JSON"):
        read_events(other)


def test_join_by_request_id_then_time() -> None:
    rows = request_rows(read_events(NINFER_DATA / "request_log_v9.jsonl"))
    clients = [
        {"cell_id": "a", "status": "ok", "started_utc": "2025-08-20T08:55:00.050Z"},  # 1755680100.050 s: request 1
        # (not the 503 logged 450 ms later: the outcome differs)
        {"cell_id": "b", "server_request_id": 3},
        {"cell_id": "c", "started_utc": "2025-08-20T10:30:00Z"},  # nothing near it
    ]
    joined = join_client_rows(clients, rows)
    assert joined[0]["server_join"] == "time" and joined[0]["ttft_s_server"] == 16.47
    assert joined[1]["server_join"] == "request_id" and joined[1]["cached_tokens_server"] == 16384
    assert joined[2]["server_join"] is None and "ttft_s_server" not in joined[2]
    assert joined[0]["cell_id"] == "a" and clients[0].get("server_join") is None  # inputs are not modified


# ---------------------------------------------------------------------------------------------
# Per-request "done" lines on stderr
# ---------------------------------------------------------------------------------------------

def test_request_done_g0() -> None:
    line = ("ninfer-serve: [req 1] done finish=stop_token prompt=25 gen=57 cache=0 ttft=80ms prefill=312.5tok/s "
            "decode=77.1tok/s wall=0.81s speculative=off")  # IF §2.1, verbatim
    assert ADAPTER.parse_request_done(line) == {
        "request_id": 1, "finish_reason": "stop_token", "prompt_tokens_server": 25, "completion_tokens_server": 57,
        "decode_tokens_server": 56, "cached_tokens_server": 0, "ttft_s_server": 0.08, "prefill_tok_s_server": 312.5,
        "decode_tok_s_server": 77.1, "e2e_s_server": 0.81, "spec_backend_server": "none", "acceptance_server": None}
    spec = line.replace("speculative=off", "speculative=mtp 3.40tok/round (79.9%)")  # IF §2.1 speculative clause
    out = ADAPTER.parse_request_done(spec)
    assert out is not None and out["acceptance_server"] == pytest.approx(0.799)
    assert out["tokens_per_round_server"] == 3.4 and out["spec_backend_server"] == "mtp"


def test_request_done_g1_with_reuse_and_na_decode() -> None:
    # IF §2.2 done-line format with `reuse=`; values rendered; decode `n/a` per IF §2.1.
    line = ("[2026-08-20 10:01:00.000] [info] ninfer-serve: [req 9] done finish=output_limit prompt=16400 gen=1 "
            "cache=16384 reuse=append_frontier ttft=130ms prefill=133.3tok/s decode=n/a wall=0.14s speculative=off")
    out = ADAPTER.parse_request_done(line)
    assert out is not None
    assert (out["request_id"], out["cached_tokens_server"], out["prefix_reuse_path"]) == (9, 16384, "append_frontier")
    assert out["decode_tok_s_server"] is None and out["ttft_s_server"] == 0.13 and out["e2e_s_server"] == 0.14


def test_request_done_g2() -> None:
    # IF §2.3 request line fields; values rendered.
    line = ('[2026-09-01 12:01:00.000] [info] [ninfer-serve] request id=4 status=done prompt_tokens=8192 '
            'completion_tokens=128 prefix_cache_hit_tokens=0 prefix_reuse_path="root" ttft_ms=8123.500 '
            'duration_ms=9900.000 prefill_tokens_per_second=1008.500 decode_tokens_per_second=71.300')
    assert ADAPTER.parse_request_done(line) == {
        "request_id": 4, "prompt_tokens_server": 8192, "completion_tokens_server": 128, "cached_tokens_server": 0,
        "decode_tokens_server": 127, "prefill_tok_s_server": 1008.5, "decode_tok_s_server": 71.3,
        "ttft_s_server": 8.1235, "e2e_s_server": 9.9, "prefix_reuse_path": "root"}
    assert ADAPTER.parse_request_done(line.replace("status=done", "status=submitted")) is None


def test_request_done_g3() -> None:
    line = G3 + ("req#3 done | openai-chat | stop token | prompt 1,234 | output 256 | cache 1,000 (81.0%, endpoint) "
                 "| TTFT 120 ms | total 3.4s | queue 15.0 ms | prefill 2.34k tok/s | decode 71.2 tok/s | "
                 "mtp accepted 200/300 (66.7%)")  # IF §2.4, verbatim
    assert ADAPTER.parse_request_done(line) == {
        "request_id": 3, "protocol": "openai-chat", "finish_reason": "stop token", "prompt_tokens_server": 1234,
        "completion_tokens_server": 256, "decode_tokens_server": 255, "cached_tokens_server": 1000,
        "prefix_reuse_path": "endpoint",
        "ttft_s_server": pytest.approx(0.12), "e2e_s_server": 3.4, "queue_s_server": pytest.approx(0.015),
        "prefill_tok_s_server": 2340.0, "decode_tok_s_server": 71.2, "spec_backend_server": "mtp",
        "accepted_tokens_server": 200, "drafted_tokens_server": 300, "acceptance_server": pytest.approx(2 / 3)}
    started = G3 + "req#3 started | openai-chat stream | 2 messages | max output 8,192 | thinking template default"
    assert ADAPTER.parse_request_done(started) is None


def test_a_warmup_that_g1_logs_and_ignores_leaves_a_healthy_start() -> None:
    # The live healthy start (ninfer-live/g1-h200/startup-errors/healthy_kv_auto_c2.log) with the warmup
    # line G0/G1 print when the warmup request fails and they go on serving, rendered from IF §2.1's format
    # (`warmup failed (continuing): <what>`; the capture's warmup did not fail), put before `listening on`.
    from ninferkit.server.diagnose import diagnose_log

    lines = (LIVE / "startup-errors" / "healthy_kv_auto_c2.log").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "listening on" in line)
    lines.insert(at, "[2026-12-01 14:25:30.300] [warning] ninfer-serve: warmup failed (continuing): CUDA error")
    report = diagnose_log("\n".join(lines) + "\n", ADAPTER)
    assert report["healthy"] and report["request_errors"] == ["warmup_failed_continuing"]


def test_a_rule_quotes_a_last_line_without_newline_whole() -> None:
    found = ADAPTER.diagnose("[2026-12-01 14:24:20.547] [error] ninfer-serve: failed to bind 127.0.0.1:18092")
    assert found is not None and found.evidence.endswith("failed to bind 127.0.0.1:18092")
    llama = get_adapter("llama_server").diagnose("couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8088")
    assert llama is not None and llama.evidence.endswith("port: 8088")
