"""The HTML write-up in a real browser: every figure decodes and no request leaves the page.

Chromium (Debian package `chromium`) loads the file headless and is driven over the DevTools protocol
on a pipe (--remote-debugging-pipe: commands on fd 3, replies on fd 4, NUL-separated JSON), so no
extra package and no port is needed. Skipped, with the reason, where chromium is not installed.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from ninferkit.report import write_report
from tests.conftest import REPO
from tests.unit.test_report import RUN_A, copy_run

EXAMPLE = REPO / "docs" / "examples" / "h200-llamacpp"

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe"]


class DevTools:
    """A minimal DevTools-protocol client over chromium's debugging pipe."""

    def __init__(self, profile_dir: Path) -> None:
        self._to_browser_r, self._to_browser_w = os.pipe()
        self._from_browser_r, self._from_browser_w = os.pipe()
        assert CHROMIUM is not None
        self.process = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile_dir}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4), preexec_fn=self._map_fds,
        )
        os.close(self._to_browser_r)
        os.close(self._from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def _map_fds(self) -> None:
        # Runs in the child before it closes the fds it does not keep (all but 0-4): move the pipe ends
        # above 10 first, so placing one on 3 or 4 cannot overwrite the other.
        commands = fcntl.fcntl(self._to_browser_r, fcntl.F_DUPFD, 10)
        replies = fcntl.fcntl(self._from_browser_w, fcntl.F_DUPFD, 10)
        os.dup2(commands, 3)
        os.dup2(replies, 4)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout_s: float = 30.0) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser_w, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read(timeout_s)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply["result"]
                return result
            self.events.append(reply)

    def wait_for(self, method: str, timeout_s: float = 30.0) -> dict[str, Any]:
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            event = self._read(timeout_s)
            self.events.append(event)
            if event.get("method") == method:
                return event

    def _read(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._from_browser_r], [], [], max(left, 0))
            if not ready:
                raise AssertionError(f"chromium sent nothing within {timeout_s} s")
            chunk = os.read(self._from_browser_r, 1 << 16)
            if not chunk:
                raise AssertionError("chromium closed the debugging pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        parsed: dict[str, Any] = json.loads(message)
        return parsed

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout_s=10)
        except (AssertionError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser_w)
        os.close(self._from_browser_r)


IMAGES = """Promise.all(Array.from(document.images).map(img => img.decode().then(
    () => [img.naturalWidth, img.naturalHeight], () => [0, 0])))"""


def test_every_figure_loads_and_no_request_leaves_the_page(tmp_path: Path) -> None:
    report = write_report(copy_run(RUN_A, tmp_path))
    page = report.files["html"]
    text = page.read_text()
    # nothing that could fetch: no http(s) in any attribute or CSS url(); URLs in text are loopback only
    assert not re.search(r"""(?:src|href|srcset|action|poster|data)\s*=\s*["']?\s*(?:https?:|//)""", text, re.I)
    assert not re.search(r"url\(\s*['\"]?(?:https?:|//)", text, re.I)
    assert {m.group(1) for m in re.finditer(r"https?://([^/:\s<\"]+)", text)} <= {"127.0.0.1"}
    assert "<script" not in text.lower()

    browser = DevTools(tmp_path / "chromium-profile")
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        browser.send("Network.enable", session=session)
        browser.send("Page.enable", session=session)
        browser.send("Page.navigate", {"url": page.as_uri()}, session=session)
        browser.wait_for("Page.loadEventFired")
        sizes = browser.send("Runtime.evaluate", {"expression": IMAGES, "awaitPromise": True,
                                                  "returnByValue": True}, session=session)["result"]["value"]
        title = browser.send("Runtime.evaluate", {"expression": "document.title", "returnByValue": True},
                             session=session)["result"]["value"]
    finally:
        browser.close()

    assert title.startswith("local-cpu: llama_server on CPU")
    assert len(sizes) == len(report.figures) == 4
    assert all(width > 0 and height > 0 for width, height in sizes), sizes
    requested = [event["params"]["request"]["url"] for event in browser.events
                 if event.get("method") == "Network.requestWillBeSent"]
    assert requested, "the DevTools Network domain reported no request at all; the check would be vacuous"
    leaving = [url for url in requested if not url.startswith(("file:", "data:"))]
    assert leaving == []


CUT_OFF = """Array.from(document.querySelectorAll('table, pre')).filter(el =>
    el.scrollWidth > el.clientWidth + 1 || el.getBoundingClientRect().right > document.documentElement.clientWidth + 1
).map(el => el.tagName + ': ' + (el.caption ? el.caption.textContent : el.textContent).slice(0, 60))"""
PRINTABLE_PX = round((297 - 2 * 12) / 25.4 * 96)
"""The width a printed page gives the write-up: A4 landscape (its @page) less two 12 mm margins, at 96 px per inch."""


def test_printed_tables_fit_the_page(tmp_path: Path) -> None:
    """The published H200 example (its widest tables: the launch flags, the capacity searches, the startup
    ledger) laid out for print at a printed page's width: no table or code block is wider than the page or
    hides part of itself behind a scroll bar, which paper does not have."""
    run = tmp_path / "h200-llamacpp"
    shutil.copytree(EXAMPLE, run, ignore=shutil.ignore_patterns("report"))
    page = write_report(run, ["html"]).files["html"]
    browser = DevTools(tmp_path / "chromium-profile")
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        browser.send("Page.enable", session=session)
        browser.send("Emulation.setDeviceMetricsOverride", {"width": PRINTABLE_PX, "height": 700,
                                                            "deviceScaleFactor": 1, "mobile": False}, session=session)
        browser.send("Emulation.setEmulatedMedia", {"media": "print"}, session=session)
        browser.send("Page.navigate", {"url": page.as_uri()}, session=session)
        browser.wait_for("Page.loadEventFired")
        cut = browser.send("Runtime.evaluate", {"expression": CUT_OFF, "returnByValue": True},
                           session=session)["result"]["value"]
        tables = browser.send("Runtime.evaluate", {"expression": "document.querySelectorAll('table').length",
                                                   "returnByValue": True}, session=session)["result"]["value"]
    finally:
        browser.close()
    assert tables > 10 and cut == []
