"""A headless Chromium driven over the DevTools protocol, for the browser tests and `benchmarks.browser`.

No WebDriver: Chromium starts with `--remote-debugging-port=0`, says on stderr where its
DevTools websocket listens, and each tab is a page target spoken to over its own websocket
(aiohttp's client, in a thread running an event loop, behind a synchronous API).

Reading the screen: the page draws the app's terminal (xterm.js) on a canvas, so its text is not
in the page. A script run before the page's own (`Page.addScriptToEvaluateOnNewDocument`) keeps
the terminal object when the page's script stores it (`this.terminal = new Terminal(...)`), and
`Tab.screen()` reads the terminal's rows from it: what the browser shows, cell by cell.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Keeps the page's terminal object as `window.__term` when the page stores it.
KEEP_TERMINAL = """
Object.defineProperty(Object.prototype, 'terminal', {
  configurable: true,
  set(value) {
    if (value && value.buffer && !window.__term) { window.__term = value; }
    Object.defineProperty(this, 'terminal', {value, writable: true, configurable: true, enumerable: true});
  },
});
"""

#: The rows of the terminal's screen as text.
SCREEN_JS = """(() => {
  const t = window.__term; if (!t) return null;
  const b = t.buffer.active, rows = [];
  for (let y = 0; y < t.rows; y++) { const l = b.getLine(b.viewportY + y); rows.push(l ? l.translateToString(true) : ''); }
  return rows;
})()"""

#: Each cell's (bold, foreground, background) on one row: highlights are cells styled unlike their row.
STYLES_JS = """((y) => {
  const t = window.__term; const b = t.buffer.active; const l = b.getLine(b.viewportY + y); const out = [];
  for (let x = 0; x < t.cols; x++) { const c = l.getCell(x); out.push([c.isBold(), c.getFgColor(), c.getBgColor()]); }
  return out;
})"""

_KEYS = {
    # name: (key, code, windowsVirtualKeyCode)
    "enter": ("Enter", "Enter", 13),
    "escape": ("Escape", "Escape", 27),
    "tab": ("Tab", "Tab", 9),
    "backspace": ("Backspace", "Backspace", 8),
    "up": ("ArrowUp", "ArrowUp", 38),
    "down": ("ArrowDown", "ArrowDown", 40),
    "left": ("ArrowLeft", "ArrowLeft", 37),
    "right": ("ArrowRight", "ArrowRight", 39),
    "home": ("Home", "Home", 36),
    "end": ("End", "End", 35),
    **{f"f{n}": (f"F{n}", f"F{n}", 111 + n) for n in range(1, 13)},
}
_MODIFIERS = {"alt": 1, "ctrl": 2, "meta": 4, "shift": 8}


def find_chromium() -> str | None:
    """The Chromium binary on PATH (Debian's `chromium`, or another build's name), None when there is none."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class DevToolsError(RuntimeError):
    """Chromium answered a command with an error, or did not start."""


class _Loop:
    """An event loop in a daemon thread; `run` waits for a coroutine from any other thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="devtools", daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class Tab:
    """One page target: commands, script, keys, mouse, screenshots."""

    def __init__(self, browser: Chromium, target_id: str, ws: Any, session: Any) -> None:
        self.browser = browser
        self.target_id = target_id
        self._ws = ws
        self._session = session
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._reader = asyncio.run_coroutine_threadsafe(self._read(), browser.loop.loop)

    async def _read(self) -> None:
        async for msg in self._ws:
            data = json.loads(msg.data)
            future = self._waiting.pop(data.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(data)

    async def _send(self, method: str, params: dict[str, Any]) -> Any:
        key = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        await self._ws.send_str(json.dumps({"id": key, "method": method, "params": params}))
        answer = await future
        if "error" in answer:
            raise DevToolsError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    def send(self, method: str, timeout: float = 60.0, **params: Any) -> Any:
        """Run one DevTools command; its result."""
        return self.browser.loop.run(self._send(method, params), timeout)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        out = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in out:
            raise DevToolsError(f"script failed: {out['exceptionDetails'].get('text')}")
        return out.get("result", {}).get("value")

    def navigate(self, url: str) -> None:
        """Open `url` in this tab (returns once the navigation started)."""
        self.send("Page.navigate", url=url)

    # -- the app's screen -------------------------------------------------------------------
    def screen(self) -> list[str]:
        """The terminal's rows as the browser shows them ([] before the terminal exists)."""
        return self.evaluate(SCREEN_JS) or []

    def text(self) -> str:
        """The screen as one string, rows joined by newlines."""
        return "\n".join(self.screen())

    def styles(self, row: int) -> list[tuple[bool, int, int]]:
        """(bold, foreground, background) of each cell of screen row `row`."""
        return [tuple(c) for c in self.evaluate(f"({STYLES_JS})({row})")]

    def wait_for(
        self, predicate: Callable[[str], bool], timeout: float = 60.0, what: str = "the screen"
    ) -> str:
        """Poll the screen until `predicate(text)` holds; the text. Raises TimeoutError with the last screen."""
        end = time.monotonic() + timeout
        text = ""
        while time.monotonic() < end:
            text = self.text()
            if text and predicate(text):
                return text
            time.sleep(0.05)
        raise TimeoutError(f"waiting for {what}; the screen was:\n{text}")

    def cell_box(self) -> tuple[float, float, float, float]:
        """(left, top, cell width, cell height) of the terminal's grid in page pixels."""
        left, top, width, height, cols, rows = self.evaluate(
            "(() => { const t = window.__term; const r = t.element.querySelector('.xterm-screen')"
            ".getBoundingClientRect(); return [r.left, r.top, r.width, r.height, t.cols, t.rows]; })()"
        )
        return left, top, width / cols, height / rows

    # -- input ------------------------------------------------------------------------------
    def focus(self) -> None:
        """Give the terminal the keyboard."""
        self.evaluate("window.__term && window.__term.focus()")

    def type(self, text: str) -> None:
        """Type `text` as one insertion (what an input method or a paste-free keyboard delivers)."""
        self.send("Input.insertText", text=text)

    def type_keys(self, text: str) -> None:
        """Type `text` key by key (a keyDown with its text for each character)."""
        for ch in text:
            self.send("Input.dispatchKeyEvent", type="keyDown", text=ch, key=ch, unmodifiedText=ch)
            self.send("Input.dispatchKeyEvent", type="keyUp", key=ch)

    def press(self, combo: str) -> None:
        """Press a key such as `enter`, `f6`, `alt+c` or `ctrl+down` (keyDown then keyUp)."""
        *mods, name = combo.split("+")
        modifiers = sum(_MODIFIERS[m] for m in mods)
        if name in _KEYS:
            key, code, vk = _KEYS[name]
        else:
            key, code, vk = name, f"Key{name.upper()}", ord(name.upper())
        params = {"key": key, "code": code, "windowsVirtualKeyCode": vk, "modifiers": modifiers}
        text = {} if mods or name in _KEYS else {"text": name}
        if name == "enter" and not mods:
            text = {"text": "\r"}
        self.send("Input.dispatchKeyEvent", type="rawKeyDown" if not text else "keyDown", **params, **text)
        self.send("Input.dispatchKeyEvent", type="keyUp", **params)

    def click_cell(self, x: int, y: int, count: int = 1) -> None:
        """Click the middle of the terminal cell at column `x`, row `y` (`count` 2: a double click)."""
        left, top, cw, ch = self.cell_box()
        px, py = left + (x + 0.5) * cw, top + (y + 0.5) * ch
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=px, y=py)
        for n in range(1, count + 1):
            for kind in ("mousePressed", "mouseReleased"):
                self.send("Input.dispatchMouseEvent", type=kind, x=px, y=py, button="left", clickCount=n)

    def screenshot(self, path: Path) -> Path:
        """Save the page as a PNG."""
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        """Close the tab (its websocket to the app closes with it)."""
        try:
            self.browser.call("Target.closeTarget", targetId=self.target_id)
        except Exception:  # noqa: BLE001 - the browser may be gone already
            pass
        try:
            self.browser.loop.run(self._ws.close(), 5)
        except Exception:  # noqa: BLE001
            pass


class Chromium:
    """A headless Chromium process with a private profile; `close` ends it and removes the profile.

    Args:
        binary: The browser (default: `find_chromium()`).
        width: Window width in pixels.
        height: Window height in pixels.
    """

    def __init__(self, binary: str | None = None, width: int = 1400, height: int = 860) -> None:
        import aiohttp

        binary = binary or find_chromium()
        if binary is None:
            raise DevToolsError("no chromium on PATH")
        self.profile = tempfile.mkdtemp(prefix="explorer-chromium-")
        args = [
            binary,
            "--headless=new",
            "--no-sandbox",  # root in a container has no user namespace for the sandbox
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--remote-debugging-port=0",
            "--remote-allow-origins=*",
            f"--user-data-dir={self.profile}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self.width, self.height = width, height
        url = self._devtools_url()
        self.port = int(re.search(r":(\d+)/", url).group(1))  # type: ignore[union-attr]
        self.loop = _Loop()
        self._http: Any = self.loop.run(self._client(aiohttp))
        self._browser_ws = self.loop.run(self._http.ws_connect(url, max_msg_size=0))
        self._browser_ids = itertools.count(1)
        self._browser_lock = threading.Lock()
        self.tabs: list[Tab] = []

    @staticmethod
    async def _client(aiohttp: Any) -> Any:
        return aiohttp.ClientSession()

    def _devtools_url(self, timeout: float = 30.0) -> str:
        end = time.monotonic() + timeout
        lines: list[str] = []
        assert self.proc.stderr is not None
        while time.monotonic() < end:
            line = self.proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                # Keep draining stderr, so a chatty browser never blocks on a full pipe.
                threading.Thread(target=self._drain, daemon=True).start()
                return m.group(1)
        self.close()
        raise DevToolsError("chromium did not start: " + "".join(lines[-10:]))

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for _ in self.proc.stderr:
            pass

    def call(self, method: str, **params: Any) -> Any:
        """Run one DevTools command on the browser (not a tab); its result."""

        async def call() -> Any:
            key = next(self._browser_ids)
            await self._browser_ws.send_str(json.dumps({"id": key, "method": method, "params": params}))
            async for msg in self._browser_ws:
                data = json.loads(msg.data)
                if data.get("id") == key:
                    if "error" in data:
                        raise DevToolsError(f"{method}: {data['error']}")
                    return data.get("result", {})
            raise DevToolsError("the browser closed its DevTools connection")

        with self._browser_lock:
            return self.loop.run(call())

    def new_tab(self, url: str = "about:blank") -> Tab:
        """A new tab that keeps the page's terminal readable, then opens `url`."""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        ws = self.loop.run(
            self._http.ws_connect(f"ws://127.0.0.1:{self.port}/devtools/page/{target}", max_msg_size=0)
        )
        tab = Tab(self, target, ws, None)
        tab.send("Page.enable")
        tab.send("Page.addScriptToEvaluateOnNewDocument", source=KEEP_TERMINAL)
        tab.send(
            "Emulation.setDeviceMetricsOverride",
            width=self.width,
            height=self.height,
            deviceScaleFactor=1,
            mobile=False,
        )
        if url != "about:blank":
            tab.navigate(url)
        self.tabs.append(tab)
        return tab

    def close(self) -> None:
        """End the browser and remove its profile."""
        for tab in getattr(self, "tabs", []):
            tab.close()
        try:
            if hasattr(self, "_browser_ws"):
                self.loop.run(self._browser_ws.close(), 5)
                self.loop.run(self._http.close(), 5)
        except Exception:  # noqa: BLE001 - closing anyway
            pass
        if hasattr(self, "loop"):
            self.loop.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def install_chromium(timeout: float = 900.0) -> str | None:
    """Install Debian's chromium when it is missing and this user may (root, apt-get); the binary or None."""
    found = find_chromium()
    if found or not shutil.which("apt-get") or os.geteuid() != 0:
        return found
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        subprocess.run(
            ["apt-get", "update", "-q"], env=env, capture_output=True, timeout=timeout, check=False
        )
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "chromium"],
            env=env,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return find_chromium()
