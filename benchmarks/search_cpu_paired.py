"""Search CPU time, paired: the searches of this tree against a baseline source tree, per query, in A/B/B/A processes.

Run with ``nice -n 10 python -m benchmarks.search_cpu_paired --baseline DIR [--size 10000] [--pairs 4]``
(about 10 min at 10k with the defaults, once the indexes are built).

The whole-command pair (`benchmarks.speed_paired`) swings by ±10 % between runs on a shared
machine; this one measures only the searches, by CPU time, many times each. Each tree first
indexes its own copy of the index of the generated speed vault (``--size`` notes, the vault of
`benchmarks.speed`, in its own ``index.cache_dir``) and gives every shard a stand-in vector as
`benchmarks.speed` does (built once, not timed). Then processes alternate A B B A A B B A ...,
each with its tree alone on ``sys.path`` (it prints ``explorer.__file__`` to prove it): open the
stored index, load the model, warm up on other queries, then ``--reps`` rounds of the same fixed
queries of each type (the query sets of `benchmarks.speed`), the result cache cleared before each
search, timed by ``time.process_time`` (all of the process's threads) and ``time.thread_time``
(the searching thread):

- ``keystroke``: pass 1 hybrid, ``search(q, two_pass=False, rerank=False)``;
- ``keystroke_deep``: the same with no dense floor (every dense ranking runs 100 notes deep);
- ``full``: the default pipeline, ``search(q)``;
- ``lexical``: BM25 alone, ``search(q, dense=False, two_pass=False, rerank=False)``.

The query vectors are made by the model once per text and process and then remembered (the
model's work is the same in both trees and the noisiest part of the CPU time); ``--model`` times
the model at every search instead. Per tree and type, each query's figure is the median over its
repetitions and processes; the ratio new / baseline is the geometric mean over queries of the
per-query ratios, and the ratio of the median per-search times, each with a 95 % bootstrap
interval (queries and processes resampled).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import DEFAULT_OUT, REPO, log, machine, markdown_table, offline_environment, write_json

TYPES = ("keystroke", "keystroke_deep", "full", "lexical")

#: Indexes the vault into the tree's own cache folder and gives every shard a stand-in vector.
BUILD = r"""
import sys, time
from pathlib import Path
import explorer
from explorer.config import load_settings
try:
    from explorer.index.local.vault_index import VaultIndex
except ImportError:
    from explorer.index.vault_index import VaultIndex
from benchmarks.speed import install_standin_vectors, vocabulary
vault, cache, wordvecs = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
print(explorer.__file__, file=sys.stderr)
t = time.time()
index = VaultIndex(vault, load_settings(vault, {"index.cache_dir": cache}))
index.open()
install_standin_vectors(index, wordvecs, vocabulary())
index.close()
print(f"built in {time.time() - t:.1f} s", file=sys.stderr)
"""

#: One measuring process: open the stored index, warm up, then answer timing requests from stdin, a line each.
CHILD = r"""
import json, sys, time
from pathlib import Path
import explorer
from explorer.config import load_settings
from explorer.engine import make_pipeline, open_index
vault, cache = Path(sys.argv[1]), sys.argv[2]
plan = json.loads(sys.argv[3])
settings = load_settings(vault, {"index.cache_dir": cache})
index, _ = open_index(vault, settings)
emb = index.embedder()
if not plan["model"]:
    encode, memo = emb.encode, {}
    def remembered(texts, *args, **kwargs):
        key = (tuple(texts), args, tuple(sorted(kwargs.items())))
        if key not in memo:
            memo[key] = encode(texts, *args, **kwargs)
        return memo[key]
    emb.encode = remembered
pipes = {
    "main": make_pipeline(index, settings),
    "deep": make_pipeline(index, settings.with_overrides({"experimental.dense_threshold": 0.0}, origin="deep")),
}
kinds = {
    "keystroke": ("main", {"two_pass": False, "rerank": False}),
    "keystroke_deep": ("deep", {"two_pass": False, "rerank": False}),
    "full": ("main", {}),
    "lexical": ("main", {"dense": False, "two_pass": False, "rerank": False}),
}
for q in plan["warm"]:
    for kind, (pipe, kwargs) in kinds.items():
        pipes[pipe].search(q, record=False, **kwargs)
for kind in plan["types"]:  # every query once: the query vectors are made here, not in a timed search
    pipe, kwargs = kinds[kind]
    for q in plan["queries"][kind]:
        pipes[pipe].clear_cache()
        pipes[pipe].search(q, record=False, **kwargs)
print(json.dumps({"explorer": explorer.__file__}), flush=True)
from collections import Counter
lines = Counter()
def _line(frame, event, arg):
    if event == "line":
        lines[frame.f_code.co_filename.rsplit("/", 1)[-1] + ":" + frame.f_code.co_name] += 1
    return _line
def _call(frame, event, arg):
    frame.f_trace_lines = True
    return _line
for line in sys.stdin:
    ask = json.loads(line)
    pipe, kwargs = kinds[ask["kind"]]
    p = pipes[pipe]
    p.clear_cache()
    if ask.get("trace"):  # the Python lines the search runs, by file:function (no timing)
        lines.clear()
        sys.settrace(_call)
        p.search(ask["q"], record=False, **kwargs)
        sys.settrace(None)
        print(json.dumps({"lines": dict(lines)}), flush=True)
        continue
    t0, c0 = time.thread_time(), time.process_time()
    out = p.search(ask["q"], record=False, **kwargs)
    c1, t1 = time.process_time(), time.thread_time()
    reply = {"process": (c1 - c0) * 1000, "thread": (t1 - t0) * 1000}
    if ask.get("top"):
        reply["top"] = [[r.document_path, round(r.score, 9)] for r in out.results[:10]]
    print(json.dumps(reply), flush=True)
index.close()
"""


def _env(tree: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(tree))


def build(tree: Path, vault: Path, cache: Path, wordvecs: Path) -> None:
    """Index `vault` with `tree` into `cache` (once: a marker file says it is done)."""
    marker = cache / ".search-cpu-built"
    if marker.is_file():
        return
    cache.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-c", BUILD, str(vault), str(cache), str(wordvecs)],
        cwd=tree,
        env=_env(tree),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if proc.returncode:
        raise SystemExit(f"building the index with {tree} failed:\n{proc.stderr[-2000:]}")
    log(proc.stderr.strip().splitlines()[-1])
    marker.write_text("built\n", encoding="utf-8")


class Searcher:
    """A measuring process of one tree, searching on request; checks that it imported that tree's package."""

    def __init__(self, tree: Path, vault: Path, cache: Path, plan: dict[str, Any]) -> None:
        err = (cache / "searcher.log").open("a", encoding="utf-8")  # the process's stderr
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(vault), str(cache), json.dumps(plan)],
            cwd=tree,
            env=_env(tree),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        ready = self._read()
        if not Path(ready["explorer"]).resolve().is_relative_to(tree.resolve()):
            self.close()
            raise SystemExit(f"{tree} imported explorer from {ready['explorer']}")

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"a measuring process ended (exit {self.proc.wait()})")
        got: dict[str, Any] = json.loads(line)
        return got

    def search(self, kind: str, query: str, top: bool = False, trace: bool = False) -> dict[str, Any]:
        """Time one search (the result cache cleared first) in the process; with `trace`, count the
        Python lines it runs instead."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"kind": kind, "q": query, "top": top, "trace": trace}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=120)


def _geomean(xs: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs))


def summarise(
    times: dict[str, dict[str, list[list[float]]]], boot: int = 2000, seed: int = 3
) -> dict[str, Any]:
    """Ratios new / baseline of one query type and clock, with 95 % bootstrap intervals.

    `times[tree][query][pair]` are the CPU ms of that query's searches in that pair of processes
    (the i-th of the baseline's paired with the i-th of the new tree's: searched back to back).
    Per query: the median of its paired ratios (`paired`), and the ratio of its median times;
    over queries, the geometric mean of each, and the ratio of the medians (p50) of the
    per-query median times. The interval resamples queries and process pairs.
    """
    base, new = times["baseline"], times["new"]
    queries = list(base)
    n_pairs = len(base[queries[0]])

    def stats(qs: Sequence[str], pairs: Sequence[int]) -> tuple[float, float, float]:
        paired, ratio, b_med, n_med = [], [], [], []
        for q in qs:
            b = [t for i in pairs for t in base[q][i]]
            n = [t for i in pairs for t in new[q][i]]
            paired.append(statistics.median(y / x for x, y in zip(b, n)))
            bm, nm = statistics.median(b), statistics.median(n)
            ratio.append(nm / bm)
            b_med.append(bm)
            n_med.append(nm)
        return _geomean(paired), _geomean(ratio), statistics.median(n_med) / statistics.median(b_med)

    point = stats(queries, range(n_pairs))
    rng = random.Random(seed)
    draws: list[list[float]] = [[], [], []]
    for _ in range(boot):
        qs = [rng.choice(queries) for _ in queries]
        pairs = [rng.randrange(n_pairs) for _ in range(n_pairs)]
        for j, v in enumerate(stats(qs, pairs)):
            draws[j].append(v)
    lo, hi = int(0.025 * boot), int(0.975 * boot) - 1
    out: dict[str, Any] = {
        "baseline_p50_ms": round(
            statistics.median(statistics.median([t for rep in v for t in rep]) for v in base.values()), 3
        ),
        "new_p50_ms": round(
            statistics.median(statistics.median([t for rep in v for t in rep]) for v in new.values()), 3
        ),
    }
    for j, name in enumerate(("paired", "geomean", "p50")):
        d = sorted(draws[j])
        out[f"{name}_ratio"] = round(point[j], 4)
        out[f"{name}_ci"] = [round(d[lo], 4), round(d[hi], 4)]
    return out


def trace_lines(
    trees: dict[str, Path],
    vault: Path,
    caches: dict[str, Path],
    plan: dict[str, Any],
    types: list[str],
    out: Path,
    tag: str,
) -> int:
    """Each query of each type once per tree under `sys.settrace`: Python lines per search, new / baseline,
    and the functions whose lines moved most (one process per tree, the same hash seed)."""
    counts: dict[str, dict[str, Counter[str]]] = {name: {t: Counter() for t in types} for name in trees}
    os.environ["PYTHONHASHSEED"] = "0"
    for name, tree in trees.items():
        searcher = Searcher(tree, vault, caches[name], plan)
        try:
            for t in types:
                for q in plan["queries"][t]:
                    counts[name][t].update(searcher.search(t, q, trace=True)["lines"])
        finally:
            searcher.close()
    rows, moved = [], {}
    for t in types:
        n_q = len(plan["queries"][t])
        b, n = counts["baseline"][t], counts["new"][t]
        rows.append([t, round(b.total() / n_q), round(n.total() / n_q), f"{n.total() / b.total():.4f}"])
        keys = set(b) | set(n)
        moved[t] = {
            k: round((n[k] - b[k]) / n_q, 1) for k in sorted(keys, key=lambda k: -abs(n[k] - b[k]))[:25]
        }
    print(markdown_table(["type", "baseline lines/search", "new lines/search", "new / baseline"], rows))
    for t in types:
        print(f"{t}: lines per search moved most (file:function, new - baseline):")
        for k, v in list(moved[t].items())[:12]:
            print(f"  {v:+9.1f}  {k}")
    write_json(
        out / f"search-lines-paired{'-' + tag if tag else ''}.json",
        {"trees": {k: str(v) for k, v in trees.items()}, "rows": rows, "moved": moved},
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Build both trees' indexes, run the paired processes, print the ratios and write JSON."""
    offline_environment()
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.search_cpu_paired", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--baseline", type=Path, required=True, help="source tree of the baseline")
    parser.add_argument("--new", type=Path, default=REPO, help="source tree measured against it (this one)")
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument(
        "--pairs", type=int, default=4, help="pairs of processes (which starts first alternates)"
    )
    parser.add_argument("--queries", type=int, default=30, help="queries of each type")
    parser.add_argument("--reps", type=int, default=5, help="times each query is searched in a process")
    parser.add_argument("--types", default=",".join(TYPES), help="comma-separated query types")
    parser.add_argument(
        "--model", action="store_true", help="embed the query at every search (not remembered)"
    )
    parser.add_argument(
        "--trace-lines",
        action="store_true",
        help="count the Python lines each search runs (exact, whatever the load) instead of timing",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    from benchmarks.speed import ensure_vault, make_queries, vocabulary, word_vectors

    out = args.out.resolve()
    vocab = vocabulary()
    wordvecs = word_vectors(vocab, out).resolve()
    vault = ensure_vault(args.size, out, vocab).resolve()
    trees = {"baseline": args.baseline.resolve(), "new": args.new.resolve()}
    caches = {name: out / f"search-cpu-cache-{name}-{args.size}-{args.tag or 'x'}" for name in trees}
    for name, tree in trees.items():
        build(tree, vault, caches[name], wordvecs)
    # The query sets of benchmarks.speed: its keystroke, full and keystroke_deep sets; lexical reuses keystroke's.
    labels = ("keystroke", "full", "full_rerank", "keystroke_deep")
    pool = make_queries(vocab, len(labels) * 100 + 5)
    sets = {label: pool[5 + i * 100 : 5 + i * 100 + args.queries] for i, label in enumerate(labels)}
    types = [t for t in args.types.split(",") if t]
    plan = {
        "warm": pool[:5],
        "types": types,
        "queries": {t: sets["keystroke" if t == "lexical" else t] for t in types},
        "model": args.model,
    }
    if args.trace_lines:
        return trace_lines(trees, vault, caches, plan, types, out, args.tag)
    clocks = ("process", "thread")
    # times[clock][type][tree][query][pair] = [ms of each repetition]
    times: dict[str, dict[str, dict[str, dict[str, list[list[float]]]]]] = {
        c: {t: {name: {q: [] for q in plan["queries"][t]} for name in trees} for t in types} for c in clocks
    }
    seen: list[
        tuple[str, str, str, Any]
    ] = []  # (tree, type, query, top 10) of each process's first search of a query
    for i in range(args.pairs):
        order = ["baseline", "new"] if i % 2 == 0 else ["new", "baseline"]
        t = time.perf_counter()
        searchers = {name: Searcher(trees[name], vault, caches[name], plan) for name in order}
        for c in clocks:
            for t_ in types:
                for name in trees:
                    for q in plan["queries"][t_]:
                        times[c][t_][name][q].append([])
        try:
            step = 0
            for rep in range(args.reps):
                for kind in types:
                    for q in plan["queries"][kind]:
                        # back to back, the first of the two alternating
                        for name in order if (step + rep) % 2 == 0 else reversed(order):
                            got = searchers[name].search(kind, q, top=rep == 0)
                            for c in clocks:
                                times[c][kind][name][q][-1].append(got[c])
                            if rep == 0:
                                seen.append((name, kind, q, got["top"]))
                        step += 1
        finally:
            for s in searchers.values():
                s.close()
        log(
            f"pair {i + 1} ({order[0]} started first): {time.perf_counter() - t:.0f} s, load {os.getloadavg()[0]:.2f}"
        )
    first = {(kind, q): top for _, kind, q, top in seen}
    same_tops = {t: all(top == first[kind, q] for _, kind, q, top in seen if kind == t) for t in types}
    results = {c: {t: summarise(times[c][t]) for t in types} for c in clocks}
    rows = [
        [
            t,
            c,
            r["baseline_p50_ms"],
            r["new_p50_ms"],
            f"{r['paired_ratio']:.3f} [{r['paired_ci'][0]:.3f}, {r['paired_ci'][1]:.3f}]",
            f"{r['p50_ratio']:.3f} [{r['p50_ci'][0]:.3f}, {r['p50_ci'][1]:.3f}]",
            "yes" if same_tops[t] else "NO",
        ]
        for c in clocks
        for t, r in results[c].items()
    ]
    table = markdown_table(
        [
            "type",
            "CPU clock",
            "baseline p50 ms",
            "new p50 ms",
            "paired ratio [95 %]",
            "ratio of p50 [95 %]",
            "same top 10",
        ],
        rows,
    )
    report = {
        "benchmark": "search_cpu_paired",
        "size": args.size,
        "trees": {k: str(v) for k, v in trees.items()},
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "args": {k: str(v) for k, v in vars(args).items()},
        "results": results,
        "same_tops": same_tops,
        "times": times,
    }
    write_json(out / f"search-cpu-paired-{args.size}{'-' + args.tag if args.tag else ''}.json", report)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
