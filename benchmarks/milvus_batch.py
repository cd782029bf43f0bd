"""Batched BM25 rankings on the Milvus backend: one engine search for every term against one per term, paired.

    nice -n 10 python -m benchmarks.milvus_batch --notes 3750 --terms 4 --out /tmp/milvus-bench

Reuses the vault, the Milvus-side cache and the Milvus Lite database `benchmarks.milvus_scale`
left in OUT (run it first with the same --notes): the index opens warm and writes nothing. Each
query runs twice, in turns: with `bm25_top_many` (every term's BM25 ranking in one engine search)
and asking the engine once per term, as before it. A stand-in term writer gives each query up to
`--terms` terms besides it (the query's words one by one, as an LLM term writer writes 3-5), so
a search has several BM25 rankings per pass. Reports p50/p95 of each arm, the paired median
ratio, engine searches per search and whether both arms gave the same top 10.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.common import log, machine, offline_environment, summary, write_json
from benchmarks.speed import ensure_vault, make_queries, vocabulary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--notes", type=int, default=3750)
    ap.add_argument("--terms", type=int, default=4)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--out", type=Path, default=Path("/tmp/milvus-bench"))
    args = ap.parse_args(argv)
    offline_environment()
    from explorer.config import Settings
    from explorer.engine import make_pipeline
    from explorer.index.milvus import MilvusIndex, MilvusSnapshot
    from explorer.search.core.terms import SearchTerms

    vocab = vocabulary()
    vault = ensure_vault(args.notes, args.out, vocab)
    base = Settings()
    settings = replace(
        base,
        index=replace(
            base.index,
            cache_dir=str(args.out / "cache-milvus"),
            backend="milvus",
            milvus_uri=str(args.out / "engine" / "m.db"),
        ),
    )
    index = MilvusIndex(vault, settings)
    t = time.perf_counter()
    index.open()
    log(f"open {time.perf_counter() - t:.1f} s, {index.stats().shards} shards")
    pipe = make_pipeline(index, settings)

    def words_as_terms(text: str, **_: object) -> SearchTerms:  # stands in for an LLM term writer
        words = text.split()
        return SearchTerms(
            query=text, terms=tuple(words[: args.terms]) if len(words) > 1 else (), source="llm"
        )

    pipe.term_writer = words_as_terms
    batched = MilvusSnapshot.bm25_top_many

    def per_term(self, queries, k, allowed=None):
        return [batched(self, [t], k, allowed)[0] for t in queries]

    queries = make_queries(vocab, args.queries + 3, seed=23)
    for q in queries[:3]:
        pipe.search(q, record=False)
    times: dict[str, list[float]] = {"batched": [], "per_term": []}
    calls = {"batched": 0, "per_term": 0}
    terms, same = [], 0
    for i, q in enumerate(queries[3:]):
        tops = {}
        for name in ("batched", "per_term") if i % 2 == 0 else ("per_term", "batched"):
            if name == "per_term":
                MilvusSnapshot.bm25_top_many = per_term  # type: ignore[method-assign]
            before = index.engine.calls.get("search", 0)
            t = time.perf_counter()
            r = pipe.search(q, record=False)
            times[name].append((time.perf_counter() - t) * 1000)
            MilvusSnapshot.bm25_top_many = batched  # type: ignore[method-assign]
            calls[name] += index.engine.calls.get("search", 0) - before
            pipe._cache.clear()  # noqa: SLF001 - each arm answers afresh
            tops[name] = [x.node_id for x in r.results[:10]]
            if name == "batched":
                terms.append(len(r.search_terms_used))
        same += tops["batched"] == tops["per_term"]
    n = len(times["batched"])
    ratios = sorted(b / a for a, b in zip(times["batched"], times["per_term"], strict=True))
    res = {
        "machine": machine(),
        "notes": args.notes,
        "max_terms_written": args.terms,
        "terms_per_search_mean": round(sum(terms) / max(1, len(terms)), 2),
        "search_ms": {k: summary(v) for k, v in times.items()},
        "per_term_over_batched_median": round(ratios[len(ratios) // 2], 2),
        "engine_searches_per_search": {k: round(v / max(1, n), 1) for k, v in calls.items()},
        "same_top10": f"{same}/{n}",
    }
    log(str({k: v for k, v in res.items() if k != "machine"}))
    write_json(args.out / f"milvus-batch-{args.notes}-t{args.terms}.json", res)
    index.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
