"""The Milvus backend next to the local one on one synthetic vault: ingest rate and search latency, paired.

    nice -n 10 python -m benchmarks.milvus_scale --notes 3000 --out /tmp/milvus-bench

One generated vault (benchmarks.speed's generator) is indexed twice: by the local backend and by
the Milvus backend on Milvus Lite in process (a `.db` path), which parses as the local one and
then writes every row with its vector in one `sync` (as an open with a warm vector cache does;
a cold open writes rows without vectors first and again as vectors arrive). Both get the same stand-in vectors
(tf-idf weighted means of real-model word vectors, as benchmarks.speed does: embedding 12k shards
with the model would take ~10 min and measures the model, not the backend). Ingest: the rows
written by `MilvusIndex.sync` (every shard with its vector, then a flush) per second. Searches:
the full pipeline (real query embedding, both passes), three arms taking turns query by query:
local, Milvus, and Milvus asked once per term (the BM25 rankings before `bm25_top_many` batched
them); p50/p95 of each, the paired median ratios, engine searches per search, and how many of the
top 10 node_ids local and Milvus share.
"""

from __future__ import annotations

import argparse
import shutil
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.common import log, machine, offline_environment, summary, write_json
from benchmarks.speed import ensure_vault, install_standin_vectors, make_queries, vocabulary, word_vectors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--notes", type=int, default=3000)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--out", type=Path, default=Path("/tmp/milvus-bench"))
    ap.add_argument(
        "--shared-cache",
        action="store_true",
        help="open the Milvus side on a copy of the local cache (no second parse; for large vaults)",
    )
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="keep the caches and the engine of an earlier run with the same --out (searches again; sync writes nothing)",
    )
    args = ap.parse_args(argv)
    offline_environment()
    from explorer.config import Settings
    from explorer.engine import make_pipeline
    from explorer.index.milvus import MilvusIndex
    from explorer.index.vault_index import VaultIndex

    args.out.mkdir(parents=True, exist_ok=True)
    vocab = vocabulary()
    vault = ensure_vault(args.notes, args.out, vocab)
    wv = word_vectors(vocab, args.out)
    base = Settings()
    res: dict = {"machine": machine(), "notes": args.notes}

    reuse = args.reuse and all((args.out / d).exists() for d in ("cache-local", "cache-milvus", "engine"))
    for d in () if reuse else ("cache-local", "cache-milvus", "engine"):
        shutil.rmtree(args.out / d, ignore_errors=True)
    local = VaultIndex(
        vault, replace(base, index=replace(base.index, cache_dir=str(args.out / "cache-local")))
    )
    t = time.perf_counter()
    local.open()
    res["local_open_s"] = round(time.perf_counter() - t, 2)
    install_standin_vectors(local, wv, vocab)
    res["shards"] = local.stats().shards
    if (
        args.shared_cache and not reuse
    ):  # the Milvus side opens on a copy of this cache: parsed notes and vectors
        local.close()
        shutil.copytree(args.out / "cache-local", args.out / "cache-milvus")
        local = VaultIndex(
            vault, replace(base, index=replace(base.index, cache_dir=str(args.out / "cache-local")))
        )
        t = time.perf_counter()
        local.open()
        res["local_warm_open_s"] = round(time.perf_counter() - t, 2)

    ms = replace(
        base,
        index=replace(
            base.index,
            cache_dir=str(args.out / "cache-milvus"),
            backend="milvus",
            milvus_uri=str(args.out / "engine" / "m.db"),
        ),
    )
    remote = MilvusIndex(vault, ms)
    t = time.perf_counter()
    VaultIndex.open(remote)  # parse and index as the local backend does; the engine is written below
    res["milvus_parse_s"] = round(time.perf_counter() - t, 2)
    if not args.shared_cache:
        install_standin_vectors(remote, wv, vocab)  # as a warm vector cache would give them at open
    sample = list(remote.shards.values())[:2000]
    t = time.perf_counter()
    for s in sample:
        remote._row(s)  # noqa: SLF001 - the row building alone, timed
    res["row_build_ms"] = round((time.perf_counter() - t) * 1000 / max(1, len(sample)), 3)
    remote._opened = True  # noqa: SLF001 - opened by VaultIndex.open above, synced here
    t = time.perf_counter()
    rows = remote.sync()  # every shard with its vector: inserted in batches, then one flush
    dt = time.perf_counter() - t
    res["ingest"] = {"rows": rows, "s": round(dt, 2), "rows_per_s": round(rows / dt, 1)}
    log(f"ingest {rows} rows in {dt:.1f} s ({res['row_build_ms']} ms per row built)")

    pl, pm = make_pipeline(local, local.settings), make_pipeline(remote, remote.settings)
    queries = make_queries(vocab, args.queries + 5)
    for q in queries[:5]:
        pl.search(q, record=False)
        pm.search(q, record=False)
    from explorer.index.milvus import MilvusSnapshot

    batched = MilvusSnapshot.bm25_top_many

    def per_term(self, queries, k, allowed=None):  # the engine asked once per term (before batching)
        return [batched(self, [t], k, allowed)[0] for t in queries]

    tl, tm, tp, agree = [], [], [], []
    calls = {"batched": 0, "per_term": 0}
    for i, q in enumerate(queries[5:]):
        arms = [("local", pl, tl), ("batched", pm, tm), ("per_term", pm, tp)]
        order = arms[i % 3 :] + arms[: i % 3]
        got = {}
        for name, pipe, times in order:
            if name == "per_term":
                MilvusSnapshot.bm25_top_many = per_term  # type: ignore[method-assign]
            before = remote.engine.calls.get("search", 0)
            t = time.perf_counter()
            r = pipe.search(q, record=False)
            times.append((time.perf_counter() - t) * 1000)
            MilvusSnapshot.bm25_top_many = batched  # type: ignore[method-assign]
            if name in calls:
                calls[name] += remote.engine.calls.get("search", 0) - before
            pipe._cache.clear()  # noqa: SLF001 - the arms share the Milvus pipeline: no cached answers
            got[name] = [x.node_id for x in r.results[:10]]
        got[id(pl)], got[id(pm)] = got["local"], got["batched"]
        a, b = got[id(pl)], got[id(pm)]
        agree.append(len(set(a) & set(b)) / max(1, len(a)))
    res["search_ms"] = {"local": summary(tl), "milvus": summary(tm), "milvus_per_term": summary(tp)}

    def paired(a: list[float], b: list[float]) -> float:
        ratios = sorted(y / max(x, 1e-9) for x, y in zip(a, b, strict=True))
        return round(ratios[len(ratios) // 2], 2)

    res["milvus_over_local_median"] = paired(tl, tm)
    res["per_term_over_batched_median"] = paired(tm, tp)
    res["engine_searches_per_search"] = {k: round(v / max(1, len(tm)), 1) for k, v in calls.items()}
    res["top10_agreement"] = round(sum(agree) / len(agree), 3)
    log(
        f"local {res['search_ms']['local']} / milvus {res['search_ms']['milvus']}; paired ratio "
        f"{res['milvus_over_local_median']}; engine searches per search {res['engine_searches_per_search']}; "
        f"agreement {res['top10_agreement']}"
    )
    write_json(args.out / f"milvus-scale-{args.notes}.json", res)
    local.close()
    remote.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
