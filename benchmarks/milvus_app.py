"""The app on a Milvus-backed memory next to the local one, in a real terminal (tmux): typing to settled results.

    nice -n 10 python -m benchmarks.milvus_app --out /tmp/milvus-bench --notes 3750 --sizes 80x24,160x50 [--at-start] [--before DIR]

Uses the vault, caches and engine of a `benchmarks.milvus_scale` run with the same `--out` and
`--notes` (the local cache `cache-local`, the Milvus one `cache-milvus` and `engine/m.db`). For each
terminal size and each start (`--starts`), the app is started once on each backend (the order
alternating), and for each: the time from the start until the status bar counts the notes (the
index open), then the first query pasted at once (the first search after opening), then the other
queries one after the other (the box emptied, the query pasted). For every query: the time until
the first result row shows (the quality line "N results") and until the screen stops changing for
`--quiet` seconds (settled). Medians per backend and size; the load average before and after.

With `--at-start`, the first query is pasted as soon as the app's screen is up (before the index
has opened) and timed from the command (`launch_to_first_s` / `launch_to_settled_s`): what a
person who types at once waits. With `--before DIR`, every Milvus arm runs again with
`PYTHONPATH=DIR` (a copy of the code before a change) as `ARM-before`, in the same rotation.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import log, machine, write_json
from benchmarks.milvus_scale import server_on_copy

EXPLORER = Path(sys.executable).with_name("explorer")
QUERIES = (
    "river delta sediment",
    "budget review meeting",
    "garden soil compost",
    "battery charging cycle",
    "winter travel plans",
    "protein folding model",
    "orchestra rehearsal schedule",
    "database index migration",
)


def _screen(session: str) -> str:
    return subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
    ).stdout


def _keys(session: str, *keys: str, literal: bool = False) -> None:
    subprocess.run(["tmux", "send-keys", "-t", session, *(["-l"] if literal else []), *keys], check=True)


def _wait(session: str, done: object, timeout: float, quiet: float) -> tuple[float | None, float | None, str]:
    """(seconds to the first screen where `done(screen)` holds, seconds to the last change before `quiet`
    seconds without one, the settled screen); from now."""
    t0 = time.perf_counter()
    first = None
    last_change, last = t0, _screen(session)
    while time.perf_counter() - t0 < timeout:
        time.sleep(0.03)
        now = time.perf_counter()
        out = _screen(session)
        if out != last:
            last, last_change = out, now
        if first is None and done(out):  # type: ignore[operator]
            first = now - t0
        if first is not None and now - last_change >= quiet:
            return first, last_change - t0, out
    return first, None, last


def _has_results(screen: str) -> bool:
    return " results ·" in screen or " result ·" in screen


def _drawn(screen: str) -> bool:
    return "Opening the index" in screen or "Type to search" in screen or _has_results(screen)


def one_app(
    arm: str,
    env: dict[str, str],
    vault: Path,
    size: str,
    queries: list[str],
    quiet: float,
    timeout: float,
    at_start: bool = False,
) -> dict:
    session = f"milvus-app-{os.getpid()}"
    subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    cols, rows = size.split("x")
    t0 = time.perf_counter()
    cmd = " ".join(f"{k}={v}" for k, v in env.items()) + f" {EXPLORER} {vault}"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", cols, "-y", rows, f"env {cmd}"], check=True
    )
    out: dict = {"arm": arm, "size": size, "queries": [], "at_start": at_start}
    try:
        end = time.perf_counter() + timeout
        if at_start:  # the first query typed as soon as the screen is up, timed from the command
            while time.perf_counter() < end and not _drawn(_screen(session)):
                time.sleep(0.02)
            pasted = time.perf_counter() - t0
            out["drawn_s"] = round(pasted, 2)
            _keys(session, queries[0], literal=True)
            first, settled, _ = _wait(session, _has_results, timeout, quiet)
            out["from_launch"] = {
                "first_s": None if first is None else round(first + pasted, 2),
                "settled_s": None if settled is None else round(settled + pasted, 2),
            }
            log(f"{arm} {size} at start {queries[0]!r}: {out['from_launch']}")
            queries = queries[1:]
        while time.perf_counter() < end and "watch: on" not in _screen(session):
            time.sleep(0.05)
        out["open_s"] = round(time.perf_counter() - t0, 2)  # the index open and the watcher started
        time.sleep(0.5)
        for i, q in enumerate(queries):
            if i or at_start:
                _keys(session, "C-u")
                _wait(session, lambda s: not _has_results(s), 10, 0.5)
            _keys(session, q, literal=True)
            first, settled, screen = _wait(session, _has_results, timeout, quiet)
            top = next((ln for ln in screen.splitlines() if "│  1 " in ln), "")
            out["queries"].append(
                {"query": q, "first_s": first, "settled_s": settled, "top": top.strip("│ ").strip()}
            )
            log(f"{arm} {size} {q!r}: first {first} settled {settled}")
    finally:
        _keys(session, "C-q")
        time.sleep(1.0)
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("/tmp/milvus-bench"))
    ap.add_argument("--notes", type=int, default=3750)
    ap.add_argument("--sizes", default="80x24,160x50")
    ap.add_argument("--starts", type=int, default=2, help="app starts per backend and size")
    ap.add_argument(
        "--queries", type=int, default=6, help="queries per start (the first is the first search)"
    )
    ap.add_argument("--quiet", type=float, default=1.5)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument(
        "--server",
        action="store_true",
        help="a third arm: the app on a `milvus-lite server` process (a copy of the engine) reached by URI",
    )
    ap.add_argument(
        "--at-start",
        action="store_true",
        help="type the first query as soon as the app's screen is up, timed from the command",
    )
    ap.add_argument(
        "--before",
        type=Path,
        default=None,
        help="a copy of the code before a change (its PYTHONPATH): each Milvus arm again on it, as ARM-before",
    )
    ap.add_argument("--tag", default="")
    args = ap.parse_args(argv)
    vault = args.out / f"speed-vault-{args.notes}"
    base = {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    arms = {
        "local": {**base, "EXPLORER_INDEX_CACHE_DIR": str(args.out / "cache-local")},
        "milvus": {
            **base,
            "EXPLORER_INDEX_CACHE_DIR": str(args.out / "cache-milvus"),
            "EXPLORER_INDEX_BACKEND": "milvus",
            "EXPLORER_INDEX_MILVUS_URI": str(args.out / "engine" / "m.db"),
        },
    }
    proc = None
    if args.server:
        proc, uri, _ = server_on_copy(args.out, "app-server")
        arms["milvus-server"] = {
            **arms["milvus"],
            "EXPLORER_INDEX_CACHE_DIR": str(args.out / "cache-milvus-app-server"),
            "EXPLORER_INDEX_MILVUS_URI": uri,
        }
    if args.before is not None:
        for name in [a for a in arms if a != "local"]:
            arms[f"{name}-before"] = {**arms[name], "PYTHONPATH": str(args.before)}
    res: dict = {"machine": machine(), "load_before": os.getloadavg(), "runs": [], "at_start": args.at_start}
    order = list(arms)
    for size in args.sizes.split(","):
        for start in range(args.starts):
            for i in range(len(order)):
                arm = order[(start + i) % len(order)]
                qs = [QUERIES[(start * 3 + j) % len(QUERIES)] for j in range(args.queries)]
                res["runs"].append(
                    one_app(arm, arms[arm], vault, size, qs, args.quiet, args.timeout, args.at_start)
                )
    res["load_after"] = os.getloadavg()
    if proc is not None:
        proc.terminate()
        proc.wait(timeout=30)
    summary: dict = {}
    for size in args.sizes.split(","):
        for arm in arms:
            runs = [r for r in res["runs"] if r["arm"] == arm and r["size"] == size]
            firsts = [r["queries"][0] for r in runs if r["queries"]]
            later = [q for r in runs for q in r["queries"][1:]]

            def med(xs: list[float | None]) -> float | None:
                xs2 = [x for x in xs if x is not None]
                return round(statistics.median(xs2), 2) if xs2 else None

            launched = [r["from_launch"] for r in runs if "from_launch" in r]
            summary[f"{arm} {size}"] = {
                "launch_to_first_s": med([x["first_s"] for x in launched]),
                "launch_to_settled_s": med([x["settled_s"] for x in launched]),
                "open_s": med([r["open_s"] for r in runs]),
                "first_search_first_s": med([q["first_s"] for q in firsts]),
                "first_search_settled_s": med([q["settled_s"] for q in firsts]),
                "later_first_s": med([q["first_s"] for q in later]),
                "later_settled_s": med([q["settled_s"] for q in later]),
                "later_n": len(later),
            }
            log(f"{arm} {size}: {summary[f'{arm} {size}']}")
    res["summary"] = summary
    write_json(args.out / f"milvus-app{args.tag}.json", res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
