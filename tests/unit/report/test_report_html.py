"""The HTML write-up in a real browser: every figure decodes, no request leaves the page, a phone's screen and
a desktop's show every section with no table wider than the screen, and print fits the page.

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
from tests.unit.report.test_report import RUN_A, copy_run

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


def open_page(browser: DevTools, page: Path, metrics: dict[str, Any] | None = None,
              media: str | None = None) -> str:
    """A new tab showing `page` (at `metrics`, Emulation.setDeviceMetricsOverride's, and for `media`); its
    session id once the page has loaded."""
    target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session: str = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    browser.send("Network.enable", session=session)
    browser.send("Page.enable", session=session)
    if metrics:
        browser.send("Emulation.setDeviceMetricsOverride", metrics, session=session)
    if media:
        browser.send("Emulation.setEmulatedMedia", {"media": media}, session=session)
    browser.send("Page.navigate", {"url": page.as_uri()}, session=session)
    browser.wait_for("Page.loadEventFired")
    return session


def evaluate(browser: DevTools, session: str, expression: str) -> Any:
    return browser.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True, "returnByValue": True},
                        session=session)["result"]["value"]


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
        session = open_page(browser, page)
        sizes = evaluate(browser, session, IMAGES)
        title = evaluate(browser, session, "document.title")
    finally:
        browser.close()

    assert re.fullmatch(r"a generated qwen3 \(4 layers, 256 hidden, f16, random weights\) on CPU: decode [\d.]+ tok/s, "
                        r"prefill [\d,.]+ tok/s \(llama\.cpp llama-server 11434\.0\.0; KV f16\)", title), title
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


def example_page(where: Path) -> Path:
    """The published H200 example's index.html, written afresh (its widest tables: the launch flags, the
    capacity searches, the startup ledger, the speculation table's 12 columns)."""
    run = where / "h200-llamacpp"
    shutil.copytree(EXAMPLE, run, ignore=shutil.ignore_patterns("report"))
    return write_report(run, ["html"]).files["html"]


def test_printed_tables_fit_the_page(tmp_path: Path) -> None:
    """The published H200 example laid out for print at a printed page's width: no table or code block is
    wider than the page or hides part of itself behind a scroll bar, which paper does not have."""
    page = example_page(tmp_path)
    browser = DevTools(tmp_path / "chromium-profile")
    try:
        session = open_page(browser, page, {"width": PRINTABLE_PX, "height": 700, "deviceScaleFactor": 1,
                                            "mobile": False}, media="print")
        cut = evaluate(browser, session, CUT_OFF)
        tables = evaluate(browser, session, "document.querySelectorAll('table').length")
    finally:
        browser.close()
    assert tables > 10 and cut == []


SECTIONS = ["Headline", "Environment", "Pinned recipe", "Acceptance checks", "Errors met", "Benchmarks",
            "Tasks at each depth", "Concurrency, lane by lane", "Coding and agent by input length", "Capacity",
            "Run conditions", "Method", "Caveats"]
"""The example's post: the sections with data (it has no engine window and no speculation to show); the raw detail
is in appendix.html."""
LAYOUT = """(width => {
  const clips = el => getComputedStyle(el).overflowX !== 'visible';
  const box = el => {  // what shows of el: the box of the nearest ancestor that clips it, else its own
    for (let up = el.parentElement; up && up !== document.body; up = up.parentElement) if (clips(up)) return up;
    return el;
  };
  const text = 'p, li, td, th, figcaption, pre, a';
  return {
    screen_width: width,
    layout_width: window.innerWidth,
    page_width: document.documentElement.scrollWidth,
    headings: Array.from(document.querySelectorAll('h2')).map(h => h.textContent),
    contents: Array.from(document.querySelectorAll('nav a')).map(a => a.getAttribute('href')),
    ids: Array.from(document.querySelectorAll('h2')).map(h => '#' + h.id),
    tables: document.querySelectorAll('table').length,
    scrolling: Array.from(document.querySelectorAll('table')).filter(
      el => box(el) !== el && box(el).scrollWidth > box(el).clientWidth).length,
    wider: Array.from(document.querySelectorAll('table, pre, img')).filter(
      el => box(el).getBoundingClientRect().right > width + 0.5 || box(el).getBoundingClientRect().left < -0.5
    ).map(el => el.tagName + ': ' + (el.closest('figure') || el).textContent.slice(0, 60)),
    smallest_font_px: Math.min(...Array.from(document.querySelectorAll(text)).map(
      el => parseFloat(getComputedStyle(el).fontSize))),
  };
})(%d)"""
"""What a screen (%d px wide) shows: its width, the width the page was laid out at and the page's own, the
section headings and the contents' links, the tables that scroll inside their box, the tables, pre blocks and
figures whose box (or the box that clips it) reaches past the screen's edge, and the smallest font of any
text."""
SCREENS = {"phone": {"width": 390, "height": 844, "deviceScaleFactor": 3, "mobile": True},
           "desktop": {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False}}
"""A phone (390 CSS px wide, as an iPhone 12 to 15; mobile, so the page's viewport meta decides its layout
width) and a laptop's browser window."""


@pytest.mark.parametrize("screen", SCREENS)
def test_every_section_shows_and_no_table_is_wider_than_the_screen(screen: str, tmp_path: Path) -> None:
    """The published H200 example on a phone and on a desktop: the page is as wide as the screen (a table
    wider than that scrolls inside its own box), every section is there and linked from the contents, and
    no text is smaller than 12 px."""
    page = example_page(tmp_path)
    browser = DevTools(tmp_path / "chromium-profile")
    try:
        layout = evaluate(browser, open_page(browser, page, SCREENS[screen]), LAYOUT % SCREENS[screen]["width"])
    finally:
        browser.close()
    assert layout["screen_width"] == SCREENS[screen]["width"]
    assert layout["headings"] == SECTIONS and layout["contents"] == layout["ids"]
    assert layout["tables"] > 10 and layout["wider"] == [], layout
    assert layout["page_width"] <= layout["screen_width"], layout
    # a phone lays the page out at the screen's width, unless the page has no viewport meta (or something on it
    # is wider than the screen): then it lays it out wider and zooms out, and the text is too small to read
    assert layout["layout_width"] == layout["screen_width"]
    assert layout["smallest_font_px"] >= 12
    if screen == "phone":  # the widest tables do not fit a phone: they scroll in their box, not the page
        assert layout["scrolling"] > 0
