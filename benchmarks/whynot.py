"""What the proving why-not finds and what it costs: for queries on a vault, the notes ranked #11-#50
(just out of a top 10) and some not in the first 50, asked `prove`; how often a change was found
that brings the note into the top 10, by kind, and the time per proof (median, p90).

    python -m benchmarks.whynot [VAULT]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from pathlib import Path

from benchmarks.mcp_answers import QUERIES

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    from explorer.config import load_settings
    from explorer.engine import make_pipeline, open_index
    from explorer.search.explain.whynot import prove

    parser = argparse.ArgumentParser()
    parser.add_argument("vault", nargs="?", type=Path, default=ROOT / "sample_vault")
    parser.add_argument("--per-query", type=int, default=3, help="notes asked per query")
    args = parser.parse_args()
    vault = args.vault.resolve()
    settings = load_settings(vault, {})
    index, _ = open_index(vault, settings)
    index.embed_pending()
    pipeline = make_pipeline(index, settings)
    times: list[float] = []
    held: Counter[str] = Counter()
    stated: Counter[str] = Counter()
    helped = asked = 0
    for q in QUERIES:
        deep = pipeline.search(q, k=50, record=False)
        near = [r.document_path for r in deep.results[10:]][: args.per_query]
        far = sorted(set(index.notes) - {r.document_path for r in deep.results})[:1]
        for path in near + far:
            t = time.perf_counter()
            proof = prove(pipeline, q, path, k=10, make_pipeline=make_pipeline)
            times.append(time.perf_counter() - t)
            asked += 1
            for c in proof.changes:
                stated[c.kind] += 1
                held[c.kind] += c.holds
            helped += any(c.holds for c in proof.changes)
    index.close()
    times.sort()
    print(
        f"{asked} notes asked ({len(QUERIES)} queries) on {vault.name}; a change that reaches the top 10 "
        f"found for {helped} ({helped / asked:.0%})"
    )
    print(
        f"time per proof: median {statistics.median(times):.2f} s, p90 {times[int(0.9 * (len(times) - 1))]:.2f} s"
    )
    print("| change | run | reached the top 10 |")
    print("|---|---|---|")
    for kind in sorted(stated):
        print(f"| {kind} | {stated[kind]} | {held[kind]} |")


if __name__ == "__main__":
    main()
