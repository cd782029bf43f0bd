"""The local rerank backend: the bundled MiniLM scoring each candidate's best shard, then its sentence windows."""

from __future__ import annotations

import copy
import functools
import hashlib
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from explorer.search.rerank.base import Cancelled, CostModel, RerankBackendError, RerankCancelled, never
from explorer.search.schema import SearchResult
from explorer.text.lru import LRUCache

if TYPE_CHECKING:
    from explorer.index.backend import IndexBackend, Snapshot

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_MARKUP = re.compile(r"^\s*(?:#{1,6}\s+|[-*+]\s+(?:\[[ xX]\]\s+)?|\d+[.)]\s+|>\s*)+")
_FENCE = re.compile(r"^\s*(```|~~~)")


def sentence_windows(text: str, min_chars: int = 60, max_chars: int = 400) -> list[str]:
    """Sentence windows of a passage: its lines cut into sentences, short ones merged.

    List, heading and quote marks are dropped; code blocks form windows of their own. A window
    grows by merging until it reaches `min_chars`, never past `max_chars` (one long sentence
    stays whole); a short remainder joins the window before it.
    """
    blocks: list[list[str]] = [[]]
    in_code = False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_code = not in_code
            blocks.append([])
            continue
        if in_code:
            if line.strip():
                blocks[-1].append(line.strip())
            continue
        line = _MARKUP.sub("", line).strip()
        if line and not set(line) <= set("-=*_|: "):
            blocks[-1].extend(p.strip() for p in _SENTENCE_END.split(line) if p.strip())
    windows: list[str] = []
    for pieces in blocks:
        current = ""
        group: list[str] = []
        for p in pieces:
            if not current:
                current = p
            elif len(current) < min_chars and len(current) + 1 + len(p) <= max_chars:
                current = f"{current} {p}"
            else:
                group.append(current)
                current = p
        if current:
            if group and len(current) < min_chars // 2 and len(group[-1]) + 1 + len(current) <= max_chars:
                group[-1] = f"{group[-1]} {current}"
            else:
                group.append(current)
        windows.extend(group)
    return windows


@functools.lru_cache(maxsize=8192)
def _windows_of(text: str) -> tuple[str, ...]:
    """`sentence_windows(text)`, memoised (shard texts repeat from search to search)."""
    return tuple(sentence_windows(text))


class VectorCache(LRUCache[str, np.ndarray]):
    """Thread-safe LRU of embedding vectors keyed by a hash of the embedded text."""

    def __init__(self, capacity: int = 20_000) -> None:
        super().__init__(capacity)

    @staticmethod
    def key(text: str) -> str:
        """The cache key of a text."""
        return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class _Best:
    """The best shard of a candidate for the query."""

    cosine: float
    """Its cosine with the query."""
    text: str
    """Its raw text (cut into windows by the precision pass)."""


class LocalNeuralBackend:
    """The offline default: the bundled MiniLM, scoring at a finer grain than retrieval.

    Gate pass (`precise=False`): the query's cosine with every shard of the candidate's note,
    from the stored shard vectors (no model call but the query's, cached per query text); the
    best shard's cosine is the score. Retrieval saw only shards that made a ranking, as ranks;
    this sees every shard with its cosine.

    Precision pass (`precise=True`): the candidate's first `window_shards` context shards (the
    passages fusion ranked best, the ones shown; else its best shard) are cut into sentence
    windows (`sentence_windows`); each window is embedded once and cached by text hash (window
    vectors do not depend on the query, so the cache serves every later search). Score:
    `window_weight * best window cosine + (1 - window_weight) * best shard cosine`. Windows are
    embedded in batches of `batch_size`, best candidates first, with `cancelled` checked between
    batches; what was embedded before a timeout stays cached.

    `normalize` maps a cosine to 0-1 linearly between COS_FLOOR and COS_CEIL (a fixed
    calibration of this model).
    """

    name = "local"
    refines = True
    COS_FLOOR = 0.1
    COS_CEIL = 0.8

    def __init__(
        self,
        index: IndexBackend,
        window_weight: float = 0.5,
        window_shards: int = 2,
        batch_size: int = 8,
        cache: VectorCache | None = None,
    ) -> None:
        """
        Args:
            index: The index whose embedder and shard vectors are used.
            window_weight: Share of the best window cosine in the precision score.
            window_shards: Context shards of a candidate cut into windows.
            batch_size: Windows per model call (the granularity of cancellation).
            cache: Window vector cache (a private one by default).
        """
        self.index = index
        self.window_weight = window_weight
        self.window_shards = window_shards
        self.cost = CostModel(initial_ms=6.0)
        """Milliseconds per embedded window, measured."""
        self.batch_size = batch_size
        self.cache = cache or VectorCache()
        self._queries: LRUCache[str, np.ndarray] = LRUCache(128)
        self._snap: Snapshot | None = None

    def reading(self, snap: Snapshot) -> LocalNeuralBackend:
        """This backend reading `snap` (a search's) for shards and vectors; model, caches and cost are shared."""
        view = copy.copy(self)
        view._snap = snap
        return view

    @contextmanager
    def _view(self) -> Iterator[Snapshot]:
        """The snapshot given to `reading`, else one taken for this call."""
        if self._snap is not None:
            yield self._snap
        else:
            with self.index.snapshot() as snap:
                yield snap

    def prepare(self) -> None:
        """Load the embedding model (raises when none is available)."""
        if self.index.embedder() is None:
            raise RerankBackendError(f"embedding model {self.index.model_state}")

    def normalize(self, scores: Sequence[float]) -> list[float]:
        """Cosine -> 0-1, linear between COS_FLOOR and COS_CEIL, clipped."""
        span = self.COS_CEIL - self.COS_FLOOR
        return [min(max((s - self.COS_FLOOR) / span, 0.0), 1.0) for s in scores]

    def affordable(
        self, query: str, candidates: Sequence[SearchResult], budget_ms: float, *, precise: bool
    ) -> int:
        """The prefix of `candidates` whose texts still to embed fit the budget.

        Gate: shards without a stored vector (notes not embedded yet). Precision: sentence
        windows not in the cache. Each costs the measured time per embedded text; a candidate
        with nothing left to embed costs nothing.
        """
        pending: set[str] = set()
        for n, r in enumerate(candidates):
            texts = (
                self._unembedded_shards(r)
                if not precise
                else [
                    w
                    for c in r.context_shards[: self.window_shards]
                    if c.text.strip()
                    for w in _windows_of(c.text)
                ]
            )
            for t in texts:
                k = VectorCache.key(t)
                if k not in pending and self.cache.get(k) is None:
                    pending.add(k)
            if not self.cost.fits(len(pending), budget_ms):
                return n
        return len(candidates)

    def _unembedded_shards(self, r: SearchResult) -> list[str]:
        with self._view() as snap:
            return [
                snap.shards[n].search_text
                for n in snap.shard_ids(r.document_path)
                if n in snap.shards and snap.vector(n) is None
            ]

    def score(
        self,
        query: str,
        candidates: Sequence[SearchResult],
        *,
        precise: bool = True,
        cancelled: Cancelled | None = None,
    ) -> list[float]:
        """Best shard cosine (gate) or the window/shard mix (precision), per candidate."""
        cancelled = cancelled or never
        emb = self.index.embedder()
        if emb is None:
            raise RerankBackendError(f"embedding model {self.index.model_state}")
        qvec = self._query_vector(query, emb)
        best = self._best_shards(qvec, candidates, emb, cancelled)
        if not precise:
            return [b.cosine for b in best]
        windows = [self._windows(r, b) for r, b in zip(candidates, best)]
        self._embed_missing([w for ws in windows for w in ws], emb, cancelled)
        w = self.window_weight
        out: list[float] = []
        for b, ws in zip(best, windows):
            cos = [float(v @ qvec) for v in (self.cache.get(VectorCache.key(t)) for t in ws) if v is not None]
            out.append(w * max(cos) + (1.0 - w) * b.cosine if cos else b.cosine)
        return out

    def warm(self, results: Sequence[SearchResult], query: str, cancelled: Cancelled | None = None) -> int:
        """Embed the windows the precision pass would need for `results`; returns how many were new."""
        emb = self.index.embedder()
        if emb is None:
            return 0
        cancelled = cancelled or never
        before = len(self.cache)
        try:
            best = self._best_shards(self._query_vector(query, emb), results, emb, cancelled)
            windows = [w for r, b in zip(results, best) for w in self._windows(r, b)]
            self._embed_missing(windows, emb, cancelled)
        except RerankCancelled:
            pass
        return max(0, len(self.cache) - before)

    def remember_query(self, query: str, vector: np.ndarray) -> None:
        """Use `vector` as the embedding of `query` (the pipeline already computed it)."""
        vec = np.asarray(vector, dtype=np.float32).reshape(-1)
        self._queries.put(query, vec)

    # -- parts -----------------------------------------------------------------------------------------
    def _windows(self, r: SearchResult, best: _Best) -> list[str]:
        texts = [c.text for c in r.context_shards[: self.window_shards] if c.text.strip()] or [best.text]
        return list(dict.fromkeys(w for t in texts for w in _windows_of(t)))

    def _query_vector(self, query: str, emb: Any) -> np.ndarray:
        vec = self._queries.get(query)
        if vec is None:
            vec = np.asarray(emb.encode([query])[0], dtype=np.float32)
            self._queries.put(query, vec)
        return vec

    def _best_shards(
        self, qvec: np.ndarray, candidates: Sequence[SearchResult], emb: Any, cancelled: Cancelled
    ) -> list[_Best]:
        """Per candidate, its best shard: stored vectors, else shards embedded now, else its passages."""
        stored: list[list[tuple[np.ndarray, str]]] = []
        unembedded: list[list[str]] = []
        with self._view() as snap:
            for r in candidates:
                have: list[tuple[np.ndarray, str]] = []
                lack: list[str] = []
                for node_id in snap.shard_ids(r.document_path):
                    sh = snap.shards.get(node_id)
                    if sh is None:
                        continue
                    v = snap.vector(node_id)
                    if v is not None:
                        have.append((v, sh.text))
                    else:
                        lack.append(sh.search_text)
                if not have and not lack:  # gone from the index since: use the passages shown
                    lack = [c.text for c in r.context_shards if c.text.strip()]
                stored.append(have)
                unembedded.append(lack)
        if any(unembedded):
            self._embed_missing([t for ts in unembedded for t in ts], emb, cancelled)
        out: list[_Best] = []
        for have, lack in zip(stored, unembedded):
            pairs = [(float(v @ qvec), text) for v, text in have]
            for t in lack:
                v = self.cache.get(VectorCache.key(t))
                if v is not None:
                    pairs.append((float(v @ qvec), t))
            if pairs:
                cos, text = max(pairs, key=lambda p: p[0])
                out.append(_Best(cos, text))
            else:
                out.append(_Best(0.0, ""))
        return out

    def _embed_missing(self, texts: Sequence[str], emb: Any, cancelled: Cancelled) -> None:
        todo: list[tuple[str, str]] = []
        seen: set[str] = set()
        for t in texts:
            k = VectorCache.key(t)
            if k not in seen and self.cache.get(k) is None:
                seen.add(k)
                todo.append((k, t))
        for i in range(0, len(todo), self.batch_size):
            if cancelled():
                raise RerankCancelled()
            chunk = todo[i : i + self.batch_size]
            t0 = time.perf_counter()
            vecs = emb.encode([t for _, t in chunk], batch_size=self.batch_size)
            self.cost.observe((time.perf_counter() - t0) * 1000, len(chunk))
            for (k, _), v in zip(chunk, vecs):
                self.cache.put(k, np.asarray(v, dtype=np.float32))
