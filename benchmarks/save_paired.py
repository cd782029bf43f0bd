"""Save -> searchable and the cold lexical index, paired: this tree against a baseline tree, wall and CPU side by side.

Run with ``nice -n 10 python -m benchmarks.save_paired --baseline DIR --size 10000 [--pairs 1]
[--edits 40] [--queries 30]``.

Each run is one process of one tree (its own ``explorer`` on ``PYTHONPATH``) on its own copy of
the ``benchmarks.speed`` vault: a cold lexical open, the stand-in vectors and the model, warm
full searches, then ``--edits`` saves of one note each followed by the lexical pass-1 search for
the word written (the note's file written, ``refresh(paths=[...])``,
``search(word, two_pass=False, rerank=False, dense=False)``, as ``benchmarks.speed`` times
save -> searchable). Every figure is taken by the wall clock and by the CPU time of the working
thread (``time.thread_time``), with the process's CPU time, the load average at each phase and
the CPU each thread of the process used during the saves: a wall time far above the thread's
CPU time with no other thread busy is the machine's load, not a wait of the save.

Runs go in pairs, order alternating (new, baseline, baseline, new, ...); read the ratio of each
pair. The first save of a run is also reported apart: it includes what a search builds once.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import DEFAULT_OUT, REPO, log, machine, offline_environment, write_json
from benchmarks.speed_paired import paired_table

#: One run, in the tree on PYTHONPATH: argv = vault, edits, queries, wordvecs.
CHILD = r"""
import glob, json, os, statistics, sys, threading, time
from pathlib import Path
vault, edits, n_queries, wordvecs = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
import benchmarks.speed as speed
from explorer.config import load_settings
try:
    from explorer.engine import make_pipeline
except ImportError:  # an older tree
    from explorer.cli import make_pipeline
from explorer.index.local.vault_index import VaultIndex

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) // 1024

def pct(v, p):
    o = sorted(v); pos = (len(o) - 1) * p / 100; lo = int(pos); hi = min(lo + 1, len(o) - 1)
    return round(o[lo] + (o[hi] - o[lo]) * (pos - lo), 2)

def thread_ticks():
    out = {}
    for d in glob.glob("/proc/self/task/*"):
        try:
            stat = open(d + "/stat").read()
            fields = stat[stat.rindex(")") + 2 :].split()
            out[d.rsplit("/", 1)[1]] = int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return out

load = lambda: round(os.getloadavg()[0], 2)
res = {"load": {"start": load()}}
settings = load_settings(vault)
t, c = time.perf_counter(), time.thread_time()
index = VaultIndex(vault, settings)
index.open()
res["cold_wall_s"] = round(time.perf_counter() - t, 2)
res["cold_cpu_s"] = round(time.thread_time() - c, 2)
res["peak_rss_cold_mb"] = status("VmHWM")
res["load"]["cold"] = load()
vocab = speed.vocabulary()
speed.install_standin_vectors(index, wordvecs, vocab)
index.embedder()
pipeline = make_pipeline(index, settings)
for q in speed.make_queries(vocab, n_queries, seed=23):
    pipeline.search(q)
paths = sorted(index.notes)
step = max(1, len(paths) // edits)
wall, cpu, proc = [], [], []
res["python_threads"] = [th.name for th in threading.enumerate()]
main_tid = str(threading.get_native_id())
before = thread_ticks()
for i, rel in enumerate(paths[::step][:edits]):
    file = vault / rel
    original = file.read_text(encoding="utf-8")
    marker = f"zqsave{i}x{os.getpid()}"
    t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
    file.write_text(original + f"\nEdited just now: {marker} about the garden budget.\n", encoding="utf-8")
    index.refresh(paths=[rel])
    out = pipeline.search(marker, two_pass=False, rerank=False, dense=False)
    wall.append((time.perf_counter() - t0) * 1000)
    cpu.append((time.thread_time() - c0) * 1000)
    proc.append((time.process_time() - p0) * 1000)
    if not (out.results and out.results[0].document_path == rel):
        raise SystemExit(f"edited note {rel} not found by {marker}")
    file.write_text(original, encoding="utf-8")
    index.refresh(paths=[rel])
after = thread_ticks()
res["load"]["saves"] = load()
busy = {tid: after.get(tid, 0) - n for tid, n in before.items()}
res["other_threads_cpu_ms"] = 10 * sum(v for tid, v in busy.items() if tid != main_tid)
res["main_thread_cpu_ms"] = 10 * busy.get(main_tid, 0)
for name, xs in (("save_wall_ms", wall), ("save_cpu_ms", cpu), ("save_process_cpu_ms", proc)):
    res[name] = {"p50": round(statistics.median(xs), 2), "p95": pct(xs, 95), "first": round(xs[0], 2)}
res["peak_rss_mb"] = status("VmHWM")
index.close()
print("RESULT " + json.dumps(res))
"""

FIGURES = (
    ("cold lexical, wall s", ("cold_wall_s",)),
    ("cold lexical, CPU s", ("cold_cpu_s",)),
    ("save -> searchable p50, wall ms", ("save_wall_ms", "p50")),
    ("save -> searchable p50, CPU ms", ("save_cpu_ms", "p50")),
    ("save -> searchable p95, wall ms", ("save_wall_ms", "p95")),
    ("save -> searchable p95, CPU ms", ("save_cpu_ms", "p95")),
    ("first save after the open, wall ms", ("save_wall_ms", "first")),
    ("first save after the open, CPU ms", ("save_cpu_ms", "first")),
    ("other threads' CPU during the saves, ms", ("other_threads_cpu_ms",)),
    ("peak RSS after the cold open, MB", ("peak_rss_cold_mb",)),
    ("load average (1 min) during the saves", ("load", "saves")),
)


def run(src: Path, vault: Path, args: argparse.Namespace, wordvecs: Path) -> dict[str, Any]:
    """One run of tree `src` on a fresh copy of `vault` (its index removed first)."""
    shutil.rmtree(vault / ".explorer", ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = [sys.executable, "-c", CHILD, str(vault), str(args.edits), str(args.queries), str(wordvecs)]
    proc = subprocess.run(cmd, env=env, cwd=src, capture_output=True, text=True, timeout=args.cap_s)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[len("RESULT ") :]))
    return {"error": (proc.stderr or proc.stdout)[-2000:]}


def main(argv: Sequence[str] | None = None) -> int:
    offline_environment()
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.save_paired", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--baseline", type=Path, required=True, help="source tree to compare with")
    parser.add_argument("--size", type=int, default=10000)
    parser.add_argument("--pairs", type=int, default=1, help="pairs of runs, order alternating")
    parser.add_argument("--edits", type=int, default=40)
    parser.add_argument("--queries", type=int, default=30, help="warm full searches before the saves")
    parser.add_argument("--cap-s", type=float, default=3600.0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    from benchmarks.speed import ensure_vault, vocabulary, word_vectors

    out = args.out.resolve()
    vocab = vocabulary()
    wordvecs = word_vectors(vocab, out).resolve()
    source = ensure_vault(args.size, out, vocab)
    trees = {"new": REPO, "baseline": args.baseline.resolve()}
    vaults = {}
    for name in trees:
        vault = out / f"save-pair-{name}-{args.size}" / source.name
        if not (vault / ".bench-manifest.json").is_file():
            shutil.rmtree(vault.parent, ignore_errors=True)
            shutil.copytree(source, vault, ignore=shutil.ignore_patterns(".explorer"))
        vaults[name] = vault
    pairs = []
    for i in range(args.pairs):
        order = ["new", "baseline"] if i % 2 == 0 else ["baseline", "new"]
        runs = {}
        for name in order:
            log(f"pair {i + 1}: {name}")
            runs[name] = run(trees[name], vaults[name], args, wordvecs)
        pairs.append({"order": order, "runs": runs})
    report = {
        "benchmark": "save_paired",
        "size": args.size,
        "machine": machine(),
        "args": vars(args) | {"out": str(out), "baseline": str(args.baseline)},
        "pairs": pairs,
    }
    write_json(out / f"save-paired-{args.size}.json", report)
    print(paired_table(FIGURES, pairs, "pair"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
