"""A real HTTP/1.1 file server on 127.0.0.1 for the download tests and the download benchmark.

It serves the files of one directory under any URL path whose last segment names the file (so
both ``/FILE`` and the hub layout ``/ORG/REPO/resolve/REVISION/FILE`` work), honours
``Range: bytes=N-`` with 206 and ``Content-Range``, and answers an unsatisfiable range with 416.
Bodies go out with ``socket.sendfile`` (zero copy), so the server is not what limits a loopback
benchmark. Faults can be switched on to test a client's resume logic and its bounds:

- ``drop_after_bytes``: the next ``drops`` responses close the connection after that many body
  bytes (a connection cut midway, as on a flaky link);
- ``ignore_range``: every request gets 200 and the whole file, Range or not;
- ``endless``: 200 with no Content-Length, and zero bytes sent until the client hangs up;
- ``trailing_bytes``: the whole file and then that many more bytes, with no Content-Length;
- ``redirect``: every request is answered 302 to this URL (to itself: a redirect loop);
- ``trickle_bytes_per_s``: the body goes out at about that rate, 256 bytes at a time (a server that is
  never silent long enough for a read timeout, but would take days).

Each request is recorded (path, Range header, status, body bytes sent) so a test can check what the
client asked for. Run as a script for the benchmark: ``python tests/range_server.py DIR`` prints the
port on its first line and serves until killed.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


@dataclass
class Served:
    """One request as the server saw it."""

    path: str
    range: str | None
    status: int
    body_bytes: int
    authorization: str | None = None


@dataclass
class Faults:
    drop_after_bytes: int | None = None
    drops: int = 0
    ignore_range: bool = False
    endless: bool = False
    trailing_bytes: int = 0
    redirect: str | None = None
    trickle_bytes_per_s: int | None = None


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up mid-body (it restarts, or gives up) is normal here; anything else is not."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


@dataclass
class RangeServer:
    """Serve `root` on a free loopback port in a background thread; use as a context manager."""

    root: Path
    faults: Faults = field(default_factory=Faults)
    log: list[Served] = field(default_factory=list)
    host: str = "127.0.0.1"  # any 127.x.y.z: a second host on loopback (Linux routes the whole /8)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._httpd = _QuietServer((self.host, 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="range-server",
                                        daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> RangeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def take_drop(self) -> int | None:
        """The byte count to cut the next response after, or None; counts the drop down."""
        with self._lock:
            if self.faults.drop_after_bytes is None or self.faults.drops <= 0:
                return None
            self.faults.drops -= 1
            return self.faults.drop_after_bytes

    def record(self, served: Served) -> None:
        with self._lock:
            self.log.append(served)


def _handler_for(server: RangeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            """Quiet: the request log is `server.log`, not stderr."""

        def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
            self._serve(send_body=False)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._serve(send_body=True)

        def _serve(self, send_body: bool) -> None:
            name = unquote(urlsplit(self.path).path).rsplit("/", 1)[-1]
            path = server.root / name
            asked = self.headers.get("Range")
            faults = server.faults
            if faults.redirect is not None:
                self._reply(302, asked, {"Location": faults.redirect, "Content-Length": "0"})
                return
            if faults.endless or faults.trailing_bytes:
                self._unbounded(path, asked)
                return
            if not name or not path.is_file():
                self._reply(404, asked, {"Content-Length": "0"})
                return
            size = path.stat().st_size
            start, end = 0, size - 1
            status = 200
            found = _RANGE.match(asked or "")
            if found and not server.faults.ignore_range:
                start = int(found[1])
                end = min(int(found[2]), size - 1) if found[2] else size - 1
                if start >= size:
                    self._reply(416, asked, {"Content-Range": f"bytes */{size}", "Content-Length": "0"})
                    return
                status = 206
            length = end - start + 1
            headers = {"Content-Length": str(length), "Accept-Ranges": "bytes", "ETag": f'"{size:x}"'}
            if status == 206:
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            cut = server.take_drop() if send_body else None
            served = self._reply(status, asked, headers)
            if not send_body:
                return
            count = length if cut is None else min(cut, length)
            with path.open("rb") as handle:
                if server.faults.trickle_bytes_per_s:
                    self._trickle(handle, start, count, served)
                    return
                sent = self.connection.sendfile(handle, start, count) if count else 0
            served.body_bytes = sent
            if cut is not None:
                self.close_connection = True

        def _trickle(self, handle: BinaryIO, start: int, count: int, served: Served) -> None:
            """256 bytes at a time, paced to the fault's rate, until the client hangs up."""
            rate = server.faults.trickle_bytes_per_s or 1
            handle.seek(start)
            try:
                while served.body_bytes < count:
                    piece = handle.read(min(256, count - served.body_bytes))
                    self.wfile.write(piece)
                    self.wfile.flush()
                    served.body_bytes += len(piece)
                    time.sleep(len(piece) / rate)
            except ConnectionError:
                return

        def _unbounded(self, path: Path, asked: str | None) -> None:
            """A body delimited by closing the connection: the file and trailing bytes, or zeros forever."""
            served = self._reply(200, asked, {"Connection": "close"})
            self.close_connection = True
            block = bytes(1024 * 1024)
            try:
                if not server.faults.endless:
                    self.wfile.write(path.read_bytes() + bytes(server.faults.trailing_bytes))
                    served.body_bytes = path.stat().st_size + server.faults.trailing_bytes
                    return
                while True:
                    self.wfile.write(block)
                    served.body_bytes += len(block)
            except ConnectionError:
                return

        def _reply(self, status: int, asked: str | None, headers: dict[str, str]) -> Served:
            served = Served(self.path, asked, status, 0, self.headers.get("Authorization"))
            server.record(served)
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            return served

    return Handler


def main(argv: list[str]) -> int:
    with RangeServer(Path(argv[1])) as running:
        print(running.port, flush=True)
        threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
