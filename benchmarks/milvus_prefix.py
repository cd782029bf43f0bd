"""How much of a BM25 engine answer a search needs: could a smaller first BM25 fetch settle the ranking?

    nice -n 10 python -m benchmarks.milvus_prefix --out /tmp/milvus-bench --notes 3750 --queries 60

On the vault and engine of a `benchmarks.milvus_scale` run (same `--out`, `--notes`): for each
generated query, the engine's BM25 answer at the search's depth (`retrievers.base.shard_depth` of the
candidate notes), in the engine's order, is rescored with Explorer's BM25 as the search does; the
ranking the search keeps is that order cut after the shards of its first `candidates` notes. The
figure is the deepest engine rank among the kept shards: the smallest first fetch that would have
held the whole kept ranking, as a share of the depth. A first fetch can only be taken as settled
when that share is small and provably so; the engine orders by its own statistics (per segment,
its own idf formula), so the share is measured here rather than bounded.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace
from pathlib import Path

from benchmarks.common import log, machine, offline_environment, write_json
from benchmarks.speed import make_queries, vocabulary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("/tmp/milvus-bench"))
    ap.add_argument("--notes", type=int, default=3750)
    ap.add_argument("--queries", type=int, default=60)
    args = ap.parse_args(argv)
    offline_environment()
    from explorer.config import Settings
    from explorer.index.milvus import MilvusIndex
    from explorer.index.milvus.engine import BM25_PARAMS, MAX_LIMIT, engine_terms
    from explorer.text.tokenize import tokenize

    base = Settings()
    ms = replace(
        base,
        index=replace(
            base.index,
            cache_dir=str(args.out / "cache-milvus"),
            backend="milvus",
            milvus_uri=str(args.out / "engine" / "m.db"),
        ),
    )
    ix = MilvusIndex(args.out / f"speed-vault-{args.notes}", ms)
    ix.open()
    snap = ix.snapshot()
    notes = base.experimental.candidates
    per_note = len(snap.shards) / max(1, len(snap.notes))
    depth = max(notes, int(notes * per_note * 2) + 16)
    shares, full = [], 0
    for q in make_queries(vocabulary(), args.queries):
        toks = tokenize(q)
        if not toks:
            continue
        rows = ix.engine.call(
            "search",
            lambda c, toks=toks: c.search(
                ix.engine.collection,
                data=[engine_terms(toks)],
                anns_field="sparse",
                limit=min(depth, MAX_LIMIT),
                filter=f'vault == "{ix.vault_name}"',
                search_params=BM25_PARAMS,
                output_fields=["node_id", "content_hash"],
            ),
        )[0]
        ids = [r["entity"]["node_id"] for r in rows]
        rank = {n: i for i, n in enumerate(ids)}
        scores = snap.bm25_scores(toks, ids)
        order = sorted(ids, key=lambda n: (-scores.get(n, 0.0), n))
        seen: set[str] = set()
        kept = []
        for n in order:
            path = snap.shards[n].path
            if path not in seen and len(seen) == notes:
                break
            seen.add(path)
            kept.append(n)
        if len(ids) < depth:
            full += 1  # all the matches fit in the depth: nothing to cut
        shares.append(max(rank[n] for n in kept) + 1)
    ix.close()
    res = {
        "machine": machine(),
        "depth": depth,
        "queries": len(shares),
        "answers_below_depth": full,
        "needed_prefix_rows": {
            "median": statistics.median(shares),
            "p90": sorted(shares)[int(0.9 * (len(shares) - 1))],
            "max": max(shares),
        },
        "needed_share_of_depth_median": round(statistics.median(shares) / depth, 3),
    }
    log(str(res))
    write_json(args.out / f"milvus-prefix-{args.notes}.json", res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
