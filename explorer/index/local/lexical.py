"""BM25 with rank_bm25.BM25Okapi's formula and defaults, updated one document at a time."""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from operator import itemgetter

import numpy as np

from explorer.index.local.lexical_segment import document_frequencies, export_segment

#: rank_bm25.BM25Okapi's defaults, fixed by the parity test against it (tests/test_bm25_parity.py):
#: term-frequency saturation, length normalisation, and the floor of a negative idf as a share of the mean idf.
BM25_K1 = 1.5
BM25_B = 0.75
BM25_EPSILON = 0.25


class Vocabulary:
    """The terms an index's idf tables have held, in the order they first did (shared by its later versions).

    Append-only: a term that becomes live again may be listed twice, and a listed term may no
    longer be live (ask the idf table). Lets a reader that keeps something per term (the typo
    speller's word list) follow an index from one version to the next without reading its whole
    vocabulary again.
    """

    __slots__ = ("terms",)

    def __init__(self, terms: list[str]) -> None:
        self.terms = terms
        """Every term listed so far."""


class IdfTable(Mapping[str, float]):
    """Term -> idf of one version of a `BM25Index`, computed per term when first asked.

    The same values as a table of every term (`BM25Okapi`'s idf, negative idf floored at
    `epsilon * mean idf`): the mean comes from the count of terms per document frequency, which
    the index keeps up to date as documents change, so a new version costs work for the terms
    that changed, not for the whole vocabulary. Valid while its index is unchanged (a snapshot's
    index is: the writer forks before changing it).
    """

    def __init__(self, index: BM25Index, n: int, eps: float, size: int, vocabulary: Vocabulary) -> None:
        self._index = index
        self._n = n
        self._eps = eps
        self._size = size
        self._values: dict[str, float] = {}
        self._complete = False
        self.vocabulary = vocabulary
        """The terms of this index's tables so far (explorer.index.local.lexical.Vocabulary)."""

    def get(self, term: str, default: float | None = None) -> float | None:  # type: ignore[override]
        value = self._values.get(term)
        if value is not None or self._complete:
            return default if value is None else value
        df = self._index._live_df(term)
        if df <= 0:
            return default
        raw = float(np.log(np.float64(self._n - df + 0.5)) - np.log(np.float64(df + 0.5)))
        value = self._values[term] = self._eps if raw < 0 else raw
        return value

    def __getitem__(self, term: str) -> float:
        value = self.get(term)
        if value is None:
            raise KeyError(term)
        return value

    def __contains__(self, term: object) -> bool:
        return isinstance(term, str) and self.get(term) is not None

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[str]:
        if not self._complete:
            self._fill()
        return iter(self._values)

    def _fill(self, terms: list[str] | None = None, values: list[float] | None = None) -> None:
        """Compute every term's idf (in the order of the index's vocabulary)."""
        if terms is None or values is None:
            terms, df = self._index._document_frequencies()
            raw = np.log(self._n - df + 0.5) - np.log(df + 0.5)
            values = np.where(raw < 0, self._eps, raw).tolist()
        self._values = dict(zip(terms, values))
        self._complete = True


class BM25Index:
    """Okapi BM25 over documents keyed by id, updated incrementally.

    Scores equal those of `rank_bm25.BM25Okapi(corpus, k1, b, epsilon).get_scores(query)` on the
    same live documents: idf = ln(N - n + 0.5) - ln(n + 0.5), negative idf floored at
    `epsilon * mean idf`, avgdl over live documents. Raw term counts are kept, the weights are
    computed at query time, so adding or removing a document costs work proportional to its
    own terms; only the idf table (one vector op over the vocabulary) is refreshed lazily.
    """

    def __init__(self, k1: float = BM25_K1, b: float = BM25_B, epsilon: float = BM25_EPSILON) -> None:
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
        self._idf: IdfTable | None = None
        self._df_hist: dict[int, int] | None = None
        """Live terms per document frequency, kept once an idf table was built (None before)."""
        self._df_moved: dict[str, int] = {}
        """Net change of each term's document frequency since `_df_hist` was last brought up to date."""
        self._vocabulary: Vocabulary | None = None
        self._idf_lock = threading.Lock()
        """Held while a new idf table is made (searches of one snapshot may ask at once)."""
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        # The base segment: documents loaded as arrays (slots 0..base_n-1), see `load_base`.
        self._base_n = 0
        self._base_vocab: dict[str, int] = {}
        self._base_terms: list[str] = []
        self._base_dead = np.zeros(0, dtype=bool)
        self._base_ndead = 0
        self._base_dead_df: dict[str, int] = {}
        """Per term, the documents of the base segment that hold it and were removed since it was loaded."""
        self._base: dict[str, np.ndarray] = {}
        self._owned: set[str] | None = None
        """Terms whose posting dict this index may change in place (None: all; see `fork`)."""

    def fork(self) -> BM25Index:
        """A copy that shares everything a change replaces rather than changes, for a snapshot to keep this one.

        The containers a change edits in place (the slot tables, document lengths, the outer
        postings table) are copied; each term's posting dict is copied on the fork's first change
        to it; the base segment's arrays, the per-term arrays and the idf table are shared (they
        are replaced, never changed). So this index stays as it was, at the cost of copying
        tables proportional to the document count, once per batch that lands while a snapshot
        holds it.
        """
        twin = BM25Index.__new__(BM25Index)
        twin.k1, twin.b, twin.epsilon = self.k1, self.b, self.epsilon
        twin._slot_of = dict(self._slot_of)
        twin._key_of = list(self._key_of)
        twin._free = list(self._free)
        twin._doc_len = self._doc_len.copy()
        twin._doc_terms = list(self._doc_terms)
        twin._postings = dict(self._postings)
        twin._total_len = self._total_len
        twin._idf = self._idf
        twin._df_hist = dict(self._df_hist) if self._df_hist is not None else None
        twin._df_moved = dict(self._df_moved)
        twin._vocabulary = self._vocabulary
        twin._idf_lock = threading.Lock()
        twin._arrays = dict(self._arrays)
        twin._base_n = self._base_n
        twin._base_vocab = self._base_vocab
        twin._base_terms = self._base_terms
        twin._base_dead = self._base_dead.copy()
        twin._base_ndead = self._base_ndead
        twin._base_dead_df = dict(self._base_dead_df)
        twin._base = self._base
        twin._owned = set()
        return twin

    def _posting_for_change(self, term: str) -> dict[int, int] | None:
        """The posting dict of `term`, copied first when a fork still shares it."""
        posting = self._postings.get(term)
        if posting is not None and self._owned is not None and term not in self._owned:
            posting = self._postings[term] = dict(posting)
            self._owned.add(term)
        return posting

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
        owned = self._owned
        for term, tf in counts.items():
            posting = postings.get(term) if owned is None else self._posting_for_change(term)
            if posting is None:
                postings[term] = {slot: tf}
                if owned is not None:
                    owned.add(term)
            else:
                posting[slot] = tf
        if self._arrays:
            for term in counts:
                self._arrays.pop(term, None)
        if self._df_hist is not None:
            moved = self._df_moved
            for term in counts:
                moved[term] = moved.get(term, 0) + 1
        self._idf = None

    def remove(self, key: str) -> bool:
        """Remove a document; False when it was not there."""
        slot = self._slot_of.pop(key, None)
        if slot is None:
            return False
        if self._is_base(slot):
            self._base_dead[slot] = True
            self._base_ndead += 1
            counts = self._base_doc_terms(slot)
            dead_df = self._base_dead_df
            for term in counts:
                dead_df[term] = dead_df.get(term, 0) + 1
        else:
            counts = self._doc_terms[slot] or {}
        owned = self._owned
        for term in counts:
            posting = self._postings.get(term) if owned is None else self._posting_for_change(term)
            if posting is not None:
                posting.pop(slot, None)
                if not posting:
                    del self._postings[term]
            self._arrays.pop(term, None)
        if self._df_hist is not None:
            moved = self._df_moved
            for term in counts:
                moved[term] = moved.get(term, 0) - 1
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

    def idf(self) -> IdfTable:
        """Term -> idf, as BM25Okapi computes it (a new table only after a change).

        The first table reads every term's document frequency; later ones bring the count of
        terms per document frequency up to date with the terms documents added or removed since,
        and compute a term's idf when it is asked for.
        """
        table = self._idf
        if table is not None:
            return table
        with self._idf_lock:
            if self._idf is None:
                self._idf = self._new_idf()
            return self._idf

    def _new_idf(self) -> IdfTable:
        """A new idf table (the caller holds `_idf_lock`)."""
        n = len(self._slot_of)
        if self._df_hist is None:
            terms, df = self._document_frequencies()
            raw = np.log(n - df + 0.5) - np.log(df + 0.5)
            eps = self.epsilon * (float(raw.sum()) / len(raw)) if len(raw) else 0.0
            found, counts = np.unique(df.astype(np.int64), return_counts=True)
            self._df_hist = dict(zip(found.tolist(), counts.tolist()))
            self._df_moved = {}
            self._vocabulary = Vocabulary(list(terms))
            table = IdfTable(self, n, eps, len(terms), self._vocabulary)
            table._fill(terms, np.where(raw < 0, eps, raw).tolist())
            return table
        size, eps = self._settle_frequencies(n)
        assert self._vocabulary is not None
        return IdfTable(self, n, eps, size, self._vocabulary)

    def _settle_frequencies(self, n: int) -> tuple[int, float]:
        """Bring `_df_hist` up to date with `_df_moved`; (live terms, the idf floor) for `n` documents."""
        hist = self._df_hist
        assert hist is not None and self._vocabulary is not None
        appeared = []
        for term, delta in self._df_moved.items():
            if not delta:
                continue
            new = self._live_df(term)
            old = new - delta
            if old > 0:
                left = hist[old] - 1
                if left:
                    hist[old] = left
                else:
                    del hist[old]
            else:
                appeared.append(term)
            if new > 0:
                hist[new] = hist.get(new, 0) + 1
        self._df_moved = {}
        if appeared:
            self._vocabulary.terms.extend(appeared)
        if not hist:
            return 0, 0.0
        df = np.fromiter(hist.keys(), dtype=np.float64, count=len(hist))
        count = np.fromiter(hist.values(), dtype=np.float64, count=len(hist))
        size = int(count.sum())
        raw = np.log(n - df + 0.5) - np.log(df + 0.5)
        return size, self.epsilon * (float((raw * count).sum()) / size)

    def _document_frequencies(self) -> tuple[list[str], np.ndarray]:
        """Every term with at least one live document, and its document frequency."""
        return document_frequencies(self)

    def _live_df(self, term: str) -> int:
        """`doc_freq` without building the term's posting arrays."""
        df = len(self._postings.get(term, ()))
        tid = self._base_vocab.get(term) if self._base_n else None
        if tid is not None:
            ptr = self._base["post_ptr"]
            lo, hi = int(ptr[tid]), int(ptr[tid + 1])
            df += hi - lo - self._base_dead_df.get(term, 0)
        return df

    def doc_freq(self, term: str) -> int:
        """Number of live documents containing `term`."""
        if self._base_n:
            return len(self._posting_arrays(term)[0])
        return len(self._postings.get(term, ()))

    def term_freq(self, key: str, term: str) -> int:
        """Occurrences of `term` in document `key`."""
        return self.terms(key).get(term, 0)

    def terms(self, key: str) -> dict[str, int]:
        """Term counts of document `key` (empty when absent)."""
        slot = self._slot_of.get(key)
        if slot is None:
            return {}
        if self._is_base(slot):
            return self._base_doc_terms(slot)
        counts = self._doc_terms[slot]
        return counts if counts is not None else {}

    def tokens(self, key: str) -> Collection[str]:
        """The distinct terms of document `key` (empty when absent): `terms(key)` without the counts,
        which for a document of a loaded segment costs a list of its terms instead of a dict."""
        slot = self._slot_of.get(key)
        if slot is None:
            return ()
        if self._is_base(slot):
            b = self._base
            lo, hi = int(b["doc_ptr"][slot]), int(b["doc_ptr"][slot + 1])
            return list(map(self._base_terms.__getitem__, b["fwd_term"][lo:hi].tolist()))
        counts = self._doc_terms[slot]
        return counts.keys() if counts is not None else ()

    # -- the base segment -------------------------------------------------------------------
    def _is_base(self, slot: int) -> bool:
        return slot < self._base_n and not self._base_dead[slot]

    def _base_doc_terms(self, slot: int) -> dict[str, int]:
        b = self._base
        lo, hi = int(b["doc_ptr"][slot]), int(b["doc_ptr"][slot + 1])
        terms = self._base_terms
        return {terms[t]: tf for t, tf in zip(b["fwd_term"][lo:hi].tolist(), b["fwd_tf"][lo:hi].tolist())}

    def load_base(self, keys: list[str], vocab: list[str], arrays: dict[str, np.ndarray]) -> None:
        """Load documents as a read-only segment of arrays (an index opened from disk); the index must be empty.

        Args:
            keys: Document keys; document i takes slot i.
            vocab: Terms; term ids index it.
            arrays: `doc_len` (per document), `post_ptr`/`post_doc`/`post_tf` (per term, documents
                in CSR form) and `doc_ptr`/`fwd_term`/`fwd_tf` (per document, terms in CSR form).
                They may be read-only memory maps: documents removed later are masked, not erased.
        """
        if self._slot_of or self._key_of:
            raise ValueError("load_base needs an empty index")
        n = len(keys)
        self._base_n = n
        self._base = arrays
        self._base_terms = vocab
        self._base_vocab = {t: i for i, t in enumerate(vocab)}
        self._base_dead = np.zeros(n, dtype=bool)
        self._base_ndead = 0
        self._base_dead_df = {}
        self._slot_of = dict(zip(keys, range(n)))
        self._key_of = list(keys)
        self._doc_terms = [None] * n
        self._doc_len = np.zeros(max(64, n), dtype=np.float64)
        self._doc_len[:n] = arrays["doc_len"]
        self._total_len = int(arrays["doc_len"].sum())
        self._idf = None
        self._df_hist = None
        self._df_moved = {}
        self._arrays = {}

    def export(self, keys: list[str]) -> tuple[list[str], dict[str, np.ndarray]]:
        """(vocab, arrays) of the live documents `keys`, in that order, for `load_base` (a compact segment)."""
        return export_segment(self, keys)

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
            tid = self._base_vocab.get(term) if self._base_n else None
            if tid is not None:
                b = self._base
                lo, hi = int(b["post_ptr"][tid]), int(b["post_ptr"][tid + 1])
                bslots = b["post_doc"][lo:hi].astype(np.int64)
                btfs = b["post_tf"][lo:hi].astype(np.float64)
                if self._base_ndead:
                    keep = ~self._base_dead[bslots]
                    bslots, btfs = bslots[keep], btfs[keep]
                slots, tfs = np.concatenate([bslots, slots]), np.concatenate([btfs, tfs])
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

    def spread_pairs(
        self, pairs: Iterable[tuple[str, str, float]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(dst, src, weight) arrays of (key that gains, key whose words it gains, at what weight)
        triples of live documents, for `top_spread`."""
        slot = self._slot_of
        kept = [(slot[a], slot[b], w) for a, b, w in pairs if a in slot and b in slot]
        if not kept:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)
        dst, src, weight = zip(*kept)
        return (
            np.asarray(dst, dtype=np.int64),
            np.asarray(src, dtype=np.int64),
            np.asarray(weight, dtype=np.float64),
        )

    def top_spread(
        self,
        query: Sequence[str],
        k: int,
        pairs: tuple[np.ndarray, np.ndarray, np.ndarray],
        allowed: np.ndarray | None = None,
    ) -> list[tuple[str, float]]:
        """`top` over expanded documents: each `dst` document also holds its `src` documents' words
        at their `weight` (term counts and length), as if their text were appended with that weight.

        `pairs` is from `spread_pairs`. The idf counts the expanded documents that hold a term;
        a term in half of them or more counts nothing (in a dialog, the speakers' names are in
        nearly every expanded turn). avgdl is the expanded documents' mean. Documents that are no
        `dst` keep their own words.
        """
        dst, src, weight = pairs
        n_slots = len(self._key_of)
        n = len(self._slot_of)
        if not n or not self._total_len or k <= 0:
            return []
        dl = self._doc_len[:n_slots].copy()
        if len(dst):
            dl += np.bincount(dst, weights=weight * dl[src], minlength=n_slots)[:n_slots]
        avgdl = float(dl.sum()) / n
        base_idf = self.idf()
        scores = np.zeros(n_slots, dtype=np.float64)
        hit = np.zeros(n_slots, dtype=bool)
        k1, b = self.k1, self.b
        for term in query:
            if term not in base_idf:
                continue
            slots, tf_own = self._posting_arrays(term)
            tf = np.zeros(n_slots, dtype=np.float64)
            tf[slots] = tf_own
            if len(dst):
                tf += np.bincount(dst, weights=weight * tf[src], minlength=n_slots)[:n_slots]
            has = np.flatnonzero(tf > 0)
            df = len(has)
            w = math.log(n - df + 0.5) - math.log(df + 0.5)
            if w <= 0:  # in half the expanded documents or more (a speaker's name): no evidence
                continue
            t = tf[has]
            scores[has] += w * (t * (k1 + 1) / (t + k1 * (1 - b + b * dl[has] / avgdl)))
            hit[has] = True
        if allowed is not None:
            m = allowed[:n_slots]
            hit[: len(m)] &= m
            hit[len(m) :] = False
        idx = np.flatnonzero(hit)
        return self._best(idx, scores[idx], k)

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
        return self._best(slots, scores, k)

    def _best(self, slots: np.ndarray, scores: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The `k` best (key, score) of these slots and their scores, ties by key (freed slots left out)."""
        if not len(slots) or k <= 0:
            return []
        if len(slots) > k:
            part = np.argpartition(-scores, k - 1)[:k]
            cut = scores[part].min()
            sel = scores >= cut
            slots, scores = slots[sel], scores[sel]
        key_of = self._key_of
        pairs = [(key_of[s], sc) for s, sc in zip(slots.tolist(), scores.tolist()) if key_of[s] is not None]
        # Best score first, ties by key: two sorts in C (by key, then by score, which keeps the key
        # order of equal scores) instead of one sort with a tuple key built per pair.
        pairs.sort(key=itemgetter(0))
        pairs.sort(key=itemgetter(1), reverse=True)
        return pairs[:k]


def bm25_idf_reference(n_docs: int, df: int) -> float:
    """The raw (unfloored) idf of one term; for documentation and tests."""
    return math.log(n_docs - df + 0.5) - math.log(df + 0.5)
