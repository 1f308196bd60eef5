"""The measuring client's streamed request over a socket read by hand: HTTP/1.1 framing and SSE lines split in
asyncio's buffered protocol (`buffer_updated`), each socket read stamped once before anything parses it.

Why not httpx for this one request: through httpx, httpcore and h11 every read cost the client about 60 us
of Python before its events could be stamped (issue 43: 46% of its CPU; at 64 streams one core saturated
and the stamps queued 9-16 ms behind the bytes). Here a read is one clock read, a chunk-size scan and a
line split; its events' JSON parse runs once the batch of reads the loop found ready is stamped (ParseLater).
httpx stays for every other request ninferkit sends, and for a client given a `transport` (a test replaying a
recording).

What a server can do wrong here is what httpx reported, with httpx's error types and words, so rows read
alike: ConnectError, ReadTimeout (no byte within the read timeout), RemoteProtocolError (the server closed
before a response byte, or inside the body: "incomplete chunked read"). A body is never grown past its cap:
an error page stops at `error_cap` bytes (`cut`), an SSE line at its cap (SseLines, MalformedStream).
"""

from __future__ import annotations

import asyncio
import math
import re
import ssl
import time
from collections.abc import Callable, Mapping

import httpx

READ_BYTES = 64 * 1024
"""The most one socket read takes: hundreds of events' worth, in a buffer kept for the connection."""
HEAD_BYTES = 64 * 1024
"""A response head longer than this is no HTTP server's."""
CHUNK_LINE_BYTES = 1024
"""A chunk-size line longer than this is no HTTP server's."""
LAST_EVENT_GRACE_S = 0.05
"""How long the body's end may lag the stream's last event before the request ends without it (a server that
sends [DONE] and keeps the response open); the row's end time is at most this late there."""

EventSink = Callable[[bytes, float], None]
"""Takes one SSE `data:` payload and the stamp of the read that completed it; raises MalformedStream to stop."""


class MalformedStream(ValueError):
    """The server sent an event this client cannot read; the request is an errored row saying why."""


FINAL_EVENTS = (b'"message_stop"', b'"response.completed"', b'"response.incomplete"')
"""The last event of a Messages or Responses stream, as its `event:` line or its data's quoted type names it (a
quote inside generated text is escaped, so these bytes are the event's own); the chat API ends with [DONE]."""
_FINAL = re.compile(b"|".join(re.escape(final) for final in FINAL_EVENTS))
"""Any of FINAL_EVENTS, found in one scan of an event (one C call where a scan per name cost four)."""


class SseLines:
    """Splits a body into SSE `data:` payloads as its pieces come, each handed on with the stamp of the piece
    that completed it; an event torn across pieces waits for its newline, a line is never grown past `line_cap`.
    A last line without its newline is an event cut off by a closed connection: never handed on. The stream's
    last event marks it done, so a server that keeps the connection open after it is not waited on (that wait
    read as a read timeout: issue 40)."""

    def __init__(self, sink: EventSink, line_cap: int, named_end: bool = True) -> None:
        """`named_end` False for a stream that ends with `data: [DONE]` only (the chat API): its events are not
        scanned for FINAL_EVENTS, a scan per event that only the Messages and Responses APIs need."""
        self.sink, self.line_cap, self.named_end = sink, line_cap, named_end
        self.later: ParseLater | None = None
        """Where set (the wire's reads), events are held and handed to the sink after the event loop's current
        batch of socket reads (ParseLater); else each is handed on as its line is split."""
        self.held: list[bytes] = []
        self.held_stamps: list[float] = []
        """The held events and their reads' stamps (two lists: no tuple per event for the collector to track)"""
        self.error: ValueError | None = None
        """What the sink refused while handing on held events (MalformedStream)"""
        self.on_error: Callable[[ValueError], None] | None = None
        self.rest = b""
        self.done = False
        """The stream's last event came (`data: [DONE]`, a Messages or Responses stream's final event)"""
        self.first: float | None = None
        """The stamp of the first piece"""

    def feed(self, data: bytes, now: float) -> None:
        if self.first is None:
            self.first = now
        *lines, self.rest = (self.rest + data).split(b"\n")
        if len(self.rest) > self.line_cap:
            raise MalformedStream(f"an SSE line over {self.line_cap:,} bytes with no end (not an event any "
                                  f"engine sends): {self.rest[:200].decode(errors='replace')}")
        for line in lines:
            if line.startswith(b"data:"):
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    self.done = True
                elif payload:
                    if self.later is None:
                        self.sink(payload, now)
                    else:
                        if not self.held:
                            self.later.want(self)
                        self.held.append(payload)
                        self.held_stamps.append(now)
                    if self.named_end and not self.done:
                        self.done = _FINAL.search(payload) is not None
            elif line.startswith(b"event:"):
                self.done = self.done or b'"' + line[6:].strip() + b'"' in FINAL_EVENTS


    def hand_on(self) -> None:
        """The held events to the sink, in order, each with its read's stamp; what the sink refuses is kept in
        `error` (and told to `on_error`), and the events after it are dropped: the stream stops there."""
        held, stamps, self.held, self.held_stamps = self.held, self.held_stamps, [], []
        if self.error is not None:
            return
        try:
            for payload, now in zip(held, stamps, strict=True):
                self.sink(payload, now)
        except ValueError as exc:  # MalformedStream
            self.error = exc
            if self.on_error is not None:
                self.on_error(exc)


class ParseLater:
    """Hands the events of a batch of socket reads to their parsers once every read of the batch is stamped.

    asyncio handles the reads one select() found ready one after another; parsed as it came, each event held
    the next read's stamp back by its JSON parse. When many streams' events arrive together (64 streams of one
    engine step), the last of them was stamped late by all the others' parses (issue 43: stamp lag, ITL p99
    over the truth at c64). So a read only stamps, de-frames and splits; the parse runs in one callback queued
    behind the batch (call_soon runs after the handles already due), before the next select's reads are handled.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.waiting: list[SseLines] = []

    def want(self, lines: SseLines) -> None:
        if not self.waiting:
            self.loop.call_soon(self.run)
        self.waiting.append(lines)

    def run(self) -> None:
        waiting, self.waiting = self.waiting, []
        for lines in waiting:
            lines.hand_on()


class WireAnswer:
    """What one request got: its status, its SSE lines (status < 400) or its error page's bytes, and whether
    that page was cut."""

    def __init__(self, lines: SseLines) -> None:
        self.status: int | None = None
        self.lines = lines
        self.page = bytearray()
        self.cut: str | None = None


class _Wire(asyncio.BufferedProtocol):
    """One connection: the request's response read off it as its bytes arrive; reusable once a response ends.

    Read into a buffer of its own (asyncio's buffered protocol): a plain protocol's transport asks recv() for
    256 KiB a read, a buffer that big allocated and cut down at every read; at one event a read that cost
    25-30 us, more than the read's own Python (a bare asyncio reader of the stand-in server, issue 43)."""

    def __init__(self) -> None:
        self._buffer = bytearray(READ_BYTES)
        self._view = memoryview(self._buffer)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._timer: asyncio.TimerHandle | None = None
        self._grace: asyncio.TimerHandle | None = None
        self._reset(None, WireAnswer(SseLines(lambda payload, now: None, 0)), 0, None)

    def _reset(self, done: asyncio.Future[None] | None, answer: WireAnswer, error_cap: int,
               timeout: float | None) -> None:
        self._cancel_grace()
        self.done, self.answer, self.error_cap, self.timeout = done, answer, error_cap, timeout
        self.head = b""
        self.raw = b""
        """Body bytes not yet de-framed"""
        self.chunked = False
        self.length: int | None = None
        """Body bytes still to come (Content-Length), or None"""
        self.chunk_left = -1
        """-1: a chunk-size line is next; -2: the CRLF after a chunk's data; -3: the trailer; else data bytes left"""
        self.keep_open = False
        self.last_read = time.monotonic()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def send(self, request: bytes, done: asyncio.Future[None], answer: WireAnswer, error_cap: int,
             timeout: float | None) -> None:
        self._reset(done, answer, error_cap, timeout)
        answer.lines.on_error = self._fail
        assert self.transport is not None
        self.transport.write(request)
        self._arm()

    def _arm(self) -> None:
        if self.timeout is None or self.done is None:
            return
        loop = self.done.get_loop()
        if self._timer is None:
            self._timer = loop.call_at(self.last_read + self.timeout, self._check_timeout)

    def _check_timeout(self) -> None:
        self._timer = None
        if self.done is None or self.done.done() or self.timeout is None:
            return
        loop = self.done.get_loop()
        if loop.time() < self.last_read + self.timeout:
            self._timer = loop.call_at(self.last_read + self.timeout, self._check_timeout)
        else:
            self._fail(httpx.ReadTimeout("no data within the read timeout"))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        now = time.monotonic()  # the one clock read of this socket read, before anything looks at its bytes
        self._read(bytes(self._view[:nbytes]), now)

    def _read(self, data: bytes, now: float) -> None:
        self.last_read = now
        if self.done is None or self.done.done():
            return
        try:
            if self.answer.status is None:
                self.head += data
                end = self.head.find(b"\r\n\r\n")
                if end < 0:
                    if len(self.head) > HEAD_BYTES:
                        raise httpx.RemoteProtocolError(f"a response head over {HEAD_BYTES:,} bytes")
                    return
                data = self.head[end + 4:]
                self._read_head(self.head[:end])
            self.raw += data
            self._body(now)
        except (httpx.HTTPError, ValueError) as exc:
            self._fail(exc)

    def _read_head(self, head: bytes) -> None:
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise httpx.RemoteProtocolError(f"not an HTTP/1.1 status line: {status_line[:100]!r}")
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self.answer.status = int(parts[1])
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if not self.chunked and "content-length" in headers:
            try:
                self.length = int(headers["content-length"])
            except ValueError:
                raise httpx.RemoteProtocolError(f"Content-Length {headers['content-length']!r}") from None
        self.keep_open = (parts[0] == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
                          and (self.chunked or self.length is not None))

    def _body(self, now: float) -> None:
        if self.chunk_left == -1 and self._one_whole_chunk(now):
            return
        if not self.chunked:
            data, self.raw = self.raw, b""
            if self.length is not None:
                data = data[:self.length]
                self.length -= len(data)
            self._deliver(data, now)
            if self.length == 0:
                self._finish()
            return
        pieces = []
        raw, at = self.raw, 0
        while True:
            if self.chunk_left >= 0:
                take = min(self.chunk_left, len(raw) - at)
                pieces.append(raw[at:at + take])
                at += take
                self.chunk_left -= take
                if self.chunk_left:
                    break
                self.chunk_left = -2
            if self.chunk_left == -2:
                if len(raw) - at < 2:
                    break
                if raw[at:at + 2] != b"\r\n":
                    raise httpx.RemoteProtocolError("a chunk's data did not end with CRLF")
                at += 2
                self.chunk_left = -1
            if self.chunk_left == -3:
                end = raw.find(b"\r\n", at)
                if end < 0:
                    break
                if end == at:  # the blank line after the last chunk (and any trailers)
                    self.raw = b""
                    self._deliver(b"".join(pieces), now)
                    self._finish()
                    return
                at = end + 2
                continue
            end = raw.find(b"\r\n", at)
            if end < 0:
                if len(raw) - at > CHUNK_LINE_BYTES:
                    raise httpx.RemoteProtocolError("a chunk-size line with no end")
                break
            try:
                size = int(raw[at:end].split(b";")[0], 16)
            except ValueError:
                raise httpx.RemoteProtocolError(f"a chunk size that is not hex: {raw[at:end][:40]!r}") from None
            at = end + 2
            self.chunk_left = size if size else -3
        self.raw = raw[at:]
        self._deliver(b"".join(pieces), now)

    def _one_whole_chunk(self, now: float) -> bool:
        """The common read, de-framed in a few C calls: exactly one whole chunk (a streamed event as engines send
        it, one to a chunk, read as it came); False, nothing done, for anything else (the general loop's)."""
        if not self.chunked:
            return False
        raw = self.raw
        end = raw.find(b"\r\n", 0, 10)
        if end < 1:
            return False
        try:
            size = int(raw[:end], 16)
        except ValueError:  # a chunk extension, or no hex: the general loop reads or refuses it
            return False
        stop = end + 2 + size
        if not size or len(raw) != stop + 2 or raw[stop:] != b"\r\n":
            return False
        self.raw = b""
        self._deliver(raw[end + 2:stop], now)
        return True

    def _deliver(self, data: bytes, now: float) -> None:
        if not data:
            return
        answer = self.answer
        if answer.status is not None and answer.status >= 400:
            answer.page += data
            if len(answer.page) > self.error_cap:
                del answer.page[self.error_cap:]
                answer.cut = f"cut at {self.error_cap:,} bytes: the server sent more and was not read further"
                self.keep_open = False
                self._finish()
            return
        answer.lines.feed(data, now)
        if answer.lines.done and self.done is not None and not self.done.done():
            self._after_last_event()

    def _after_last_event(self) -> None:
        """The stream's last event came: its body's end usually follows in the same read or the next; where it
        does not come within LAST_EVENT_GRACE_S the request ends anyway, and the connection is not reused."""
        assert self.done is not None
        if self._grace is None:
            self._grace = self.done.get_loop().call_later(LAST_EVENT_GRACE_S, self._end_without_body_end)

    def _end_without_body_end(self) -> None:
        self._grace = None
        if self.done is not None and not self.done.done():
            self.keep_open = False
            self._finish()

    def _cancel_grace(self) -> None:
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None

    def _finish(self) -> None:
        self._cancel_grace()
        if not self.keep_open and self.transport is not None:
            self.transport.close()
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        self._cancel_grace()
        self.keep_open = False
        if self.transport is not None:
            self.transport.close()
        if self.done is not None and not self.done.done():
            self.done.set_exception(exc)

    def eof_received(self) -> bool | None:
        self._lost(None)
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._lost(exc)

    def _lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.done is None or self.done.done():
            return
        answer = self.answer
        if answer.status is None:
            said = "Server disconnected without sending a response."
            self.done.set_exception(httpx.RemoteProtocolError(said) if exc is None else httpx.ReadError(str(exc)))
        elif self.chunked or self.length:
            why = "incomplete chunked read" if self.chunked else f"{self.length} bytes of the body never came"
            self.done.set_exception(httpx.RemoteProtocolError(
                f"peer closed connection without sending complete message body: {why}"))
        else:  # a body that ends when the connection does
            self._finish()


class SseWire:
    """Streamed POSTs to one server, each on a connection of its own or, with `keep_alive`, a reused one."""

    def __init__(self, base_url: str, headers: Mapping[str, str], *, connect_timeout_s: float,
                 read_timeout_s: float, keep_alive: bool) -> None:
        url = httpx.URL(base_url)
        self.host, self.tls = url.host, url.scheme == "https"
        self.port = url.port or (443 if self.tls else 80)
        self.base_path = url.raw_path.decode().split("?")[0].rstrip("/")
        named = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address, bracketed as in a URL
        self.headers = {"Host": f"{named}:{self.port}", "Accept": "*/*", "User-Agent": "ninferkit",
                        "Content-Type": "application/json", **headers}
        self.connect_timeout_s, self.read_timeout_s, self.keep_alive = connect_timeout_s, read_timeout_s, keep_alive
        self._idle: list[_Wire] = []
        self._ssl: ssl.SSLContext | None = None
        self._later: ParseLater | None = None

    async def post(self, path: str, body: bytes, answer: WireAnswer, error_cap: int) -> None:
        """Send `body`, then read the answer into `answer` until it ends; httpx's errors for a connection that
        failed (see the module docstring), MalformedStream for a stream its lines refuse."""
        wire = await self._connection()
        headers = {**self.headers, "Content-Length": str(len(body))}
        if not self.keep_alive:
            headers["Connection"] = "close"
        head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        request = f"POST {self.base_path}{path} HTTP/1.1\r\n{head}\r\n".encode() + body
        loop = asyncio.get_running_loop()
        if self._later is None or self._later.loop is not loop:
            self._later = ParseLater(loop)
        answer.lines.later = self._later
        done: asyncio.Future[None] = loop.create_future()
        try:
            timeout = None if math.isinf(self.read_timeout_s) else self.read_timeout_s
            wire.send(request, done, answer, error_cap, timeout)
            await done
        except BaseException:
            wire.keep_open = False
            if wire.transport is not None:
                wire.transport.close()
            raise
        finally:
            answer.lines.hand_on()  # events still held: the answer ended in their read's batch
        if answer.lines.error is not None:
            wire.keep_open = False
            if wire.transport is not None:
                wire.transport.close()
            raise answer.lines.error
        if wire.keep_open and self.keep_alive and not wire.closed:
            self._idle.append(wire)

    async def _connection(self) -> _Wire:
        while self._idle:
            wire = self._idle.pop()
            if not wire.closed and wire.transport is not None and not wire.transport.is_closing():
                return wire
        loop = asyncio.get_running_loop()
        if self.tls and self._ssl is None:
            self._ssl = httpx.create_ssl_context()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, wire = await loop.create_connection(_Wire, self.host, self.port, ssl=self._ssl if self.tls else None)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"connect to {self.host}:{self.port}: {exc or 'timed out'}") from exc
        except OSError as exc:  # ssl.SSLError included
            raise httpx.ConnectError(f"connect to {self.host}:{self.port}: {exc}") from exc
        return wire

    def close(self) -> None:
        for wire in self._idle:
            if wire.transport is not None:
                wire.transport.close()
        self._idle.clear()
