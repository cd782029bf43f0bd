"""Embedding runtime benchmark: ONNX Runtime vs sentence-transformers on all-MiniLM-L6-v2.

Run with ``python -m benchmarks.embed_runtimes``. Measures throughput (chunks/s) on synthetic
paragraphs of 80-250 words, single-query latency (median and p90 of 30 runs) and the vector
agreement of the two runtimes, then prints a small table.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from explorer.index.local.embed import (
    Embedder,
    OnnxEmbedder,
    SentenceTransformerEmbedder,
    artefact_dir_for,
    default_model_cache_dir,
    resolve_model,
)

_WORDS = (
    "the of and to in is was that for on with as by at from this have it be are not but had his "
    "they you which one were all we their when there can been has more if will would about out "
    "so what up into them some could time these two may then do first any my now such like our "
    "over man me even most made after also did many before must through back years where much "
    "your way well down should because each just those people how too little state good very "
    "make world still own see men work long get here between both life being under never day "
    "same another know while last might us great old year off come since against go came right "
    "used take three notes vault search memory meeting project idea draft review garden recipe "
    "journal question answer system design database index query embedding vector model python "
    "server deploy backup travel budget health book chapter summary link tag daily weekly plan"
).split()

_QUERIES = [
    "where is the backup plan",
    "notes about the garden project",
    "python database index design",
    "weekly budget review meeting",
    "summary of the travel journal",
    "how to deploy the server",
]


def synthetic_paragraphs(count: int, seed: int = 0) -> list[str]:
    """Makes English-like paragraphs of 80-250 words.

    Args:
        count: How many paragraphs.
        seed: Random seed, for repeatable runs.

    Returns:
        The paragraphs.
    """
    rng = random.Random(seed)
    paragraphs = []
    for _ in range(count):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(80, 250))]
        sentences, start = [], 0
        while start < len(words):
            end = min(len(words), start + rng.randint(6, 20))
            sentence = " ".join(words[start:end])
            sentences.append(sentence[0].upper() + sentence[1:] + ".")
            start = end
        paragraphs.append(" ".join(sentences))
    return paragraphs


def _throughput(embedder: Embedder, texts: Sequence[str], repeats: int) -> tuple[float, np.ndarray]:
    """Returns the median chunks/s over ``repeats`` full passes, and the vectors."""
    embedder.encode(list(texts[:8]))  # warm-up: first-run allocations, lazy init
    rates = []
    vectors = np.zeros((0, embedder.dim), dtype=np.float32)
    for _ in range(repeats):
        started = time.perf_counter()
        vectors = embedder.encode(texts, batch_size=32)
        rates.append(len(texts) / (time.perf_counter() - started))
    return statistics.median(rates), vectors


def _query_latency(embedder: Embedder, runs: int = 30) -> tuple[float, float]:
    """Returns the median and p90 single-query latency in ms."""
    for query in _QUERIES:
        embedder.encode([query])
    timings = []
    for index in range(runs):
        started = time.perf_counter()
        embedder.encode([_QUERIES[index % len(_QUERIES)]])
        timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    return statistics.median(timings), timings[int(0.9 * (len(timings) - 1))]


def _timed(load: Callable[[], Embedder]) -> tuple[Embedder, float]:
    """Returns a loaded embedder and the load time in seconds."""
    started = time.perf_counter()
    embedder = load()
    return embedder, time.perf_counter() - started


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark and prints the table.

    Args:
        argv: Command-line arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=200, help="paragraphs to embed")
    parser.add_argument("--repeats", type=int, default=3, help="passes per runtime (median)")
    parser.add_argument("--threads", type=int, default=None, help="threads for both runtimes")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="ONNX cache (default: the user cache; 'tmp' for a throwaway one, forcing a build)",
    )
    args = parser.parse_args(argv)

    model_dir = resolve_model(None)
    if args.cache_dir is not None and str(args.cache_dir) == "tmp":
        cache_dir = Path(tempfile.mkdtemp(prefix="explorer-bench-"))
    else:
        cache_dir = args.cache_dir or default_model_cache_dir()
    texts = synthetic_paragraphs(args.chunks)
    words = [len(text.split()) for text in texts]

    built = not (artefact_dir_for(model_dir, cache_dir) / "manifest.json").exists()
    messages: list[str] = []
    onnx, onnx_load = _timed(
        lambda: OnnxEmbedder(model_dir, cache_dir, progress=messages.append, threads=args.threads)
    )
    assert isinstance(onnx, OnnxEmbedder)
    tokens = onnx.token_lengths(texts)
    onnx_rate, onnx_vectors = _throughput(onnx, texts, args.repeats)
    onnx_query = _query_latency(onnx)

    st, st_load = _timed(lambda: SentenceTransformerEmbedder(model_dir, threads=args.threads))
    st_rate, st_vectors = _throughput(st, texts, args.repeats)
    st_query = _query_latency(st)

    cosines = np.einsum("ij,ij->i", onnx_vectors, st_vectors)
    print(
        f"{len(texts)} synthetic chunks, {min(words)}-{max(words)} words "
        f"(mean {statistics.mean(words):.0f}), tokens mean {statistics.mean(tokens):.0f} "
        f"(truncated at {onnx.max_seq_length}: {sum(t >= onnx.max_seq_length for t in tokens)}); "
        f"ONNX threads {onnx.threads}; median of {args.repeats} passes, batch 32"
    )
    if built:
        print("ONNX artefact was built in this run: " + " | ".join(messages))
    print()
    header = f"| {'runtime':<22} | {'load s':>7} | {'chunks/s':>8} | {'query ms p50':>12} |"
    print(f"{header} {'p90':>6} |")
    print(f"|{'-' * 24}|{'-' * 9}|{'-' * 10}|{'-' * 14}|{'-' * 8}|")
    rows = [
        ("onnx (fp32)", onnx_load, onnx_rate, onnx_query),
        ("sentence-transformers", st_load, st_rate, st_query),
    ]
    for name, load, rate, (p50, p90) in rows:
        print(f"| {name:<22} | {load:>7.2f} | {rate:>8.1f} | {p50:>12.1f} | {p90:>6.1f} |")
    print()
    print(
        f"ONNX vs sentence-transformers cosine: min {cosines.min():.7f}, "
        f"mean {cosines.mean():.7f}; speed-up {onnx_rate / st_rate:.2f}x throughput, "
        f"{st_query[0] / onnx_query[0]:.1f}x query latency"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
