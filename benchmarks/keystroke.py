"""Keystroke to results, paired: the app in a browser tab (`explorer serve`) against the app in a real terminal (tmux).

Run with ``python -m benchmarks.keystroke [--vault DIR] [--key-ms 200] [--repeat N] [--no-embeddings]``
(needs tmux and chromium). The vault (default: a copy of sample_vault, 102 notes) is indexed once
first (`explorer index`, not timed). Two apps stay up for the whole run, on the same vault and
settings, each with ``--set experimental.mark_results=true``:

- **browser**: `explorer serve`, one headless Chromium tab (driven over the DevTools protocol);
- **terminal**: `explorer VAULT` in a tmux pane of the same size as the browser's terminal, on a
  private tmux server, read through a tmux control-mode client.

Each query of QUERIES is typed key by key at a person's pace (``--key-ms`` apart, after Escape has
selected the previous query so the first key replaces it), first in the browser then in the
terminal, query after query (ABAB). The clock runs from the last key to the moment the terminal
holds the results *of that query*: with `experimental.mark_results` the app writes
``explorer:<stage>:<query>`` to the terminal's title (OSC 2) just after the frame that drew a
search's results list, so the title arriving says that this query's rows (not a prefix's) are in
the terminal. Measured where each terminal parses the app's output:

- browser: the page's own clock, from the last key's `keydown` (a capturing listener) to xterm.js
  parsing the title (`onTitleChange`); the canvas paints it at the next animation frame;
- terminal: this process's clock, from writing the last key to tmux (`send-keys`) to tmux's
  control client receiving the title in the pane's output.

Per query two times: the first results of the query drawn (the lexical stage when it is drawn,
else the final one) and its final results. A point is valid when the final title came within
``--timeout`` seconds and the screen then showed the query in the search box and a results list;
the top result read off both screens is compared as a check that both searched alike.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.chromium import Chromium, Tab, install_chromium
from benchmarks.common import (
    DEFAULT_OUT,
    REPO,
    log,
    machine,
    markdown_table,
    offline_environment,
    percentile,
    write_json,
)

#: Queries on sample_vault's subjects, each a different note's (consecutive ones differ).
QUERIES = [
    "hamster diet",
    "cold brew coffee",
    "sourdough fermentation",
    "jupiter moons",
    "index fund fees",
    "lisbon trams",
    "circle of fifths",
    "bicycle chain rust",
    "espresso grind size",
    "meteor showers",
    "compound interest",
    "emergency fund",
    "roman roads",
    "silk road trade",
    "miso soup",
    "ratatouille recipe",
    "kyoto temples",
    "exposure triangle",
    "rust borrow checker",
    "vegetarian protein",
    "star life cycle",
    "great wall of china",
    "sleep schedule",
    "kitchen renovation budget",
]

MARK = "explorer:"
#: The results list's first row: rank 1, the score bar, the score, the title.
TOP_ROW = re.compile(r"(?:^|[\s│])1 [█░]{8} (\d+\.\d{3}) (.+?)(?:\s{2,}|│|$)")

#: Installs the page's recorders once the terminal exists: each key's keydown time, and each
#: title the app writes with the time xterm.js parsed it and the screen's rows at that moment.
RECORDERS_JS = """(() => {
  const t = window.__term; if (!t) return false;
  if (window.__bench) return true;
  const b = {keys: [], marks: []}; window.__bench = b;
  window.addEventListener('keydown', (e) => { b.keys.push([performance.now(), e.key]); }, true);
  t.onTitleChange((title) => {
    const now = performance.now(), buf = t.buffer.active, rows = [];
    for (let y = 0; y < t.rows; y++) { const l = buf.getLine(buf.viewportY + y); rows.push(l ? l.translateToString(true) : ''); }
    b.marks.push([now, title, rows]);
  });
  return true;
})()"""


def _env(runtime: Path, state: Path) -> dict[str, str]:
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        XDG_RUNTIME_DIR=str(runtime),
        XDG_STATE_HOME=str(state),
        COLORTERM="truecolor",  # the terminal app draws in the colours the browser's does
    )
    env.pop("EXPLORER_SERVE_TOKEN", None)
    env.pop("TMUX", None)
    return env


def _top(rows: Sequence[str]) -> str | None:
    """`score title` of the first result on a screen, None when no list is shown."""
    for row in rows:
        m = TOP_ROW.search(row)
        if m:
            return f"{m.group(1)} {m.group(2).strip()}"
    return None


def _shows(rows: Sequence[str], query: str) -> bool:
    """The screen holds the query (its search box) and a results list."""
    text = "\n".join(rows)
    return query in text and ("Results (" in text or "No match" in text)


def _ready(rows: Sequence[str], hybrid: bool) -> bool:
    """The app's status line says the index is open (and the model loaded when asked for)."""
    text = "\n".join(rows)
    if "notes" not in text or "opening index" in text:
        return False
    return not hybrid or ("hybrid" in text and "loading" not in text and "embedding…" not in text)


class BrowserSide:
    """One tab of `explorer serve`, its keys and titles timed by the page's clock."""

    def __init__(self, browser: Chromium, url: str, hybrid: bool, timeout: float) -> None:
        self.tab: Tab = browser.new_tab(url)
        self.tab.wait_for(lambda s: "Search" in s and "notes" in s, timeout, "the browser's first screen")
        end = time.monotonic() + timeout
        while not self.tab.evaluate(RECORDERS_JS):
            if time.monotonic() > end:
                raise TimeoutError("the page's terminal never came")
            time.sleep(0.05)
        self.tab.wait_for(lambda s: _ready(s.splitlines(), hybrid), timeout, "the browser's app ready")
        self.tab.focus()
        self.cols, self.rows = self.tab.evaluate("[window.__term.cols, window.__term.rows]")

    def measure(self, query: str, key_s: float, timeout: float) -> dict[str, Any]:
        tab = self.tab
        tab.press("escape")  # the search box, its query selected: the first key replaces it
        time.sleep(0.4)
        tab.evaluate("window.__bench.keys = []; window.__bench.marks = []; true")
        for i, ch in enumerate(query):
            if i:
                time.sleep(key_s)
            tab.send("Input.dispatchKeyEvent", type="keyDown", text=ch, key=ch, unmodifiedText=ch)
            tab.send("Input.dispatchKeyEvent", type="keyUp", key=ch)
        final = f"{MARK}full:{query}"
        end = time.monotonic() + timeout
        marks: list[Any] = []
        while time.monotonic() < end:
            marks = tab.evaluate("window.__bench.marks.map((m) => [m[0], m[1]])")
            if any(title == final for _, title in marks):
                break
            time.sleep(0.02)
        keys, marks = tab.evaluate("[window.__bench.keys, window.__bench.marks]")
        last_key = keys[-1][0] if len(keys) == len(query) and keys[-1][1] == query[-1] else None
        return _point(query, last_key, [(t, title, rows) for t, title, rows in marks], key_count=len(keys))


class TerminalSide:
    """The app in a tmux pane of a private tmux server; keys and output through a control-mode client."""

    def __init__(self, command: list[str], env: dict[str, str], size: tuple[int, int], work: Path) -> None:
        self.socket = str(work / "tmux.sock")
        self.session = "explorer-keys"
        cols, rows = size
        conf = work / "tmux.conf"
        # The pane keeps the size given (a control client has a size of its own), and stays after the app.
        conf.write_text(
            f"set -g default-terminal {_default_terminal()}\nset -g remain-on-exit on\nset -g status off\n"
        )
        self._tmux(
            "-f",
            str(conf),
            "new-session",
            "-d",
            "-s",
            self.session,
            "-x",
            str(cols),
            "-y",
            str(rows),
            shlex.join(command),
            env=env,
        )
        self._tmux("set-option", "-g", "window-size", "manual")  # tmux 3.3 refuses it in the file
        self.client = subprocess.Popen(
            ["tmux", "-S", self.socket, "-C", "attach-session", "-t", self.session],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self._lock = threading.Lock()
        self._titles: list[tuple[float, str]] = []
        self._tail = b""
        self._reader = threading.Thread(target=self._read, name="tmux-control", daemon=True)
        self._reader.start()
        self.size = size

    def _tmux(self, *args: str, env: dict[str, str] | None = None) -> str:
        run = subprocess.run(
            ["tmux", "-S", self.socket, *args], capture_output=True, text=True, env=env, timeout=30
        )
        return run.stdout

    def _read(self) -> None:
        assert self.client.stdout is not None
        for line in self.client.stdout:
            now = time.perf_counter()
            if not line.startswith(b"%output "):
                continue
            data = line.rstrip(b"\n").split(b" ", 2)[2] if line.count(b" ") >= 2 else b""
            data = re.sub(rb"\\(\d{3})", lambda m: bytes([int(m.group(1), 8)]), data)
            # A title may be split over two %output lines: search the tail of the previous one too.
            buf = self._tail + data
            last = 0
            for m in re.finditer(rb"\x1b\]2;([^\x07\x1b]*)(?:\x07|\x1b\\)", buf):
                with self._lock:
                    self._titles.append((now, m.group(1).decode("utf-8", "replace")))
                last = m.end()
            rest = buf[last:]
            start = rest.rfind(b"\x1b]")
            self._tail = rest[start:][-4096:] if start >= 0 else b""

    def command(self, text: str) -> float:
        """Send one tmux command over the control client; the time it was written."""
        assert self.client.stdin is not None
        self.client.stdin.write(text.encode() + b"\n")
        self.client.stdin.flush()
        return time.perf_counter()

    def screen(self) -> list[str]:
        return self._tmux("capture-pane", "-p", "-t", self.session).splitlines()

    def wait_ready(self, hybrid: bool, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if _ready(self.screen(), hybrid):
                return
            time.sleep(0.2)
        raise TimeoutError("the terminal's app was not ready:\n" + "\n".join(self.screen()))

    def measure(self, query: str, key_s: float, timeout: float) -> dict[str, Any]:
        self.command(f"send-keys -t {self.session} Escape")
        time.sleep(0.4)
        with self._lock:
            self._titles.clear()
        last_key = 0.0
        for i, ch in enumerate(query):
            if i:
                time.sleep(key_s)
            last_key = self.command(
                f"send-keys -t {self.session} -H " + " ".join(f"{b:02x}" for b in ch.encode())
            )
        final = f"{MARK}full:{query}"
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._lock:
                if any(title == final for _, title in self._titles):
                    break
            time.sleep(0.01)
        rows = self.screen()
        with self._lock:
            marks = [(t * 1000, title, rows) for t, title in self._titles]
        return _point(query, last_key * 1000, marks, key_count=len(query))

    def close(self) -> None:
        try:
            self.command(f"kill-session -t {self.session}")
        except OSError:
            pass
        if self.client.poll() is None:
            self.client.terminate()
            try:
                self.client.wait(10)
            except subprocess.TimeoutExpired:
                self.client.kill()
        self._tmux("kill-server")


def _default_terminal() -> str:
    run = subprocess.run(["infocmp", "tmux-256color"], capture_output=True)
    return "tmux-256color" if run.returncode == 0 else "screen-256color"


def _point(
    query: str, last_key: float | None, marks: list[tuple[float, str, list[str]]], key_count: int
) -> dict:
    """One query's times (ms) from its last key: first results of the query drawn, final results."""
    mine = [
        (t, title, rows)
        for t, title, rows in marks
        if title.split(":", 2)[-1] == query and title.startswith(MARK)
    ]
    final = next(((t, rows) for t, title, rows in mine if title == f"{MARK}full:{query}"), None)
    out: dict[str, Any] = {"query": query, "valid": False, "keys": key_count}
    if last_key is None:
        out["why"] = "the last key was not seen"
        return out
    if final is None:
        out["why"] = "no final results of the query"
        return out
    out["first_ms"] = round(mine[0][0] - last_key, 1)
    out["final_ms"] = round(final[0] - last_key, 1)
    out["stages"] = [title.split(":", 2)[1] for _, title, _ in mine]
    out["top"] = _top(final[1])
    if not _shows(final[1], query):
        out["why"] = "the screen did not show the query's results"
        return out
    out["valid"] = out["final_ms"] > 0
    if not out["valid"]:
        out["why"] = "results before the last key"
    return out


def _stats(values: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "median": round(statistics.median(values), 1) if values else float("nan"),
        "p90": round(percentile(values, 90), 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vault", type=Path, default=None, help="vault (default: a copy of sample_vault)")
    parser.add_argument("--key-ms", type=float, default=200.0, help="pause between two keys (ms)")
    parser.add_argument("--repeat", type=int, default=1, help="times through the query list")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds a query's results may take")
    parser.add_argument("--no-embeddings", action="store_true", help="BM25 only")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT / "keystroke.json")
    args = parser.parse_args(argv)
    offline_environment()
    if shutil.which("tmux") is None:
        print("tmux is needed (apt-get install tmux)", file=sys.stderr)
        return 2
    if install_chromium() is None:
        print("no chromium (apt-get install chromium)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-keystroke-"))
    runtime = Path(tempfile.mkdtemp(prefix="xbk"))
    runtime.chmod(0o700)
    vault = args.vault or Path(shutil.copytree(REPO / "sample_vault", work / "vault"))
    env = _env(runtime, work / "state")
    flags = ["--no-embeddings"] if args.no_embeddings else []
    hybrid = not args.no_embeddings
    subprocess.run(
        [sys.executable, "-m", "explorer", "index", str(vault), *flags], env=env, check=True, timeout=3600
    )
    marks = ["--set", "experimental.mark_results=true", *flags]
    report: dict[str, Any] = {
        "machine": machine(),
        "vault": str(vault),
        "notes": sum(
            1
            for p in vault.rglob("*.md")
            if not any(part.startswith(".") for part in p.relative_to(vault).parts)
        ),
        "embeddings": hybrid,
        "key_ms": args.key_ms,
    }
    serve = subprocess.Popen(
        [sys.executable, "-m", "explorer", "serve", str(vault), "--port", "0", *marks],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=REPO,
    )
    browser: Chromium | None = None
    terminal: TerminalSide | None = None
    points: list[dict[str, Any]] = []
    try:
        assert serve.stdout is not None
        url = serve.stdout.readline().strip()
        browser = Chromium()
        web = BrowserSide(browser, url, hybrid, 300)
        report["size"] = [web.cols, web.rows]
        log(f"browser terminal {web.cols}x{web.rows}")
        terminal = TerminalSide(
            [sys.executable, "-m", "explorer", str(vault), *marks], env, (web.cols, web.rows), work
        )
        terminal.wait_ready(hybrid, 300)
        log("both apps ready")
        key_s = args.key_ms / 1000
        # One query each, not counted: the first search of each app warms what a first search warms.
        web.measure("warm up", key_s, args.timeout)
        terminal.measure("warm up", key_s, args.timeout)
        load: list[float] = []
        for query in QUERIES * args.repeat:
            load.append(os.getloadavg()[0])
            b = web.measure(query, key_s, args.timeout)
            t = terminal.measure(query, key_s, args.timeout)
            points.append({"query": query, "browser": b, "terminal": t})
            log(
                f"{query!r}: browser {b.get('final_ms')} ms ({'ok' if b['valid'] else b.get('why')}), "
                f"terminal {t.get('final_ms')} ms ({'ok' if t['valid'] else t.get('why')})"
            )
        load.append(os.getloadavg()[0])
        serve.send_signal(signal.SIGINT)
        report["serve_exit"] = serve.wait(60)
    finally:
        if terminal is not None:
            terminal.close()
        if browser is not None:
            browser.close()
        if serve.poll() is None:
            serve.kill()
        shutil.rmtree(runtime, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)  # the tmux socket, the state folder, the vault copy
    both = [p for p in points if p["browser"]["valid"] and p["terminal"]["valid"]]
    ratios = [p["browser"]["final_ms"] / p["terminal"]["final_ms"] for p in both]
    report["points"] = points
    report["load_1min"] = {"min": min(load), "median": round(statistics.median(load), 2), "max": max(load)}
    report["valid"] = {
        "browser": sum(p["browser"]["valid"] for p in points),
        "terminal": sum(p["terminal"]["valid"] for p in points),
        "both": len(both),
        "of": len(points),
    }
    # The same first result on both screens: its title, and its score (a reranking that ran out of
    # its time budget on one side only, under load, changes the score and may change the order).
    tops = [(p["browser"].get("top") or "", p["terminal"].get("top") or "") for p in both]
    report["same_top"] = {
        "title": sum(b.split(" ", 1)[-1] == t.split(" ", 1)[-1] for b, t in tops),
        "title_and_score": sum(b == t for b, t in tops),
    }
    report["final_ms"] = {
        "browser": _stats([p["browser"]["final_ms"] for p in both]),
        "terminal": _stats([p["terminal"]["final_ms"] for p in both]),
        "ratio_median": round(statistics.median(ratios), 2) if ratios else float("nan"),
        "diff_median": round(
            statistics.median([p["browser"]["final_ms"] - p["terminal"]["final_ms"] for p in both]), 1
        )
        if both
        else float("nan"),
    }
    report["first_ms"] = {
        "browser": _stats([p["browser"]["first_ms"] for p in both]),
        "terminal": _stats([p["terminal"]["first_ms"] for p in both]),
    }
    write_json(args.out, report)
    f, v = report["final_ms"], report["valid"]
    print(
        markdown_table(
            ["last key -> results", "browser", "terminal (tmux)", "paired"],
            [
                [
                    "final results, median / p90",
                    f"{f['browser']['median']} / {f['browser']['p90']} ms",
                    f"{f['terminal']['median']} / {f['terminal']['p90']} ms",
                    f"ratio {f['ratio_median']}x, diff {f['diff_median']} ms",
                ],
                [
                    "first results of the query, median / p90",
                    f"{report['first_ms']['browser']['median']} / {report['first_ms']['browser']['p90']} ms",
                    f"{report['first_ms']['terminal']['median']} / {report['first_ms']['terminal']['p90']} ms",
                    "",
                ],
                [
                    "valid points",
                    f"{v['browser']}/{v['of']}",
                    f"{v['terminal']}/{v['of']}",
                    f"{v['both']} paired",
                ],
            ],
        )
    )
    print(
        f"\nn={v['both']} pairs, the same first result on both screens {report['same_top']['title']}/{v['both']} "
        f"(and the same score {report['same_top']['title_and_score']}/{v['both']}), "
        f"{report['notes']} notes, keys {args.key_ms:.0f} ms apart, {web.cols}x{web.rows} cells, "
        f"load (1 min) {report['load_1min']['min']:.1f}-{report['load_1min']['max']:.1f} on "
        f"{report['machine']['cores']} cores; {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
