"""The one table of metric names: each peer tool's name for a figure, ninferkit's, and the unit each writes.

The same word means different formulas in different tools (latency.py; the peers' reference §0): AIPerf's and
GuideLLM's "ITL" is vLLM's and ninferkit's TPOT, AIPerf's "ICL" is vLLM's ITL, GuideLLM's TPOT counts the first
token's wait. So a row maps a formula, never a word, and the exporters and importers convert by these rows
only. `markdown()` renders the table docs/interop.md shows (a test keeps the two equal).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetricName:
    tool: str
    theirs: str
    """The tool's field, as its file spells it."""
    their_unit: str
    ours: str
    """The RequestRow field (or a figure of latency.py) that is the same formula."""
    our_unit: str
    note: str = ""


VLLM = "vllm-bench"
AIPERF = "aiperf"
GUIDELLM = "guidellm"

MAPPING: tuple[MetricName, ...] = (
    MetricName(VLLM, "ttfts[i]", "s", "ttft_client_s", "s",
               "vLLM counts the first chunk with `choices`, even an empty role delta; ours waits for text"),
    MetricName(VLLM, "itls[i]", "s (list)", "itl_client_s", "s (list)", "the gaps between text events"),
    MetricName(VLLM, "latencies[i]", "s", "t_last_token - t_send", "s",
               "vLLM's E2EL stops at the last text chunk; our e2e_client_s also waits for the final usage event "
               "(an import takes E2EL as e2e_client_s and the request's end, t_done: vLLM keeps no later time)"),
    MetricName(VLLM, "start_times[i]", "s (perf_counter)", "t_send", "s (monotonic)",
               "both clocks' origin is arbitrary"),
    MetricName(VLLM, "input_lens[i]", "tokens", "prompt_tokens", "tokens"),
    MetricName(VLLM, "output_lens[i]", "tokens", "completion_tokens", "tokens", "from the server's usage in both"),
    MetricName(VLLM, "errors[i]", "text", "error", "text", "an empty text is a request that finished"),
    MetricName(VLLM, "{mean,median,std,p99}_ttft_ms", "ms", "ttft_client_s", "s"),
    MetricName(VLLM, "{mean,median,std,p99}_tpot_ms", "ms", "tpot_client_s", "s",
               "(latency - TTFT) / (output tokens - 1), per request"),
    MetricName(VLLM, "{mean,median,std,p99}_itl_ms", "ms", "itl_client_s", "s", "gaps pooled over requests"),
    MetricName(VLLM, "{mean,median,std,p99}_e2el_ms", "ms", "t_last_token - t_send", "s"),
    MetricName(VLLM, "duration", "s", "wall_s", "s", "first send to last end"),
    MetricName(VLLM, "request_throughput", "requests/s", "requests_per_s", "requests/s", "finished over duration"),
    MetricName(VLLM, "output_throughput", "tokens/s", "output_tok_s", "tokens/s", "output tokens over duration"),
    MetricName(VLLM, "max_concurrent_requests", "requests", "peak_in_flight", "requests"),
    MetricName(AIPERF, "time_to_first_token", "ms", "ttft_client_s", "s",
               "AIPerf 0.13 waits for the first chunk with content, as ours"),
    MetricName(AIPERF, "inter_token_latency", "ms", "tpot_client_s", "s",
               "AIPerf's ITL is (latency - TTFT) / (output tokens - 1): our TPOT"),
    MetricName(AIPERF, "inter_chunk_latency", "ms (list)", "itl_client_s", "s (list)", "AIPerf's ICL is our ITL"),
    MetricName(AIPERF, "request_latency", "ms", "t_last_token - t_send", "s",
               "to the last content chunk"),
    MetricName(AIPERF, "usage_prompt_tokens", "tokens", "prompt_tokens", "tokens", "the server's usage in both"),
    MetricName(AIPERF, "usage_completion_tokens", "tokens", "completion_tokens", "tokens"),
    MetricName(AIPERF, "usage_prompt_cache_read_tokens", "tokens", "cached_tokens", "tokens"),
    MetricName(AIPERF, "input_sequence_length", "tokens", "(none)", "",
               "AIPerf's own tokenizer's count (the server's with --use-server-token-count); the export writes "
               "the server's"),
    MetricName(AIPERF, "output_sequence_length", "tokens", "(none)", "", "as input_sequence_length"),
    MetricName(AIPERF, "request_throughput", "requests/sec", "requests_per_s", "requests/s"),
    MetricName(AIPERF, "output_token_throughput", "tokens/sec", "output_tok_s", "tokens/s"),
    MetricName(AIPERF, "benchmark_duration", "sec", "wall_s", "s"),
    MetricName(GUIDELLM, "time_to_first_token_ms", "ms", "ttft_client_s", "s"),
    MetricName(GUIDELLM, "inter_token_latency_ms", "ms", "tpot_client_s", "s",
               "GuideLLM's ITL is (last - first token) / (output tokens - 1): our TPOT"),
    MetricName(GUIDELLM, "time_per_output_token_ms", "ms", "(none)", "",
               "GuideLLM's TPOT divides the whole latency, TTFT included, by the output tokens: no ninferkit field"),
    MetricName(GUIDELLM, "request_latency", "s", "e2e_client_s", "s",
               "to the request's end (GuideLLM's request_end), as ours: not vLLM's or AIPerf's last text chunk"),
    MetricName(GUIDELLM, "prompt_tokens", "tokens", "prompt_tokens", "tokens",
               "the server's usage where it gives one (prefer_response_metrics)"),
    MetricName(GUIDELLM, "cached_tokens", "tokens", "cached_tokens", "tokens"),
    MetricName(GUIDELLM, "output_tokens", "tokens", "completion_tokens", "tokens"),
    MetricName(GUIDELLM, "requests_per_second", "requests/s", "requests_per_s", "requests/s"),
    MetricName(GUIDELLM, "output_tokens_per_second", "tokens/s", "output_tok_s", "tokens/s"),
)


def markdown() -> str:
    """The mapping as the Markdown table docs/interop.md shows."""
    lines = ["| tool | their name | their unit | ninferkit | our unit | note |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row in MAPPING:
        lines.append(f"| {row.tool} | `{row.theirs}` | {row.their_unit} | `{row.ours}` | {row.our_unit} | {row.note} |")
    return "\n".join(lines) + "\n"
