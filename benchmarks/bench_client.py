"""How much does ninferkit's client distort what it measures? Figures against the embedded server.

Launches the embedded llama-server on a free loopback port (64 slots of 512 tokens, so 64 clients
each get a slot; speculative decoding off, so every event carries one token, the client's most work per
token, and because this llama.cpp aborts with 64 slots drafting up to 64 tokens each: "batch must be
large enough to hold the sampled and draft tokens"), sends the same request bodies (cold:
`cache_prompt` false, output pinned with `ignore_eos`) through a bare `curl`, through ninferkit's
StreamingClient, through a bare blocking socket in Python (which splits the stream's lines and parses every
event's JSON as it arrives, as any reader must), and optionally through a peer tool, and prints:

- client TTFT minus the server's prompt time (p50, p99) for ninferkit and for the bare socket, and
  ninferkit's own share: the median of per-request differences between the two. The gap itself
  is mostly the server's own time outside `prompt_ms` (HTTP, templating, tokenizing, and slot
  selection, which grows as more of the 64 slots hold an old prompt), so the target (< 2 ms) is
  on the share;
- client decode tok/s over the server's `timings` decode tok/s (median of per-request ratios);
- client CPU seconds per 1,000 streamed tokens at concurrency 1, 8 and 64, and at concurrency 1
  the client's voluntary context switches (wakeups) per token;
- the server's own decode rate while each client drives it, over the rate with bare curl.
  At concurrency 1 the three clients take turns request by request, so background load on the
  shared cores hits them alike, and the figure is the median of per-request `timings` ratios; the
  bare socket's ratio is the floor for any Python reader. At 8 and 64 curl and ninferkit take turns phase by
  phase, `--repeats` rounds of every level, the order rotating each round (per-request `timings` medians, and
  /metrics counter deltas, which also cover the peer), min and median of the rounds printed;
- the same for the peer tool (AIPerf) when `--peer-aiperf PATH` names its executable: its CPU per 1,000 tokens
  is the marginal cost (a run of N requests minus a run of 1, over the tokens between them), so its start-up
  (7-8 s of CPU, imports and its worker processes) is not divided by the few tokens a short run streams.

The client-only figures against a server that only streams (ceilings, stamp lag against the send time, 256
streams over worker processes) are benchmarks/bench_client_standin.py's; this one is the real engine's side.
SIGTERM or Ctrl-C stop the llama-server it launched.

Run: .venv/bin/python benchmarks/bench_client.py [--requests 12] [--output-tokens 128] [--levels 1,8,64]
         [--repeats 3] [--peer-aiperf /path/to/aiperf]
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
import signal
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

from ninferkit.engines import get_adapter  # noqa: E402
from ninferkit.measure.client import RequestSpec, StreamingClient, request_body  # noqa: E402
from ninferkit.measure.telemetry import parse_prometheus  # noqa: E402
from ninferkit.measure.workloads import Tokenizer, exact_prompt, user_messages  # noqa: E402
from ninferkit.rundir.runs import open_run  # noqa: E402
from ninferkit.server import process as server  # noqa: E402
from ninferkit.steps.launch import launch  # noqa: E402
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


def curl_request(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One body through `curl -sN`; the final chunk's server timings."""
    done = subprocess.run(["curl", "-sN", "-H", "Content-Type: application/json", "--data-binary", "@-",
                           url + "/v1/chat/completions"], input=json.dumps(body).encode(),
                          capture_output=True, check=True)
    return ADAPTER.server_timings(final_event(done.stdout))


def final_event(body: bytes) -> dict[str, Any]:
    """The last JSON event of a chat stream (the one with usage and timings)."""
    events = [line[5:].strip() for line in body.split(b"\n") if line.startswith(b"data:")]
    final: dict[str, Any] = json.loads(next(e for e in reversed(events) if e != b"[DONE]"))
    return final


def curl_phase(url: str, bodies: list[dict[str, Any]], concurrency: int) -> list[dict[str, Any]]:
    """Each body through curl, `concurrency` closed-loop workers; the final chunks' timings."""
    results: list[dict[str, Any]] = []
    lock = threading.Lock()
    queue = list(bodies)

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                body = queue.pop()
            timings = curl_request(url, body)
            with lock:
                results.append(timings)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def bare_request(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One body through a blocking socket and no HTTP library (the floor for a Python client): the
    server's timings plus `ttft_gap_ms` (client TTFT minus server prompt time), `cpu_s`, `wakeups`."""
    host, port = url.removeprefix("http://").split(":")
    payload = json.dumps(body).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode()
    rest, first, last = b"", None, None
    switches, cpu = voluntary_switches(), time.process_time()
    sent = time.monotonic()
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(head + payload)
        while data := sock.recv(65536):
            now = time.monotonic()  # one clock read per recv, then the lines split and every event parsed
            *lines, rest = (rest + data).split(b"\n")
            for line in lines:
                if line.startswith(b"data: ") and line[6:] != b"[DONE]":
                    event = json.loads(line[6:])
                    if any((choice.get("delta") or {}).get("content") for choice in event.get("choices") or ()):
                        first = first if first is not None else now
                    if "timings" in event:
                        last = event
    cpu, switches = time.process_time() - cpu, voluntary_switches() - switches
    assert first is not None and last is not None
    timings = ADAPTER.server_timings(last)
    return timings | {"ttft_gap_ms": 1000 * (first - sent - timings["prompt_s_server"]), "cpu_s": cpu,
                      "wakeups": switches}


def voluntary_switches() -> int:
    """This process's voluntary context switches so far: each is a sleep and a wakeup."""
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.MULTILINE).group(1))  # type: ignore[union-attr]


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


async def turns_phase(url: str, specs: list[RequestSpec], bodies: list[dict[str, Any]]) -> dict[str, Any]:
    """Concurrency 1, request by request: curl, then ninferkit, then the bare socket, the same body.

    Taking turns puts the three clients under the same background load (the cores are shared), so
    per-request ratios compare like with like. Blocking calls inside the coroutine are fine here:
    nothing else runs on the loop.
    """
    curl, ours, bare = [], [], []
    cpu, wakeups = 0.0, 0
    async with StreamingClient(url, ADAPTER, "embedded", max_connections=2) as client:
        for spec, body in zip(specs, bodies, strict=True):
            curl.append(curl_request(url, body))
            switches, started = voluntary_switches(), time.process_time()
            result = await client.send(spec)
            cpu, wakeups = cpu + time.process_time() - started, wakeups + voluntary_switches() - switches
            if result.status != "ok":
                raise SystemExit(f"concurrency 1: a request failed: {result.error}")
            ours.append(result.row())
            bare.append(bare_request(url, body))
    tokens = sum(r["completion_tokens"] for r in ours)
    return {"curl": curl, "ours": ours, "bare": bare, "tokens": tokens, "cpu_s": cpu, "wakeups": wakeups,
            "cpu_s_per_1k_tokens": cpu / tokens * 1000}


def aiperf_phase(aiperf: str, url: str, tokenizer_dir: Path, prompt_tokens: int, output_tokens: int,
                 requests: int, concurrency: int, workdir: Path) -> dict[str, float]:
    """AIPerf on the same workload shape; its CPU per 1,000 tokens the marginal cost: a run of `requests` minus a
    run of one, each from the rusage of its whole (reaped) process tree, over the tokens between them."""
    small = aiperf_run(aiperf, url, tokenizer_dir, prompt_tokens, output_tokens, 1, 1, workdir)
    large = aiperf_run(aiperf, url, tokenizer_dir, prompt_tokens, output_tokens, requests, concurrency, workdir)
    tokens = large["tokens"] - small["tokens"]
    return {"cpu_s_per_1k_tokens": (large["cpu_s"] - small["cpu_s"]) / tokens * 1000,
            "server_decode_metrics": large["server_decode_metrics"], "tokens": large["tokens"],
            "startup_cpu_s": small["cpu_s"]}


def aiperf_run(aiperf: str, url: str, tokenizer_dir: Path, prompt_tokens: int, output_tokens: int,
               requests: int, concurrency: int, workdir: Path) -> dict[str, float]:
    """One AIPerf run: its process tree's CPU seconds, the tokens the server predicted, its decode rate."""
    argv = [aiperf, "profile", "--model", "embedded", "--url", url, "--endpoint-type", "chat", "--streaming",
            "--tokenizer", str(tokenizer_dir), "--isl", str(prompt_tokens), "--isl-stddev", "0",
            "--osl", str(output_tokens), "--osl-stddev", "0", "--extra-inputs", "ignore_eos:true",
            "--extra-inputs", "cache_prompt:false", "--concurrency", str(concurrency),
            "--request-count", str(requests),
            "--output-artifact-dir", str(workdir / f"aiperf-c{concurrency}-n{requests}"), "--ui-type", "none",
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
    return {"cpu_s": cpu, "server_decode_metrics": metrics_decode_rate(before, after), "tokens": tokens}


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


def level_round(url: str, specs: list[RequestSpec], bodies: list[dict[str, Any]], concurrency: int,
                ours_first: bool) -> dict[str, float]:
    """One round at one concurrency: curl's phase and ninferkit's, in the order given, each between /metrics
    scrapes; their figures."""
    figures: dict[str, float] = {}
    for reader in ("ours", "curl") if ours_first else ("curl", "ours"):
        before = metrics(url)
        if reader == "curl":
            rows = curl_phase(url, bodies, concurrency)
        else:
            rows, cpu = asyncio.run(client_phase(url, specs, concurrency))
            figures["tokens"] = sum(r["completion_tokens"] for r in rows)
            figures["cpu_s_per_1k_tokens"] = cpu / figures["tokens"] * 1000
        figures[f"metrics_decode_{reader}"] = metrics_decode_rate(before, metrics(url))
        figures[f"server_decode_{reader}"] = statistics.median(r["decode_tok_s_server"] for r in rows)
    figures["server_decode_ratio"] = figures["server_decode_ours"] / figures["server_decode_curl"]
    figures["metrics_decode_ratio"] = figures["metrics_decode_ours"] / figures["metrics_decode_curl"]
    return figures


def spread(values: list[float], digits: int) -> str:
    """'min / median' of a figure's rounds."""
    return f"{min(values):.{digits}f} / {statistics.median(values):.{digits}f}"


def print_ours(args: argparse.Namespace, turns: dict[str, Any], report: dict[int, dict[str, list[float]]]) -> None:
    ours, bare, curl = turns["ours"], turns["bare"], turns["curl"]
    gaps = [1000 * (r["ttft_client_s"] - r["prompt_s_server"]) for r in ours]
    bare_gaps = [r["ttft_gap_ms"] for r in bare]
    share = [g - b for g, b in zip(gaps, bare_gaps, strict=True)]
    bare_tokens = sum(r["decode_tokens_server"] for r in bare)
    print(f"workload: {args.prompt_tokens} prompt tokens (cold), {args.output_tokens} output tokens (ignore_eos), "
          f"embedded llama-server with 64 slots, loopback; {os.cpu_count()} CPU cores shared by client and server; "
          f"load average before {turns['load_before']}, after {Path('/proc/loadavg').read_text().split()[0]}")
    print(f"concurrency 1, {len(ours)} requests, curl / ninferkit / bare socket taking turns:")
    print(f"  TTFT client - server prompt time: ninferkit p50 {statistics.median(gaps):.2f} ms, p99 "
          f"{percentile(gaps, 99):.2f} ms; bare socket (the floor: the server's own time outside prompt_ms) p50 "
          f"{statistics.median(bare_gaps):.2f} ms, p99 {percentile(bare_gaps, 99):.2f} ms")
    print(f"  ninferkit's own share of the gap (per request, minus the bare socket's): p50 "
          f"{statistics.median(share):.2f} ms, p99 {percentile(share, 99):.2f} ms  (target p50 < 2 ms)")
    decode = [r["decode_tok_s_client"] / r["decode_tok_s_server"] for r in ours]
    print(f"  decode tok/s client / server timings: median {statistics.median(decode):.4f} "
          f"(min {min(decode):.4f}, max {max(decode):.4f})  (target within 1%)")
    for name, rows in (("ninferkit", ours), ("bare socket", bare)):
        ratios = [r["decode_tok_s_server"] / c["decode_tok_s_server"] for r, c in zip(rows, curl, strict=True)]
        rate, curl_rate = (statistics.median(r["decode_tok_s_server"] for r in group) for group in (rows, curl))
        print(f"  server decode while {name} reads / while curl reads: median {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}; medians {rate:.1f} vs {curl_rate:.1f} tok/s)"
              + ("  (target >= 0.97)" if rows is ours else ""))
    print(f"  client CPU per 1,000 tokens: ninferkit {turns['cpu_s'] / turns['tokens'] * 1000:.3f} s, bare socket "
          f"{sum(r['cpu_s'] for r in bare) / bare_tokens * 1000:.3f} s; wakeups (voluntary context switches) per "
          f"token: ninferkit {turns['wakeups'] / turns['tokens']:.2f}, bare socket "
          f"{sum(r['wakeups'] for r in bare) / bare_tokens:.2f}")
    for concurrency, figures in report.items():
        print(f"concurrency {concurrency:>2}, {len(figures['tokens'])} rounds, min / median: client CPU "
              f"{spread(figures['cpu_s_per_1k_tokens'], 3)} s per 1,000 tokens; server decode (timings median) ours "
              f"{spread(figures['server_decode_ours'], 1)} vs curl {spread(figures['server_decode_curl'], 1)} tok/s, "
              f"ratio {spread(figures['server_decode_ratio'], 3)}; (/metrics) ours "
              f"{spread(figures['metrics_decode_ours'], 1)} vs curl {spread(figures['metrics_decode_curl'], 1)}, "
              f"ratio {spread(figures['metrics_decode_ratio'], 3)}  (target >= 0.97)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=12, help="requests per client at concurrency 1")
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--peer-aiperf", help="path of an `aiperf` executable (its own venv, with tokenizers)")
    parser.add_argument("--levels", default="1,8,64",
                        help="concurrency levels for the CPU and slow-down figures (1 always runs)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the levels above 1")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds to the finally that stops the server

    workdir = Path(tempfile.mkdtemp(prefix="bench-client-"))
    run = open_run(REPO / "params" / "local-cpu.yaml", workdir / "run",
                   [f"serve.port={free_port()}", "serve.max_concurrency=64", "serve.max_context=512", "serve.spec={}"])
    url = f"http://127.0.0.1:{run.profile.serve.port}"
    try:
        launch(run, progress=False)  # inside: a SIGTERM while it starts still stops it
        with Tokenizer(url, ADAPTER) as tokenizer:
            prompts = [exact_prompt(tokenizer, args.prompt_tokens).text for _ in range(max(args.requests, 64))]
        specs = [RequestSpec("chat", user_messages(p), args.output_tokens, extra=EXTRA) for p in prompts]
        bodies = [request_body(s, "embedded") | {"stream": True} for s in specs]
        # warm-up: one request each way
        curl_request(url, bodies[0])
        asyncio.run(client_phase(url, specs[:1], 1))
        bare_request(url, bodies[0])

        load_before = Path("/proc/loadavg").read_text().split()[0]
        print(f"concurrency 1: {args.requests} requests, curl / ninferkit / bare socket taking turns", file=sys.stderr)
        turns = asyncio.run(turns_phase(url, specs[:args.requests], bodies[:args.requests])) | {
            "load_before": load_before}
        counts = {8: max(args.requests, 16), 64: 64}
        levels = sorted({int(level) for level in args.levels.split(",")} - {1})
        rounds: dict[int, list[dict[str, float]]] = {level: [] for level in levels}
        for repeat in range(args.repeats):  # every level each round, curl and ninferkit taking turns, order rotating
            for level in levels:
                count = counts.get(level, max(args.requests, level))
                print(f"round {repeat + 1}, concurrency {level}: {count} requests by curl and by ninferkit",
                      file=sys.stderr)
                rounds[level].append(level_round(url, specs[:count], bodies[:count], level, repeat % 2 == 1))
        report = {level: {name: [figures[name] for figures in rounds[level]] for name in rounds[level][0]}
                  for level in levels}
        print_ours(args, turns, report)
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
        ours = statistics.median(report[concurrency]["cpu_s_per_1k_tokens"]) if concurrency in report else \
            turns["cpu_s_per_1k_tokens"]
        print(f"peer AIPerf concurrency {concurrency}: CPU {figures['cpu_s_per_1k_tokens']:.3f} s per 1,000 tokens "
              f"past its start-up ({figures['startup_cpu_s']:.1f} s for one request; ours / peer = "
              f"{ours / figures['cpu_s_per_1k_tokens']:.3f}, target <= 0.1); server decode "
              f"(/metrics) {figures['server_decode_metrics']:.1f} vs curl {figures['metrics_decode_curl']:.1f} = "
              f"{figures['server_decode_metrics'] / figures['metrics_decode_curl']:.3f}")
    if not peer:
        print("peer tool: not run (pass --peer-aiperf PATH)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
