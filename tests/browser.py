"""Look at the built site in a real browser: headless Chromium driven through the DevTools protocol.

No browser library is needed: Chromium's ``--remote-debugging-pipe`` speaks the protocol as NUL-separated
JSON on file descriptors 3 (commands in) and 4 (replies and events out). The site (or a folder of decks) is
served from 127.0.0.1 by a small HTTP server that also hands out the npm packages installed in
tests/mathjax in place of the CDN copies the pages name (MathJax; reveal.js for the decks), since the tests
have no network.
"""

from __future__ import annotations

import base64
import fcntl
import functools
import http.server
import io
import json
import os
import select
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

CDN = "https://cdn.jsdelivr.net/npm/"          # pages name packages as CDN + "NAME@VERSION/PATH"
LOCAL = "/__npm__/"                             # ... which this server answers from node_modules
PACKAGES = {"mathjax": "mathjax-full", "reveal.js": "reveal.js"}    # CDN name -> the npm package we install
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--remote-debugging-pipe", "--enable-features=OverlayScrollbar",
    # (overlay scrollbars, as on phones and macOS: a block that scrolls must show it by its own styles)
    # every host but this machine fails at once instead of waiting for a network that is not there
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


class SiteHandler(http.server.SimpleHTTPRequestHandler):
    """Files of the site; in its pages every CDN URL points at this server's copy of the package instead,
    which it hands out only where the installed version is the one the page asks for ("3" takes any 3.x)."""

    def __init__(self, *args, site: Path, node_modules: Path, **kwargs):
        self.site, self.node_modules = site, node_modules
        super().__init__(*args, directory=str(site), **kwargs)

    def translate_path(self, path):
        if not path.startswith(LOCAL):
            return super().translate_path(path)
        spec, _, rest = path.split("?")[0][len(LOCAL):].partition("/")
        name, _, wanted = spec.rpartition("@")
        package = self.node_modules / PACKAGES.get(name, name)
        manifest = package / "package.json"
        installed = json.loads(manifest.read_text())["version"] if manifest.is_file() else None
        if installed is None or not (installed == wanted or installed.startswith(wanted + ".")):
            return str(self.node_modules / "__not_installed__" / spec)       # answered 404
        return str(package / rest)

    def send_head(self):
        path = Path(self.translate_path(self.path))
        if path.suffix != ".html" or not path.is_file():
            return super().send_head()
        body = path.read_bytes().replace(CDN.encode(), LOCAL.encode())
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return io.BytesIO(body)

    def log_message(self, *args):
        pass


class Site:
    """``with Site(html_dir, node_modules) as url:`` serves the site on 127.0.0.1 at a free port."""

    def __init__(self, site: Path, node_modules: Path):
        handler = functools.partial(SiteHandler, site=site, node_modules=node_modules)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)

    def __enter__(self) -> str:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class BrowserError(RuntimeError):
    pass


class Chromium:
    """One headless Chromium with one page, driven over the DevTools pipe."""

    def __init__(self, executable: str, timeout: float = 60.0):
        self.timeout, self._id, self._buffer, self.events = timeout, 0, b"", []
        self.profile = tempfile.mkdtemp(prefix="gdn2edu-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire_pipes():               # in the child: the protocol expects fds 3 and 4 (dup2 leaves them
            # inheritable; os.pipe's own fds close on exec). The pipes are first copied above 4: one of them
            # may itself be fd 3 or 4, where dup2 onto itself would keep close-on-exec, or be overwritten.
            reader, writer = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 5) for fd in (to_browser_r, from_browser_w))
            os.dup2(reader, 3)
            os.dup2(writer, 4)

        self.process = subprocess.Popen(   # close_fds would run after wire_pipes and close 3 and 4 again
            [executable, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            preexec_fn=wire_pipes, close_fds=False, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)
        self.call("Network.enable", session=True)

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise BrowserError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], 0.5)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise BrowserError("Chromium closed the DevTools pipe (did it crash?)")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: bool = False, **params) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for_event(self, method: str) -> dict:
        deadline = time.monotonic() + self.timeout
        for i, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(i)
        while True:
            event = self._read_message(deadline)
            if event.get("method") == method:
                return event
            self.events.append(event)

    def set_width(self, width: int, height: int = 900):
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=width < 600)

    def open(self, url: str):
        self.events.clear()
        self.call("Page.navigate", session=True, url=url)
        self.wait_for_event("Page.loadEventFired")

    def evaluate(self, expression: str):
        """The value of a JavaScript expression (a promise is awaited), as JSON."""
        result = self.call("Runtime.evaluate", session=True, expression=expression, awaitPromise=True,
                           returnByValue=True, timeout=int(self.timeout * 1000))
        if "exceptionDetails" in result:
            raise BrowserError(f"JavaScript failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def failed_loads(self) -> list[str]:
        """'URL (why)' for each request of the page opened last that failed or was answered with an error,
        as far as its events have come in (the load event and every evaluate since). The favicon is left out:
        Chromium asks for it on its own, at a time of its choosing, where no page names one."""
        urls = {e["params"]["requestId"]: e["params"]["request"]["url"]
                for e in self.events if e.get("method") == "Network.requestWillBeSent"}
        failed = [f"{urls.get(e['params']['requestId'], '?')} ({e['params']['errorText']})"
                  for e in self.events if e.get("method") == "Network.loadingFailed"]
        failed += [f"{e['params']['response']['url']} (HTTP {e['params']['response']['status']})"
                   for e in self.events if e.get("method") == "Network.responseReceived"
                   and e["params"]["response"]["status"] >= 400]
        return [f for f in failed if not f.split(" (")[0].endswith("/favicon.ico")]

    def screenshot(self, path: Path, height: int = 4000):
        """A PNG of the page's top ``height`` pixels at the current width: the viewport is made that tall
        for the shot (capturing beyond the viewport lays some pages out wider than the set width)."""
        width = self.evaluate("window.innerWidth")
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=width < 600)
        self.evaluate("new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self):
        try:
            self.call("Browser.close")
        except BrowserError:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self.profile, ignore_errors=True)


# What one page reports: run in the page after its load event.
PAGE_REPORT = r"""
(async () => {
  const article = document.querySelector("article") || document.body;
  const report = {math: 0, typeset: 0, merror: [], undefinedMacros: [], images: [], brokenImages: [],
                  colab: [], clipped: [], mathjaxLoaded: !!(window.MathJax && MathJax.startup)};
  if (report.mathjaxLoaded) { await MathJax.startup.promise; }
  const maths = [...article.querySelectorAll(".math")];
  report.math = maths.length;
  report.typeset = maths.filter((m) => m.querySelector("mjx-container")).length;
  for (const e of article.querySelectorAll("mjx-merror, [data-mjx-error]")) {
    report.merror.push((e.closest(".math") || e).textContent.slice(0, 120));
  }
  // an undefined macro is drawn as red text (MathJax's noundefined extension), not as an merror
  for (const e of article.querySelectorAll("mjx-container mjx-mtext")) {
    if (getComputedStyle(e).color === "rgb(255, 0, 0)") report.undefinedMacros.push(e.textContent);
  }
  for (const img of document.querySelectorAll("img")) {
    report.images.push(img.src);
    const probe = new Image();
    probe.src = img.src;
    try { await probe.decode(); if (!probe.naturalWidth) report.brokenImages.push(img.src); }
    catch (err) { report.brokenImages.push(img.src); }
  }
  report.colab = [...document.querySelectorAll("a[href*='colab.research.google.com']")].map((a) => a.href);
  // A block whose content is wider than its box must scroll; otherwise its content is cut off by an
  // ancestor or spills over the page. Checked on display math, code cells, outputs and tables.
  const blocks = article.querySelectorAll(
      "div.math, mjx-container[display='true'], div.highlight, div.highlight pre, .cell_output, " +
      ".cell_output pre, .output, table, .table-wrapper, .pst-scrollable-table-container");
  for (const b of blocks) {
    const style = getComputedStyle(b);
    if (style.display === "none" || b.offsetParent === null) continue;
    if (b.closest("details:not([open])")) continue;
    if (b.scrollWidth <= b.clientWidth + 1) continue;
    // it scrolls, and shows it: a scrollbar that takes room (an overlay one is hidden until one scrolls)
    const borders = parseFloat(style.borderTopWidth) + parseFloat(style.borderBottomWidth);
    const scrolls = ["auto", "scroll"].includes(style.overflowX);
    const bar = b.offsetHeight - b.clientHeight - borders;
    if (!scrolls || bar < 4) {
      report.clipped.push(`${b.tagName.toLowerCase()}.${[...b.classList].join(".")} ` +
                          `(${b.scrollWidth} px of content in ${b.clientWidth} px, ` +
                          `${scrolls ? "scrollbar hidden" : "overflow-x " + style.overflowX}): ` +
                          b.textContent.trim().slice(0, 80));
    }
  }
  return report;
})()
"""


# What a reveal.js deck reports, run after its load event: it waits for reveal.js and MathJax to start (the
# math plugin loads MathJax only once reveal.js runs), then walks the deck with next() to its last slide.
DECK_REPORT = r"""
(async () => {
  const sleep = (ms) => new Promise((done) => setTimeout(done, ms));
  const waitFor = async (ok) => { for (let i = 0; i < 200 && !ok(); i++) await sleep(50); return !!ok(); };
  const report = {ready: await waitFor(() => window.Reveal && Reveal.isReady && Reveal.isReady()),
                  mathjaxLoaded: await waitFor(() => window.MathJax && MathJax.startup && MathJax.startup.promise)};
  if (report.mathjaxLoaded) { await MathJax.startup.promise; }
  const formulas = () => document.querySelectorAll(".reveal .slides mjx-container").length;
  report.formulas = formulas();
  // TeX that MathJax left as text: a formula it did not find or could not typeset (code is not math)
  report.rawTex = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest("pre, code, script, style")) continue;
    if (/\\[([]|\$\$/.test(node.textContent)) report.rawTex.push(node.textContent.trim().slice(0, 80));
  }
  if (!report.ready) return report;
  report.horizontal = Reveal.getHorizontalSlides().length;
  report.total = Reveal.getTotalSlides();
  // every slide in turn: next() from the first, until reveal.js says the last is shown
  Reveal.slide(0, 0);
  const seen = [Reveal.getIndices()];
  while (!Reveal.isLastSlide() && seen.length <= report.total) { Reveal.next(); seen.push(Reveal.getIndices()); }
  report.formulasAfterWalk = formulas();    // the math plugin typesets the page again on every slide change
  report.visited = new Set(seen.map((i) => `${i.h}/${i.v}`)).size;
  report.isLastSlide = Reveal.isLastSlide();
  report.last = Reveal.getIndices();
  const current = Reveal.getCurrentSlide();
  const box = current.getBoundingClientRect();
  report.lastShown = current.classList.contains("present") && box.width > 0 && box.height > 0;
  return report;
})()
"""
