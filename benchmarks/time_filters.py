r"""Time and property filters at scale: what they cost a search, and how much `recent:` moves a ranking.

Run with ``nice -n 10 python -m benchmarks.time_filters [--notes 10000]``. A seeded vault of notes
with a frontmatter `date` spread over three years (a share without one, dated by file time), a
`status` property (some as lists) and words from a small vocabulary is indexed BM25-only (the
filters do not depend on the retrievers). Each query then runs in every variant below, the
variants interleaved and the whole set repeated, with the search cache off; a variant's cost is
the median over queries of its own median time, and its ratio to the plain query in the same run.

Variants: plain, `on:2024`, `after:2024-06 before:2025`, `on:last month` (relative), `[status:draft]`,
`-[status]`, `recent:30d`, `recent:off` (must equal plain exactly), and for `recent:30d` / `recent:365d`
how often the top 1 changes and the mean overlap of the top 10 with the plain ranking.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import DEFAULT_OUT, log, machine, markdown_table, offline_environment, write_json

WORDS = (
    "garden tomato compost soil seed harvest coffee espresso grinder roast bean kettle hike trail boots "
    "ridge summit camp budget invoice savings pension rent tax python docker cluster deploy branch "
    "commit guitar chord scale rhythm tempo piano novel chapter author review plot hamster wheel "
    "bedding cage diet vet travel kyoto temple train ticket museum"
).split()
STATUS = ("draft", "review", "published", "archived")
VARIANTS = (
    "plain",
    "on:2024",
    "after:2024-06 before:2025",
    "on:last month",
    "[status:draft]",
    "-[status]",
    "recent:30d",
    "recent:off",
)
TODAY = dt.date(2025, 6, 15)


def write_vault(vault: Path, n: int, seed: int) -> None:
    """`n` notes of 40-120 words; 85 % with a frontmatter date, 60 % with a status."""
    rng = random.Random(seed)
    start = dt.date(2022, 7, 1)
    file_time = dt.datetime(2025, 1, 1, 12).timestamp()
    for i in range(n):
        front = []
        if rng.random() < 0.85:
            front.append(f"date: {(start + dt.timedelta(days=rng.randrange(1080))).isoformat()}")
        if rng.random() < 0.6:
            status = rng.sample(STATUS, 2) if rng.random() < 0.2 else rng.choice(STATUS)
            front.append(f"status: {status if isinstance(status, str) else '[' + ', '.join(status) + ']'}")
        body = " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 120)))
        head = "---\n" + "\n".join(front) + "\n---\n" if front else ""
        path = vault / f"folder{i % 50:02d}" / f"note {i:05d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{head}# Note {i}\n\n{body}\n", encoding="utf-8")
        os.utime(path, (file_time, file_time))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.time_filters", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default bench-out/)")
    parser.add_argument("--notes", type=int, default=10_000, help="notes in the generated vault")
    parser.add_argument("--queries", type=int, default=30, help="queries (two words each)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds over every query and variant")
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args(argv)
    offline_environment()
    from benchmarks.quality import open_vault_index
    from explorer.engine import make_pipeline

    vault = args.out / "time-filters" / f"vault-{args.notes}-{args.seed}"
    if not vault.exists():
        log(f"writing {args.notes} notes to {vault}")
        write_vault(vault, args.notes, args.seed)
    index, settings, _ = open_vault_index(
        vault, {"experimental.cache_size": 0, "rerank.enabled": False}, embeddings=False
    )
    pipeline = make_pipeline(index, settings)
    pipeline.today = lambda: TODAY
    rng = random.Random(args.seed + 1)
    queries = [" ".join(rng.sample(WORDS, 2)) for _ in range(args.queries)]
    t = time.perf_counter()
    pipeline.search(f"{queries[0]} on:2024", k=10, record=False)
    first_dated = (time.perf_counter() - t) * 1000
    times: dict[str, dict[str, list[float]]] = {v: {q: [] for q in queries} for v in VARIANTS}
    tops: dict[str, dict[str, list[str]]] = {
        v: {} for v in ("plain", "recent:off", "recent:30d", "recent:365d")
    }
    counts: dict[str, list[int]] = {v: [] for v in VARIANTS}
    for r in range(args.repeats):
        for q in queries:
            order = list(VARIANTS)
            rng.shuffle(order)
            for v in order:
                query = q if v == "plain" else f"{q} {v}"
                t = time.perf_counter()
                res = pipeline.search(query, k=10, record=False)
                times[v][q].append((time.perf_counter() - t) * 1000)
                if r == 0:
                    ranked = [x.document_path for x in res.results if x.source == "search"]
                    counts[v].append(len(ranked))
                    if v in tops:
                        tops[v][q] = ranked
        log(f"round {r + 1}/{args.repeats} done")
    for q in queries:
        res = pipeline.search(f"{q} recent:365d", k=10, record=False)
        tops["recent:365d"][q] = [x.document_path for x in res.results if x.source == "search"]
    index.close()
    med = {v: statistics.median(statistics.median(ts) for ts in times[v].values()) for v in VARIANTS}
    ratio = {
        v: statistics.median(
            statistics.median(times[v][q]) / statistics.median(times["plain"][q]) for q in queries
        )
        for v in VARIANTS
    }
    moved = {}
    for v in ("recent:off", "recent:30d", "recent:365d"):
        top1 = sum(tops[v][q][:1] != tops["plain"][q][:1] for q in queries) / len(queries)
        overlap = statistics.mean(
            len(set(tops[v][q][:10]) & set(tops["plain"][q][:10])) / max(len(tops["plain"][q][:10]), 1)
            for q in queries
        )
        same = sum(tops[v][q] == tops["plain"][q] for q in queries) / len(queries)
        moved[v] = {"top1_changed": top1, "top10_overlap": overlap, "identical_lists": same}
    rows = [[v, f"{med[v]:.1f}", f"{ratio[v]:.2f}", f"{statistics.mean(counts[v]):.1f}"] for v in VARIANTS]
    print(markdown_table(["variant", "median ms", "ratio to plain (paired)", "mean results"], rows))
    print()
    print(
        markdown_table(
            ["row", "top 1 changed", "top 10 overlap", "identical lists"],
            [
                [v, f"{m['top1_changed']:.0%}", f"{m['top10_overlap']:.2f}", f"{m['identical_lists']:.0%}"]
                for v, m in moved.items()
            ],
        )
    )
    print(f"\nfirst dated query of an index version (note dates read): {first_dated:.1f} ms")
    report = {
        "machine": machine(),
        "notes": args.notes,
        "queries": len(queries),
        "repeats": args.repeats,
        "median_ms": med,
        "ratio_to_plain": ratio,
        "mean_results": {v: statistics.mean(c) for v, c in counts.items()},
        "recency": moved,
        "first_dated_query_ms": first_dated,
    }
    write_json(args.out / "time_filters.json", report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
