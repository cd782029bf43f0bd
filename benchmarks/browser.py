"""`explorer serve` in a headless Chromium: start to first results, keystroke to results against the app, memory per tab.

Run with ``python -m benchmarks.browser [--vault DIR] [--rounds N] [--no-embeddings]``. The vault
(default: a copy of sample_vault) is indexed once first (`explorer index`, not timed), so every
figure is a warm restart, as a person reopening Explorer sees it.

1. **Start to first results**: from starting `explorer serve` to the URL printed, to the app's first
   screen in a new tab, and to the first query's results drawn in the browser (the query typed as
   soon as the search box is there). Then the same for a second and a third tab of the running server.
2. **Keystroke to results, paired**: each query typed at once but its last key, then from the last
   key event to its results on screen (consecutive queries have different top results), in the browser (a DevTools key event; the top result's path read back from the page's
   terminal) and in the app run in this process (`App.run_test`, the key pressed through Pilot,
   the results widget polled; a query whose top result differs from the CLI's is cut at 15 s), per
   query, the browser's block first, the two on the same vault and settings.
3. **Memory**: the server's resident set (VmRSS) with no tab, 1 tab and 3 tabs, each tab having
   searched; and, for scale, what one more `explorer` process (the terminal app) holds after a search.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.chromium import Chromium, Tab, install_chromium
from benchmarks.common import REPO, machine, markdown_table, offline_environment

QUERIES = [
    "hamster diet",
    "cold brew coffee",
    "sourdough starter",
    "telescope eyepiece",
    "marathon training plan",
    "tomato seedlings",
    "index fund fees",
    "lisbon trams",
    "piano scales",
    "bicycle chain",
]


def _env(runtime: Path, state: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), XDG_RUNTIME_DIR=str(runtime), XDG_STATE_HOME=str(state))
    env.pop("EXPLORER_SERVE_TOKEN", None)
    return env


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _top_paths(vault: Path, flags: list[str], env: dict[str, str]) -> dict[str, str]:
    """Each query's top result path, from `explorer search --json --local`."""
    out = {}
    for q in QUERIES:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "explorer",
                "search",
                q,
                "--vault",
                str(vault),
                "--json",
                "--local",
                *flags,
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        results = json.loads(run.stdout)["results"] if run.returncode == 0 else []
        if results:
            out[q] = results[0]["document_path"]
    return out


def _shows_top(text: str, path: str) -> bool:
    """Whether the first result's row is followed by `path` (its path line)."""
    rows = text.splitlines()
    return any((" 1 █" in row or " 1 ░" in row) and path in nxt for row, nxt in itertools.pairwise(rows))


def _has_results(text: str) -> bool:
    return any(" 1 █" in row or " 1 ░" in row for row in text.splitlines())


def _open_tab(browser: Chromium, url: str, query: str, top: str) -> dict[str, float]:
    t0 = time.perf_counter()
    tab = browser.new_tab(url)
    tab.wait_for(lambda s: "Search" in s and "notes" in s, 300, "the first screen")
    t_screen = time.perf_counter()
    tab.focus()
    tab.type(query)
    tab.wait_for(_has_results, 300, "the first results")
    t_results = time.perf_counter()
    return {"screen_s": t_screen - t0, "results_s": t_results - t0, "tab": tab}  # type: ignore[dict-item]


def _browser_keystroke(tab: Tab, query: str, top: str) -> float:
    """Type all but the last key, let its results come, then time the last key to the full query's results."""
    tab.press("escape")  # the search box, its query selected: typing replaces it
    time.sleep(0.3)
    tab.type(query[:-1])
    t0 = time.perf_counter()
    tab.type(query[-1])
    tab.wait_for(lambda s: _shows_top(s, top), 120, f"results of {query!r}")
    return (time.perf_counter() - t0) * 1000


async def _app_keystrokes(vault: Path, flags: dict[str, Any], pairs: list[tuple[str, str]]) -> list[float]:
    """The same measure in the app run in this process (headless), one value per (query, top)."""
    from explorer.config import load_settings
    from explorer.tui.app import ExplorerApp
    from explorer.tui.widgets.results import ResultsList
    from explorer.tui.widgets.search_box import SearchBox

    app = ExplorerApp(vault, load_settings(vault, flags), state_path=None, watch=True)
    out: list[float] = []
    async with app.run_test(size=(155, 40)) as pilot:
        end = time.monotonic() + 300
        while app.pipeline is None and time.monotonic() < end:
            await pilot.pause(0.05)
        if flags.get("index.embeddings", True):
            while app.status.model != "ready" and time.monotonic() < end:
                await pilot.pause(0.05)
        for query, top in pairs:
            box = app.main_screen.query_one(SearchBox)
            box.focus()
            box.value = query[:-1]
            results = app.main_screen.query_one(ResultsList)
            t0 = time.perf_counter()
            await pilot.press(query[-1])
            stop = time.monotonic() + 15
            while time.monotonic() < stop:
                sel = results.results[0] if results.results else None
                if box.value == query and sel is not None and sel.document_path == top:
                    break
                await pilot.pause(0.005)
            else:
                print(f"app: {query!r} never showed {top} first", file=sys.stderr, flush=True)
            out.append((time.perf_counter() - t0) * 1000)
            print(f"app {query!r}: {out[-1]:.0f} ms", file=sys.stderr, flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vault", type=Path, default=None, help="vault (default: a copy of sample_vault)")
    parser.add_argument("--rounds", type=int, default=len(QUERIES), help="paired keystroke measurements")
    parser.add_argument("--no-embeddings", action="store_true", help="BM25 only")
    parser.add_argument("--screenshot", type=Path, default=None, help="save the first tab's results as a PNG")
    args = parser.parse_args(argv)
    offline_environment()
    if install_chromium() is None:
        print("no chromium (apt-get install chromium)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-browser-"))
    runtime = Path(tempfile.mkdtemp(prefix="xbb"))
    runtime.chmod(0o700)
    vault = args.vault or Path(shutil.copytree(REPO / "sample_vault", work / "vault"))
    env = _env(runtime, work / "state")
    cli_flags = ["--no-embeddings"] if args.no_embeddings else []
    subprocess.run(
        [sys.executable, "-m", "explorer", "index", str(vault), *cli_flags], env=env, check=True, timeout=3600
    )
    tops = _top_paths(vault, cli_flags, env)
    queries = [q for q in QUERIES if q in tops]
    report: dict[str, Any] = {"machine": machine(), "vault": str(vault), "embeddings": not args.no_embeddings}
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "explorer", "serve", str(vault), "--port", "0", *cli_flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    browser = None
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        t_url = time.perf_counter() - t0
        time.sleep(2.0)
        rss0 = _rss_mb(proc.pid)
        browser = Chromium()
        first = _open_tab(browser, url, queries[0], tops[queries[0]])
        base = url.split("/?")[0] + "/"
        report["start"] = {
            "url_s": round(t_url, 2),
            "first_screen_s": round(t_url + first["screen_s"], 2),
            "first_results_s": round(t_url + first["results_s"], 2),
        }
        tab1: Tab = first["tab"]  # type: ignore[assignment]
        if args.screenshot:
            tab1.screenshot(args.screenshot)
        time.sleep(2.0)
        rss1 = _rss_mb(proc.pid)
        more = [_open_tab(browser, base, q, tops[q]) for q in queries[1:3]]
        report["more_tabs"] = [
            {"screen_s": round(m["screen_s"], 2), "results_s": round(m["results_s"], 2)} for m in more
        ]
        time.sleep(2.0)
        rss3 = _rss_mb(proc.pid)
        print(f"rss MB: no tab {rss0:.0f}, 1 tab {rss1:.0f}, 3 tabs {rss3:.0f}", file=sys.stderr, flush=True)
        for m in more:
            m["tab"].close()  # type: ignore[attr-defined]
        # Paired keystroke-to-results: browser, then the in-process app, per query.
        # Consecutive queries with different top results: a query's results are told from the last ones.
        pairs: list[tuple[str, str]] = []
        for q in queries * 3:
            if len(pairs) < args.rounds and (not pairs or tops[q] != pairs[-1][1]):
                pairs.append((q, tops[q]))
        print(json.dumps(report), file=sys.stderr, flush=True)
        web_ms = [_browser_keystroke(tab1, q, top) for q, top in pairs]
        print(f"browser keystroke ms: {web_ms}", file=sys.stderr, flush=True)
        flags = {"index.embeddings": False} if args.no_embeddings else {}
        app_ms = asyncio.run(_app_keystrokes(vault, flags, pairs))
        diffs = [w - a for w, a in zip(web_ms, app_ms)]
        report["keystroke_ms"] = {
            "browser_median": round(statistics.median(web_ms), 1),
            "app_median": round(statistics.median(app_ms), 1),
            "paired_diff_median": round(statistics.median(diffs), 1),
            "browser": [round(x, 1) for x in web_ms],
            "app": [round(x, 1) for x in app_ms],
        }
        report["rss_mb"] = {
            "no_tab": round(rss0, 1),
            "one_tab": round(rss1, 1),
            "three_tabs": round(rss3, 1),
            "per_extra_tab": round((rss3 - rss1) / 2, 1),
        }
        proc.send_signal(signal.SIGINT)
        report["exit_code"] = proc.wait(60)
    finally:
        if browser is not None:
            browser.close()
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(runtime, ignore_errors=True)
    print(json.dumps(report, indent=2))
    s, k, r = report["start"], report["keystroke_ms"], report["rss_mb"]
    print(
        markdown_table(
            ["measure", "value"],
            [
                ["serve -> URL printed", f"{s['url_s']} s"],
                ["serve -> first screen in the browser", f"{s['first_screen_s']} s"],
                ["serve -> first results in the browser", f"{s['first_results_s']} s"],
                [
                    "2nd / 3rd tab -> first results",
                    " / ".join(f"{m['results_s']} s" for m in report["more_tabs"]),
                ],
                ["last key -> results, browser (median)", f"{k['browser_median']} ms"],
                ["last key -> results, app in process (median)", f"{k['app_median']} ms"],
                ["paired difference browser - app (median)", f"{k['paired_diff_median']} ms"],
                [
                    "server RSS: no tab / 1 tab / 3 tabs",
                    f"{r['no_tab']} / {r['one_tab']} / {r['three_tabs']} MB",
                ],
            ],
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
