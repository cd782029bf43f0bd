"""Where a search's CPU goes, per stage and per query, in this tree and a baseline tree, alternating.

Run with ``nice -n 10 python -m benchmarks.speed_stages --baseline DIR [--size 10000] [--rounds 2]``.

Each tree gets its own copy of the ``benchmarks.speed`` vault, indexed once by that tree (not
timed). A round then runs, for each tree in turn (the order alternates from round to round), one
process of that tree (``PYTHONPATH`` set to it, its own ``benchmarks.speed`` for the stand-in
vectors) that opens the stored index as a restarted app or CLI does, and answers the same
``--queries`` word queries (the speed benchmark's own, ``benchmarks.speed.make_queries``) in two
ways: ``full`` (the default pipeline) and ``keystroke`` (pass 1, no rerank). Each query runs
``--repeats`` times with the result cache cleared; the figure is the CPU time of the searching
thread (``time.thread_time``), and beside it the wall time: the first run of each query (nothing
of it cached: the speed benchmark's case) and the least of the runs (what is left once the notes
it shows are read). A cProfile of as many other queries, each run once (timer: thread CPU),
gives the stages of a first search.

What to read: the per-query ratios this tree / baseline of one round (each query against itself),
their median, and the stage table (CPU ms per search under the profiler, whose overhead inflates
every figure about 2.5x but both trees alike). Stages are matched by function name, so the table
reads the baseline's names where a stage had another.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import DEFAULT_OUT, REPO, log, machine, markdown_table, offline_environment, write_json

#: One tree's measurement: argv = vault, word vectors, out prefix, queries, repeats, prime-only.
CHILD = r"""
import cProfile, json, os, statistics, sys, time
from pathlib import Path
import benchmarks.speed as speed
from explorer.config import load_settings
from explorer.index.vault_index import VaultIndex
try:
    from explorer.engine import make_pipeline
except ImportError:  # trees before the engine package
    from explorer.cli import make_pipeline

vault, wordvecs, out = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
n, repeats, prime = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1"
settings = load_settings(vault)
ix = VaultIndex(vault, settings)
ix.open()
if prime:
    ix.close()
    sys.exit(0)
vocab = speed.vocabulary()
speed.install_standin_vectors(ix, wordvecs, vocab)
ix.embedder()
p = make_pipeline(ix, settings)
queries = speed.make_queries(vocab, 5 + 4 * n)
for q in queries[:5]:
    p.search(q)
# Timed queries (each run `repeats` times) and fresh ones for the profile, apart per kind of search.
timed = {"full": queries[5 : 5 + n], "keystroke": queries[5 + n : 5 + 2 * n]}
fresh = {"full": queries[5 + 2 * n : 5 + 3 * n], "keystroke": queries[5 + 3 * n :]}

def clear():
    if hasattr(p, "clear_cache"):
        p.clear_cache()
    else:
        p._cache.clear()

res = {"load": list(os.getloadavg())}
for kind, kw in (("full", {}), ("keystroke", {"two_pass": False, "rerank": False})):
    cpu = {q: [] for q in timed[kind]}
    wall = {q: [] for q in timed[kind]}
    for _ in range(repeats):
        for q in timed[kind]:
            clear()
            w = time.perf_counter()
            c = time.thread_time()
            p.search(q, **kw)
            cpu[q].append((time.thread_time() - c) * 1000)
            wall[q].append((time.perf_counter() - w) * 1000)
    prof = cProfile.Profile(time.thread_time)
    prof.enable()
    for q in fresh[kind]:
        clear()
        p.search(q, **kw)
    prof.disable()
    prof.dump_stats(f"{out}.{kind}.prof")
    res[kind] = {
        "first": {q: v[0] for q, v in cpu.items()},
        "least": {q: min(v) for q, v in cpu.items()},
        "wall_first": {q: v[0] for q, v in wall.items()},
        "wall_least": {q: min(v) for q, v in wall.items()},
    }
res["load_end"] = list(os.getloadavg())
Path(f"{out}.json").write_text(json.dumps(res))
ix.close()
"""

#: (stage, [(file suffix, function name), ...]): the names of both trees; inclusive CPU per search.
STAGES: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "whole search",
        (
            ("search/pipeline.py", "search"),
            ("search/core/pipeline.py", "search"),
        ),
    ),
    (
        "terms",
        (
            ("search/pipeline.py", "_write_terms"),
            ("search/core/pipeline.py", "_write_terms"),
        ),
    ),
    (
        "query vectors (model)",
        (
            ("index/embed.py", "encode"),
            ("embed/runtimes.py", "encode"),
        ),
    ),
    ("BM25 top-k", (("index/lexical.py", "top"),)),
    ("dense scan", (("index/dense.py", "search_many"),)),
    (
        "depth in notes",
        (
            ("search/pipeline.py", "_note_depth"),
            ("search/retrieve.py", "_note_depth"),
            ("search/core/retrievers/base.py", "note_depth"),
        ),
    ),
    (
        "dense feedback",
        (
            ("search/pipeline.py", "_feedback"),
            ("search/retrieve.py", "_feedback"),
            ("search/core/retrievers/feedback.py", "rank"),
        ),
    ),
    (
        "name ranking",
        (
            ("search/retrieve.py", "_name_ranking"),
            ("search/core/retrievers/name.py", "rank"),
        ),
    ),
    (
        "typo corrections",
        (
            ("search/retrieve.py", "corrections"),
            ("search/core/retrieve.py", "corrections"),
        ),
    ),
    ("fusion (rrf)", (("search/fusion.py", "rrf"),)),
    (
        "notes from shards",
        (
            ("search/pipeline.py", "_entries"),
            ("search/fusion.py", "aggregate"),
        ),
    ),
    (
        "result records",
        (
            ("search/pipeline.py", "_result"),
            ("search/results.py", "_result"),
            ("search/results.py", "judged"),
            ("search/core/results.py", "_result"),
            ("search/core/results.py", "judged"),
        ),
    ),
    (
        "  relevance",
        (
            ("search/pipeline.py", "_relevance"),
            ("search/results.py", "_relevance"),
            ("search/core/results.py", "_relevance"),
        ),
    ),
    (
        "  passages + highlights",
        (
            ("search/pipeline.py", "make_context_shard"),
            ("search/results.py", "make_context_shard"),
            ("search/core/results.py", "make_context_shard"),
        ),
    ),
    ("  note texts read (prefetch)", (("index/snapshot.py", "prefetch"),)),
    (
        "analysis (two-pass)",
        (
            ("search/pipeline.py", "_analyse"),
            ("search/twopass.py", "analyse"),
            ("search/core/twopass.py", "analyse"),
        ),
    ),
    ("quality", (("search/quality.py", "assess"),)),
    (
        "history + advice",
        (
            ("search/pipeline.py", "_record"),
            ("search/core/pipeline.py", "_record"),
        ),
    ),
)


def stage_table(base_prof: Path, new_prof: Path, n: int) -> list[list[Any]]:
    """Rows (stage, calls and ms per search of each tree, difference) from two cProfile dumps."""

    def load(path: Path) -> dict[tuple[str, str], tuple[int, float]]:
        out: dict[tuple[str, str], tuple[int, float]] = {}
        for (file, _line, fn), (_cc, nc, _tt, ct, _callers) in pstats.Stats(str(path)).stats.items():  # type: ignore[attr-defined]
            calls, cum = out.get((file, fn), (0, 0.0))
            out[(file, fn)] = (calls + nc, cum + ct)
        return out

    def get(
        d: dict[tuple[str, str], tuple[int, float]], pats: Sequence[tuple[str, str]]
    ) -> tuple[int, float]:
        calls = cum = 0.0
        for (file, fn), (nc, ct) in d.items():
            if any(fn == f and file.endswith(suffix) for suffix, f in pats):
                calls += nc
                cum += ct
        return int(calls), cum

    b, nw = load(base_prof), load(new_prof)
    rows = []
    for label, pats in STAGES:
        cb, tb = get(b, pats)
        cn, tn = get(nw, pats)
        rows.append(
            [label, cb, round(tb / n * 1000, 2), cn, round(tn / n * 1000, 2), round((tn - tb) / n * 1000, 2)]
        )
    return rows


def run_child(
    src: Path, vault: Path, wordvecs: Path, prefix: Path, n: int, repeats: int, prime: bool
) -> None:
    cmd = [sys.executable, "-c", CHILD, str(vault), str(wordvecs), str(prefix), str(n), str(repeats)]
    proc = subprocess.run(
        [*cmd, "1" if prime else "0"],
        cwd=src,
        env=dict(os.environ, PYTHONPATH=str(src)),
        capture_output=True,
        text=True,
        timeout=7200,
    )
    if proc.returncode:
        raise RuntimeError(f"{src}: exit {proc.returncode}: {proc.stderr[-1500:]}")


def main(argv: Sequence[str] | None = None) -> int:
    """Prime both trees' indexes, run the alternating rounds, print the ratios and the stage table."""
    offline_environment()
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.speed_stages", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--baseline", type=Path, required=True, help="source tree of the baseline")
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=80)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--first", choices=("baseline", "new"), default="baseline")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    from benchmarks.speed import ensure_vault, vocabulary, word_vectors

    out = args.out.resolve()
    vocab = vocabulary()
    wordvecs = word_vectors(vocab, out).resolve()
    source = ensure_vault(args.size, out, vocab)
    trees = {"baseline": args.baseline.resolve(), "new": REPO}
    vaults: dict[str, Path] = {}
    for name, src in trees.items():
        vault = out / f"speed-stages-{name}-{args.size}" / source.name
        if not (vault / ".bench-manifest.json").is_file():
            shutil.rmtree(vault.parent, ignore_errors=True)
            vault.parent.mkdir(parents=True)
            shutil.copytree(source, vault, ignore=shutil.ignore_patterns(".explorer"))
        vaults[name] = vault
        log(f"{name}: indexing its copy (not timed)")
        run_child(src, vault, wordvecs, out / "unused", args.queries, 1, prime=True)
    order = ["baseline", "new"] if args.first == "baseline" else ["new", "baseline"]
    rounds: list[dict[str, Any]] = []
    for r in range(args.rounds):
        got: dict[str, Any] = {}
        for name in order if r % 2 == 0 else list(reversed(order)):
            prefix = out / f"speed-stages-{args.size}{args.tag}-r{r + 1}-{name}"
            t = time.perf_counter()
            run_child(trees[name], vaults[name], wordvecs, prefix, args.queries, args.repeats, prime=False)
            got[name] = json.loads(Path(f"{prefix}.json").read_text(encoding="utf-8"))
            got[name]["prefix"] = str(prefix)
            log(f"round {r + 1} {name}: {time.perf_counter() - t:.0f} s, load {os.getloadavg()[0]:.1f}")
        rounds.append(got)
    report: dict[str, Any] = {
        "machine": machine(),
        "args": {k: str(v) for k, v in vars(args).items()},
        "rounds": [],
    }
    rows = []
    for r, got in enumerate(rounds, 1):
        base, new = got["baseline"], got["new"]
        entry: dict[str, Any] = {"load": [base["load"], new["load"], base["load_end"], new["load_end"]]}
        for kind in ("full", "keystroke"):
            for which in ("first", "least", "wall_first", "wall_least"):
                if which not in base[kind] or which not in new[kind]:
                    continue
                b, nw = base[kind][which], new[kind][which]
                ratio = statistics.median(nw[q] / b[q] for q in b if b[q] > 0)
                mb, mn = statistics.median(b.values()), statistics.median(nw.values())
                entry[f"{kind}_{which}"] = {"baseline_ms": mb, "new_ms": mn, "per_query_ratio": ratio}
                rows.append([r, kind, which, round(mb, 2), round(mn, 2), round(ratio, 3)])
        for kind in ("full", "keystroke"):
            entry[f"stages_{kind}"] = stage_table(
                Path(f"{base['prefix']}.{kind}.prof"), Path(f"{new['prefix']}.{kind}.prof"), args.queries
            )
        report["rounds"].append(entry)
    print(
        markdown_table(
            [
                "round",
                "search",
                "run (CPU, or wall)",
                "baseline ms (median)",
                "this tree",
                "per-query ratio (median)",
            ],
            rows,
        )
    )
    last = report["rounds"][-1]
    for kind in ("full", "keystroke"):
        print(f"\nstages, {kind}, last round (CPU ms per search under cProfile):\n")
        print(
            markdown_table(
                ["stage", "baseline calls", "baseline ms", "this tree calls", "this tree ms", "difference"],
                last[f"stages_{kind}"],
            )
        )
    write_json(out / f"speed-stages-{args.size}{args.tag}.json", report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
