"""Warm restart, paired: this tree against a baseline source tree, alternating on the same vault.

Run with ``python -m benchmarks.restart_paired --baseline DIR --vault V [--runs 5] [--build]``.

``--build`` first indexes the vault with each tree into its own cache folder
(``bench-out/restart-cache-<tree>-<notes>``) and gives every shard a stand-in vector as
``benchmarks.speed`` does. Each run then starts a fresh process per tree, alternating which goes
first: import, open the stored index (refresh included, and where the tree can, the model loading
meanwhile), answer one lexical query (`searchable_s`: the restart until a search answers), then one
hybrid query (`wall_s`: the restart until a hybrid search answers). The machine is
shared, so the figures that matter are the medians and the per-pair ratios (new / baseline) of
runs made back to back. Memory is reported as peak RSS and, at the end of the run, anonymous
(process-private) and file-backed (memory-mapped, shared with the page cache) resident sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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

CHILD = r"""
import json, os, resource, sys, time
t0 = time.time()
from explorer.config import load_settings
try:
    from explorer.engine import make_pipeline, open_index
except ImportError:
    from explorer.cli import make_pipeline, open_index
from pathlib import Path
vault, cache, query = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
settings = load_settings(vault, {"index.cache_dir": cache} if cache else {})
t1 = time.time()
try:
    out = open_index(vault, settings, load_model=True)  # the model loads while the index opens
except TypeError:  # a tree without that: the model loads at the first hybrid query
    out = open_index(vault, settings)
index = out[0]
t2 = time.time()
pipeline = make_pipeline(index, settings)
pipeline.search(query, dense=False, two_pass=False, rerank=False)
t_lex = time.time()
res = pipeline.search(query, two_pass=False, rerank=False)
t3 = time.time()
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
kb = lambda k: int(status.get(k, "0 kB").split()[0]) / 1024
st = index.stats()
print(json.dumps({"wall_s": round(t3 - t0, 3), "import_s": round(t1 - t0, 3), "open_s": round(t2 - t1, 3),
                  "searchable_s": round(t_lex - t0, 3),
                  "query_s": round(t3 - t_lex, 3), "dense": bool(res.mode["dense"] if isinstance(res.mode, dict) else res.mode.dense), "pending": st.pending,
                  "notes": st.notes, "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                  "rss_anon_mb": round(kb("RssAnon"), 1), "rss_file_mb": round(kb("RssFile"), 1)}))
"""

BUILD = r"""
import sys, time
from pathlib import Path
from explorer.config import load_settings
from explorer.index.local.vault_index import VaultIndex
sys.path.insert(0, sys.argv[4])
from benchmarks.speed import install_standin_vectors, vocabulary
vault, cache, wordvecs = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
t = time.time()
index = VaultIndex(vault, load_settings(vault, {"index.cache_dir": cache}))
index.open()
lex = time.time() - t
install_standin_vectors(index, wordvecs, vocabulary())
index.close()
print(f"indexed in {lex:.1f} s, vectors {time.time() - t - lex:.1f} s")
"""


def _run(src: Path, code: str, args: list[str], timeout: float) -> tuple[str, str, int]:
    env = dict(os.environ, PYTHONPATH=str(src))
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=src
    )
    return proc.stdout, proc.stderr, proc.returncode


def main(argv: Sequence[str] | None = None) -> int:
    """Build (optionally), then alternate warm restarts of both trees; print a table, write JSON."""
    offline_environment()
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.restart_paired", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        required=True,
        help="source tree of the baseline (e.g. a git archive of main)",
    )
    parser.add_argument("--vault", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--build", action="store_true")
    parser.add_argument(
        "--shared-index",
        action="store_true",
        help="both trees open the vault's own index folder (trees with the same store schema)",
    )
    parser.add_argument(
        "--baseline-cache",
        type=Path,
        default=None,
        help="the baseline opens this index folder, the new tree the vault's own (trees of different store schemas)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    from benchmarks.speed import make_queries, vocabulary, word_vectors

    vault = args.vault.resolve()
    notes = sum(1 for _ in vault.rglob("*.md"))
    trees = {"baseline": args.baseline.resolve(), "new": REPO}
    caches = {
        name: "" if args.shared_index else str(args.out.resolve() / f"restart-cache-{name}-{notes}")
        for name in trees
    }
    if args.baseline_cache is not None:
        caches = {"baseline": str(args.baseline_cache.resolve()), "new": ""}
    if args.build:
        wordvecs = word_vectors(vocabulary(), args.out)
        for name, src in trees.items():
            t = time.perf_counter()
            out, err, code = _run(
                src, BUILD, [str(vault), caches[name], str(wordvecs.resolve()), str(REPO)], 7200
            )
            log(f"built {name}: {out.strip() or err[-500:]} ({time.perf_counter() - t:.0f} s)")
            if code:
                return 1
    queries = make_queries(vocabulary(), args.runs + 1, seed=5)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for i in range(args.runs + 1):
        order = list(trees) if i % 2 == 0 else list(reversed(trees))
        for name in order:
            out, err, code = _run(trees[name], CHILD, [str(vault), caches[name], queries[i]], 1200)
            if code:
                log(f"{name} failed: {err[-800:]}")
                return 1
            data = json.loads(out.strip().splitlines()[-1])
            data["load"] = round(os.getloadavg()[0], 2)
            if i:  # the first round warms the page cache
                runs[name].append(data)
        log(f"round {i}: " + ", ".join(f"{n} {runs[n][-1]['wall_s'] if i else '-'} s" for n in trees))
    ratios = {
        k: [n[k] / b[k] for b, n in zip(runs["baseline"], runs["new"]) if b[k]]
        for k in ("wall_s", "searchable_s", "open_s", "peak_rss_mb")
    }
    report = {
        "benchmark": "restart_paired",
        "vault": str(vault),
        "notes": notes,
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "runs": runs,
        "median": {
            name: {
                k: statistics.median([r[k] for r in rs])
                for k in (
                    "wall_s",
                    "searchable_s",
                    "import_s",
                    "open_s",
                    "query_s",
                    "peak_rss_mb",
                    "rss_anon_mb",
                    "rss_file_mb",
                )
            }
            for name, rs in runs.items()
        },
        "paired_ratio_median": {k: round(statistics.median(v), 3) for k, v in ratios.items()},
        "wall_s": {name: summary([r["wall_s"] for r in rs]) for name, rs in runs.items()},
    }
    suffix = f"-{args.tag}" if args.tag else ""
    write_json(args.out / f"restart-paired-{notes}{suffix}.json", report)
    m = report["median"]
    print(
        markdown_table(
            [
                "notes",
                "tree",
                "restart to hybrid s (median)",
                "to searchable s",
                "open s",
                "hybrid query s",
                "peak RSS MB",
                "anon RSS MB",
                "mapped file RSS MB",
            ],
            [
                [
                    f"{notes:,}",
                    name,
                    m[name]["wall_s"],
                    m[name]["searchable_s"],
                    m[name]["open_s"],
                    m[name]["query_s"],
                    m[name]["peak_rss_mb"],
                    m[name]["rss_anon_mb"],
                    m[name]["rss_file_mb"],
                ]
                for name in trees
            ],
        )
    )
    print(f"paired ratios new/baseline (median of {args.runs}): {report['paired_ratio_median']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
