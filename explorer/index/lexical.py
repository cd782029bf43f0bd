"""BM25 with rank_bm25.BM25Okapi's formula and defaults, updated one document at a time."""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable, Sequence

import numpy as np


class BM25Index:
    """Okapi BM25 over documents keyed by id, updated incrementally.

    Scores equal those of `rank_bm25.BM25Okapi(corpus, k1, b, epsilon).get_scores(query)` on the
    same live documents: idf = ln(N - n + 0.5) - ln(n + 0.5), negative idf floored at
    `epsilon * mean idf`, avgdl over live documents. Raw term counts are kept, the weights are
    computed at query time, so adding or removing a document costs work proportional to its
    own terms; only the idf table (one vector op over the vocabulary) is refreshed lazily.
    """

    def __init__(self, k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25) -> None:
        self.k1 = k1
        self.b = b
        self.epsilon = epsilon
        self._slot_of: dict[str, int] = {}
        self._key_of: list[str | None] = []
        self._free: list[int] = []
        self._doc_len = np.zeros(64, dtype=np.float64)
        self._doc_terms: list[dict[str, int] | None] = []
        self._postings: dict[str, dict[int, int]] = {}
        self._total_len = 0
        self._idf: dict[str, float] | None = None
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    # -- updates -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, key: str) -> bool:
        return key in self._slot_of

    def keys(self) -> list[str]:
        """Live document keys."""
        return list(self._slot_of)

    def add(self, key: str, tokens: Sequence[str]) -> None:
        """Add a document, replacing any with the same key."""
        self.add_counts(key, Counter(tokens), len(tokens))

    def add_counts(self, key: str, counts: Counter[str] | dict[str, int], length: int | None = None) -> None:
        """Add a document given its term counts (and length, default the sum of the counts)."""
        if key in self._slot_of:
            self.remove(key)
        slot = self._free.pop() if self._free else len(self._key_of)
        if slot == len(self._key_of):
            self._key_of.append(None)
            self._doc_terms.append(None)
            if slot >= len(self._doc_len):
                grown = np.zeros(max(64, len(self._doc_len) * 2), dtype=np.float64)
                grown[: len(self._doc_len)] = self._doc_len
                self._doc_len = grown
        length = sum(counts.values()) if length is None else length
        self._slot_of[key] = slot
        self._key_of[slot] = key
        self._doc_terms[slot] = counts
        self._doc_len[slot] = length
        self._total_len += length
        postings = self._postings
        for term, tf in counts.items():
            posting = postings.get(term)
            if posting is None:
                postings[term] = {slot: tf}
            else:
                posting[slot] = tf
        if self._arrays:
            for term in counts:
                self._arrays.pop(term, None)
        self._idf = None

    def remove(self, key: str) -> bool:
        """Remove a document; False when it was not there."""
        slot = self._slot_of.pop(key, None)
        if slot is None:
            return False
        counts = self._doc_terms[slot] or {}
        for term in counts:
            posting = self._postings.get(term)
            if posting is not None:
                posting.pop(slot, None)
                if not posting:
                    del self._postings[term]
            self._arrays.pop(term, None)
        self._total_len -= int(self._doc_len[slot])
        self._doc_len[slot] = 0
        self._key_of[slot] = None
        self._doc_terms[slot] = None
        self._free.append(slot)
        self._idf = None
        return True

    # -- statistics ----------------------------------------------------------------------
    @property
    def avgdl(self) -> float:
        """Mean document length in tokens."""
        n = len(self._slot_of)
        return self._total_len / n if n else 0.0

    def idf(self) -> dict[str, float]:
        """Term -> idf, as BM25Okapi computes it (recomputed only after a change)."""
        if self._idf is None:
            n = len(self._slot_of)
            terms = list(self._postings)
            df = np.fromiter((len(self._postings[t]) for t in terms), dtype=np.float64, count=len(terms))
            idf = np.log(n - df + 0.5) - np.log(df + 0.5)
            if len(idf):
                eps = self.epsilon * (float(idf.sum()) / len(idf))
                idf = np.where(idf < 0, eps, idf)
            self._idf = dict(zip(terms, idf.tolist()))
        return self._idf

    def doc_freq(self, term: str) -> int:
        """Number of live documents containing `term`."""
        return len(self._postings.get(term, ()))

    def term_freq(self, key: str, term: str) -> int:
        """Occurrences of `term` in document `key`."""
        slot = self._slot_of.get(key)
        if slot is None:
            return 0
        counts = self._doc_terms[slot]
        return counts.get(term, 0) if counts else 0

    def terms(self, key: str) -> dict[str, int]:
        """Term counts of document `key` (empty when absent)."""
        slot = self._slot_of.get(key)
        counts = self._doc_terms[slot] if slot is not None else None
        return counts if counts is not None else {}

    def doc_len(self, key: str) -> int:
        """Length of document `key` in tokens."""
        slot = self._slot_of.get(key)
        return int(self._doc_len[slot]) if slot is not None else 0

    # -- queries -------------------------------------------------------------------------
    def _posting_arrays(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        arrays = self._arrays.get(term)
        if arrays is None:
            posting = self._postings.get(term, {})
            slots = np.fromiter(posting.keys(), dtype=np.int64, count=len(posting))
            tfs = np.fromiter(posting.values(), dtype=np.float64, count=len(posting))
            arrays = (slots, tfs)
            self._arrays[term] = arrays
        return arrays

    def score_slots(self, query: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(slots, scores) of the documents that contain at least one query token."""
        idf = self.idf()
        avgdl = self.avgdl
        if not avgdl:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        scores = np.zeros(len(self._key_of), dtype=np.float64)
        hit = np.zeros(len(self._key_of), dtype=bool)
        k1, b = self.k1, self.b
        for term in query:
            w = idf.get(term)
            if w is None:
                continue
            slots, tf = self._posting_arrays(term)
            dl = self._doc_len[slots]
            scores[slots] += w * (tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)))
            hit[slots] = True
        idx = np.flatnonzero(hit)
        return idx, scores[idx]

    def get_scores(self, query: Sequence[str], keys: Iterable[str] | None = None) -> dict[str, float]:
        """Score of every live document (or of `keys`), 0.0 where no query token occurs."""
        slots, scores = self.score_slots(query)
        by_slot = dict(zip(slots.tolist(), scores.tolist()))
        wanted = self._slot_of if keys is None else {k: self._slot_of[k] for k in keys if k in self._slot_of}
        return {k: by_slot.get(s, 0.0) for k, s in wanted.items()}

    def mask(self, keys: Iterable[str]) -> np.ndarray:
        """A boolean slot mask of `keys`, for `top(..., allowed=mask)`."""
        m = np.zeros(len(self._key_of), dtype=bool)
        idx = [self._slot_of[k] for k in keys if k in self._slot_of]
        m[idx] = True
        return m

    def top(
        self, query: Sequence[str], k: int, allowed: set[str] | np.ndarray | None = None
    ) -> list[tuple[str, float]]:
        """The `k` best (key, score) among documents containing a query token, ties by key.

        `allowed` restricts the candidates: a set of keys, or a mask from `mask()`.
        """
        slots, scores = self.score_slots(query)
        if allowed is not None and len(slots):
            m = allowed if isinstance(allowed, np.ndarray) else self.mask(allowed)
            inside = slots < len(m)
            keep = np.zeros(len(slots), dtype=bool)
            keep[inside] = m[slots[inside]]
            slots, scores = slots[keep], scores[keep]
        if not len(slots) or k <= 0:
            return []
        if len(slots) > k:
            part = np.argpartition(-scores, k - 1)[:k]
            cut = scores[part].min()
            sel = scores >= cut
            slots, scores = slots[sel], scores[sel]
        pairs = [(self._key_of[s], sc) for s, sc in zip(slots.tolist(), scores.tolist())]
        pairs.sort(key=lambda p: (-p[1], p[0]))
        return [(key, sc) for key, sc in pairs[:k] if key is not None]


def bm25_idf_reference(n_docs: int, df: int) -> float:
    """The raw (unfloored) idf of one term; for documentation and tests."""
    return math.log(n_docs - df + 0.5) - math.log(df + 0.5)
