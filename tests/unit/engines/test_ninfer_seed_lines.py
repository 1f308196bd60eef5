"""The field reports' NInfer lines, pasted as printed, read and diagnosed as the reports read them.

Data: tests/seed_excerpts.py quotes every NInfer log and error line of seeds 000, 003 and 004
(verbatim copies in tests/data/seeds/), each with its report and section. A lab user who pastes
what the report shows must get the report's numbers, and for each row of its error table the
report's remedy, written as the profile field to change.
"""

from __future__ import annotations

import re

import pytest

from ninferkit.engines import get_adapter
from ninferkit.engines.ninfer.logs import parse_ledger, parse_throughput, read_log
from ninferkit.engines.ninfer.numbers import duration_s
from ninferkit.server.diagnose import diagnose_log, every_diagnosis, throughput_summary
from tests import seed_excerpts as seeds
from tests.seed_excerpts import SEEDS, Excerpt

ADAPTER = get_adapter("ninfer")
GIB = 1024**3


def _lines_of(text: str, excerpt: Excerpt) -> set[int]:
    """The line numbers an excerpt spans in its seed (every place it is quoted)."""
    out: set[int] = set()
    for found in re.finditer(re.escape(excerpt.text), text):
        first = text.count("\n", 0, found.start()) + 1
        out |= set(range(first, first + excerpt.text.count("\n") + 1))
    return out


@pytest.mark.parametrize("excerpt", seeds.EXCERPTS, ids=lambda e: f"{e.seed[:3]}{e.section}")
def test_each_excerpt_is_verbatim(excerpt: Excerpt) -> None:
    assert excerpt.text in (SEEDS / excerpt.seed).read_text()


@pytest.mark.parametrize("seed", seeds.NINFER_SEEDS)
def test_the_excerpts_are_every_ninfer_line_of_the_reports(seed: str) -> None:
    # Every line of the report that a log reader or a diagnosis rule recognizes lies inside an excerpt,
    # and every line excerpt is recognized: nothing quoted is left out, nothing is quoted in vain.
    text = (SEEDS / seed).read_text()
    recognized = {line.number for line in read_log(text) if line.kind not in ("other", "usage")}
    recognized |= {n for entry in every_diagnosis(ADAPTER.diagnoses, text) for n in entry["lines"]}
    excerpts = [e for e in seeds.LINE_EXCERPTS if e.seed == seed]
    covered = set().union(*(_lines_of(text, e) for e in excerpts)) if excerpts else set()
    assert recognized <= covered
    for excerpt in excerpts:
        assert _lines_of(text, excerpt) & recognized, excerpt
    assert bool(excerpts) == (seed != seeds.SEED_004)  # seed 004 quotes no NInfer line


def test_startup_ledger_1_6_reads_the_reports_own_figures() -> None:
    # The report's §0 row "实测占用": weights 19.7 GiB, KV pool 262,144 tokens, runtime 10.8 GiB,
    # free after startup 1.21 GiB, ready 18.2 s; §0 command line: --kv-dtype int8, explicit pool.
    ledger = parse_ledger(seeds.LEDGER.text)
    assert ledger == {
        "model_name": "qwen3.8-27b/nvfp4", "ready_s": 18.2,
        "weights_bytes": round(19.7 * GIB), "weights_bytes_resolution_bytes": round(GIB / 10),
        "kv_tokens": 262144, "kv_dtype": "int8", "kv_capacity_mode": "explicit", "kv_pages": 4096,
        "kv_max_pages": 4096, "runtime_bytes": round(10.8 * GIB), "runtime_bytes_resolution_bytes": round(GIB / 10),
        "free_after_startup_bytes": round(1.21 * GIB), "free_after_startup_bytes_resolution_bytes": round(GIB / 100),
        "listen_url": "http://0.0.0.0:8080", "model_id": "qwen3.8-27b", "auth": "disabled"}
    report = diagnose_log(seeds.LEDGER.text, ADAPTER)
    assert report["healthy"] and report["errors"] == [] and report["unread"] == []
    assert report["build"]["log_format"] == "pipe"
    assert "hamawang/ninfer-v100-20260916@f17d37f" in report["build"]["builds"]


def test_startup_refusal_1_4_names_the_phase_the_reason_and_the_build() -> None:
    lines = read_log(seeds.STARTUP_REFUSED.text)
    assert [(line.kind, line.level) for line in lines] == [("error", "error"), ("error", "fatal")]
    assert lines[0].values["phase"] == "inspecting artifact" and lines[0].values["after_s"] == 0.0314
    assert lines[1].values["detail"] == "artifact magic is not NInfer v2"
    first = ADAPTER.diagnose(seeds.STARTUP_REFUSED.text)
    assert first is not None and first.code == "artifact_container_mismatch"  # the reason, not the phase
    assert "artifact.revision" in first.fix and "v2" in first.cause
    report = diagnose_log(seeds.STARTUP_REFUSED.text, ADAPTER)
    assert [(e["code"], e["lines"]) for e in report["errors"]] == [("startup_failed", [1]),
                                                                   ("artifact_container_mismatch", [2])]
    assert "inspecting artifact, 31.4 ms in" in report["errors"][0]["cause"]
    # the verdict names the reason, not the generic phase line before it
    assert not report["healthy"] and report["verdict"] == "failed: artifact_container_mismatch"
    # Pipe lines and a reader of container v2 only: the report's own fork, alone in the table.
    assert report["build"]["builds"] == ["hamawang/ninfer-v100-20260916@f17d37f"]
    assert report["build"]["containers_read"] == [2]


def test_throughput_2_4d_as_printed() -> None:
    serial, = seeds.SERIAL_PREFILL.text.splitlines()
    starved, batched = seeds.PREFILL_STARVES_DECODE.text.splitlines()
    # One prefill at a time, one request waiting, no decode clause (none that interval: IF §2.4 omits it).
    assert parse_throughput(serial) == {
        "interval_s": 5.0, "prefill_tok_s": 409.6, "prefill_tokens": 2048, "decode_tok_s": 0.0, "decode_tokens": 0,
        "running": 1, "prefilling": 1, "decode_ready": 0, "waiting": 1, "materializing": 0, "terminal_pending": 0,
        "batch": None, "host_pct": 53.9}  # `host 53.9%` without its duration: no host_s, not 0
    # `decode  3.2 tok/s` (two spaces, no token count): the rate as printed, the count not known.
    assert parse_throughput(starved) == {
        "interval_s": 5.0, "prefill_tok_s": 819.2, "prefill_tokens": 4096, "decode_tok_s": 3.2, "running": 3,
        "prefilling": 1, "decode_ready": 2, "waiting": 0, "materializing": 0, "terminal_pending": 0, "batch": 2.0}
    # The empty column is the prefill clause the engine left out; the decode rate is §2.4(b)'s 3.98 row.
    assert parse_throughput(batched) == {
        "interval_s": 5.0, "prefill_tok_s": 0.0, "prefill_tokens": 0, "decode_tok_s": 126.8, "running": 4,
        "prefilling": 0, "decode_ready": 4, "waiting": 0, "materializing": 0, "terminal_pending": 0, "batch": 3.98}
    for line in (serial, starved):  # each line agrees with itself: rate x interval = tokens
        row = parse_throughput(line)
        assert row is not None and row["prefill_tok_s"] * row["interval_s"] == pytest.approx(row["prefill_tokens"])
    summary = throughput_summary(filter(None, map(parse_throughput, (serial, starved, batched))))
    assert summary is not None and summary["lines"] == 3 and summary["lines_with_unread_parts"] == 0
    assert summary["decode"] == {"active_lines": 2, "not_read": 0, "tokens": 650, "seconds": 10.0,
                                 "average_tok_s": 65.0, "peak_tok_s": 126.8, "peak_interval_s": 5.0}
    assert summary["prefill"] == {"active_lines": 2, "not_read": 0, "tokens": 6144, "seconds": 10.0,
                                  "average_tok_s": 614.4, "peak_tok_s": 819.2, "peak_interval_s": 5.0}


def test_engine_duration_2_4a() -> None:
    assert duration_s(seeds.ENGINE_TTFT.text) == pytest.approx(488.7)  # 8 min 8.7 s


@pytest.mark.parametrize(("excerpt", "code", "remedy"), [
    # §1.7 处置 column, as the profile field (or host step) that carries it:
    (seeds.DRIVER_MISSING, "driver_missing", ["nvidia-driver-580-server"]),
    (seeds.OPEN_MODULE_ROW, "open_kernel_module", ['apt purge "nvidia-*-open"', "nvidia-driver-580-server"]),
    (seeds.CUDART_MISSING, "cuda_runtime_missing", ["engine.cuda_runtime", "12.8.0"]),
    (seeds.MAGIC_ROW, "artifact_container_mismatch", ["artifact.revision"]),
    (seeds.AUTO_REFUSED_ROW, "insufficient_memory", ["serve.kv.capacity", "explicit"]),
    (seeds.QUEUE_TIMEOUT_ROW, "request_queue_timeout", ["serve.pending_timeout_ms", "600000"]),
    (seeds.CONTEXT_ROW, "context_length_exceeded", ["serve.max_context"]),
    # the same failures quoted elsewhere in the reports:
    (seeds.OPEN_MODULE, "open_kernel_module", ['apt purge "nvidia-*-open"']),
    (seeds.CONTEXT_REJECTED, "context_length_exceeded", ["serve.max_context above 131072"]),
    (seeds.QUEUE_TIMEOUT, "request_queue_timeout", ["serve.pending_timeout_ms"]),
    (seeds.CONTEXT_BODY, "context_length_exceeded", ["serve.max_context"]),
    (seeds.READER_V1_V2, "artifact_container_mismatch", ["artifact.revision"]),
    (seeds.COMPAT_LIBCUDA, "compat_libcuda", ["/usr/local/cuda/compat"]),
], ids=lambda v: v.section if isinstance(v, Excerpt) else None)
def test_error_lines_get_the_reports_remedy(excerpt: Excerpt, code: str, remedy: list[str]) -> None:
    found = ADAPTER.diagnose(excerpt.text)
    assert found is not None and found.code == code
    assert found.evidence == excerpt.text.splitlines()[0].strip()
    for words in remedy:
        assert words in found.fix


def test_the_elided_auto_refusal_is_diagnosed_without_invented_numbers() -> None:
    # §1.7 prints the message with its numbers elided (…): the cause gives none rather than zeros.
    found = ADAPTER.diagnose(seeds.AUTO_REFUSED_ROW.text)
    assert found is not None and "short by" not in found.cause and "auto" in found.cause
    assert ADAPTER.parse_refusal(seeds.AUTO_REFUSED_ROW.text) is None


def test_the_two_field_reports_readers_are_told_apart() -> None:
    # §1.4 (seed 000, SM70 fork): v2 only; seed 003 (Don-Chad v0.6.1): v1 and v2.
    v2 = diagnose_log(seeds.STARTUP_REFUSED.text, ADAPTER)["build"]
    v1_v2 = diagnose_log(seeds.READER_V1_V2.text, ADAPTER)["build"]
    assert (v2["containers_read"], v1_v2["containers_read"]) == ([2], [1, 2])
    assert "Don-Chad/ninfer-3090@0.6.1" in v1_v2["builds"] and "Don-Chad/ninfer-3090@0.6.1" not in v2["builds"]


KERNEL_REFUSAL = ("NVRM: The NVIDIA GPU 0000:00:04.0 (PCI ID: 10de:1db1)\n"
                  "NVRM: installed in this system is not supported by open\n"
                  "NVRM: nvidia.ko because it does not include the required GPU\n"
                  "NVRM: System Processor (GSP).\n"
                  "NVRM: The NVIDIA probe routine failed for 1 device(s).\n")
"""The open module's refusal on a V100 as the kernel prints it: the format of kernel-open/nvidia/nv.c in NVIDIA's
open-gpu-kernel-modules (`"NVRM: installed in this system is not supported by open\\n" "NVRM: nvidia.ko because it
does not include the required GPU\\n" "NVRM: System Processor (GSP).\\n"`), the PCI ID a V100's. Seed 000 §1.1 quotes
it joined on one line, with "..." for the NVRM: prefixes."""


def test_the_open_module_refusal_as_the_kernel_splits_it() -> None:
    report = diagnose_log(KERNEL_REFUSAL, ADAPTER)
    (entry,) = report["errors"]
    assert entry["code"] == "open_kernel_module" and entry["lines"] == [2, 3, 4]
    assert report["verdict"] == "failed: open_kernel_module" and 'apt purge "nvidia-*-open"' in entry["fix"]
    assert diagnose_log(KERNEL_REFUSAL.splitlines()[-1], ADAPTER)["errors"] == []  # the probe line alone says no why
