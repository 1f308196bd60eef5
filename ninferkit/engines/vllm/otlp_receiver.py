"""An OTLP/HTTP trace receiver on loopback that runs vLLM as its child and keeps each span vLLM exports.

    python -m ninferkit.engines.vllm.otlp_receiver --port PORT --jsonl FILE -- VLLM_ARGV...

The launch runs this in place of vLLM's own command when the profile sets `serve.otlp_traces_jsonl` (the
adapter adds `--otlp-traces-endpoint http://127.0.0.1:PORT/v1/traces` to vLLM's argv), so the receiver lives
exactly as long as the server: the launch's process group holds both, a stop's SIGTERM reaches both, and the
receiver exits with vLLM's exit code once vLLM has exited, after taking the spans vLLM flushes on its way out.
Each span is appended as one JSON line and flushed at once: a run that dies midway keeps every span received.
A body that is not an OTLP trace export is answered 400 and kept out of the file.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

from ninferkit.engines.vllm.otlp import decode_export
from ninferkit.errors import BadInput

TRACES_PATH = "/v1/traces"
BODY_BYTES = 64 * 1024 * 1024
"""The largest export taken: vLLM's batches are a few hundred spans of about 1 KB."""


def endpoint(port: int) -> str:
    """The URL vLLM is told to export to (the HTTP exporter posts to it as given)."""
    return f"http://127.0.0.1:{port}{TRACES_PATH}"


class _Spans:
    """The JSONL file the handlers append to, one lock so lines never interleave."""

    def __init__(self, out: IO[str]) -> None:
        self.out, self.lock = out, threading.Lock()

    def add(self, spans: list[dict[str, Any]]) -> None:
        with self.lock:
            for span in spans:
                self.out.write(json.dumps(span, separators=(",", ":")) + "\n")
            self.out.flush()


def _handler(spans: _Spans) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            length = int(self.headers.get("Content-Length") or 0)
            if self.path != TRACES_PATH or not 0 < length <= BODY_BYTES:
                self.send_error(404 if self.path != TRACES_PATH else 400)
                return
            try:
                found = decode_export(self.rfile.read(length))
            except BadInput as exc:
                self.send_error(400, str(exc))
                return
            spans.add(found)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
            """Quiet: vLLM's log is the server log this shares; a request line per export would bury it."""

    return Handler


def serve(port: int, jsonl: Path, argv: list[str]) -> int:
    """Receive on 127.0.0.1:`port` into `jsonl` while `argv` runs; its exit code."""
    jsonl.parent.mkdir(parents=True, exist_ok=True)
    with jsonl.open("a", encoding="utf-8") as out:
        server = ThreadingHTTPServer(("127.0.0.1", port), _handler(_Spans(out)))
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        child = subprocess.Popen(argv)
        for signum in (signal.SIGTERM, signal.SIGINT):  # the group's stop reaches vLLM too: wait for it to end
            signal.signal(signum, lambda *_: None)
        code = child.wait()
        server.shutdown()
        server.server_close()
    return code


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ninferkit.engines.vllm.otlp_receiver",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True, help="the loopback port vLLM exports to")
    parser.add_argument("--jsonl", type=Path, required=True, help="where each span is appended as a JSON line")
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="-- then vLLM's command")
    parsed = parser.parse_args(args)
    argv = parsed.argv[1:] if parsed.argv[:1] == ["--"] else parsed.argv
    if not argv:
        parser.error("no command after --")
    try:
        return serve(parsed.port, parsed.jsonl, argv)
    except OSError as exc:
        print(f"otlp_receiver: cannot listen on 127.0.0.1:{parsed.port} or write {parsed.jsonl}: {exc}",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
