"""Every NInfer log and error line the field reports quote, verbatim, with the report and section.

The reports are copied byte for byte into tests/data/seeds/; test_ninfer_seed_lines checks that each
excerpt is still found there as written, and that these are all of them: every line of the three
NInfer reports that a log reader or a diagnosis rule recognizes is inside one of these excerpts.
Seed 004 quotes no NInfer log or error line (its numbers come from the fork's performance.md and
its launcher), so it has none here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SEEDS = Path(__file__).parent / "data" / "seeds"
SEED_000 = "000_77605b501239fca0.txt"  # V100-PCIE-32G, hamawang/ninfer-v100-20260916 (pipe lines, container v2)
SEED_003 = "003_1ab31df8685faa70.txt"  # RTX 3090, Don-Chad/ninfer-3090 prebuilt v0.6.1
SEED_004 = "004_976b9d3921b6cb81.txt"  # 2 x V100-SXM2, plus1998/NInfer-V100-Duo
NINFER_SEEDS = (SEED_000, SEED_003, SEED_004)


@dataclass(frozen=True)
class Excerpt:
    seed: str
    section: str
    text: str


# seed 000 §1.1: what the open kernel module prints on Volta
OPEN_MODULE = Excerpt(SEED_000, "§1.1",
                      "not supported by open nvidia.ko ... does not include the required GPU System Processor (GSP)")
# seed 000 §1.4: the engine given the container v3 file of the hub's `main`
STARTUP_REFUSED = Excerpt(SEED_000, "§1.4", "ERROR startup failed | inspecting artifact | 31.4 ms\n"
                                            "FATAL server failed during startup | artifact magic is not NInfer v2")
# seed 000 §1.5: the answers to a too-long prompt and to a request that waited over 30 s
CONTEXT_REJECTED = Excerpt(SEED_000, "§1.5",
                           "400 context_length_exceeded: prepared prompt exceeds Engine max_context 131072")
QUEUE_TIMEOUT = Excerpt(SEED_000, "§1.5", "503 request_queue_timeout")
# seed 000 §1.6: the startup ledger ("启动日志里会打出显存账本")
LEDGER = Excerpt(SEED_000, "§1.6", "INFO  engine ready | qwen3.8-27b/nvfp4 | total 18.2s | weights 19.7 GiB\n"
                                   "INFO  capacity | KV 262,144 tokens, int8, explicit | pages 4,096/4,096 | "
                                   "runtime 10.8 GiB | free 1.21 GiB\n"
                                   "INFO  listening on http://0.0.0.0:8080 | model qwen3.8-27b | auth disabled")
# seed 000 §1.7: the error table's symptom column, row by row
DRIVER_MISSING = Excerpt(SEED_000, "§1.7", "couldn't communicate with the NVIDIA driver")
OPEN_MODULE_ROW = Excerpt(SEED_000, "§1.7", "not supported by open nvidia.ko ... GPU System Processor (GSP)")
CUDART_MISSING = Excerpt(SEED_000, "§1.7", "cannot open shared object file: libcudart.so.12")
MAGIC_ROW = Excerpt(SEED_000, "§1.7", "FATAL ... artifact magic is not NInfer v2")
AUTO_REFUSED_ROW = Excerpt(SEED_000, "§1.7",
                           "minimum Engine runtime reservation requires … but only … available after weights")
QUEUE_TIMEOUT_ROW = Excerpt(SEED_000, "§1.7", "503 request_queue_timeout")
CONTEXT_ROW = Excerpt(SEED_000, "§1.7", "400 context_length_exceeded")
ERROR_TABLE = (DRIVER_MISSING, OPEN_MODULE_ROW, CUDART_MISSING, MAGIC_ROW, AUTO_REFUSED_ROW, QUEUE_TIMEOUT_ROW,
               CONTEXT_ROW)
# seed 000 §2.4(a): the engine's own figure for L2's time to first token ("引擎记 8m8.7s")
ENGINE_TTFT = Excerpt(SEED_000, "§2.4(a)", "8m8.7s")
# seed 000 §2.4(d): "服务端日志里的两个并发现象（原文）", the throughput lines as quoted (aligned into columns)
SERIAL_PREFILL = Excerpt(SEED_000, "§2.4(d)", "throughput | 5.0s | prefill 409.6 tok/s (2,048 tok) | running 1 "
                                              "(prefill 1) | waiting 1 | host 53.9%")
PREFILL_STARVES_DECODE = Excerpt(
    SEED_000, "§2.4(d)",
    "throughput | 5.0s | prefill 819.2 tok/s (4,096 tok) | decode  3.2 tok/s | running 3 (prefill 1, decode-ready 2) "
    "| batch 2.00\n"
    "throughput | 5.0s |                              | decode 126.8 tok/s | running 4 (decode-ready 4)              "
    "| batch 3.98")
# seed 000 §2.5: the single-request boundary
CONTEXT_BODY = Excerpt(SEED_000, "§2.5", 'HTTP 400 {"error":{"code":"context_length_exceeded",\n'
                                         '  "message":"prepared prompt exceeds Engine max_context 131072", ...}}')
# seed 000 §2.5: the memory formula the report fitted to its refusals, and its capacity table (tab-separated
# as in the report: figure, groupwise-int, nvfp4); tests/unit/capacity/test_capacity_known.py holds ninferkit to
# each figure
CAPACITY_FORMULA = Excerpt(SEED_000, "§2.5", "运行时占用 = 2.75 GiB（固定：state 槽 + workspace + CUDA graph） + "
                                             "KV 池容量 × 35,904 B\n"
                                             "权重后可用显存：nvfp4 11.70 GiB / groupwise-int 14.75 GiB")
CAPACITY_SETTING = Excerpt(SEED_000, "§2.5", "--max-concurrency 2，容量需为 64 的倍数")
CAPACITY_TABLE = Excerpt(SEED_000, "§2.5", "\tgroupwise-int\tnvfp4\n"
                                           "权重\t16.7 GiB\t19.7 GiB\n"
                                           "权重后可用\t14.75 GiB\t11.70 GiB\n"
                                           "`--kv-capacity auto`\t328,960 token\t拒绝启动（差 0.88 GiB）\n"
                                           "最大共享池\t358,912 token\t267,456 token\n"
                                           "双并发每路可用\t≈179K\t≈130K\n"
                                           "2×160K（池需 327,680）\t余 31,232\t差 2.01 GiB；"
                                           "关掉 graph + state 槽也只省 622 MiB，仍差 1.40 GiB")
# seed 000 §1.5: why --kv-capacity is explicit; its "~237K" is auto at the deployment's 2 x 131,072
KV_CAPACITY_FLAG = Excerpt(SEED_000, "§1.5", "nvfp4 权重 19.7 GiB 下 `auto` 只肯给 ~237K")
# seed 003 §一.1: v0.6.1 given the hub's container v3 file
READER_V1_V2 = Excerpt(SEED_003, "§一.1", "artifact magic is not NInfer v1 or v2")
# seed 003 §一.2: the Dockerfile comment on the forward-compat libcuda
COMPAT_LIBCUDA = Excerpt(SEED_003, "§一.2", "cudaErrorCompatNotSupportedOnDevice")

LINE_EXCERPTS = (OPEN_MODULE, STARTUP_REFUSED, CONTEXT_REJECTED, QUEUE_TIMEOUT, LEDGER, *ERROR_TABLE,
                 SERIAL_PREFILL, PREFILL_STARVES_DECODE, CONTEXT_BODY, READER_V1_V2, COMPAT_LIBCUDA)
"""Excerpts that are whole lines or parts of one line of a log or an answer."""
EXCERPTS = (*LINE_EXCERPTS, ENGINE_TTFT, CAPACITY_FORMULA, CAPACITY_SETTING, CAPACITY_TABLE, KV_CAPACITY_FLAG)
TASK_PROMPTS = Excerpt(SEED_000, "§2.3", "TTFT 方面：短 prompt（几十 token）在 8K 与 64K 档几乎无差别"
                       "（0.09–0.47 s），只有 5.9K 文档摘要那档是 5.8 s。")
