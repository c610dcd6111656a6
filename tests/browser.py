"""Headless Chromium driven through the DevTools protocol on a pipe (``--remote-debugging-pipe``): no extra package.

``open_page(path)`` loads a local HTML file and returns what the page did: console errors and uncaught
exceptions, every network request, the items each chart drew (counted in the SVG Vega made), the title,
and a screenshot of the whole page.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# Per chart (``div.chart[data-chart]``): for every Vega mark group, its mark type and item count.
_COUNT_MARKS = """
JSON.stringify(Array.from(document.querySelectorAll('div.chart')).map(function(div){
  var marks = {};
  div.querySelectorAll('svg g.role-mark').forEach(function(g){
    var type = Array.from(g.classList).filter(function(c){ return c.indexOf('mark-') === 0; })[0].slice(5);
    var items = Array.from(g.children).filter(function(c){ return c.tagName.toLowerCase() !== 'g'; }).length
              || g.children.length;
    marks[type] = (marks[type] || 0) + items;
  });
  return {name: div.getAttribute('data-chart'), drawn: div.getAttribute('data-drawn') === '1', marks: marks};
}))
"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("Chromium is not installed (.ci/run installs it with apt-get where apt is available)")


@dataclass
class PageVisit:
    title: str = ""
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every URL the page asked for, its own file included
    charts: list[dict] = field(default_factory=list)  # {"name", "drawn", "marks": {type: items}}
    charts_drawn: str | None = None  # body[data-charts-drawn]
    screenshot: bytes = b""

    def network_requests(self) -> list[str]:
        return [u for u in self.requests if not u.startswith(("file:", "data:", "about:", "blob:"))]

    def marks(self, name: str) -> dict[str, int]:
        found = [c for c in self.charts if c["name"] == name]
        assert len(found) == 1, f"{len(found)} charts named {name!r}: {[c['name'] for c in self.charts]}"
        return found[0]["marks"]


def _as_fds_3_and_4(read_end: int, write_end: int) -> None:
    # In the child, before exec: copies first, so that neither end is overwritten when it already is 3 or 4.
    read_copy, write_copy = fcntl.fcntl(read_end, fcntl.F_DUPFD, 10), fcntl.fcntl(write_end, fcntl.F_DUPFD, 10)
    os.dup2(read_copy, 3)
    os.dup2(write_copy, 4)


class _Pipe:
    def __init__(self, browser: str, profile: str):
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # Chromium reads commands on fd 3 and writes on fd 4.
        self.process = subprocess.Popen(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
             f"--user-data-dir={profile}", "--remote-debugging-pipe", "--window-size=1200,900"],
            pass_fds=(3, 4), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=lambda: _as_fds_3_and_4(to_chrome_r, from_chrome_w))
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._id = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 60) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            reply = self._read(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)
        raise TimeoutError(method)

    def _read(self, deadline: float) -> dict:
        """The next message; TimeoutError where Chromium says nothing whole by ``deadline`` (a browser that hangs
        fails its test instead of holding the suite)."""
        while b"\0" not in self._buffer:
            if not select.select([self._from_chrome], [], [], max(0.0, deadline - time.time()))[0]:
                raise TimeoutError("Chromium said nothing")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)


def open_page(path: Path, wait_s: float = 90) -> PageVisit:
    """Load ``path`` and wait until every chart has drawn (or ``wait_s`` passed)."""
    visit = PageVisit()
    with tempfile.TemporaryDirectory() as profile:
        pipe = _Pipe(chromium(), profile)
        try:
            target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                pipe.send(f"{domain}.enable", session=session)
            pipe.send("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
            deadline = time.time() + wait_s
            while time.time() < deadline:
                state = pipe.send("Runtime.evaluate", {
                    "expression": "document.readyState + '|' + (document.body && "
                                  "document.body.getAttribute('data-charts-drawn'))", "returnByValue": True},
                    session=session)["result"].get("value", "")
                ready, _, drawn = state.partition("|")
                if ready == "complete" and drawn != "null":
                    visit.charts_drawn = drawn
                    break
                time.sleep(0.2)
            value = pipe.send("Runtime.evaluate", {"expression": _COUNT_MARKS, "returnByValue": True},
                              session=session)["result"]["value"]
            visit.charts = json.loads(value)
            visit.title = pipe.send("Runtime.evaluate", {"expression": "document.title", "returnByValue": True},
                                    session=session)["result"]["value"]
            size = pipe.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
            shot = pipe.send("Page.captureScreenshot", {
                "format": "png", "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 12000), "scale": 1}},
                session=session)
            visit.screenshot = base64.b64decode(shot["data"])
        finally:
            pipe.close()
    for event in pipe.events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            visit.console_errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            visit.console_errors.append(str(params.get("exceptionDetails", {}).get("text")))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            visit.console_errors.append(params["entry"].get("text", ""))
        elif method == "Network.requestWillBeSent":
            visit.requests.append(params["request"]["url"])
    return visit


# The text of the page and of every frame and shadow root in it (same origin), as one string.
_ALL_TEXT = """
(function(){
  var parts = [];
  function walk(root){
    if (!root) return;
    if (root.body) parts.push(root.body.innerText);
    root.querySelectorAll('*').forEach(function(el){
      if (el.shadowRoot) { parts.push(el.shadowRoot.textContent); walk(el.shadowRoot); }
      if (el.tagName === 'IFRAME') { try { walk(el.contentDocument); } catch (e) {} }
    });
  }
  walk(document);
  return parts.join('\\n');
})()
"""


@dataclass
class Browser:
    """One headless Chromium for a test module: ``text(url, until)`` loads ``url`` and returns the text of the page
    and its frames once it holds ``until``; ``requests`` lists every URL that load asked for."""

    pipe: _Pipe
    profile: tempfile.TemporaryDirectory
    requests: list[str] = field(default_factory=list)

    def text(self, url: str, until: str, wait_s: float = 120) -> str:
        target = self.pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Network"):
            self.pipe.send(f"{domain}.enable", session=session)
        self.pipe.send("Page.navigate", {"url": url}, session=session)
        deadline, text = time.time() + wait_s, ""
        while time.time() < deadline:
            text = self.pipe.send("Runtime.evaluate", {"expression": _ALL_TEXT, "returnByValue": True},
                                  session=session)["result"].get("value", "") or ""
            if until in text:
                break
            time.sleep(0.5)
        self.pipe.send("Target.closeTarget", {"targetId": target})
        self.requests = [e["params"]["request"]["url"] for e in self.pipe.events
                         if e.get("method") == "Network.requestWillBeSent"]
        self.pipe.events.clear()
        return text

    def close(self) -> None:
        self.pipe.close()
        self.profile.cleanup()


def browser() -> Browser:
    """A started headless Chromium (skips where none is installed); ``close()`` it."""
    profile = tempfile.TemporaryDirectory()
    return Browser(_Pipe(chromium(), profile.name), profile)
