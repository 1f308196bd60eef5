"""httpx transports over a network backend of our choosing, built from public httpcore API only.

httpx does the HTTP work everywhere in ninferkit, but its transports take no httpcore network
backend, and two places need one: downloads read the socket in 1 MiB pieces
(`ninferkit.artifact.fetch`), and the measuring client reads its streams off plain asyncio sockets
(:class:`LoopBackend`), which cost the server it measures less. These transports do what
httpx.HTTPTransport / AsyncHTTPTransport do (map the request to httpcore, the errors back to
httpx's) over a pool given that backend. httpx ignores proxies from the environment for a client
given a transport: callers use these only where no proxy applies.
"""

from __future__ import annotations

import asyncio
import math
import ssl
import urllib.request
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

# most specific first: the first match names the httpx error (httpx.HTTPTransport does the same)
_HTTPCORE_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout), (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout), (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException), (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError), (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError), (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError), (httpcore.ProtocolError, httpx.ProtocolError),
    (httpcore.ProxyError, httpx.ProxyError), (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
)


@contextmanager
def httpx_errors() -> Iterator[None]:
    """Re-raise httpcore's errors as the httpx errors callers catch."""
    try:
        yield
    except Exception as exc:
        mapped = next((theirs for ours, theirs in _HTTPCORE_ERRORS if isinstance(exc, ours)), None)
        if mapped is None:
            raise
        raise mapped(str(exc)) from exc


def _core_request(request: httpx.Request) -> httpcore.Request:
    url = request.url
    return httpcore.Request(request.method, httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port,
                                                         target=url.raw_path),
                            headers=request.headers.raw, content=request.stream, extensions=request.extensions)


DEFAULT_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)
"""httpx's own default pool limits."""


def _pool_options(limits: httpx.Limits) -> dict[str, Any]:
    return {"ssl_context": httpx.create_ssl_context(), "max_connections": limits.max_connections,
            "max_keepalive_connections": limits.max_keepalive_connections,
            "keepalive_expiry": limits.keepalive_expiry}


class _Body(httpx.SyncByteStream):
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __iter__(self) -> Iterator[bytes]:
        with httpx_errors():
            yield from self.inner

    def close(self) -> None:
        with httpx_errors():
            self.inner.close()


class BackendTransport(httpx.BaseTransport):
    """httpx.HTTPTransport's mapping over an httpcore pool on `network_backend`."""

    def __init__(self, network_backend: httpcore.NetworkBackend, limits: httpx.Limits = DEFAULT_LIMITS) -> None:
        self.pool = httpcore.ConnectionPool(network_backend=network_backend, **_pool_options(limits))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with httpx_errors():
            response = self.pool.handle_request(_core_request(request))
        return httpx.Response(response.status, headers=response.headers, stream=_Body(response.stream),
                              extensions=response.extensions)

    def close(self) -> None:
        self.pool.close()


class _AsyncBody(httpx.AsyncByteStream):
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with httpx_errors():
            async for part in self.inner:
                yield part

    async def aclose(self) -> None:
        with httpx_errors():
            await self.inner.aclose()


class AsyncBackendTransport(httpx.AsyncBaseTransport):
    """httpx.AsyncHTTPTransport's mapping over an httpcore pool on `network_backend`."""

    def __init__(self, network_backend: httpcore.AsyncNetworkBackend, limits: httpx.Limits = DEFAULT_LIMITS) -> None:
        self.pool = httpcore.AsyncConnectionPool(network_backend=network_backend, **_pool_options(limits))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        with httpx_errors():
            response = await self.pool.handle_async_request(_core_request(request))
        return httpx.Response(response.status, headers=response.headers, stream=_AsyncBody(response.stream),
                              extensions=response.extensions)

    async def aclose(self) -> None:
        await self.pool.aclose()


class LoopBackend(httpcore.AsyncNetworkBackend):
    """TCP (and TLS) connections as plain asyncio transports; see :class:`_LoopStream` for why."""

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None) -> _LoopStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    _Receiver, host, port, local_addr=None if local_address is None else (local_address, 0))
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"connect to {host}:{port}: {exc or 'timed out'}") from exc
        except OSError as exc:
            raise httpcore.ConnectError(f"connect to {host}:{port}: {exc}") from exc
        sock = transport.get_extra_info("socket")
        for option in socket_options or ():
            sock.setsockopt(*option)
        return _LoopStream(transport, protocol)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _Receiver(asyncio.Protocol):
    """Buffers what asyncio's transport reads and wakes the one pending read.

    A read's timeout is a deadline, checked by one timer that lives across reads and is re-armed
    only when it fires before the deadline: with a 600 s timeout that is one timer per connection,
    where a timer per read (set, then cancelled) cost measurably per streamed token.
    """

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.at_eof = False
        self.error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._deadline = math.inf
        self._timer: asyncio.TimerHandle | None = None

    async def wait(self, timeout: float | None) -> None:
        """Until bytes arrive or the stream ends; httpcore.ReadTimeout after `timeout` seconds."""
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        self._deadline = math.inf if timeout is None else loop.time() + timeout
        if self._deadline < math.inf and (self._timer is None or self._timer.when() > self._deadline):
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(self._deadline, self._check_deadline)
        await waiter

    def _check_deadline(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done() or self._deadline == math.inf:
            return
        loop = waiter.get_loop()
        if loop.time() < self._deadline:
            self._timer = loop.call_at(self._deadline, self._check_deadline)
        else:
            waiter.set_exception(httpcore.ReadTimeout("no data within the read timeout"))
            self._waiter = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._wake()

    def eof_received(self) -> None:
        self.at_eof = True
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.at_eof, self.error = True, exc
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        self._waiter = None


class _LoopStream(httpcore.AsyncNetworkStream):
    """httpcore's network stream, read straight off an asyncio transport.

    On a 2-core machine at concurrency 1 every wakeup of the measuring client preempts one of the
    server's compute threads, which stalls the whole decode step at its barrier, so the CPU a
    streamed token costs here is decode rate lost there. anyio's stream (httpcore's default on
    asyncio) spends per read two `epoll_ctl` calls (resume, then pause reading) and a cancel scope
    with its own timer; here the socket stays registered and arriving bytes wait in a buffer
    (:class:`_Receiver`). Against a llama-server look-alike (one 240-byte event every 2 ms) that took
    the client from about 140 to about 90 us of CPU per streamed token; most of the rest is the
    asyncio wakeup itself and httpcore/h11's chunked decoding. No read-side backpressure: the
    bodies read this way are small.
    """

    def __init__(self, transport: asyncio.Transport, receiver: _Receiver) -> None:
        self._transport = transport
        self._receiver = receiver

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        receiver = self._receiver
        if not receiver.buffer and not receiver.at_eof:
            await receiver.wait(timeout)
        if receiver.buffer:
            data = bytes(receiver.buffer[:max_bytes])
            del receiver.buffer[:max_bytes]
            return data
        if receiver.error is not None:
            raise httpcore.ReadError(str(receiver.error)) from receiver.error
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        """Hands the bytes to the transport, which sends what the socket does not take at once."""
        if self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        self._transport.write(buffer)

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> _LoopStream:
        try:
            transport = await asyncio.get_running_loop().start_tls(
                self._transport, self._receiver, ssl_context, server_hostname=server_hostname,
                ssl_handshake_timeout=timeout)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"TLS handshake: {exc or 'timed out'}") from exc
        except OSError as exc:  # ssl.SSLError included
            raise httpcore.ConnectError(f"TLS handshake: {exc}") from exc
        assert transport is not None
        return _LoopStream(transport, self._receiver)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # httpcore: an idle pooled connection the server has closed
            return bool(self._receiver.buffer) or self._receiver.at_eof
        return self._transport.get_extra_info({"client_addr": "sockname", "server_addr": "peername"}.get(info, info))


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


def uses_proxy(url: str) -> bool:
    """Whether httpx may send a request for `url` through a proxy from the environment (http_proxy and the
    like): never for loopback, where the engine ninferkit started listens (a lab's proxy cannot reach it, and
    a readiness check sent there waits out the whole startup timeout). Pass as httpx's `trust_env`."""
    host = httpx.URL(url).host
    return host not in LOOPBACK_HOSTS and not host.startswith("127.")


def proxy_note(url: str) -> str:
    """For an error about `url`: the proxy the request went through, where one was used ("" where none)."""
    if not uses_proxy(url):
        return ""
    scheme = httpx.URL(url).scheme
    proxies = urllib.request.getproxies()  # the variables httpx reads, by the same rules
    proxy = proxies.get(scheme) or proxies.get("all")
    return f" (sent through the proxy {proxy}, from the environment's {scheme}_proxy)" if proxy else ""
