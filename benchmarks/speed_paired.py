"""Speed, paired: ``benchmarks.speed`` of this tree against a baseline source tree, back to back.

Run with ``python -m benchmarks.speed_paired --baseline DIR --size 10000 [--rounds 1] [--first new]``.

Each round runs, for each tree in turn (the order alternates from round to round), that tree's
own ``benchmarks.speed`` worker on its own copy of the generated vault (cold lexical index,
stand-in vectors, keystroke / full latency, save -> searchable), then warm restarts of that tree
in fresh processes (open the stored index, answer one hybrid query), measured as
``benchmarks.restart_paired`` does, with private (anonymous) and memory-mapped (file) resident
memory apart. The machine is shared, so the figures to read are the ratios new / baseline of runs
made back to back; several invocations with ``--first`` swapped make alternating pairs.

With ``--clock cpu`` each worker times its phases by the CPU time of its own thread
(``time.thread_time`` in place of ``time.perf_counter`` inside ``benchmarks.speed`` only, so both
trees' unchanged workers measure the same way): cold lexical index, keystroke, full and
save -> searchable then count the work of the thread that does it, not the waiting for a core on
a shared machine (the model's own threads are not counted). Warm restarts stay wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import DEFAULT_OUT, REPO, log, machine, markdown_table, offline_environment, write_json
from benchmarks.restart_paired import CHILD

#: Runs a tree's `benchmarks.speed` with its clock reading the CPU time of the calling thread.
CPU_WORKER = r"""
import sys, time
import benchmarks.speed as speed

class _ThreadClock:
    perf_counter = staticmethod(time.thread_time)

    def __getattr__(self, name):
        return getattr(time, name)

speed.time = _ThreadClock()
sys.exit(speed.main(sys.argv[1:]))
"""

#: (label, key path in the worker's result, unit) of the figures compared.
FIGURES = (
    ("cold lexical index s", ("cold_lexical_s",), None),
    ("keystroke p50 ms", ("keystroke", "latency_ms", "median"), None),
    ("keystroke p95 ms", ("keystroke", "latency_ms", "p95"), None),
    ("keystroke, no floor p95 ms", ("keystroke_deep", "latency_ms", "p95"), None),
    ("full p50 ms", ("full", "latency_ms", "median"), None),
    ("full p95 ms", ("full", "latency_ms", "p95"), None),
    ("save -> searchable lexical p95 ms", ("save_lexical", "latency_ms", "p95"), None),
    ("peak RSS MB (bench process)", ("peak_rss_mb",), None),
    ("warm restart s", ("restart", "wall_s"), None),
    ("restart: open s", ("restart", "open_s"), None),
    ("restart: peak RSS MB", ("restart", "peak_rss_mb"), None),
    ("restart: private (anon) RSS MB", ("restart", "rss_anon_mb"), None),
    ("restart: mapped file RSS MB", ("restart", "rss_file_mb"), None),
)


def figure_at(d: dict[str, Any], path: tuple[str, ...]) -> float | None:
    """The number at `path` in a run's report, None when the run has none there."""
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return float(d) if isinstance(d, (int, float)) else None


def paired_table(
    figures: Iterable[tuple[str, tuple[str, ...]]], pairs: list[dict[str, Any]], column: str
) -> str:
    """Each figure of each pair of runs (baseline, new, their ratio) as a Markdown table; `column` names
    the pair column ("round", "pair")."""
    rows = []
    for label, path in figures:
        for i, p in enumerate(pairs):
            b, n = figure_at(p["runs"].get("baseline", {}), path), figure_at(p["runs"].get("new", {}), path)
            rows.append(
                [
                    label if i == 0 else "",
                    f"{i + 1} ({p['order'][0]} first)",
                    "-" if b is None else round(b, 1),
                    "-" if n is None else round(n, 1),
                    f"{n / b:.2f}" if b and n is not None else "-",
                ]
            )
    return markdown_table(["figure", column, "baseline", "new", "new / baseline"], rows)


def _tree_env(src: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(src))


def run_tree(
    name: str, src: Path, vault: Path, size: int, args: argparse.Namespace, wordvecs: Path, queries: list[str]
) -> dict[str, Any]:
    """The speed worker of tree `src` on `vault`, then `args.restarts` warm restarts."""
    result = vault.parent / f"speed-{size}-{name}.json"
    result.unlink(missing_ok=True)
    launch = ["-c", CPU_WORKER] if args.clock == "cpu" else ["-m", "benchmarks.speed"]
    cmd = [
        sys.executable,
        *launch,
        "--worker",
        "--vault",
        str(vault),
        "--size",
        str(size),
        "--queries",
        str(args.queries),
        "--edits",
        str(args.edits),
        "--vector-edits",
        str(args.vector_edits),
        "--wordvecs",
        str(wordvecs),
        "--result",
        str(result),
        "--out",
        str(vault.parent),
    ]
    t = time.perf_counter()
    proc = subprocess.run(
        cmd, cwd=src, env=_tree_env(src), capture_output=True, text=True, timeout=args.cap_s
    )
    res: dict[str, Any] = json.loads(result.read_text(encoding="utf-8")) if result.is_file() else {}
    res["worker_exit"] = proc.returncode
    res["worker_wall_s"] = round(time.perf_counter() - t, 1)
    if proc.returncode:
        res["worker_stderr"] = proc.stderr[-1500:]
        log(f"{name} worker exited with {proc.returncode}: {proc.stderr[-300:]}")
    if "done" not in res.get("phases_done", []):
        return res
    restarts = []
    for i in range(args.restarts + 1):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(vault), str(vault / ".explorer"), queries[i]],
            cwd=src,
            env=_tree_env(src),
            capture_output=True,
            text=True,
            timeout=1200,
        )
        if out.returncode:
            log(f"{name} restart failed: {out.stderr[-800:]}")
            break
        data = json.loads(out.stdout.strip().splitlines()[-1])
        data["load"] = round(os.getloadavg()[0], 2)
        if i:  # the first restart warms the page cache
            restarts.append(data)
    if restarts:
        res["restart"] = {
            k: statistics.median([r[k] for r in restarts])
            for k in ("wall_s", "import_s", "open_s", "query_s", "peak_rss_mb", "rss_anon_mb", "rss_file_mb")
        }
        res["restart"]["runs"] = restarts
        res["restart"]["all_hybrid"] = all(r["dense"] and r["pending"] == 0 for r in restarts)
    return res


def main(argv: Sequence[str] | None = None) -> int:
    """Run both trees for one size, alternating; print the paired table and write JSON."""
    offline_environment()
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.speed_paired", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--baseline", type=Path, required=True, help="source tree of the baseline (e.g. a git archive)"
    )
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--first", choices=("baseline", "new"), default="baseline", help="tree that runs first in round 1"
    )
    parser.add_argument(
        "--only",
        choices=("baseline", "new"),
        default=None,
        help="run one tree (a pair then spans two invocations, each short enough for the timing lock)",
    )
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--edits", type=int, default=10)
    parser.add_argument("--vector-edits", type=int, default=0)
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="time the worker's phases by wall time or by the CPU time of its thread",
    )
    parser.add_argument("--cap-s", type=float, default=3600.0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    from benchmarks.speed import ensure_vault, make_queries, vocabulary, word_vectors

    out = args.out.resolve()
    vocab = vocabulary()
    wordvecs = word_vectors(vocab, out).resolve()
    source = ensure_vault(args.size, out, vocab)
    trees = {"baseline": args.baseline.resolve(), "new": REPO}
    vaults = {}
    for name in trees:
        folder = out / f"speed-pair-{name}-{args.size}"
        vault = folder / source.name
        if not (vault / ".bench-manifest.json").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            shutil.copytree(source, vault, ignore=shutil.ignore_patterns(".explorer"))
        vaults[name] = vault
    queries = make_queries(vocab, args.restarts + 1, seed=5)
    order = list(trees) if args.first == "baseline" else list(reversed(trees))
    rounds = []
    for i in range(args.rounds):
        runs = {}
        for name in order:
            if args.only and name != args.only:
                continue
            log(f"round {i + 1}: {name}")
            runs[name] = run_tree(name, trees[name], vaults[name], args.size, args, wordvecs, queries)
            runs[name]["load_after"] = [round(x, 2) for x in os.getloadavg()]
        rounds.append({"order": list(order), "runs": runs})
        order.reverse()
    ratios = {}
    for label, path, _ in FIGURES:
        vals = [
            (figure_at(r["runs"].get("baseline", {}), path), figure_at(r["runs"].get("new", {}), path))
            for r in rounds
        ]
        ratios[label] = [round(n / b, 3) for b, n in vals if b and n is not None]
    report = {
        "benchmark": "speed_paired",
        "size": args.size,
        "baseline": str(trees["baseline"]),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "args": vars(args) | {"out": str(out), "baseline": str(args.baseline)},
        "rounds": rounds,
        "ratios": ratios,
    }
    suffix = (f"-{args.tag}" if args.tag else "") + ("-cpu" if args.clock == "cpu" else "")
    only = f"-{args.only}" if args.only else ""
    write_json(out / f"speed-paired-{args.size}{suffix}{only}.json", report)
    print(paired_table(((label, path) for label, path, _ in FIGURES), rounds, "round"))
    loads = [r["runs"][name].get("load_average", {}) for r in rounds for name in r["runs"]]
    print("load averages by phase:", json.dumps(loads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
