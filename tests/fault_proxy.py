"""A fault-injecting HTTP/1.1 proxy on loopback, in front of a real server (the live llama-server).

Requests pass through to the upstream server unchanged unless a fault is queued for them; each
request takes the next queued fault whose condition it meets (FIFO), else passes. Faults:

- ``drop``: close the client's connection once the request has arrived, before any response byte
  (what a server does to an idle kept-alive connection it closes under a new request); with
  ``reused_only`` it waits for a request on a connection that already carried one;
- ``cut_after``: forward the real response, then close the connection after that many body bytes;
- ``stall``: forward the real response head and its first body bytes, then send nothing more;
- ``status``: answer with this HTTP status and body instead of asking the server (``echo_auth``
  puts the request's Authorization header in the body, as a careless server's error page might);
- ``rewrite``: forward the real response with each SSE ``data:`` payload passed through a function
  (malformed streams made from the server's own events).

Framing on both sides is done by h11 (the HTTP/1.1 state machine httpx itself uses), so the proxy
keeps connections alive as the client and the server ask. Every request is logged (path, the fault
applied, the connection's request number).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import h11

READ_BYTES = 65536


@dataclass
class Fault:
    kind: str  # drop | cut_after | stall | status | rewrite
    reused_only: bool = False
    path: str | None = None  # only requests to this path (None: any)
    after_bytes: int = 0
    status: int = 500
    body: bytes = b""
    echo_auth: bool = False
    rewrite: Callable[[bytes], bytes] | None = None


@dataclass
class Seen:
    path: str
    fault: str
    on_connection: int
    authorization: str | None


@dataclass
class FaultProxy:
    """Listen on a free loopback port and forward to 127.0.0.1:`upstream_port`; a context manager."""

    upstream_port: int
    faults: list[Fault] = field(default_factory=list)
    log: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._threads: list[threading.Thread] = []
        self._clients: list[socket.socket] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> FaultProxy:
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() that close() alone leaves waiting
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            clients = list(self._clients)
        for client in clients:  # a thread waiting in recv (a kept-alive client, an upstream stream): end it now
            try:
                client.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self._threads:
            thread.join(timeout=10)

    def queue(self, *faults: Fault) -> None:
        with self._lock:
            self.faults.extend(faults)

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._clients.append(client)
            self._spawn(self._serve, client)

    def _take(self, path: str, reused: bool) -> Fault | None:
        with self._lock:
            for index, fault in enumerate(self.faults):
                if (fault.path is None or fault.path == path) and (reused or not fault.reused_only):
                    return self.faults.pop(index)
        return None

    def _serve(self, client: socket.socket) -> None:
        try:
            self._exchanges(client)
        except (OSError, h11.LocalProtocolError):
            return  # the client hung up (it stops reading a stream it cannot parse): nothing to answer

    def _exchanges(self, client: socket.socket) -> None:
        conn = h11.Connection(h11.SERVER)
        count = 0
        with client:
            client.settimeout(60)
            while not self._closing.is_set():
                got = _read_message(conn, client)
                if got is None:
                    return
                request, body = got
                count += 1
                path = request.target.decode()
                auth = dict((k.decode().lower(), v.decode()) for k, v in request.headers).get("authorization")
                fault = self._take(path, count > 1)
                with self._lock:
                    self.log.append(Seen(path, fault.kind if fault else "pass", count, auth))
                if fault is not None and fault.kind == "drop":
                    client.shutdown(socket.SHUT_RDWR)
                    return
                if fault is not None and fault.kind == "status":
                    payload = fault.body + (auth or "").encode() if fault.echo_auth else fault.body
                    _send(conn, client, h11.Response(status_code=fault.status, headers=[
                        ("content-type", "application/json"), ("content-length", str(len(payload)))]))
                    _send(conn, client, h11.Data(data=payload))
                    _send(conn, client, h11.EndOfMessage())
                elif not self._forward(conn, client, request, body, fault):
                    return
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()

    def _forward(self, conn: h11.Connection, client: socket.socket, request: h11.Request, body: bytes,
                 fault: Fault | None) -> bool:
        """Relay one exchange through a fresh upstream connection; False when the client connection must end."""
        upstream = h11.Connection(h11.CLIENT)
        with socket.create_connection(("127.0.0.1", self.upstream_port), timeout=600) as server:
            with self._lock:
                self._clients.append(server)  # ended on exit as well: a stream nobody reads any more
            for part in (request, h11.Data(data=body), h11.EndOfMessage()):
                _send(upstream, server, part)
            sent = 0
            pending = b""
            while True:
                event = _next_event(upstream, server)
                if isinstance(event, h11.Response):
                    headers = [(k, v) for k, v in event.headers if fault is None or fault.kind != "rewrite"
                               or k.lower() != b"content-length"]
                    if fault is not None and fault.kind == "rewrite" and not any(
                            k.lower() == b"transfer-encoding" for k, _ in headers):
                        headers.append((b"transfer-encoding", b"chunked"))
                    _send(conn, client, h11.Response(status_code=event.status_code, headers=headers,
                                                     reason=event.reason))
                elif isinstance(event, h11.Data):
                    data = bytes(event.data)
                    if fault is not None and fault.kind == "rewrite" and fault.rewrite is not None:
                        pending += data
                        *lines, pending = pending.split(b"\n")
                        data = b"".join(_rewritten(line, fault.rewrite) + b"\n" for line in lines)
                    if fault is not None and fault.kind == "cut_after" and sent + len(data) >= fault.after_bytes:
                        _send(conn, client, h11.Data(data=data[:fault.after_bytes - sent]))
                        client.shutdown(socket.SHUT_RDWR)
                        return False
                    if data:
                        _send(conn, client, h11.Data(data=data))
                    sent += len(data)
                    if fault is not None and fault.kind == "stall":
                        self._closing.wait(600)  # nothing more: the client's read timeout decides
                        return False
                elif isinstance(event, h11.EndOfMessage):
                    if pending and fault is not None and fault.rewrite is not None:
                        _send(conn, client, h11.Data(data=_rewritten(pending, fault.rewrite)))
                    _send(conn, client, h11.EndOfMessage())
                    return True
                elif event is None:
                    client.shutdown(socket.SHUT_RDWR)
                    return False


def _rewritten(line: bytes, rewrite: Callable[[bytes], bytes]) -> bytes:
    if line.startswith(b"data:") and line[5:].strip() not in (b"", b"[DONE]"):
        return b"data: " + rewrite(line[5:].strip())
    return line


def _read_message(conn: h11.Connection, sock: socket.socket) -> tuple[h11.Request, bytes] | None:
    request: h11.Request | None = None
    body = b""
    while True:
        event = _next_event(conn, sock)
        if event is None:
            return None
        if isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += bytes(event.data)
        elif isinstance(event, h11.EndOfMessage) and request is not None:
            return request, body


def _next_event(conn: h11.Connection, sock: socket.socket) -> h11.Event | None:
    """The next h11 event, reading from the socket as needed; None when the peer closed or broke."""
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError:
            return None
        if event is h11.NEED_DATA:
            try:
                data = sock.recv(READ_BYTES)
            except OSError:
                return None
            conn.receive_data(data)
            continue
        if event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
            return None
        return event  # type: ignore[return-value]


def _send(conn: h11.Connection, sock: socket.socket, event: h11.Event) -> None:
    data = conn.send(event)
    if data:
        sock.sendall(data)
