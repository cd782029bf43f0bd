"""Speed of the explorer on generated vaults of 1k, 10k and 50k notes: latency, freshness, start-up, memory.

Run with ``python -m benchmarks.speed [--sizes 1000,10000,50000] [--queries N]``.

Vaults are generated once into ``bench-out/speed-vault-<N>`` (reused while the generator's
parameters are unchanged): notes of 80-600 words with a title, frontmatter on some, ``##``
sections, lists, ``[[links]]`` and ``#tags``, in nested folders (5 % under ``Knowledge/``). Words
are drawn Zipf-like (Zipf-Mandelbrot, s=1.05, q=2.7) from a vocabulary of the sample vault's words
(most frequent first) followed by pronounceable synthetic words.

Corpus vectors come from a fast stand-in, because embedding 10k notes for real takes ~40 min
on two cores: each shard's vector is the tf-idf weighted mean of the real model's vectors of its
words (the vocabulary is embedded once by all-MiniLM-L6-v2 and cached), normalised, and written
into the index's vector cache and dense index directly. They live in the model's space, so a
real query vector gets meaningful cosines and the dense ranking has the usual length. Every
query, and every shard embedded by the "with vectors" freshness test, goes through the real model.

Latency is measured on three disjoint sets of queries (1-8 words, mid-frequency vocabulary):
keystroke = pass-1 hybrid (``search(q, two_pass=False, rerank=False)``), full = the default
pipeline (``search(q)``), full + rerank = ``search(q, rerank=True)``. Save-to-searchable writes a
unique word into one note and times ``refresh(paths=[rel])`` until a search finds it (with
vectors: plus ``embed_pending()`` and a hybrid search); the watcher's quiet period is not included.

Each size runs in its own process (its peak RSS is that process's), then warm restarts run in
fresh processes, the one-shot ``explorer search --json`` runs as a real command on the 1k vault,
and the indexer's embedding throughput is set against raw ``SentenceTransformer.encode`` in one
further process.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import (
    DEFAULT_OUT,
    REPO,
    current_rss_mb,
    log,
    machine,
    markdown_table,
    offline_environment,
    peak_rss_mb,
    summary,
    write_json,
)

GENERATOR_VERSION = 1
VOCAB_SIZE = 40_000
ZIPF_S = 1.05
ZIPF_Q = 2.7
KNOWLEDGE_SHARE = 0.05
SAMPLE_VAULT = REPO / "sample_vault"
PYTHON = sys.executable

#: Targets of the issue at 10k notes (ms unless named).
TARGETS = {
    "keystroke_p95_ms": 50.0,
    "full_p95_ms": 250.0,
    "save_lexical_p95_ms": 300.0,
    "save_vectors_p95_ms": 1500.0,
    "cold_lexical_s": 20.0,
    "embed_ratio": 0.9,
    "warm_restart_s": 5.0,
    "peak_rss_mb": 1536.0,
    "cli_one_shot_s": 1.5,
}

_WORD = re.compile(r"[a-z]+")


# -- vocabulary and vault generation --------------------------------------------------------
def vocabulary(size: int = VOCAB_SIZE, seed: int = 7) -> list[str]:
    """Sample-vault words by frequency (2+ letters), then synthetic pronounceable words, `size` in all."""
    counts: Counter[str] = Counter()
    for path in sorted(SAMPLE_VAULT.rglob("*.md")):
        if any(part.startswith(".") for part in path.relative_to(SAMPLE_VAULT).parts):
            continue
        try:
            counts.update(w for w in _WORD.findall(path.read_text(encoding="utf-8").lower()) if len(w) > 1)
        except (OSError, UnicodeDecodeError):
            continue
    words = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    seen = set(words)
    rng = random.Random(seed)
    onsets = "b c d f g h j k l m n p r s t v w z br cr dr fr gr pl pr st tr ch sh th".split()
    vowels = "a e i o u ai ea ee oa ou io".split()
    codas = ["", "", "n", "r", "s", "t", "l", "m", "nd", "st", "rk", "x"]
    while len(words) < size:
        w = "".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(rng.randint(1, 3))) + rng.choice(
            codas
        )
        if w not in seen and len(w) > 2:
            seen.add(w)
            words.append(w)
    return words[:size]


class _WordStream:
    """Zipf-Mandelbrot word sampler over a fixed vocabulary (numpy, drawn in blocks)."""

    def __init__(self, vocab: Sequence[str], seed: int) -> None:
        import numpy as np

        self._np = np
        self.vocab = list(vocab)
        ranks = np.arange(1, len(vocab) + 1, dtype=np.float64)
        p = 1.0 / (ranks + ZIPF_Q) ** ZIPF_S
        self._p = p / p.sum()
        self._rng = np.random.default_rng(seed)
        self._buf: list[str] = []
        self._pos = 0

    def take(self, n: int) -> list[str]:
        """The next `n` words."""
        if self._pos + n > len(self._buf):
            fresh = self._rng.choice(len(self.vocab), size=max(n, 200_000), p=self._p).tolist()
            self._buf = self._buf[self._pos :] + [self.vocab[i] for i in fresh]
            self._pos = 0
        out = self._buf[self._pos : self._pos + n]
        self._pos += n
        return out


def _sentence(words: list[str]) -> str:
    s = " ".join(words)
    return s[:1].upper() + s[1:] + "."


def _paragraph(stream: _WordStream, rng: random.Random, n_words: int) -> str:
    out, left = [], n_words
    while left > 0:
        k = min(left, rng.randint(6, 20))
        out.append(_sentence(stream.take(k)))
        left -= k
    return " ".join(out)


def generate_note(
    stream: _WordStream, rng: random.Random, title: str, titles: list[str], tags: list[str]
) -> str:
    """One note of 80-600 words: frontmatter (30 %), `# Title`, `##` sections, lists, links, tags."""
    total = int(rng.triangular(80, 600, 220))
    parts: list[str] = []
    if rng.random() < 0.3:
        parts.append(
            f"---\ntags: [{', '.join(rng.sample(tags, 2))}]\ncreated: 2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}\n---\n"
        )
    parts.append(f"# {title}\n")
    sections = max(1, total // 150)
    per = total // sections
    for s in range(sections):
        if s or rng.random() < 0.5:
            parts.append(f"## {' '.join(stream.take(rng.randint(1, 4))).capitalize()}\n")
        left = per
        while left > 0:
            roll = rng.random()
            if roll < 0.15:
                items = [" ".join(stream.take(rng.randint(3, 9))) for _ in range(rng.randint(3, 5))]
                parts.append("\n".join(f"- {it}" for it in items) + "\n")
                left -= sum(len(it.split()) for it in items)
                continue
            k = min(left, rng.randint(40, 120))
            para = _paragraph(stream, rng, k)
            if rng.random() < 0.25 and titles:
                para += f" See [[{rng.choice(titles)}]]."
            if rng.random() < 0.2:
                para += f" #{rng.choice(tags)}"
            parts.append(para + "\n")
            left -= k
    return "\n".join(parts)


def ensure_vault(size: int, out: Path, vocab: list[str], seed: int = 1) -> Path:
    """Generate (or reuse) the vault of `size` notes under `out`."""
    root = out / f"speed-vault-{size}"
    manifest = root / ".bench-manifest.json"
    params = {
        "generator": GENERATOR_VERSION,
        "size": size,
        "seed": seed,
        "vocab": len(vocab),
        "zipf": [ZIPF_S, ZIPF_Q],
    }
    if manifest.is_file():
        try:
            if json.loads(manifest.read_text(encoding="utf-8")) == params:
                return root
        except (OSError, ValueError):
            pass
    if root.exists():
        shutil.rmtree(root)
    t = time.perf_counter()
    rng = random.Random(seed)
    stream = _WordStream(vocab, seed)
    tags = list(vocab[200:400])
    areas = [w.capitalize() for w in vocab[400:430]]
    titles: list[str] = []
    for i in range(size):
        words = stream.take(rng.randint(2, 5))
        title = " ".join(words).capitalize() + f" {i}"
        if rng.random() < KNOWLEDGE_SHARE:
            folder = f"Knowledge/{rng.choice(areas)}"
        else:
            folder = f"{rng.choice(areas)}/{rng.choice(areas)}"
        path = root / folder / (title.replace(" ", "-").lower() + ".md")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(generate_note(stream, rng, title, titles[-500:], tags), encoding="utf-8")
        titles.append(title)
    manifest.write_text(json.dumps(params), encoding="utf-8")
    log(f"generated {root} ({size} notes) in {time.perf_counter() - t:.1f} s")
    return root


def make_queries(vocab: list[str], n: int, seed: int = 11) -> list[str]:
    """`n` distinct queries of 1-8 words, mostly mid-frequency words (as a person would type)."""
    rng = random.Random(seed)
    lengths = [1, 2, 2, 3, 3, 3, 4, 4, 5, 6, 8]
    pool = vocab[60:6000]
    out: list[str] = []
    seen = set()
    while len(out) < n:
        q = " ".join(rng.choice(pool) for _ in range(rng.choice(lengths)))
        if q not in seen:
            seen.add(q)
            out.append(q)
    return out


# -- stand-in corpus vectors -----------------------------------------------------------------
def word_vectors(vocab: list[str], out: Path) -> Path:
    """Embed the vocabulary with the real model once; cached as .npy next to the outputs."""
    import hashlib

    import numpy as np

    key = hashlib.blake2b("\n".join(vocab).encode(), digest_size=6).hexdigest()
    path = out / f"speed-wordvecs-{key}.npy"
    if path.is_file():
        return path
    from explorer.index.local.embed import load_embedder

    emb = load_embedder(None, "onnx")
    t = time.perf_counter()
    vecs = emb.encode(vocab, batch_size=256)
    out.mkdir(parents=True, exist_ok=True)
    np.save(path, vecs.astype(np.float16))
    log(f"embedded {len(vocab)} vocabulary words in {time.perf_counter() - t:.1f} s -> {path.name}")
    return path


def install_standin_vectors(
    index: Any, wordvec_path: Path, vocab: list[str], chunk: int = 8192
) -> dict[str, Any]:
    """Give every shard without a vector the tf-idf weighted mean of its words' real-model vectors.

    The vectors go into the index's vector cache (keyed by shard hash, so a restart loads them as
    it would real ones) and into its dense index.
    """
    import numpy as np
    from scipy import sparse

    t = time.perf_counter()
    wv = np.load(wordvec_path).astype(np.float32)
    word_id = {w: i for i, w in enumerate(vocab)}
    shards = index.pending()
    first_of: dict[str, Any] = {}
    for s in shards:
        first_of.setdefault(s.hash, s)
    hashes = list(first_of)
    docs = [
        [word_id[w] for w in _WORD.findall(first_of[h].search_text.lower()) if w in word_id] for h in hashes
    ]
    df = np.zeros(len(vocab), dtype=np.float64)
    for d in docs:
        df[list(set(d))] += 1
    idf = (np.log((len(docs) + 1) / (df + 1)) + 1.0).astype(np.float32)
    vec_of: dict[str, np.ndarray] = {}
    for start in range(0, len(hashes), chunk):
        block = docs[start : start + chunk]
        indptr = np.cumsum([0] + [len(d) for d in block])
        indices = np.fromiter((j for d in block for j in d), dtype=np.int64, count=int(indptr[-1]))
        m = sparse.csr_matrix(
            (np.ones(len(indices), dtype=np.float32), indices, indptr), shape=(len(block), len(vocab))
        )
        m.sum_duplicates()
        m = sparse.csr_matrix(m.multiply(idf[None, :]))
        vecs = np.asarray(m @ wv, dtype=np.float32)
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        part = dict(zip(hashes[start : start + chunk], vecs))
        index.store.put_vectors(index.model_id, part)
        vec_of.update(part)
    reader = index.reader
    with reader.lock:
        reader.own("dense")  # a snapshot taken before keeps the vectors it saw
        for s in shards:
            reader.dense.set(s.node_id, vec_of[s.hash])
        reader.version += 1
    del wv
    return {"shards": len(shards), "distinct": len(hashes), "s": round(time.perf_counter() - t, 2)}


# -- the per-size worker ----------------------------------------------------------------------
def _stage_medians(timings: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted({k for t in timings for k in t})
    return {k: round(statistics.median([t.get(k, 0.0) for t in timings]), 2) for k in keys}


def _profile(fn: Callable[[], None], path: Path, top: int = 35) -> None:
    """cProfile `fn`; write the top functions by cumulative and by own time to `path`."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(buf.getvalue(), encoding="utf-8")


def worker(
    vault: Path,
    size: int,
    n_queries: int,
    edits: int,
    vector_edits: int,
    wordvec_path: Path,
    result_path: Path,
    profile_dir: Path | None,
) -> int:
    """Measure one vault in this process; results are written to `result_path` after every phase."""
    res: dict[str, Any] = {"size": size, "vault": str(vault), "phases_done": []}

    def save(phase: str) -> None:
        res["phases_done"].append(phase)
        if "profiles" not in res["phases_done"]:
            res["peak_rss_mb"] = peak_rss_mb()  # the profiles below open a second index: not counted
        res.setdefault("load_average", {})[phase] = [round(x, 2) for x in os.getloadavg()]
        write_json(result_path, res)
        log(f"[{size}] {phase} done (peak RSS {res['peak_rss_mb']} MB)")

    t = time.perf_counter()
    from explorer.config import load_settings
    from explorer.engine import make_pipeline
    from explorer.index.local.vault_index import VaultIndex

    res["import_s"] = round(time.perf_counter() - t, 2)

    vocab = vocabulary()
    labels = ("keystroke", "full", "full_rerank", "keystroke_deep")
    queries = make_queries(vocab, len(labels) * n_queries + 5)
    # Each measurement gets its own queries, so no cache (results, highlights) is shared.
    warm = queries[:5]
    query_sets = {
        label: queries[5 + i * n_queries : 5 + (i + 1) * n_queries] for i, label in enumerate(labels)
    }

    # cold lexical index: no store, nothing cached
    shutil.rmtree(vault / ".explorer", ignore_errors=True)
    settings = load_settings(vault)
    t = time.perf_counter()
    index = VaultIndex(vault, settings)
    report = index.open()
    res["cold_lexical_s"] = round(time.perf_counter() - t, 2)
    st = index.stats()
    res.update(notes=st.notes, shards=st.shards, skipped=st.skipped, rss_after_lexical_mb=current_rss_mb())
    res["cold_report"] = {"added": len(report.added), "ms": round(report.ms, 1)}
    save("cold_lexical")

    res["standin_vectors"] = install_standin_vectors(index, wordvec_path, vocab)
    save("standin_vectors")

    t = time.perf_counter()
    emb = index.embedder()
    res["model_load_s"] = round(time.perf_counter() - t, 2)
    res["runtime"] = index.runtime
    res["model_state"] = index.model_state
    if emb is None:
        res["model_error"] = index.model_error
    pipeline = make_pipeline(index, settings)
    for q in warm:
        pipeline.search(q)
    res["rss_ready_mb"] = current_rss_mb()
    save("model")

    # keystroke (pass 1 hybrid) and full pipeline latency. Random word queries rarely reach the
    # 0.40 cosine floor on these vaults, so keystroke_deep repeats the keystroke measurement with
    # no floor: every dense ranking then runs 100 notes deep and the feedback ranking always runs
    # (the worst case for fusion).
    deep = make_pipeline(
        index, settings.with_overrides({"experimental.dense_threshold": 0.0}, origin="keystroke_deep")
    )
    for label, pipe, kwargs in (
        ("keystroke", pipeline, {"two_pass": False, "rerank": False}),
        ("full", pipeline, {}),
        ("full_rerank", pipeline, {"rerank": True}),
        ("keystroke_deep", deep, {"two_pass": False, "rerank": False}),
    ):
        queries = query_sets[label]
        lat, stages = [], []
        dense_hits, bm25_hits, pass2, rerank_applied, dense_mode, feedback = [], [], 0, 0, 0, 0
        for q in queries:
            t = time.perf_counter()
            out = pipe.search(q, **kwargs)
            lat.append((time.perf_counter() - t) * 1000)
            stages.append(dict(out.timings_ms))
            dense_hits.append(out.stats.embedding_matches)
            bm25_hits.append(out.stats.bm25_matches)
            pass2 += int(len(out.passes) > 1)
            rerank_applied += int(out.rerank is not None and out.rerank.applied)
            dense_mode += int(bool(out.mode.dense))
            feedback += int(bool(out.stats.feedback_from))
        res[label] = {
            "latency_ms": summary(lat),
            "stages_median_ms": _stage_medians(stages),
            "dense_matches_median": statistics.median(dense_hits) if dense_hits else 0,
            "bm25_matches_median": statistics.median(bm25_hits) if bm25_hits else 0,
            "pass2_share": round(pass2 / len(queries), 3),
            "rerank_applied_share": round(rerank_applied / len(queries), 3),
            "dense_share": round(dense_mode / len(queries), 3),
            "feedback_share": round(feedback / len(queries), 3),
        }
        save(label)

    # save -> searchable for one edited note
    paths = sorted(index.notes)
    step = max(1, len(paths) // max(1, edits + vector_edits))
    targets = paths[::step]

    def edit_once(i: int, rel: str, with_vectors: bool) -> float:
        file = vault / rel
        original = file.read_text(encoding="utf-8")
        marker = f"zqbench{i}x{os.getpid()}"
        t0 = time.perf_counter()
        file.write_text(
            original + f"\nEdited just now: {marker} about the garden budget.\n", encoding="utf-8"
        )
        index.refresh(paths=[rel])
        if with_vectors:
            index.embed_pending()
            out = pipeline.search(marker, two_pass=False, rerank=False)
        else:
            out = pipeline.search(marker, two_pass=False, rerank=False, dense=False)
        elapsed = (time.perf_counter() - t0) * 1000
        found = bool(out.results) and out.results[0].document_path == rel
        if with_vectors and index.pending():
            found = False
        if not found:
            raise RuntimeError(f"edited note {rel} not found by {marker!r}")
        file.write_text(original, encoding="utf-8")
        index.refresh(paths=[rel])
        if with_vectors:
            index.embed_pending()
        return elapsed

    lex = [edit_once(i, rel, False) for i, rel in enumerate(targets[:edits])]
    res["save_lexical"] = {"latency_ms": summary(lex)}
    save("save_lexical")
    vec = [edit_once(1000 + i, rel, True) for i, rel in enumerate(targets[edits : edits + vector_edits])]
    res["save_vectors"] = {"latency_ms": summary(vec)}
    save("save_vectors")

    res["rss_end_mb"] = current_rss_mb()
    if profile_dir is not None:
        sample = queries[:60]
        pipeline.clear_cache()  # profile real work, not cache hits
        _profile(
            lambda: [pipeline.search(q + " x", two_pass=False, rerank=False) for q in sample],
            profile_dir / f"speed-profile-{size}-keystroke.txt",
        )
        _profile(
            lambda: [pipeline.search(q + " y") for q in sample],
            profile_dir / f"speed-profile-{size}-full.txt",
        )
        index.close()
        shutil.rmtree(vault / ".explorer-profile", ignore_errors=True)
        prof_settings = load_settings(vault, {"index.cache_dir": str(vault / ".explorer-profile")})

        def cold() -> None:
            ix = VaultIndex(vault, prof_settings)
            ix.open()
            ix.close()

        _profile(cold, profile_dir / f"speed-profile-{size}-cold-lexical.txt")

        def warm_open() -> None:
            ix = VaultIndex(vault, settings)
            ix.open()
            ix.close()

        _profile(warm_open, profile_dir / f"speed-profile-{size}-warm-open.txt")
        shutil.rmtree(vault / ".explorer-profile", ignore_errors=True)
        save("profiles")
    else:
        index.close()
    res["peak_rss_with_profiles_mb"] = peak_rss_mb()
    save("done")
    return 0


# -- separate processes -----------------------------------------------------------------------
def restart_child(vault: Path, query: str, parent_t0: float) -> int:
    """New process: open the stored index, answer one hybrid query; print timings as JSON."""
    t_child = time.time()
    from explorer.config import load_settings
    from explorer.engine import make_pipeline, open_index

    t_import = time.time()
    settings = load_settings(vault)
    index, report = open_index(vault, settings)
    t_open = time.time()
    pipeline = make_pipeline(index, settings)
    out = pipeline.search(query, two_pass=False, rerank=False)
    t_done = time.time()
    st = index.stats()
    print(
        json.dumps(
            {
                "since_parent_s": round(t_done - parent_t0, 3),
                "since_child_start_s": round(t_done - t_child, 3),
                "imports_s": round(t_import - t_child, 3),
                "open_s": round(t_open - t_import, 3),
                "first_query_s": round(t_done - t_open, 3),
                "dense": bool(out.mode.dense),
                "shards_without_vectors": st.pending,
                "changed_on_open": len(report.added) + len(report.changed),
                "peak_rss_mb": peak_rss_mb(),
            }
        )
    )
    index.close()
    return 0


def embed_throughput_child(vault: Path, n_shards: int, repeats: int) -> int:
    """Indexer `embed_pending` vs raw ONNX encode vs raw SentenceTransformer.encode on the same shards."""
    import tempfile

    import numpy as np

    from explorer.config import load_settings
    from explorer.index.local.embed import resolve_model
    from explorer.index.local.vault_index import EMBED_BATCH, VaultIndex

    cache = Path(tempfile.mkdtemp(prefix="explorer-embed-bench-"))
    try:
        settings = load_settings(vault, {"index.cache_dir": str(cache)})
        index = VaultIndex(vault, settings)
        index.open()
        rng = random.Random(5)
        by_hash: dict[str, Any] = {}
        for s in index.shards.values():
            by_hash.setdefault(s.hash, s)
        chosen_hashes = set(rng.sample(sorted(by_hash), min(n_shards, len(by_hash))))
        chosen = [s for s in index.shards.values() if s.hash in chosen_hashes]
        unit = np.zeros(index.dense.dim, dtype=np.float32)
        unit[0] = 1.0
        with index.lock:
            for s in index.shards.values():
                if s.hash not in chosen_hashes:
                    index.dense.set(s.node_id, unit)  # stands for "already embedded"
        texts = [by_hash[h].search_text for h in sorted(chosen_hashes)]
        emb = index.embedder()
        emb.encode(texts[:16])
        tokens = emb.token_lengths(texts) if hasattr(emb, "token_lengths") else []
        indexer, onnx = [], []
        for _ in range(repeats):
            with index.lock:
                for s in chosen:
                    index.dense.remove(s.node_id)
            t = time.perf_counter()
            n = index.embed_pending()
            indexer.append(n / (time.perf_counter() - t))
            t = time.perf_counter()
            emb.encode(texts, batch_size=EMBED_BATCH)
            onnx.append(len(texts) / (time.perf_counter() - t))
        index.close()
        t = time.perf_counter()
        from sentence_transformers import SentenceTransformer

        import_s = time.perf_counter() - t
        model = SentenceTransformer(str(resolve_model(None)), device="cpu")
        model.encode(texts[:16])
        st = []
        for _ in range(repeats):
            t = time.perf_counter()
            model.encode(
                texts,
                batch_size=EMBED_BATCH,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
            st.append(len(texts) / (time.perf_counter() - t))
        import torch

        print(
            json.dumps(
                {
                    "shards": len(texts),
                    "tokens_median": statistics.median(tokens) if tokens else None,
                    "indexer_per_s": [round(x, 1) for x in indexer],
                    "onnx_raw_per_s": [round(x, 1) for x in onnx],
                    "st_raw_per_s": [round(x, 1) for x in st],
                    "indexer_runtime": index.runtime,
                    "torch_threads": torch.get_num_threads(),
                    "st_import_s": round(import_s, 1),
                    "ratio_indexer_vs_st": round(statistics.median(indexer) / statistics.median(st), 3),
                    "ratio_indexer_vs_onnx_raw": round(
                        statistics.median(indexer) / statistics.median(onnx), 3
                    ),
                }
            )
        )
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return 0


def _child(args: list[str], timeout: float) -> tuple[dict[str, Any] | None, float, str]:
    """Run `python -m benchmarks.speed ARGS`; (last JSON line of stdout, wall seconds, stderr tail)."""
    t = time.perf_counter()
    proc = subprocess.run(
        [PYTHON, "-m", "benchmarks.speed", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )
    wall = time.perf_counter() - t
    data = None
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            data = json.loads(line)
            break
    return data, wall, proc.stderr[-2000:]


def run_cli(vault: Path, queries: list[str], runs: int) -> dict[str, Any]:
    """Wall time of the one-shot `explorer search QUERY --vault V --json` (whole process)."""
    exe = Path(PYTHON).parent / "explorer"
    cmd0 = [str(exe)] if exe.exists() else [PYTHON, "-m", "explorer"]
    walls, hybrid, inner, rerank, codes, errors = [], [], [], [], [], []
    for i in range(runs + 1):
        q = queries[i % len(queries)]
        t = time.perf_counter()
        proc = subprocess.run(
            [*cmd0, "search", q, "--vault", str(vault), "--json"], capture_output=True, text=True, timeout=120
        )
        wall = time.perf_counter() - t
        try:
            data = json.loads(proc.stdout)
        except ValueError:
            return {"error": f"exit {proc.returncode}: {proc.stderr[-1000:]}"}
        if i == 0:
            continue  # the first run only warms the page cache
        codes.append(proc.returncode)
        if proc.returncode != 0:
            errors.append(proc.stderr.strip()[-300:])
        walls.append(wall)
        hybrid.append(bool(data.get("mode", {}).get("dense")))
        inner.append(float(data.get("timings_ms", {}).get("total", 0.0)))
        rerank.append(bool((data.get("rerank") or {}).get("applied")))
    return {
        "wall_s": summary(walls),
        "hybrid": all(hybrid),
        "hybrid_runs": sum(hybrid),
        "runs": len(walls),
        "search_total_ms_median": round(statistics.median(inner), 1),
        "rerank_applied_runs": sum(rerank),
        "exit_codes": codes,
        "stderr_of_failed_runs": errors[:3],
        "command": " ".join([*cmd0, "search", "QUERY", "--vault", str(vault), "--json"]),
    }


# -- report -----------------------------------------------------------------------------------
def _fmt(summary_: dict[str, Any] | None, key: str = "median", scale: float = 1.0) -> str:
    if not summary_ or summary_.get("n", 1) == 0:
        return "-"
    return f"{summary_[key] * scale:.0f}" if summary_[key] * scale >= 100 else f"{summary_[key] * scale:.1f}"


def tables(report: dict[str, Any]) -> str:
    """Markdown tables of a speed report."""
    rows = []
    for size, r in sorted(report["sizes"].items(), key=lambda kv: int(kv[0])):
        restart = r.get("warm_restart", {})
        rows.append(
            [
                f"{int(size):,}",
                r.get("shards", "-"),
                r.get("cold_lexical_s", "-"),
                f"{_fmt(r.get('keystroke', {}).get('latency_ms'))} / {_fmt(r.get('keystroke', {}).get('latency_ms'), 'p95')}",
                f"{_fmt(r.get('full', {}).get('latency_ms'))} / {_fmt(r.get('full', {}).get('latency_ms'), 'p95')}",
                f"{_fmt(r.get('full_rerank', {}).get('latency_ms'))} / {_fmt(r.get('full_rerank', {}).get('latency_ms'), 'p95')}",
                f"{_fmt(r.get('keystroke_deep', {}).get('latency_ms'))} / {_fmt(r.get('keystroke_deep', {}).get('latency_ms'), 'p95')}",
                f"{_fmt(r.get('save_lexical', {}).get('latency_ms'))} / {_fmt(r.get('save_lexical', {}).get('latency_ms'), 'p95')}",
                f"{_fmt(r.get('save_vectors', {}).get('latency_ms'))} / {_fmt(r.get('save_vectors', {}).get('latency_ms'), 'p95')}",
                _fmt(restart.get("wall_s")) if restart else "-",
                r.get("peak_rss_mb", "-"),
                restart.get("peak_rss_mb_median", "-") if restart else "-",
            ]
        )
    out = [
        markdown_table(
            [
                "notes",
                "shards",
                "cold lexical s",
                "keystroke ms p50 / p95",
                "full ms p50 / p95",
                "full + rerank ms p50 / p95",
                "keystroke, no dense floor ms p50 / p95",
                "save->searchable lexical ms p50 / p95",
                "save->searchable +vectors ms p50 / p95",
                "warm restart s (median)",
                "peak RSS MB (bench process)",
                "peak RSS MB (restart process)",
            ],
            rows,
        )
    ]
    if report.get("embedding"):
        e = report["embedding"]
        out.append("")
        out.append(
            markdown_table(
                [
                    "shards",
                    "indexer embed_pending /s",
                    "raw ONNX encode /s",
                    "raw SentenceTransformer.encode /s",
                    "indexer / ST",
                    "indexer / raw ONNX",
                ],
                [
                    [
                        e.get("shards"),
                        statistics.median(e["indexer_per_s"]),
                        statistics.median(e["onnx_raw_per_s"]),
                        statistics.median(e["st_raw_per_s"]),
                        e["ratio_indexer_vs_st"],
                        e["ratio_indexer_vs_onnx_raw"],
                    ]
                ],
            )
        )
    if report.get("cli"):
        c = report["cli"]
        out.append("")
        if "error" in c:
            out.append(f"one-shot CLI failed: {c['error']}")
        else:
            out.append(
                markdown_table(
                    [
                        "one-shot CLI",
                        "wall s median",
                        "wall s p95",
                        "runs",
                        "hybrid",
                        "search total ms (median)",
                        "exit codes",
                    ],
                    [
                        [
                            f"explorer search QUERY --vault V --json ({c.get('vault_notes', '?')} notes)",
                            c["wall_s"]["median"],
                            c["wall_s"]["p95"],
                            c["runs"],
                            f"{c['hybrid_runs']}/{c['runs']}",
                            c["search_total_ms_median"],
                            " ".join(map(str, c.get("exit_codes", []))),
                        ]
                    ],
                )
            )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Generate the vaults, run every measurement, print tables and write JSON."""
    offline_environment()
    parser = argparse.ArgumentParser(prog="python -m benchmarks.speed", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,50000", help="comma list of vault sizes (notes)")
    parser.add_argument("--queries", type=int, default=200, help="queries per latency measurement")
    parser.add_argument("--edits", type=int, default=30, help="edited notes for save->searchable (lexical)")
    parser.add_argument(
        "--vector-edits", type=int, default=15, help="edited notes for save->searchable with vectors"
    )
    parser.add_argument("--restarts", type=int, default=3, help="warm restarts per size")
    parser.add_argument("--cli-runs", type=int, default=5, help="one-shot CLI runs on the smallest vault")
    parser.add_argument(
        "--embed-shards", type=int, default=512, help="shards for the embedding throughput test (0: skip)"
    )
    parser.add_argument("--embed-repeats", type=int, default=2)
    parser.add_argument("--cap-s", type=float, default=5400.0, help="time cap of one size's measurements")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile keystroke, full and cold indexing per size"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--tag", default="")
    # internal: child processes
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--restart-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--embed-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--vault", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--wordvecs", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--query", help=argparse.SUPPRESS)
    parser.add_argument("--t0", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        return worker(
            args.vault,
            args.size,
            args.queries,
            args.edits,
            args.vector_edits,
            args.wordvecs,
            args.result,
            args.out if args.profile else None,
        )
    if args.restart_child:
        return restart_child(args.vault, args.query, args.t0)
    if args.embed_child:
        return embed_throughput_child(args.vault, args.embed_shards, args.embed_repeats)

    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    suffix = f"-{args.tag}" if args.tag else ""
    out_file = args.out / f"speed{suffix}.json"
    t_all = time.perf_counter()
    vocab = vocabulary()
    wordvec_path = word_vectors(vocab, args.out)
    queries = make_queries(vocab, 50, seed=99)
    report: dict[str, Any] = {
        "benchmark": "speed",
        "sizes": {},
        "machine": machine(),
        "targets_at_10k": TARGETS,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "args": vars(args) | {"out": str(args.out)},
    }
    for size in sizes:
        vault = ensure_vault(size, args.out, vocab)
        result_path = args.out / f"speed-{size}{suffix}.json"
        result_path.unlink(missing_ok=True)
        log(f"== {size} notes: worker")
        cmd = [
            "--worker",
            "--vault",
            str(vault),
            "--size",
            str(size),
            "--queries",
            str(args.queries),
            "--edits",
            str(args.edits),
            "--vector-edits",
            str(args.vector_edits),
            "--wordvecs",
            str(wordvec_path),
            "--result",
            str(result_path),
            "--out",
            str(args.out),
        ] + (["--profile"] if args.profile else [])
        proc = subprocess.Popen([PYTHON, "-m", "benchmarks.speed", *cmd], cwd=REPO)
        try:
            proc.wait(timeout=args.cap_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            log(f"[{size}] capped after {args.cap_s:.0f} s; keeping the phases done")
        r = (
            json.loads(result_path.read_text(encoding="utf-8"))
            if result_path.is_file()
            else {"error": "no result"}
        )
        r["worker_exit"] = proc.returncode
        if "done" in r.get("phases_done", []):
            restarts = []
            for i in range(args.restarts):
                data, wall, err = _child(
                    [
                        "--restart-child",
                        "--vault",
                        str(vault),
                        "--query",
                        queries[i],
                        "--t0",
                        repr(time.time()),
                    ],
                    600,
                )
                if data is None:
                    log(f"restart failed: {err}")
                    continue
                data["wall_s"] = round(wall, 3)
                restarts.append(data)
            if restarts:
                r["warm_restart"] = {
                    "runs": restarts,
                    "wall_s": summary([x["wall_s"] for x in restarts]),
                    "since_parent_s": summary([x["since_parent_s"] for x in restarts]),
                    "peak_rss_mb_median": statistics.median([x["peak_rss_mb"] for x in restarts]),
                    "all_hybrid": all(x["dense"] and x["shards_without_vectors"] == 0 for x in restarts),
                }
        report["sizes"][str(size)] = r
        write_json(out_file, report)
    if sizes and args.cli_runs:
        smallest = min(sizes)
        report["cli"] = run_cli(args.out / f"speed-vault-{smallest}", queries[10:], args.cli_runs)
        report["cli"]["vault_notes"] = smallest
        write_json(out_file, report)
    if sizes and args.embed_shards:
        log("== embedding throughput")
        data, wall, err = _child(
            [
                "--embed-child",
                "--vault",
                str(args.out / f"speed-vault-{min(sizes)}"),
                "--embed-shards",
                str(args.embed_shards),
                "--embed-repeats",
                str(args.embed_repeats),
            ],
            3600,
        )
        report["embedding"] = data if data else {"error": err}
        if not data:
            log(f"embedding throughput failed: {err}")
    report["wall_s"] = round(time.perf_counter() - t_all, 1)
    write_json(out_file, report)
    if report.get("embedding", {}).get("error"):
        report.pop("embedding")
    print(tables(report))
    log(f"wrote {out_file} ({report['wall_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
