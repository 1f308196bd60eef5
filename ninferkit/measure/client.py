"""The measuring client: one streamed request in, one typed row out, on the telemetry clock.

Chat Completions (`stream_options.include_usage`), Anthropic Messages and the Responses API are
parsed into the same :class:`RequestResult`. Times are `time.monotonic()` seconds, the clock
`telemetry.jsonl` uses, so a request can be placed on the GPU power and clock timeline.

What this client measures, and how (the peer tools each get one of these wrong,
reference/peer-benchmark-tools.md section 0):

- `t_first_token` is the first event that carries non-empty generated text (content, reasoning or
  tool-call arguments); a role-only first chunk does not count. `t_first_answer_token` is the first that
  carries answer text or tool-call arguments, not reasoning (`reasoning_content`, thinking blocks,
  Responses reasoning text): where the engine separates the two, their gap is the time spent thinking.
- The reply (its text and the tool calls it made, `Reply`) is kept for a sweep that sends it back (a
  session's next turn, an agent's tool results); it is no field of the row.
- Token counts come from the server's usage; this client never counts stream chunks, because under
  speculative decoding one chunk carries several tokens.
- `decode_tok_s_client = (completion_tokens - 1) / (t_last_token - t_first_token)`: the first token
  is the end of prefill, so it is not a decode step. `tpot_client_s` is its inverse (time per output
  token, vLLM's TPOT), and `itl_client_s` lists the gaps between the events that carried text (vLLM's
  ITL): every such event is stamped, at the socket read that brought it, before anything parses it
  (measure/sse_wire). ninferkit.measure.latency names both as the peer tools do.
- The server's own per-request timings come from the engine adapter (`server_timings`) on every
  event that carries them; the last one wins (llama-server sends them on the final chunk).
- A failed request is a row with status "errored", HTTP status and body, never an exception; so is
  a stream this client cannot read (an event that is not a JSON object, a usage count that is not
  an integer), with what was wrong. Error text is scrubbed of the key the client sends.
- Every request has a wall-clock deadline, DEADLINE_READ_TIMEOUTS times the per-read timeout (`timeout_s`,
  the sweeps' `request_timeout_s`): the read timeout ends a server gone silent (ReadTimeout), the deadline
  one that never stops talking (a comment or a token every second forever), as an errored row. Bodies
  read whole (an error page, /metrics) are capped in bytes (ninferkit.bounded), an SSE line at
  SSE_LINE_BYTES: a server that never stops sending is cut, never grown.
- A row is stored only as its reader reads it (records.request_row_refusals): a server field of the
  wrong type or an impossible value leaves that field empty and the row errored, naming both.
- A request that got no response byte because the server dropped the connection (llama-server
  closes idle kept-alive connections, about one reused connection in twenty) is sent once more, and
  its row says so in `retried` (the first try's error); one that got any byte is never sent again.
- A body carries only what its protocol takes: the Responses API has no `seed` and refuses
  `max_output_tokens` below 16, the Messages API has no `seed` (live NInfer capture: `unknown parameter:
  seed`, `max_output_tokens must be at least 16`); engine extensions come in `extra`, from the sweeps,
  which ask the engine adapter which ones the engine reads.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import httpx

from ninferkit import bounded
from ninferkit.engines.api_dialect import ApiDialect
from ninferkit.errors import RequestFailed
from ninferkit.measure.sse_wire import MalformedStream, SseLines, SseWire, WireAnswer
from ninferkit.redaction import remember, scrub
from ninferkit.rundir.records import RequestRow, request_row_refusals
from ninferkit.transports import AsyncBackendTransport, LoopBackend

Api = Literal["chat", "messages", "responses"]
API_PATHS: dict[str, str] = {"chat": "/v1/chat/completions", "messages": "/v1/messages",
                             "responses": "/v1/responses"}
ERROR_BODY_CHARS = 2000
DEADLINE_READ_TIMEOUTS = 2
"""A request's wall-clock deadline in read timeouts: longer than one, so a server that goes silent is told
apart (ReadTimeout) from one that keeps sending (RequestDeadline)."""
SSE_LINE_BYTES = 1024 * 1024
"""An SSE line longer than this with no newline is not an event any engine sends (a final chunk with its
timings is about 1 KiB): the request is an errored row, and the buffer never grows past it."""
RESPONSES_MIN_OUTPUT_TOKENS = 16
"""The Responses API's floor for max_output_tokens (NInfer G1: `max_output_tokens must be at least 16`)."""
SEED_APIS = frozenset({"chat"})
"""APIs whose protocol has a `seed` field (the Messages and Responses APIs have none)."""
DROPPED = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
"""What a connection the server closed under a request looks like before any response byte."""


@dataclass(frozen=True)
class RequestSpec:
    """What to send: the conversation, the output length and sampling, in API-neutral form.

    `messages` are `{"role", "content"}` dicts; content may be a string or a list of content blocks
    (Anthropic `cache_control` blocks pass through to the Messages API unchanged); chat messages may
    carry `tool_calls` and `tool` turns. `tools` are Chat Completions function definitions (the chat
    API only). `seed` is sent only where the protocol has one (SEED_APIS). `extra` is merged into the
    body last (output pinning, `previous_response_id`, engine extensions such as `reasoning_effort`).
    """

    api: Api
    messages: list[dict[str, Any]]
    max_tokens: int
    temperature: float | None = 0.0
    """None: none is sent, and the engine samples with its own default."""
    seed: int | None = 0
    tools: list[dict[str, Any]] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StreamedCall:
    """A tool call as the model streamed it: `arguments` is the JSON text it wrote, unparsed (whether it
    parses is what the agent loop measures)."""

    call_id: str | None
    name: str
    arguments: str


@dataclass
class Reply:
    """What the model answered: its text parts and its tool calls by stream index (a call's arguments
    arrive in pieces: Chat `tool_calls[i].function.arguments`, Anthropic `input_json_delta`, Responses
    `function_call_arguments.delta`)."""

    text_parts: list[str] = field(default_factory=list)
    calls: dict[int, list[Any]] = field(default_factory=dict)
    """index -> [call id, name, argument pieces]"""

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    @property
    def tool_calls(self) -> list[StreamedCall]:
        return [StreamedCall(call_id, name or "", "".join(pieces))
                for call_id, name, pieces in (self.calls[index] for index in sorted(self.calls))]

    def call_part(self, index: object, call_id: object, name: object, arguments: object) -> None:
        """Add a streamed piece of a call. The server's fields are untrusted: an index that is no number is
        call 0, an id or name that is no text is its JSON, and arguments sent as a JSON value rather than
        its text are that value's JSON text (the loop then says whether they parse)."""
        call = self.calls.setdefault(index if isinstance(index, int) else 0, [None, None, []])
        call[0], call[1] = call[0] or _text(call_id), call[1] or _text(name)
        if arguments:
            call[2].append(_text(arguments))


def _text(value: object) -> str | None:
    """A server's field as text: itself when it is text, its JSON otherwise (None stays None)."""
    return value if value is None or isinstance(value, str) else json.dumps(value, default=str)


@dataclass
class RequestResult:
    """One finished request: raw monotonic timestamps, server usage and timings, derived metrics."""

    api: str
    status: str = "incomplete"  # ok | errored | incomplete
    error: str | None = None
    http_status: int | None = None
    started_utc: str = ""
    t_send: float = 0.0
    t_first_byte: float | None = None
    t_first_token: float | None = None
    t_first_answer_token: float | None = None
    t_last_token: float | None = None
    t_done: float | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    reasoning_events: int = 0
    """Events that carried reasoning text (not tokens: an event may carry several; usage's `reasoning_tokens`
    is the count where the engine reports one, llama-server does not)."""
    finish_reason: str | None = None
    response_id: str | None = None
    temperature: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    reasoning_effort: str | None = None
    retried: str | None = None
    """The error of a first try that got no response byte (the connection was dropped), when it was sent again."""
    client_worker: int | None = None
    """The worker process that stamped this request (measure/client_workers), or None: the caller's own."""
    client_lag_max_s: float | None = None
    """How late the stamping process's event loop ran at most during the request (measure/client_clock), where
    the caller measured it; None: unknown, not zero."""
    server: dict[str, Any] = field(default_factory=dict)
    text_event_times: list[float] = field(default_factory=list)
    """When each event that carried generated text arrived (monotonic seconds); the row keeps their gaps."""
    reply: Reply = field(default_factory=Reply)

    @property
    def ttft_client_s(self) -> float | None:
        return None if self.t_first_token is None else self.t_first_token - self.t_send

    @property
    def ttft_answer_client_s(self) -> float | None:
        """Time to the first answer token (after any reasoning): the TTFT a user reading the answer waits."""
        return None if self.t_first_answer_token is None else self.t_first_answer_token - self.t_send

    @property
    def e2e_client_s(self) -> float | None:
        return None if self.t_done is None else self.t_done - self.t_send

    @property
    def decode_tok_s_client(self) -> float | None:
        if not self.completion_tokens or self.completion_tokens < 2:
            return None
        if self.t_first_token is None or self.t_last_token is None or self.t_last_token <= self.t_first_token:
            return None
        return (self.completion_tokens - 1) / (self.t_last_token - self.t_first_token)

    @property
    def tpot_client_s(self) -> float | None:
        """Time per output token after the first, the tokens from the server's usage (vLLM's TPOT)."""
        rate = self.decode_tok_s_client
        return None if rate is None else 1 / rate

    @property
    def itl_client_s(self) -> list[float]:
        """The gaps between consecutive text events, rounded to the microsecond (vLLM's ITL)."""
        times = self.text_event_times
        return [round(later - earlier, 6) for earlier, later in zip(times, times[1:], strict=False)]

    def row(self) -> dict[str, Any]:
        """The requests.jsonl fields of this request (records.RequestRow; the sweep adds run and cell fields)."""
        out = {item.name: getattr(self, item.name) for item in fields(self) if item.name not in ROW_LEFT_OUT}
        server = self.server
        out.update(ttft_client_s=self.ttft_client_s, ttft_answer_client_s=self.ttft_answer_client_s,
                   e2e_client_s=self.e2e_client_s,
                   decode_tok_s_client=self.decode_tok_s_client, tpot_client_s=self.tpot_client_s,
                   text_events=len(self.text_event_times), itl_client_s=self.itl_client_s)
        for name in RequestRow.SERVER_FIELDS:
            out[name] = server.get(name)
        out.update({name: value for name, value in server.items() if name not in out})  # engine extras
        drafted, accepted = server.get("drafted_tokens_server"), server.get("accepted_tokens_server")
        if out.get("acceptance_server") is None and drafted and accepted is not None:
            out["acceptance_server"] = accepted / drafted
        return _stored_as_read(out)


def _stored_as_read(row: dict[str, Any]) -> dict[str, Any]:
    """The row with every field its reader would refuse left empty, and the request errored naming the field
    and the value: one odd server field must not make the run's requests.jsonl unreadable."""
    refused = request_row_refusals(row)
    if not refused:
        return row
    said = "; ".join(f"{name} {why}" for name, why in refused.items())
    kept = {name: None if name in refused else value for name, value in row.items()}
    error = f"the server sent what no request has, not stored: {said}"
    return kept | {"status": "errored", "error": error + (f" (and: {row['error']})" if row.get("error") else "")}


ROW_LEFT_OUT = frozenset({"server", "text_event_times", "reply"})
"""Fields a row states otherwise: the server's are spread out by name, the event times become their count
and gaps (`text_events`, `itl_client_s`); the reply is the sweep's to send back, not a measurement."""


def request_body(spec: RequestSpec, model_id: str) -> dict[str, Any]:
    """The JSON body for the spec's API, streaming with usage, with only the fields that API takes.

    Raises ValueError for a spec its protocol refuses (a Responses request below 16 output tokens,
    tools outside the chat API): the sweep plan raises such sizes with a note, so none is sent.
    """
    if spec.api not in API_PATHS:
        raise ValueError(f"api = {spec.api!r}; allowed: {', '.join(API_PATHS)}")
    if spec.tools and spec.api != "chat":
        raise ValueError(f"tools are sent on the chat API only, not {spec.api!r}")
    body: dict[str, Any] = {"model": model_id, "stream": True}
    if spec.temperature is not None:
        body["temperature"] = spec.temperature
    if spec.seed is not None and spec.api in SEED_APIS:
        body["seed"] = spec.seed
    if spec.api == "chat":
        body.update(messages=spec.messages, max_tokens=spec.max_tokens, stream_options={"include_usage": True})
        if spec.tools:
            body["tools"] = spec.tools
    elif spec.api == "messages":
        system = [m["content"] for m in spec.messages if m["role"] == "system"]
        if system:
            body["system"] = system[0]
        body.update(messages=[m for m in spec.messages if m["role"] != "system"], max_tokens=spec.max_tokens)
    else:
        if spec.max_tokens < RESPONSES_MIN_OUTPUT_TOKENS:
            raise ValueError(f"max_output_tokens = {spec.max_tokens}: the Responses API takes at least "
                             f"{RESPONSES_MIN_OUTPUT_TOKENS}")
        body.update(input=spec.messages, max_output_tokens=spec.max_tokens)
    body.update(spec.extra)
    return body


def error_summary(body: str | None) -> str:
    """A server's error body as one line, `code: message (param p)`, read from the OpenAI shape
    (`{"error": {"code", "message", "param"}}`, NInfer and llama-server) or the Anthropic one
    (`{"type": "error", "error": {"type", "message"}}`); any other text is returned as it is."""
    text = scrub((body or "").strip())
    try:
        parsed = bounded.loads_json(text)
    except ValueError:
        return text[:300]
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(error, dict) or not error.get("message"):
        return text[:300]
    code = error.get("code") if error.get("code") is not None else error.get("type")
    summary = f"{code}: {error['message']}" if code is not None else str(error["message"])
    return summary + (f" (param {error['param']})" if error.get("param") else "")


class StreamingClient:
    """An async client for one server; open it with `async with`.

    Without `transport`, streamed requests are read off the socket by hand (`sse_wire`: a clock read per
    socket read, the events split there and parsed after it), and the helper requests (`get_text`,
    `post_json`) go through httpx over plain asyncio sockets (`ninferkit.transports.LoopBackend`). A
    `transport` replaces the network for both (tests replay recorded streams through `httpx.MockTransport`).

        async with StreamingClient(url, adapter, "embedded") as client:
            result = await client.send(RequestSpec("chat", [{"role": "user", "content": "Hi"}], 16))
    """

    def __init__(self, base_url: str, adapter: ApiDialect, model_id: str, *,
                 headers: Mapping[str, str] | None = None, timeout_s: float = 600.0,
                 transport: httpx.AsyncBaseTransport | None = None, max_connections: int = 256,
                 keep_alive: bool = True) -> None:
        """`keep_alive` True (the default) reuses a connection whose answer ended cleanly: a fresh one cost
        this client about twice the CPU of an 8-token request (benchmarks/bench_client_standin.py, c64). A
        request that lands on a kept-alive connection the server is closing (llama-server closes idle
        ones) gets no response byte and is sent once more (`retried`). False opens a fresh connection per
        request, as curl does."""
        self.adapter = adapter
        self.model_id = model_id
        self.deadline_s = DEADLINE_READ_TIMEOUTS * timeout_s
        for name, value in (headers or {}).items():  # the key it sends: error text it keeps is scrubbed of it
            if name.lower() in ("authorization", "x-api-key"):
                remember(value.removeprefix("Bearer ").strip(), f"the key in the {name} header")
        limits = httpx.Limits(max_connections=max_connections,
                              max_keepalive_connections=max_connections if keep_alive else 0)
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=dict(headers or {}), timeout=httpx.Timeout(timeout_s, connect=10.0),
            transport=transport or AsyncBackendTransport(LoopBackend(), limits), limits=limits,
        )
        self._wire = None if transport is not None else SseWire(
            base_url, dict(headers or {}), connect_timeout_s=10.0, read_timeout_s=timeout_s, keep_alive=keep_alive)

    async def __aenter__(self) -> StreamingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._wire is not None:
            self._wire.close()
        await self._http.aclose()

    async def send(self, spec: RequestSpec) -> RequestResult:
        """Stream one request; every failure becomes a row with status "errored", a request still going at
        its deadline (`deadline_s` from the first send) too."""
        body = request_body(spec, self.model_id)
        result = RequestResult(api=spec.api, temperature=spec.temperature, seed=body.get("seed"),
                               max_tokens=spec.max_tokens, reasoning_effort=body.get("reasoning_effort"))
        parser = _PARSERS[spec.api](result, self.adapter)
        whole = False
        try:
            async with asyncio.timeout(self.deadline_s):
                try:
                    whole = await self._stream(spec.api, body, result, parser)
                except DROPPED as exc:  # the connection closed before a response head arrived: sent again, once
                    result.retried = scrub(f"{type(exc).__name__}: {exc}")
                    whole = await self._stream(spec.api, body, result, parser)
        except TimeoutError:
            result.t_done = time.monotonic()
            result.status = "errored"
            result.error = (f"RequestDeadline: the request was still going after {self.deadline_s:g} s "
                            f"({parser.events} events so far; the deadline is "
                            f"{DEADLINE_READ_TIMEOUTS} x sweeps.request_timeout_s); the stream was closed")
        _settle(parser, result, whole)
        return result

    async def _stream(self, api: str, body: dict[str, Any], result: RequestResult, parser: _StreamParser) -> bool:
        """One try: fill `result` and `parser`, True when the stream was read to its end; raise DROPPED only
        when no response byte arrived (the caller retries that once, with the same parser, which holds no
        event yet); every other failure is written into `result` as an errored request."""
        result.started_utc = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        result.t_send = time.monotonic()
        try:
            if self._wire is None:
                page = await self._stream_httpx(api, body, result, parser)
            else:
                page = await self._stream_wire(self._wire, api, body, result, parser)
            if page is not None:
                result.t_done = time.monotonic()
                error = scrub(page.text())[:ERROR_BODY_CHARS]
                result.status, result.error = "errored", error + (f" [error body {page.cut}]" if page.cut else "")
                return False
        except DROPPED as exc:
            if result.http_status is None and result.retried is None:
                raise
            _errored(result, exc)
            return False
        except (httpx.HTTPError, ValueError) as exc:  # ValueError: MalformedStream (an SSE line with no end)
            _errored(result, exc)
            return False
        result.t_done = time.monotonic()
        return True

    async def _stream_httpx(self, api: str, body: dict[str, Any], result: RequestResult,
                            parser: _StreamParser) -> bounded.Body | None:
        """Through httpx (a client given a transport: a test's replay): the error page, or None for a stream."""
        async with self._http.stream("POST", API_PATHS[api], json=body) as response:
            result.http_status = response.status_code
            if response.status_code >= 400:
                return await bounded.aread_body(response, bounded.ERROR_BODY_BYTES, self.deadline_s)
            lines = SseLines(parser.keep, SSE_LINE_BYTES, named_end=api != "chat")
            try:
                async for chunk in response.aiter_raw():
                    lines.feed(chunk, time.monotonic())
                    if lines.done:  # the last event: a server that keeps the response open is not waited on
                        break
            finally:
                result.t_first_byte = lines.first
                parser.finished = parser.finished or lines.done
        return None

    async def _stream_wire(self, wire: SseWire, api: str, body: dict[str, Any], result: RequestResult,
                           parser: _StreamParser) -> bounded.Body | None:
        """Off the socket by hand (sse_wire): the error page, or None for a stream."""
        answer = WireAnswer(SseLines(parser.keep, SSE_LINE_BYTES, named_end=api != "chat"))
        try:
            content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()  # as httpx
            await wire.post(API_PATHS[api], content, answer, bounded.ERROR_BODY_BYTES)
        finally:
            result.http_status = answer.status
            result.t_first_byte = answer.lines.first
            parser.finished = parser.finished or answer.lines.done
        return None if answer.status is None or answer.status < 400 else bounded.Body(bytes(answer.page), answer.cut)

    async def get_text(self, path: str) -> str:
        """A plain GET of a text endpoint (the engine's /metrics), capped at bounded.METRICS_BYTES; raises
        RequestFailed (a body over the cap is not read, never half-parsed)."""
        try:
            async with self._http.stream("GET", path) as response:
                if response.status_code >= 400:
                    raise RequestFailed(f"GET {path} answered {response.status_code}")
                page = await bounded.aread_body(response, bounded.METRICS_BYTES, self.deadline_s)
        except httpx.HTTPError as exc:
            raise RequestFailed(f"GET {path} failed: {type(exc).__name__}: {exc}") from exc
        if page.cut:
            raise RequestFailed(f"GET {path} not read: its body was {page.cut}")
        return page.text()

    async def post_json(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """A plain JSON POST (tokenizer and similar helper endpoints); raises RequestFailed."""
        try:
            async with self._http.stream("POST", path, json=dict(body)) as response:
                page = await bounded.aread_body(response, bounded.ANSWER_BYTES, self.deadline_s)
                status = response.status_code
        except httpx.HTTPError as exc:
            raise RequestFailed(f"POST {path} failed: {type(exc).__name__}: {exc}; is the server running?") from exc
        if status >= 400:
            raise RequestFailed(f"POST {path} answered {status}: {scrub(page.text()[:300])}")
        if page.cut:
            raise RequestFailed(f"POST {path} not read: its answer was {page.cut}")
        data: dict[str, Any] = json.loads(page.data)
        return data


def _errored(result: RequestResult, exc: BaseException) -> None:
    result.t_done = time.monotonic()
    result.status, result.error = "errored", scrub(f"{type(exc).__name__}: {exc}")


def _settle(parser: _StreamParser, result: RequestResult, whole: bool) -> None:
    """Say how a request's stream ended, its events parsed as they came: "ok" for a stream
    read to its end with its final usage; an event this client cannot read makes the row errored whatever
    came after it (the stream would have stopped there), keeping the time the stream ended."""
    try:
        parser.settle()
    except MalformedStream as exc:
        t_done = result.t_done
        _errored(result, exc)
        result.t_done = t_done if t_done is not None else result.t_done
        return
    if whole:
        result.status = "ok" if parser.finished and result.completion_tokens is not None else "incomplete"
        if result.status == "incomplete":
            result.error = "the stream ended before the final usage event"


def _read_event(parser: _StreamParser, payload: bytes, now: float) -> None:
    """Hand one `data:` payload to the parser; MalformedStream (with an excerpt) when it cannot be read. The
    payload is decoded as UTF-8 here (what every engine sends; json.loads would first guess the encoding of
    bytes, a step per event)."""
    try:
        event = bounded.loads_json(payload.decode())
    except ValueError as exc:  # UnicodeDecodeError included
        raise MalformedStream(f"an event that is not JSON ({exc}): {_excerpt(payload)}") from None
    if not isinstance(event, dict):
        raise MalformedStream(f"an event that is a JSON {type(event).__name__}, not an object: {_excerpt(payload)}")
    try:
        parser.event(event, now)
    except (TypeError, AttributeError, KeyError, ValueError) as exc:  # a field of the wrong shape
        raise MalformedStream(f"an event this client cannot read ({type(exc).__name__}: {exc}): "
                              f"{_excerpt(payload)}") from None


def _excerpt(payload: bytes) -> str:
    return payload[:200].decode(errors="replace")


def _tokens(usage: Any, name: str) -> int | None:
    """A token count from a usage object: an integer or absent; MalformedStream for anything else."""
    if not isinstance(usage, Mapping):
        raise MalformedStream(f"usage is a {type(usage).__name__}, not an object")
    value = usage.get(name)
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    raise MalformedStream(f"usage {name} is {value!r}, not a token count")


class _StreamParser:
    """Per-API event handling; subclasses read text, usage and finish reason from their events."""

    def __init__(self, result: RequestResult, adapter: ApiDialect) -> None:
        self.result = result
        self.adapter = adapter
        self.finished = False
        self.events = 0
        """`data:` payloads read so far"""
        self.unreadable: MalformedStream | None = None
        """The first event this client could not read: the row is errored for it once the stream ends"""
        self.most_events = 8 * (result.max_tokens or 0) + 1024

    def keep(self, payload: bytes, now: float) -> None:
        """Parse one event at its stamp, taken before (the read's one clock read); MalformedStream past
        `most_events`. An event that cannot be read is kept for `settle` and the events after it are not parsed
        (the stream would have stopped there), but the stream is read on to its end, as the row's end time says.

        Parsed as it comes, not when the stream ends: streams of one round end together (a closed loop's
        requests of one length), and their parse all at once held the event loop for tens of milliseconds
        (64 streams of 128 events: stamps 20 ms late at every round's start and end, issue 43)."""
        self.events += 1
        if self.events > self.most_events:
            raise MalformedStream(f"more events than {self.result.max_tokens} output tokens can make: the "
                                  "server does not stop")
        if self.unreadable is None:
            try:
                _read_event(self, payload, now)
            except MalformedStream as exc:
                self.unreadable = exc

    def settle(self) -> None:
        """MalformedStream where an event could not be read."""
        if self.unreadable is not None:
            raise self.unreadable

    def event(self, event: dict[str, Any], now: float) -> None:
        raise NotImplementedError

    def token(self, now: float, answer: bool = True) -> None:
        """An event that carried generated text; `answer` False for reasoning text."""
        if self.result.t_first_token is None:
            self.result.t_first_token = now
        if not answer:
            self.result.reasoning_events += 1
        elif self.result.t_first_answer_token is None:
            self.result.t_first_answer_token = now
        self.result.t_last_token = now
        self.result.text_event_times.append(now)

    def timings(self, event: Mapping[str, Any]) -> None:
        found = self.adapter.server_timings(event)
        if found:
            self.result.server.update(found)


class _ChatParser(_StreamParser):
    def event(self, event: dict[str, Any], now: float) -> None:
        for choice in event.get("choices") or ():
            delta = choice.get("delta") or {}
            content, calls = delta.get("content"), delta.get("tool_calls")
            if content or calls:
                self.token(now)
                if content:
                    self.result.reply.text_parts.append(content)
                for call in calls or ():
                    function = call.get("function") or {}
                    self.result.reply.call_part(call.get("index", 0), call.get("id"), function.get("name"),
                                                function.get("arguments"))
            elif delta.get("reasoning_content"):
                self.token(now, answer=False)
            if choice.get("finish_reason"):
                self.result.finish_reason = choice["finish_reason"]
        usage = event.get("usage")
        if usage:
            self.result.prompt_tokens = _tokens(usage, "prompt_tokens")
            self.result.completion_tokens = _tokens(usage, "completion_tokens")
            self.result.cached_tokens = _tokens(usage.get("prompt_tokens_details") or {}, "cached_tokens")
            self.result.reasoning_tokens = _tokens(usage.get("completion_tokens_details") or {}, "reasoning_tokens")
        if "id" in event and self.result.response_id is None:
            self.result.response_id = event["id"]
        self.timings(event)


class _MessagesParser(_StreamParser):
    """Anthropic usage: input_tokens excludes cache reads, so prompt = input + cache read + cache creation."""

    def event(self, event: dict[str, Any], now: float) -> None:
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            text, arguments = delta.get("text"), delta.get("partial_json")
            if text:
                self.token(now)
                self.result.reply.text_parts.append(text)
            elif arguments:
                self.token(now)
                self.result.reply.call_part(event.get("index", 0), None, None, arguments)
            elif delta.get("thinking"):
                self.token(now, answer=False)
        elif kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") == "tool_use":
                self.result.reply.call_part(event.get("index", 0), block.get("id"), block.get("name"), None)
        elif kind == "message_start":
            message = event.get("message") or {}
            self.result.response_id = message.get("id")
            self._usage(message.get("usage") or {})
        elif kind == "message_delta":
            self.result.finish_reason = (event.get("delta") or {}).get("stop_reason")
            self._usage(event.get("usage") or {})
        elif kind == "message_stop":
            self.finished = True
        self.timings(event)

    def _usage(self, usage: Mapping[str, Any]) -> None:
        if _tokens(usage, "input_tokens") is not None:
            cached = _tokens(usage, "cache_read_input_tokens") or 0
            self.result.cached_tokens = cached
            self.result.prompt_tokens = (usage["input_tokens"] + cached
                                         + (_tokens(usage, "cache_creation_input_tokens") or 0))
        output = _tokens(usage, "output_tokens")
        if output is not None and (output or self.result.completion_tokens is None):
            self.result.completion_tokens = output


class _ResponsesParser(_StreamParser):
    def event(self, event: dict[str, Any], now: float) -> None:
        kind = event.get("type")
        if kind == "response.output_text.delta" and event.get("delta"):
            self.token(now)
            self.result.reply.text_parts.append(event["delta"])
        elif kind == "response.function_call_arguments.delta" and event.get("delta"):
            self.token(now)
            self.result.reply.call_part(event.get("output_index", 0), None, None, event["delta"])
        elif kind == "response.reasoning_text.delta" and event.get("delta"):
            self.token(now, answer=False)
        elif kind == "response.output_item.added":
            item = event.get("item") or {}
            if item.get("type") == "function_call":
                self.result.reply.call_part(event.get("output_index", 0), item.get("call_id"), item.get("name"),
                                            item.get("arguments"))
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            response = event.get("response") or {}
            self.result.response_id = response.get("id")
            usage = response.get("usage") or {}
            self.result.prompt_tokens = _tokens(usage, "input_tokens")
            self.result.completion_tokens = _tokens(usage, "output_tokens")
            self.result.cached_tokens = _tokens(usage.get("input_tokens_details") or {}, "cached_tokens")
            self.result.reasoning_tokens = _tokens(usage.get("output_tokens_details") or {}, "reasoning_tokens")
            reason = (response.get("incomplete_details") or {}).get("reason")
            self.result.finish_reason = reason or response.get("status")
            self.finished = kind == "response.completed" or kind == "response.incomplete"
        self.timings(event)


_PARSERS: dict[str, type[_StreamParser]] = {"chat": _ChatParser, "messages": _MessagesParser,
                                            "responses": _ResponsesParser}
