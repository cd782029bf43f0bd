"""`explorer serve` in a headless Chromium: start to first results, memory per tab (keystroke to results: benchmarks.keystroke).

Run with ``python -m benchmarks.browser [--vault DIR] [--no-embeddings]``. The vault
(default: a copy of sample_vault) is indexed once first (`explorer index`, not timed), so every
figure is a warm restart, as a person reopening Explorer sees it.

1. **Start to first results**: from starting `explorer serve` to the URL printed, to the app's first
   screen in a new tab, and to the first query's results drawn in the browser (the query typed as
   soon as the search box is there). Then the same for a second and a third tab of the running server.
2. **Keystroke to results** against the terminal app, paired: `python -m benchmarks.keystroke`
   (the same app in a browser tab and in tmux, the results known to be the typed query's).
3. **Memory**: the server's resident set (VmRSS) with no tab, 1 tab and 3 tabs, each tab having
   searched; and, for scale, what one more `explorer` process (the terminal app) holds after a search.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
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


def _has_results(text: str) -> bool:
    return any(" 1 █" in row or " 1 ░" in row for row in text.splitlines())


def _open_tab(browser: Chromium, url: str, query: str) -> dict[str, float]:
    t0 = time.perf_counter()
    tab = browser.new_tab(url)
    tab.wait_for(lambda s: "Search" in s and "notes" in s, 300, "the first screen")
    t_screen = time.perf_counter()
    tab.focus()
    tab.type(query)
    tab.wait_for(_has_results, 300, "the first results")
    t_results = time.perf_counter()
    return {"screen_s": t_screen - t0, "results_s": t_results - t0, "tab": tab}  # type: ignore[dict-item]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vault", type=Path, default=None, help="vault (default: a copy of sample_vault)")
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
    queries = QUERIES
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
        first = _open_tab(browser, url, queries[0])
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
        more = [_open_tab(browser, base, q) for q in queries[1:3]]
        report["more_tabs"] = [
            {"screen_s": round(m["screen_s"], 2), "results_s": round(m["results_s"], 2)} for m in more
        ]
        time.sleep(2.0)
        rss3 = _rss_mb(proc.pid)
        print(f"rss MB: no tab {rss0:.0f}, 1 tab {rss1:.0f}, 3 tabs {rss3:.0f}", file=sys.stderr, flush=True)
        for m in more:
            m["tab"].close()  # type: ignore[attr-defined]
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
    s, r = report["start"], report["rss_mb"]
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
