"""Time to quit the app in a real terminal (tmux): from ctrl+q to the process's exit.

Run with ``python -m benchmarks.tui_quit [VAULT] [--runs N]`` (needs tmux). The app runs as
``python -m explorer VAULT`` of this repository at 120x40; after its index and model are ready, a
query is typed and its results shown (so a search has run and the watcher is on), then ctrl+q is
sent and the clock stops when the shell that started the app writes the time of its exit. The
default vault is a copy of sample_vault under ``bench-out/quit-vault`` (its index stays there, so
runs after the first are warm). Medians of the runs are printed and written to ``bench-out``.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import DEFAULT_OUT, REPO, log, machine, write_json

SESSION = "explorer-quit-bench"


def _screen() -> str:
    return subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", SESSION], capture_output=True, text=True
    ).stdout


def _wait(predicate, timeout: float) -> bool:
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def one_run(vault: Path, query: str, timeout: float = 120.0) -> float | None:
    """Seconds from ctrl+q to the app's exit (None when a step timed out)."""
    subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)
    with tempfile.TemporaryDirectory() as tmp:
        stamp = Path(tmp) / "exited"
        env = f"PYTHONPATH={shlex.quote(str(REPO))} XDG_STATE_HOME={shlex.quote(tmp)} XDG_CONFIG_HOME={shlex.quote(tmp)}"
        app = f"{shlex.quote(sys.executable)} -m explorer {shlex.quote(str(vault))}"
        done = f"date +%s.%N > {shlex.quote(str(stamp))}"  # not python: its start-up would be counted
        subprocess.run(
            [
                "tmux",
                "new-session",
                "-d",
                "-s",
                SESSION,
                "-x",
                "120",
                "-y",
                "40",
                f"cd {shlex.quote(str(REPO))}; env {env} {app}; {done}; sleep 30",
            ],
            check=True,
        )
        try:
            if not _wait(lambda: "Search" in _screen(), timeout):
                return None
            # Ready: the status bar names the model's runtime (`hybrid (onnx)`) and embeds nothing.
            if not _wait(lambda: re.search(r"hybrid(\+rerank)? \(", _screen()) is not None, timeout):
                return None
            subprocess.run(["tmux", "send-keys", "-t", SESSION, "-l", query])
            if not _wait(lambda: re.search(r"\d+ results? · hybrid", _screen()) is not None, timeout):
                return None
            time.sleep(0.5)
            t0 = time.time()
            subprocess.run(["tmux", "send-keys", "-t", SESSION, "C-q"])
            if not _wait(stamp.exists, 30) or not _wait(lambda: stamp.read_text().strip() != "", 5):
                return None
            return float(stamp.read_text()) - t0
        finally:
            subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("vault", nargs="?", type=Path, default=None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--query", default="sourdough starter")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    if shutil.which("tmux") is None:
        print("tmux is needed (apt-get install tmux)", file=sys.stderr)
        return 2
    vault = args.vault
    if vault is None:
        vault = args.out / "quit-vault"
        if not vault.exists():
            shutil.copytree(REPO / "sample_vault", vault)
    os.environ.pop("EXPLORER_VAULT", None)
    times = []
    for i in range(args.runs):
        t = one_run(vault.resolve(), args.query)
        log(f"run {i + 1}: {t if t is None else round(t, 3)} s")
        if t is not None:
            times.append(t)
    med = round(statistics.median(times), 3) if times else None
    print("quit s:", [round(t, 3) for t in times], "median", med)
    name = f"tui-quit{'-' + args.tag if args.tag else ''}.json"
    write_json(
        args.out / name,
        {"vault": str(vault), "runs": [round(t, 3) for t in times], "median_s": med, "machine": machine()},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
