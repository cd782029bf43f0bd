"""Whole-process start-up of the app in a real terminal (tmux): first frame, and a typed query's results.

Run with ``python -m benchmarks.tui_start [VAULT] [--runs N]`` (needs tmux). The first frame is
the moment the search box is on screen; then "sourdough" is typed and the clock stops when a
result titled with it is shown. Medians of the runs are printed.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

EXPLORER = Path(sys.executable).with_name("explorer")


def _screen(session: str) -> str:
    return subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
    ).stdout


def one_run(
    vault: Path, session: str = "explorer-bench", timeout: float = 20.0
) -> tuple[float | None, float | None]:
    """(seconds to the first frame, seconds until the typed query shows results)."""
    subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    t0 = time.perf_counter()
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", f"{EXPLORER} {vault}"],
        check=True,
    )
    first = results = None
    try:
        while time.perf_counter() - t0 < timeout:
            out = _screen(session)
            if first is None and "Search" in out:
                first = time.perf_counter() - t0
                subprocess.run(["tmux", "send-keys", "-t", session, "sourdough"])
            elif first is not None and "Sourdough" in out and "results" in out.lower():
                results = time.perf_counter() - t0
                break
            time.sleep(0.02)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    return first, results


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "vault", nargs="?", type=Path, default=Path(__file__).resolve().parent.parent / "sample_vault"
    )
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    if shutil.which("tmux") is None:
        print("tmux is needed (apt-get install tmux)", file=sys.stderr)
        return 2
    runs = []
    for _ in range(args.runs):
        runs.append(one_run(args.vault))
        time.sleep(0.5)
    firsts = [f for f, _ in runs if f is not None]
    shown = [r for _, r in runs if r is not None]
    print(
        "first frame s:",
        [round(f, 2) for f in firsts],
        "median",
        round(statistics.median(firsts), 2) if firsts else None,
    )
    print(
        "typed query shows results s:",
        [round(r, 2) for r in shown],
        "median",
        round(statistics.median(shown), 2) if shown else None,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
