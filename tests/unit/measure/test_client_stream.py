"""The client's own read path (asyncio sockets under httpx, SSE split by hand) against a real HTTP
server on loopback that chooses where the bytes break: events torn across reads and chunks,
several events in one read, a stall past the read timeout, a connection closed mid-chunk."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import pytest

from ninferkit.engines import get_adapter
from ninferkit.measure.client import RequestResult, RequestSpec, StreamingClient
from ninferkit.measure.client_clock import PROBE_S, ClockWatch
from ninferkit.measure.sse_wire import ParseLater, SseLines

ADAPTER = get_adapter("llama_server")
HAIKU = [{"role": "user", "content": "Write a haiku about a lighthouse."}]
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"


def sse(event: dict[str, object] | str) -> bytes:
    return b"data: " + (event if isinstance(event, str) else json.dumps(event)).encode() + b"\n\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


ROLE = sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}]})
TOKEN = sse({"choices": [{"index": 0, "delta": {"content": " light"}, "finish_reason": None}]})
FINAL = sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}], "id": "chatcmpl-1",
             "usage": {"prompt_tokens": 12, "completion_tokens": 3},
             "timings": {"prompt_n": 12, "prompt_ms": 5.0, "predicted_n": 3, "predicted_ms": 9.0,
                         "predicted_per_second": 333.3}})


@asynccontextmanager
async def serving(writes: Sequence[tuple[float, bytes]], close: bool = True,
                  written: list[float] | None = None) -> AsyncIterator[str]:
    """A loopback server answering each request with `writes`: (seconds to wait, bytes) in turn,
    each write flushed on its own (and its time.monotonic() appended to `written`), then closing the
    connection (or holding it open until the client closes it)."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            await reader.readexactly(length)
            for delay, data in writes:
                await asyncio.sleep(delay)
                writer.write(data)
                await writer.drain()
                if written is not None:
                    written.append(time.monotonic())
            if not close:
                await reader.read()
        finally:
            writer.close()
            await writer.wait_closed()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def send(writes: Sequence[tuple[float, bytes]], close: bool = True, timeout_s: float = 10.0,
               written: list[float] | None = None) -> RequestResult:
    async with serving(writes, close, written) as url, \
            StreamingClient(url, ADAPTER, "embedded", timeout_s=timeout_s) as client:
        return await client.send(RequestSpec("chat", HAIKU, 3))


def test_an_event_torn_across_reads_is_stamped_when_it_is_whole() -> None:
    """The first token's event arrives in two pieces 0.2 s apart, and its chunk's size line in a third:
    the token is stamped on the read that completes it; the last write carries two tokens, the
    usage and [DONE] in one read."""
    first = chunk(TOKEN)
    result = asyncio.run(send([
        (0, HEAD), (0, chunk(ROLE)), (0.05, first[:3]), (0.05, first[3:40]), (0.2, first[40:]),
        (0.05, chunk(TOKEN) + chunk(TOKEN + FINAL) + chunk(sse("[DONE]")) + b"0\r\n\r\n"),
    ]))
    assert result.status == "ok", result.error
    assert result.completion_tokens == 3 and result.prompt_tokens == 12 and result.finish_reason == "length"
    assert result.server["decode_tokens_server"] == 3 and result.response_id == "chatcmpl-1"
    assert result.t_first_byte is not None and result.t_first_token is not None and result.t_last_token is not None
    assert result.t_first_token - result.t_first_byte >= 0.25  # not stamped on the torn first piece
    assert result.t_last_token - result.t_first_token >= 0.04  # the last two tokens came 0.05 s later


def test_events_in_one_chunk_and_a_chunk_per_half_event() -> None:
    """Chunk boundaries that do not follow event boundaries (HTTP framing and SSE framing are independent)."""
    body = ROLE + TOKEN + TOKEN + TOKEN + FINAL + sse("[DONE]")
    pieces = [body[i:i + 97] for i in range(0, len(body), 97)]
    result = asyncio.run(send([(0, HEAD), *((0.01, chunk(piece)) for piece in pieces), (0, b"0\r\n\r\n")]))
    assert result.status == "ok", result.error
    assert result.completion_tokens == 3 and result.finish_reason == "length"
    assert result.t_first_token is not None and result.t_last_token is not None
    assert result.t_last_token > result.t_first_token


def test_chunks_read_whole_with_an_extension_or_a_size_that_is_no_hex() -> None:
    """A read of exactly one whole chunk takes a short way (sse_wire `_one_whole_chunk`); a chunk with an extension
    after its size is read by the general way, and a size that is no hex is the same errored row either way."""
    def extended(data: bytes) -> bytes:
        return b"%x;name=value\r\n" % len(data) + data + b"\r\n"
    body = [chunk(ROLE), extended(TOKEN), chunk(TOKEN), extended(TOKEN + FINAL), chunk(sse("[DONE]"))]
    result = asyncio.run(send([(0, HEAD), *((0.01, piece) for piece in body), (0, b"0\r\n\r\n")]))
    assert result.status == "ok", result.error
    assert result.completion_tokens == 3 and len(result.text_event_times) == 3
    assert result.reply.text == " light" * 3
    broken = asyncio.run(send([(0, HEAD), (0, chunk(ROLE)), (0.01, b"zz\r\n" + TOKEN + b"\r\n")]))
    assert broken.status == "errored" and broken.error is not None
    assert "a chunk size that is not hex" in broken.error, broken.error


def test_a_batch_of_reads_is_stamped_before_any_of_its_events_is_parsed() -> None:
    """Reads the loop handles together only stamp and split; their events are parsed after the batch, in order, each
    with its own read's stamp (ParseLater), so one stream's parse does not make the next stream's stamp late."""
    async def main() -> list[tuple[bytes, float]]:
        later = ParseLater(asyncio.get_running_loop())
        parsed: list[tuple[bytes, float]] = []
        streams = [SseLines(lambda payload, now: parsed.append((payload, now)), 1024) for _ in range(2)]
        for lines in streams:
            lines.later = later
        streams[0].feed(b'data: {"a": 1}\n\ndata: {"a": 2}\n\n', 1.0)
        streams[1].feed(b'data: {"b": 1}\n\n', 2.0)
        assert parsed == []  # not in the reads themselves
        await asyncio.sleep(0)
        return parsed
    assert asyncio.run(main()) == [(b'{"a": 1}', 1.0), (b'{"a": 2}', 1.0), (b'{"b": 1}', 2.0)]


def test_a_server_that_sends_more_events_than_its_tokens_can_make_is_stopped() -> None:
    """The parser refuses events past what max_tokens can make (8 per token + 1,024); the refusal, raised where the
    events are parsed after their reads, still ends the request as an errored row."""
    flood = chunk(TOKEN * 200)
    result = asyncio.run(send([(0, HEAD), (0, chunk(ROLE)), *((0.001, flood) for _ in range(10))], close=False))
    assert result.status == "errored" and result.error is not None
    assert "more events than 3 output tokens can make" in result.error, result.error


def test_a_stall_past_the_read_timeout_is_an_errored_row() -> None:
    result = asyncio.run(send([(0, HEAD), (0, chunk(ROLE))], close=False, timeout_s=0.3))
    assert result.status == "errored" and "ReadTimeout" in (result.error or "")
    assert result.t_done is not None and 0.25 < result.t_done - result.t_send < 3


def test_a_connection_closed_mid_chunk_is_an_errored_row() -> None:
    """Through the socket layer, EOF inside a chunk is httpcore's "incomplete chunked read"."""
    result = asyncio.run(send([(0, HEAD), (0, chunk(ROLE)), (0.01, chunk(TOKEN)[:30])]))
    assert result.status == "errored" and "incomplete chunked read" in (result.error or "")
    assert result.completion_tokens is None and result.t_first_token is None


def test_every_text_event_is_stamped_and_tpot_counts_the_servers_tokens() -> None:
    """Speculative decoding sends several tokens in one event: three text events 0.3 s apart carry the 9
    tokens the final usage counts. ITL is the gap per event; TPOT spreads their time over the 8 tokens
    after the first, from usage, never from counting events. Each event is stamped when it arrived: after
    the server wrote it and before the server wrote the next (a busy machine may delay a read, but not by
    the 0.3 s between writes)."""
    many = sse({"choices": [{"index": 0, "delta": {"content": " light house keeper"}, "finish_reason": None}]})
    final = sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}], "id": "chatcmpl-2",
                 "usage": {"prompt_tokens": 12, "completion_tokens": 9}})
    written: list[float] = []
    result = asyncio.run(send([(0, HEAD), (0, chunk(ROLE)), (0, chunk(many)), (0.3, chunk(many)),
                               (0.3, chunk(many + final + sse("[DONE]")) + b"0\r\n\r\n")], written=written))
    assert result.status == "ok", result.error
    row = result.row()
    assert row["text_events"] == 3 and row["completion_tokens"] == 9
    gaps = row["itl_client_s"]
    sent = written[2:]  # the three writes that carried text
    stamps = result.text_event_times
    assert len(gaps) == 2 and all(sent[i] <= stamps[i] for i in range(3))
    assert stamps[0] < sent[1] and stamps[1] < sent[2]  # stamped as each arrived, not when the stream ended
    assert row["tpot_client_s"] == pytest.approx(sum(gaps) / 8, abs=2e-6)  # gaps are kept to the microsecond
    assert row["tpot_client_s"] == pytest.approx(1 / row["decode_tok_s_client"])
    assert sum(gaps) / len(gaps) == pytest.approx(4 * row["tpot_client_s"], rel=1e-4)  # 4 tokens per gap


def test_a_body_that_ends_with_the_connection_is_read_whole() -> None:
    """No chunking and no Content-Length: the stream ends when the server closes (HTTP/1.0 style)."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    result = asyncio.run(send([(0, head), (0, ROLE + TOKEN), (0.05, TOKEN + FINAL + sse("[DONE]"))]))
    assert result.status == "ok", result.error
    assert result.row()["text_events"] == 2 and result.completion_tokens == 3


def test_a_kept_alive_connection_carries_the_next_request() -> None:
    """Two requests in turn on a server that keeps the connection: both measured, one connection opened."""
    body = chunk(ROLE) + chunk(TOKEN) + chunk(FINAL + sse("[DONE]")) + b"0\r\n\r\n"
    keep = HEAD.replace(b"Connection: close\r\n", b"")
    connections: list[int] = []

    async def scenario() -> list[RequestResult]:
        closed = asyncio.Event()

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            connections.append(1)
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length"))
                    await reader.readexactly(length)
                    writer.write(keep + body)
                    await writer.drain()
            except asyncio.IncompleteReadError:  # the client closed its kept-alive connection
                writer.close()
                await writer.wait_closed()
                closed.set()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        async with server:
            url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
            async with StreamingClient(url, ADAPTER, "embedded", timeout_s=10) as client:
                results = [await client.send(RequestSpec("chat", HAIKU, 3)) for _ in range(2)]
            await asyncio.wait_for(closed.wait(), 10)  # the client's exit closed the connection it kept
        return results

    first, second = asyncio.run(scenario())
    assert first.status == second.status == "ok" and second.retried is None
    assert len(connections) == 1


def test_a_long_stream_is_parsed_as_it_comes_never_all_at_once_at_its_end() -> None:
    """160,000 events: parsed at the stream's end (as this client once did), they hold the event loop for about
    0.5 s (40,000 held it 0.13 s here), and every other stream's reads would have been stamped that late (issue 43:
    streams of one round end together). Parsed as they come, read by read, the loop ran at most 2-3 ms late; the
    bound leaves a loaded machine's scheduling room and still fails the parse at the end by a wide margin."""
    events = 160_000
    body = [chunk(TOKEN * 100) for _ in range(events // 100)]

    async def watched() -> tuple[RequestResult, float | None]:
        async with ClockWatch() as watch, serving([(0, HEAD), *((0, piece) for piece in body),
                                                   (0, chunk(FINAL) + chunk(sse("[DONE]")) + b"0\r\n\r\n")]) as url, \
                StreamingClient(url, ADAPTER, "embedded") as client:
            result = await client.send(RequestSpec("chat", HAIKU, events))
            await asyncio.sleep(2 * PROBE_S)  # the probe wakes once more after the stream: a lag at its end is seen
        return result, watch.cell().lag_max_s

    result, lag = asyncio.run(watched())
    assert result.status == "ok" and len(result.text_event_times) == events
    assert lag is not None and lag < 0.15, lag
