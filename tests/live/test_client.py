"""The streaming client against the live embedded server: each of the three APIs pins its output and reports
the server's usage (the recorded streams and the bodies real servers refused: tests/unit/measure/test_client.py)."""

from __future__ import annotations

import asyncio

import pytest

from ninferkit.engines import get_adapter
from ninferkit.measure.client import RequestSpec, StreamingClient
from ninferkit.rundir.runs import Run

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
