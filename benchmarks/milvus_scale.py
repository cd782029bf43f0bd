"""The Milvus backend next to the local one on one synthetic vault: ingest rate and search latency, paired.

    nice -n 10 python -m benchmarks.milvus_scale --notes 3000 --out /tmp/milvus-bench

One generated vault (benchmarks.speed's generator) is indexed twice: by the local backend and by
the Milvus backend on Milvus Lite in process (a `.db` path). Both get the same stand-in vectors
(tf-idf weighted means of real-model word vectors, as benchmarks.speed does: embedding 12k shards
with the model would take ~10 min and measures the model, not the backend). Ingest: the rows
written by `MilvusIndex.sync` (every shard with its vector, then a flush) per second. Searches:
the full pipeline (real query embedding, both passes), local and Milvus alternating query by
query, p50/p95 of each, and how many of the top 10 node_ids agree.
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

    for d in ("cache-local", "cache-milvus", "engine"):
        shutil.rmtree(args.out / d, ignore_errors=True)
    local = VaultIndex(
        vault, replace(base, index=replace(base.index, cache_dir=str(args.out / "cache-local")))
    )
    t = time.perf_counter()
    local.open()
    res["local_open_s"] = round(time.perf_counter() - t, 2)
    install_standin_vectors(local, wv, vocab)
    res["shards"] = local.stats().shards

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
    remote.open()  # parses, then writes every shard (no vectors yet) and flushes
    res["milvus_open_s"] = round(time.perf_counter() - t, 2)
    install_standin_vectors(remote, wv, vocab)
    t = time.perf_counter()
    rows = remote.sync()  # every shard again, now with its vector
    dt = time.perf_counter() - t
    res["ingest"] = {"rows": rows, "s": round(dt, 2), "rows_per_s": round(rows / dt, 1)}
    log(f"ingest {rows} rows in {dt:.1f} s")

    pl, pm = make_pipeline(local, local.settings), make_pipeline(remote, remote.settings)
    queries = make_queries(vocab, args.queries + 5)
    for q in queries[:5]:
        pl.search(q, record=False)
        pm.search(q, record=False)
    tl, tm, agree = [], [], []
    for i, q in enumerate(queries[5:]):
        order = ((pl, tl), (pm, tm)) if i % 2 == 0 else ((pm, tm), (pl, tl))
        got = {}
        for pipe, times in order:
            t = time.perf_counter()
            r = pipe.search(q, record=False)
            times.append((time.perf_counter() - t) * 1000)
            got[id(pipe)] = [x.node_id for x in r.results[:10]]
        a, b = got[id(pl)], got[id(pm)]
        agree.append(len(set(a) & set(b)) / max(1, len(a)))
    res["search_ms"] = {"local": summary(tl), "milvus": summary(tm)}
    res["top10_agreement"] = round(sum(agree) / len(agree), 3)
    log(
        f"local p50 {res['search_ms']['local']} / milvus {res['search_ms']['milvus']}; agreement {res['top10_agreement']}"
    )
    write_json(args.out / f"milvus-scale-{args.notes}.json", res)
    local.close()
    remote.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
