"""Dense retrieval at 200k shards: keystroke latency of the exact brute-force scan and memory.

Run with ``python -m benchmarks.dense_scale [--shards 200000] [--queries 300]``.

The corpus vectors are stand-ins in the real model's space, as in ``benchmarks.speed``: each
shard's vector is the normalised mean of the all-MiniLM-L6-v2 vectors of 40-160 words drawn
Zipf-like from the speed benchmark's vocabulary. Queries are embedded by the real model. A
"keystroke" is the dense half of a pass-1 search as the pipeline runs it: embed the query, one
top-~600-shard scan at the 0.40 cosine floor, and, when that found semantic matches, a second
(feedback) scan from the query plus the mean of its three best hits, as the pipeline runs them;
the "no floor" column always has matches, so it always runs both scans (the worst case). The
scan is exact, so its recall@100 against exact search is 1 by construction; the table reports
it anyway from a float64 reference on a sample of queries.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import (
    DEFAULT_OUT,
    current_rss_mb,
    log,
    machine,
    markdown_table,
    offline_environment,
    peak_rss_mb,
    summary,
    write_json,
)


def main(argv: Sequence[str] | None = None) -> int:
    """Build the stand-in corpus, time keystrokes, print a table and write JSON."""
    offline_environment()
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.dense_scale", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--shards", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)

    import numpy as np
    from scipy import sparse

    from benchmarks.speed import _WordStream, make_queries, vocabulary, word_vectors
    from explorer.index.local.dense import DenseIndex
    from explorer.index.local.embed import load_embedder

    vocab = vocabulary()
    wv = np.load(word_vectors(vocab, args.out)).astype(np.float32)
    rss0 = current_rss_mb()
    t = time.perf_counter()
    rng = np.random.default_rng(3)
    stream = _WordStream(vocab, 5)
    word_id = {w: i for i, w in enumerate(vocab)}
    dense = DenseIndex()
    chunk = 20_000
    for start in range(0, args.shards, chunk):
        n = min(chunk, args.shards - start)
        lengths = rng.integers(40, 160, size=n)
        words = stream.take(int(lengths.sum()))
        cols = np.fromiter((word_id[w] for w in words), dtype=np.int64, count=len(words))
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        m = sparse.csr_matrix((np.ones(len(cols), dtype=np.float32), cols, indptr), shape=(n, len(vocab)))
        vecs = np.asarray(m @ wv, dtype=np.float32)
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        dense.set_many([f"s{start + i}" for i in range(n)], vecs)
    build_s = time.perf_counter() - t
    del wv
    rss_index = current_rss_mb() - rss0
    log(f"{args.shards} stand-in vectors in {build_s:.1f} s, +{rss_index:.0f} MB")

    emb = load_embedder(None, "onnx")
    queries = make_queries(vocab, args.queries + 10, seed=21)
    for q in queries[:10]:
        emb.encode([q])
    # The pipeline fetches ~2 shards per note of its 100-note depth (`retrievers.base.shard_depth`).
    fetch = 100 * 2 * 3 + 16

    def keystroke(qv: np.ndarray, floor: float) -> int:
        """The dense half of a pass-1 search: the query's scan, then the feedback scan from the
        query plus the mean of its three best hits, which the pipeline runs only when the query
        has semantic matches above the floor."""
        first = dense.search(qv, fetch, threshold=floor)
        top = [dense.vector(k) for k, _ in first[:3]]
        if top:
            fb = qv + np.mean(top, axis=0)
            dense.search(fb / max(float(np.linalg.norm(fb)), 1e-12), fetch, threshold=floor)
        return len(first)

    columns: dict[str, tuple[list[float], list[float]]] = {}
    hits = []
    for label, floor in (("floor", 0.40), ("no_floor", -1.0)):
        lat, scan = [], []
        for q in queries[10:]:
            t0 = time.perf_counter()
            qv = emb.encode([q])[0]
            t1 = time.perf_counter()
            n_hits = keystroke(qv, floor)
            t2 = time.perf_counter()
            lat.append((t2 - t0) * 1000)
            scan.append((t2 - t1) * 1000)
            if label == "floor":
                hits.append(n_hits)
        columns[label] = (lat, scan)
    # Unfloored top-100 scans (the worst case for selection) and recall against float64.
    deep = []
    recall = []
    mat64 = dense._matrix[: len(dense)].astype(np.float64)  # noqa: SLF001 - the reference needs the raw rows
    for q in queries[10:60]:
        qv = emb.encode([q])[0]
        t0 = time.perf_counter()
        got = dense.search(qv, 100)
        deep.append((time.perf_counter() - t0) * 1000)
        ref = np.argsort(-(mat64 @ qv.astype(np.float64)), kind="stable")[:100]
        recall.append(len({k for k, _ in got} & {f"s{i}" for i in ref.tolist()}) / 100)
    del mat64
    res = {
        "benchmark": "dense_scale",
        "shards": args.shards,
        "machine": machine(),
        "build_s": round(build_s, 1),
        "index_rss_mb": round(rss_index, 1),
        "peak_rss_mb": peak_rss_mb(),
        "keystroke_ms": summary(columns["floor"][0]),
        "scans_ms": summary(columns["floor"][1]),
        "keystroke_no_floor_ms": summary(columns["no_floor"][0]),
        "scans_no_floor_ms": summary(columns["no_floor"][1]),
        "unfloored_top100_ms": summary(deep),
        "recall_at_100_vs_float64": round(statistics.fmean(recall), 4),
        "dense_hits_median": statistics.median(hits),
        "feedback_share_at_floor": round(sum(1 for h in hits if h) / len(hits), 3),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    suffix = f"-{args.tag}" if args.tag else ""
    write_json(args.out / f"dense-scale{suffix}.json", res)
    print(
        markdown_table(
            [
                "shards",
                "keystroke ms p50 / p95 (0.40 floor)",
                "its scans ms p50 / p95",
                "keystroke, no floor ms p50 / p95",
                "unfloored top-100 scan ms p50 / p95",
                "recall@100 vs float64",
                "index MB",
                "peak RSS MB",
            ],
            [
                [
                    f"{args.shards:,}",
                    f"{res['keystroke_ms']['median']:.1f} / {res['keystroke_ms']['p95']:.1f}",
                    f"{res['scans_ms']['median']:.1f} / {res['scans_ms']['p95']:.1f}",
                    f"{res['keystroke_no_floor_ms']['median']:.1f} / {res['keystroke_no_floor_ms']['p95']:.1f}",
                    f"{res['unfloored_top100_ms']['median']:.1f} / {res['unfloored_top100_ms']['p95']:.1f}",
                    res["recall_at_100_vs_float64"],
                    res["index_rss_mb"],
                    res["peak_rss_mb"],
                ]
            ],
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
