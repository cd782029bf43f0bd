"""One-shot `explorer search --json` as a person runs it: a new process per query, whole process timed.

Run with ``python -m benchmarks.oneshot --vault V [--runs 9] [--baseline DIR] [--served] [--text]``.

Each run starts ``python -m explorer search QUERY --json`` and times it from start to exit (its
interpreter start-up, imports, index open, model load and search included). Every run asks a
different query (`benchmarks.speed.make_queries`), so neither the page cache of one query's notes
nor a serving process's result cache answers a repeat. Without ``--served`` the command searches in
its own process (``--local``); with it, an ``explorer watch`` of the same tree is started first and
the command is answered by it over its socket (the watcher is given time to open the index and
load the model, then stopped at the end). With ``--baseline``, that source tree is run too:
locally, alternating with this one run by run, and the per-run ratios are reported (the machine
is shared, so the paired ratio is the figure to trust); served, in one block per tree (one process
serves a vault at a time), so only the medians compare. Each run's CPU time (user + system of the
command, from the operating system) is reported beside its wall time.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import (
    DEFAULT_OUT,
    REPO,
    log,
    machine,
    markdown_table,
    offline_environment,
    summary,
    write_json,
)

PING = r"""
import sys
from pathlib import Path
try:
    from explorer.engine.server import ask
except ImportError:  # a tree from before the engine package
    from explorer.engine import ask
sys.exit(0 if ask(Path(sys.argv[1]), {"op": "ping"}) else 1)
"""


def _env(src: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(src))


def _serve(src: Path, vault: Path, warm_s: float) -> subprocess.Popen:
    """`explorer watch` of `vault` from tree `src`, once it answers a ping, plus `warm_s` to settle."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "explorer", "watch", str(vault)],
        env=_env(src),
        cwd="/",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"explorer watch from {src} exited with {proc.returncode}")
        if subprocess.run([sys.executable, "-c", PING, str(vault)], env=_env(src), cwd="/").returncode == 0:
            time.sleep(warm_s)
            return proc
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("explorer watch did not start serving")


def _has_local(src: Path) -> bool:
    """Whether tree `src`'s `explorer search` knows `--local` (trees before the search server do not)."""
    return any('"--local"' in f.read_text(encoding="utf-8") for f in (src / "explorer").rglob("*.py"))


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _one(
    src: Path, vault: Path, query: str, served: bool, cache: Path | None = None, text: bool = False
) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, bytes printed) of one `explorer search` process.

    The CPU time (user + system) is the operating system's account of the finished command; a
    serving process, still running, is not in it. On a shared machine it moves less than the wall
    time, which includes waiting for a core.
    """
    cmd = [sys.executable, "-m", "explorer", "search", query, "--vault", str(vault)]
    if not text:
        cmd.append("--json")
    if not served and _has_local(src):  # a tree from before the served search searches locally anyway
        cmd.append("--local")
    if cache is not None:
        cmd += ["--set", f"index.cache_dir={cache}"]
    c = _cpu_children()
    t = time.perf_counter()
    out = subprocess.run(cmd, env=_env(src), cwd="/", capture_output=True)
    wall = time.perf_counter() - t
    if out.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr.decode(errors='replace')[-500:]}")
    return wall, _cpu_children() - c, len(out.stdout)


def main(argv: Sequence[str] | None = None) -> int:
    """Time one-shot searches (local or served), optionally paired with a baseline tree; print a table, write JSON."""
    offline_environment()
    parser = argparse.ArgumentParser(prog="python -m benchmarks.oneshot", description=__doc__.splitlines()[0])
    parser.add_argument("--vault", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument(
        "--baseline", type=Path, default=None, help="source tree to pair with (e.g. a git archive of main)"
    )
    parser.add_argument(
        "--served", action="store_true", help="answer through a running `explorer watch` of each tree"
    )
    parser.add_argument(
        "--warm", type=float, default=5.0, help="seconds a started server is given after it answers"
    )
    parser.add_argument(
        "--baseline-cache",
        type=Path,
        default=None,
        help="the baseline searches this index folder, the new tree the vault's own (different store schemas)",
    )
    parser.add_argument("--text", action="store_true", help="the plain-text output instead of --json")
    parser.add_argument(
        "--suffix", default="", help="appended to every query (e.g. ' vault:*': a team search on Milvus)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    from benchmarks.speed import make_queries, vocabulary

    vault = args.vault.resolve()
    trees = {"new": REPO}
    if args.baseline is not None:
        trees = {"baseline": args.baseline.resolve(), "new": REPO}
    queries = [q + args.suffix for q in make_queries(vocabulary(), (args.runs + 1) * len(trees), seed=23)]
    walls: dict[str, list[float]] = {name: [] for name in trees}
    cpus: dict[str, list[float]] = {name: [] for name in trees}
    sizes: dict[str, list[int]] = {name: [] for name in trees}
    if args.served:
        # One server at a time (a vault is served by one process): each tree's runs in a block.
        for j, (name, src) in enumerate(trees.items()):
            server = _serve(src, vault, args.warm)
            try:
                for i in range(args.runs + 1):
                    wall, cpu, size = _one(src, vault, queries[i * len(trees) + j], True, text=args.text)
                    if i:  # the first run warms the page cache of the command's own files
                        walls[name].append(wall)
                        cpus[name].append(cpu)
                        sizes[name].append(size)
            finally:
                server.terminate()
                server.wait(60)
            log(f"{name}: median {statistics.median(walls[name]):.3f} s")
    else:
        for i in range(args.runs + 1):
            order = list(trees) if i % 2 == 0 else list(reversed(trees))
            for j, name in enumerate(order):
                cache = args.baseline_cache.resolve() if name == "baseline" and args.baseline_cache else None
                wall, cpu, size = _one(
                    trees[name], vault, queries[i * len(trees) + j], False, cache, text=args.text
                )
                if i:
                    walls[name].append(wall)
                    cpus[name].append(cpu)
                    sizes[name].append(size)
            log(f"run {i}: " + ", ".join(f"{n} {walls[n][-1]:.3f} s" for n in trees if i))
    report = {
        "benchmark": "oneshot",
        "vault": str(vault),
        "served": args.served,
        "output": "text" if args.text else "json",
        "suffix": args.suffix,
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_average": os.getloadavg(),
        "wall_s": {n: summary(w) for n, w in walls.items()},
        "cpu_s": {n: summary(c) for n, c in cpus.items()},
        "runs": walls,
        "cpu_runs": cpus,
        "json_bytes_median": {n: statistics.median(s) for n, s in sizes.items()},
    }
    if (
        "baseline" in trees and not args.served
    ):  # served runs come in blocks, one server at a time: not paired
        for key, series in (("wall", walls), ("cpu", cpus)):
            ratios = [n / b for b, n in zip(series["baseline"], series["new"]) if b]
            report[f"{key}_ratio_new_over_baseline"] = {
                "median": round(statistics.median(ratios), 3),
                "min": round(min(ratios), 3),
                "max": round(max(ratios), 3),
            }
    suffix = ("-text" if args.text else "") + (f"-{args.tag}" if args.tag else "")
    write_json(args.out / f"oneshot-{'served' if args.served else 'local'}-{vault.name}{suffix}.json", report)
    print(
        markdown_table(
            ["vault", "mode", "tree", "wall median s", "min s", "max s", "CPU median s", "runs"],
            [
                [
                    vault.name,
                    "served" if args.served else "local",
                    n,
                    statistics.median(w),
                    min(w),
                    max(w),
                    statistics.median(cpus[n]),
                    len(w),
                ]
                for n, w in walls.items()
            ],
        )
    )
    for key in ("wall", "cpu"):
        if f"{key}_ratio_new_over_baseline" in report:
            print(f"{key} ratio new/baseline (paired runs): {report[f'{key}_ratio_new_over_baseline']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
