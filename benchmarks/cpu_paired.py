"""Search CPU time, paired: the pipeline of this tree against a baseline source tree, in alternating processes.

Run with ``python -m benchmarks.cpu_paired --baseline DIR [--vault DIR] [--pairs 4] [--dense]``.

On a shared machine wall times of one search swing by 2x between runs; the CPU time of the
searching thread (`time.thread_time`) moves far less, so it shows a per-search overhead of a few
percent that `benchmarks.speed_paired` cannot. Each process opens a copy of the vault (default
sample_vault), and answers the same queries 15 times with the result cache cleared; the figure
is the median CPU ms per search. The trees alternate; read the ratio of each pair.
The model's own threads (ONNX) are not counted: `--dense` measures everything around them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import REPO, log, machine

QUERIES = [
    "hamster cage size",
    "great wall history",
    "sourdough starter feeding",
    "carbon dating of fossils",
    "how big should a syrian hamster cage be",
    "capital of australia",
    "python decorators",
    "tea brewing temperature",
    "bicycle chain maintenance",
    "roman roads",
    "kimchi",
    "meditation breathing",
]

CHILD = r"""
import json, statistics, sys, time
from pathlib import Path
from explorer.config import Settings
from explorer.engine import make_pipeline, open_index
dense = sys.argv[2] == "1"
s = Settings().with_overrides({"index.embeddings": dense, "rerank.enabled": False})
index, _ = open_index(Path(sys.argv[1]), s, on_message=lambda m: None)
if dense:
    index.embed_pending()
p = make_pipeline(index, s)
queries = json.loads(sys.argv[3])
times = []
for _ in range(15):
    p.clear_cache()  # measure searches, not cache hits
    for q in queries:
        t = time.thread_time()
        p.search(q, record=False)
        times.append((time.thread_time() - t) * 1000)
index.close()
print(json.dumps({"median_cpu_ms": statistics.median(times), "mean_cpu_ms": statistics.fmean(times)}))
"""


def _run(tree: Path, vault: Path, dense: bool) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(vault), "1" if dense else "0", json.dumps(QUERIES)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=True,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["median_cpu_ms"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cpu_paired", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--baseline", type=Path, required=True, help="source tree of the baseline (e.g. a git archive)"
    )
    parser.add_argument("--vault", type=Path, default=REPO / "sample_vault")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument(
        "--dense", action="store_true", help="hybrid search (the model embeds the vault once)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="explorer-cpu-") as tmp:
        vault = Path(tmp) / "vault"
        shutil.copytree(args.vault, vault, ignore=shutil.ignore_patterns(".explorer"))
        pairs = []
        for i in range(args.pairs):
            order = ("baseline", "new") if i % 2 == 0 else ("new", "baseline")
            got = {
                name: _run(args.baseline if name == "baseline" else REPO, vault, args.dense) for name in order
            }
            pairs.append(got)
            log(
                f"pair {i + 1}: baseline {got['baseline']:.3f} ms, new {got['new']:.3f} ms, "
                f"ratio {got['new'] / got['baseline']:.3f}"
            )
    ratios = [p["new"] / p["baseline"] for p in pairs]
    log(
        json.dumps(
            {
                "dense": args.dense,
                "pairs": pairs,
                "median_ratio": round(statistics.median(ratios), 3),
                "load_average": machine().get("load_average"),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
