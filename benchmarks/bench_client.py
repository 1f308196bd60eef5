"""How much does ninferkit's client distort what it measures? Figures against the embedded server.

Launches the embedded llama-server on a free loopback port (64 slots of 512 tokens, so 64 clients
each get a slot), sends the same request bodies (cold: `cache_prompt` false, output pinned with
`ignore_eos`) through a bare `curl`, through ninferkit's StreamingClient and optionally through a
peer tool, and prints:

- client TTFT minus the server's prompt time (p50, p99), ninferkit client;
- client decode tok/s over the server's `timings` decode tok/s (median of per-request ratios);
- client CPU seconds per 1,000 streamed tokens at concurrency 1, 8 and 64;
- the server's own decode rate while each client drives it, over the rate with bare curl
  (per-request `timings` medians; and from /metrics counter deltas, which also covers the peer);
- the same for the peer tool (AIPerf) when `--peer-aiperf PATH` names its executable.

Run: .venv/bin/python benchmarks/bench_client.py [--requests 12] [--output-tokens 128] [--levels 1,8,64]
         [--peer-aiperf /path/to/aiperf]
The peer lives in its own venv (`python3 -m venv /tmp/peer && /tmp/peer/bin/pip install aiperf`); it runs
offline from a tokenizer folder this script writes from the model's GGUF vocabulary (checked: the same
token ids as llama-server's /tokenize on the shipped document).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ninferkit import server, steps  # noqa: E402
from ninferkit.client import RequestSpec, StreamingClient, request_body  # noqa: E402
from ninferkit.engines import get_adapter  # noqa: E402
from ninferkit.runs import open_run  # noqa: E402
from ninferkit.telemetry import parse_prometheus  # noqa: E402
from ninferkit.workloads import Tokenizer, exact_prompt, user_messages  # noqa: E402
from tests.conftest import free_port  # noqa: E402

ADAPTER = get_adapter("llama_server")
EXTRA = {"ignore_eos": True, "cache_prompt": False}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def metrics(url: str) -> dict[str, float]:
    return parse_prometheus(httpx.get(url + "/metrics", timeout=10).text)


def metrics_decode_rate(before: dict[str, float], after: dict[str, float]) -> float:
    """The server's own decode rate between two scrapes: predicted tokens over predicting seconds."""
    tokens = after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
    seconds = after["llamacpp:tokens_predicted_seconds_total"] - before["llamacpp:tokens_predicted_seconds_total"]
    return tokens / seconds


def curl_phase(url: str, bodies: list[dict[str, Any]], concurrency: int) -> list[dict[str, Any]]:
    """Each body through `curl -sN`, `concurrency` closed-loop workers; the final chunk's timings."""
    results: list[dict[str, Any]] = []
    lock = threading.Lock()
    queue = list(bodies)

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                body = queue.pop()
            done = subprocess.run(["curl", "-sN", "-H", "Content-Type: application/json", "--data-binary", "@-",
                                   url + "/v1/chat/completions"], input=json.dumps(body).encode(),
                                  capture_output=True, check=True)
            events = [line[5:].strip() for line in done.stdout.split(b"\n") if line.startswith(b"data:")]
            final = json.loads(next(e for e in reversed(events) if e != b"[DONE]"))
            with lock:
                results.append(ADAPTER.server_timings(final))

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def bare_ttft_gaps_ms(url: str, bodies: list[dict[str, Any]]) -> list[float]:
    """Client TTFT minus server prompt time with a blocking socket and no HTTP library: the floor."""
    host, port = url.removeprefix("http://").split(":")
    gaps = []
    for body in bodies:
        payload = json.dumps(body).encode()
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode()
        received, first = b"", None
        sent = time.monotonic()
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(head + payload)
            while data := sock.recv(65536):
                received += data
                if first is None and FIRST_TEXT.search(received):
                    first = time.monotonic()
        body_bytes = dechunk(received.split(b"\r\n\r\n", 1)[1])
        events = [line[5:].strip() for line in body_bytes.split(b"\n") if line.startswith(b"data:")]
        final = json.loads(next(e for e in reversed(events) if e != b"[DONE]"))
        assert first is not None
        gaps.append(1000 * (first - sent - ADAPTER.server_timings(final)["prompt_s_server"]))
    return gaps


FIRST_TEXT = re.compile(rb'"content":"[^"]')


def dechunk(data: bytes) -> bytes:
    out, position = b"", 0
    while True:
        end = data.index(b"\r\n", position)
        size = int(data[position:end], 16)
        if size == 0:
            return out
        out += data[end + 2:end + 2 + size]
        position = end + 2 + size + 2


async def client_phase(url: str, specs: list[RequestSpec], concurrency: int) -> tuple[list[dict[str, Any]], float]:
    """The specs through StreamingClient, `concurrency` closed-loop workers; rows and process CPU seconds."""
    queue = list(specs)
    rows: list[dict[str, Any]] = []
    async with StreamingClient(url, ADAPTER, "embedded", max_connections=concurrency + 1) as client:
        async def worker() -> None:
            while queue:
                rows.append((await client.send(queue.pop())).row())

        cpu = time.process_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        cpu = time.process_time() - cpu
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        raise SystemExit(f"concurrency {concurrency}: {len(failed)} of {len(rows)} requests failed, "
                         f"e.g. {failed[0]['error']}")
    return rows, cpu


def aiperf_phase(aiperf: str, url: str, tokenizer_dir: Path, prompt_tokens: int, output_tokens: int,
                 requests: int, concurrency: int, workdir: Path) -> dict[str, float]:
    """AIPerf on the same workload shape; its CPU from the rusage of its whole (reaped) process tree."""
    argv = [aiperf, "profile", "--model", "embedded", "--url", url, "--endpoint-type", "chat", "--streaming",
            "--tokenizer", str(tokenizer_dir), "--isl", str(prompt_tokens), "--isl-stddev", "0",
            "--osl", str(output_tokens), "--osl-stddev", "0", "--extra-inputs", "ignore_eos:true",
            "--extra-inputs", "cache_prompt:false", "--concurrency", str(concurrency),
            "--request-count", str(requests),
            "--output-artifact-dir", str(workdir / f"aiperf-c{concurrency}"), "--ui-type", "none",
            "--no-gpu-telemetry"]
    before_usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    before = metrics(url)
    done = subprocess.run(argv, capture_output=True, text=True)
    after = metrics(url)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"aiperf exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    cpu = (usage.ru_utime - before_usage.ru_utime) + (usage.ru_stime - before_usage.ru_stime)
    tokens = after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
    return {"cpu_s_per_1k_tokens": cpu / tokens * 1000, "server_decode_metrics": metrics_decode_rate(before, after),
            "tokens": tokens}


QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def write_tokenizer_folder(model_path: Path, folder: Path) -> None:
    """A Hugging Face tokenizer folder (tokenizer.json) written from the GGUF's own vocabulary, so a
    peer tool that needs a local tokenizer runs offline. The embedded model uses Qwen2's byte-level
    BPE: its pre-tokenizer split pattern is llama.cpp's `qwen2` one."""
    from gguf import GGUFReader

    reader = GGUFReader(str(model_path))

    def strings(key: str) -> list[str]:
        field = reader.fields[key]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    tokens, merges = strings("tokenizer.ggml.tokens"), strings("tokenizer.ggml.merges")
    types_field = reader.fields["tokenizer.ggml.token_type"]
    types = [int(types_field.parts[i][0]) for i in types_field.data]
    control = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                "special": True} for i, (t, kind) in enumerate(zip(tokens, types, strict=True)) if kind == 3]
    spec = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": control, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": [m.split(" ", 1) for m in merges]},
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 32768, "eos_token": "<|endoftext|>",
         "clean_up_tokenization_spaces": False}))


def print_ours(args: argparse.Namespace, report: dict[int, dict[str, Any]], bare: list[float]) -> None:
    one = report[1]
    print(f"workload: {args.prompt_tokens} prompt tokens (cold), {args.output_tokens} output tokens (ignore_eos), "
          f"embedded llama-server with 64 slots, loopback; {os.cpu_count()} CPU cores shared by client and server")
    print(f"TTFT client - server prompt time, concurrency 1: p50 {statistics.median(one['ttft_gap_ms']):.2f} ms, "
          f"p99 {percentile(one['ttft_gap_ms'], 99):.2f} ms  (target p50 < 2 ms)")
    print(f"the same gap with a bare blocking-socket client (the floor: the server's own time outside prompt_ms "
          f"plus a minimal client): p50 {statistics.median(bare):.2f} ms, p99 {percentile(bare, 99):.2f} ms; "
          f"ninferkit's own share: p50 {statistics.median(one['ttft_gap_ms']) - statistics.median(bare):.2f} ms")
    print(f"decode tok/s client / server timings, concurrency 1: median {statistics.median(one['decode_ratio']):.4f}"
          f" (min {min(one['decode_ratio']):.4f}, max {max(one['decode_ratio']):.4f})  (target within 1%)")
    for concurrency, figures in report.items():
        print(f"concurrency {concurrency:>2}: client CPU {figures['cpu_s_per_1k_tokens']:.3f} s per 1,000 tokens "
              f"({figures['tokens']} tokens); server decode (timings median) ours {figures['server_decode_ours']:.1f}"
              f" vs curl {figures['server_decode_curl']:.1f} tok/s = {figures['server_decode_ratio']:.3f}; "
              f"(/metrics) ours {figures['metrics_decode_ours']:.1f} vs curl {figures['metrics_decode_curl']:.1f}"
              f" = {figures['metrics_decode_ours'] / figures['metrics_decode_curl']:.3f}  (target >= 0.97)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=12, help="requests per concurrency-1 phase")
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--peer-aiperf", help="path of an `aiperf` executable (its own venv, with tokenizers)")
    parser.add_argument("--levels", default="1,8,64", help="concurrency levels for the CPU and slow-down figures")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="bench-client-"))
    run = open_run(REPO / "params" / "local-cpu.yaml", workdir / "run",
                   [f"serve.port={free_port()}", "serve.max_concurrency=64", "serve.max_context=512"])
    steps.launch(run, progress=False)
    url = f"http://127.0.0.1:{run.profile.serve.port}"
    try:
        with Tokenizer(url, ADAPTER) as tokenizer:
            prompts = [exact_prompt(tokenizer, args.prompt_tokens).text for _ in range(max(args.requests, 64))]
        specs = [RequestSpec("chat", user_messages(p), args.output_tokens, extra=EXTRA) for p in prompts]
        bodies = [request_body(s, "embedded") | {"stream": True} for s in specs]
        report: dict[int, dict[str, Any]] = {}
        # warm-up: one request each way
        curl_phase(url, bodies[:1], 1)
        asyncio.run(client_phase(url, specs[:1], 1))

        counts = {1: args.requests, 8: max(args.requests, 16), 64: 64}
        for concurrency in sorted({1, *(int(level) for level in args.levels.split(","))}):
            count = counts.get(concurrency, max(args.requests, concurrency))
            print(f"concurrency {concurrency}: {count} requests by curl, then by ninferkit", file=sys.stderr)
            chosen_specs, chosen_bodies = specs[:count], bodies[:count]
            before = metrics(url)
            curl_rows = curl_phase(url, chosen_bodies, concurrency)
            middle = metrics(url)
            rows, cpu = asyncio.run(client_phase(url, chosen_specs, concurrency))
            after = metrics(url)
            tokens = sum(r["completion_tokens"] for r in rows)
            curl_decode = statistics.median(r["decode_tok_s_server"] for r in curl_rows)
            ours_decode = statistics.median(r["decode_tok_s_server"] for r in rows)
            report[concurrency] = {
                "requests": count, "tokens": tokens, "cpu_s_per_1k_tokens": cpu / tokens * 1000,
                "server_decode_curl": curl_decode, "server_decode_ours": ours_decode,
                "server_decode_ratio": ours_decode / curl_decode,
                "metrics_decode_curl": metrics_decode_rate(before, middle),
                "metrics_decode_ours": metrics_decode_rate(middle, after),
                "ttft_gap_ms": [1000 * (r["ttft_client_s"] - r["prompt_s_server"]) for r in rows],
                "decode_ratio": [r["decode_tok_s_client"] / r["decode_tok_s_server"] for r in rows],
            }
        report_bare = bare_ttft_gaps_ms(url, bodies[:args.requests])
        print_ours(args, report, report_bare)
        peer: dict[int, dict[str, float]] = {}
        if args.peer_aiperf:
            from ninferkit.artifact import model_path

            tokenizer_dir = workdir / "tokenizer"
            write_tokenizer_folder(model_path(run.profile), tokenizer_dir)
            for concurrency, count in ((1, args.requests), (8, max(args.requests, 16))):
                before = metrics(url)
                curl_phase(url, bodies[:count], concurrency)
                curl_rate = metrics_decode_rate(before, metrics(url))
                try:
                    peer[concurrency] = aiperf_phase(args.peer_aiperf, url, tokenizer_dir, args.prompt_tokens,
                                                     args.output_tokens, count, concurrency, workdir)
                except RuntimeError as exc:
                    print(f"peer AIPerf concurrency {concurrency} failed: {exc}")
                    continue
                peer[concurrency]["metrics_decode_curl"] = curl_rate
    finally:
        server.stop(run.dir)

    for concurrency, figures in peer.items():
        ours = report[concurrency]["cpu_s_per_1k_tokens"]
        print(f"peer AIPerf concurrency {concurrency}: CPU {figures['cpu_s_per_1k_tokens']:.3f} s per 1,000 tokens "
              f"(ours / peer = {ours / figures['cpu_s_per_1k_tokens']:.3f}, target <= 0.1); server decode "
              f"(/metrics) {figures['server_decode_metrics']:.1f} vs curl {figures['metrics_decode_curl']:.1f} = "
              f"{figures['server_decode_metrics'] / figures['metrics_decode_curl']:.3f}")
    if not peer:
        print("peer tool: not run (pass --peer-aiperf PATH)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
