"""A `BM25Index`'s term statistics in array form: the base segment read and written as CSR arrays.

`export_segment` writes the live documents as a compact segment for `BM25Index.load_base`;
`document_frequencies` counts every term's live documents across the loaded segment (masking
the documents removed since) and the documents added since. Both read the index's state and
change nothing.
"""

from __future__ import annotations

import itertools
from typing import Protocol

import numpy as np


class _Index(Protocol):
    """The state of an index these functions read (explorer.index.lexical.BM25Index)."""

    @property
    def _slot_of(self) -> dict[str, int]: ...

    @property
    def _key_of(self) -> list[str | None]: ...

    @property
    def _doc_len(self) -> np.ndarray: ...

    @property
    def _doc_terms(self) -> list[dict[str, int] | None]: ...

    @property
    def _postings(self) -> dict[str, dict[int, int]]: ...

    @property
    def _base_n(self) -> int: ...

    @property
    def _base_vocab(self) -> dict[str, int]: ...

    @property
    def _base_terms(self) -> list[str]: ...

    @property
    def _base_dead(self) -> np.ndarray: ...

    @property
    def _base_ndead(self) -> int: ...

    @property
    def _base(self) -> dict[str, np.ndarray]: ...


def document_frequencies(index: _Index) -> tuple[list[str], np.ndarray]:
    """Every term with at least one live document of `index`, and its document frequency."""
    if not index._base_n:
        terms = list(index._postings)
        return terms, np.fromiter(
            (len(index._postings[t]) for t in terms), dtype=np.float64, count=len(terms)
        )
    ptr, doc = index._base["post_ptr"], index._base["post_doc"]
    if index._base_ndead:
        live = (~index._base_dead[doc]).astype(np.int64)
        cum = np.concatenate([[0], np.cumsum(live)])
        df = (cum[ptr[1:]] - cum[ptr[:-1]]).astype(np.float64)
    else:
        df = np.diff(ptr).astype(np.float64)
    extra_terms: list[str] = []
    extra_df: list[int] = []
    vocab = index._base_vocab
    for term, posting in index._postings.items():
        tid = vocab.get(term)
        if tid is None:
            extra_terms.append(term)
            extra_df.append(len(posting))
        else:
            df[tid] += len(posting)
    keep = np.flatnonzero(df > 0)
    base_terms = index._base_terms
    terms = [base_terms[i] for i in keep.tolist()] + extra_terms
    return terms, np.concatenate([df[keep], np.asarray(extra_df, dtype=np.float64)])


def export_segment(index: _Index, keys: list[str]) -> tuple[list[str], dict[str, np.ndarray]]:
    """(vocab, arrays) of the live documents `keys` of `index`, in that order, for
    `BM25Index.load_base` (a compact segment)."""
    d = len(keys)
    slots = np.fromiter((index._slot_of[k] for k in keys), dtype=np.int64, count=d)
    new_id = np.full(len(index._key_of), -1, dtype=np.int64)
    new_id[slots] = np.arange(d)
    term_parts, doc_parts, tf_parts = [], [], []
    vocab: list[str] = []
    term_id: dict[str, int] = {}
    if index._base_n:
        b = index._base
        vocab = list(index._base_terms)
        term_id = dict(index._base_vocab)
        ptr = b["post_ptr"]
        t = np.repeat(np.arange(len(ptr) - 1, dtype=np.int64), np.diff(ptr))
        docs = np.asarray(b["post_doc"], dtype=np.int64)
        keep = ~index._base_dead[docs] & (new_id[docs] >= 0)
        term_parts.append(t[keep])
        doc_parts.append(new_id[docs[keep]])
        tf_parts.append(np.asarray(b["post_tf"])[keep].astype(np.int64))
    # Documents added since the segment (or all, in an index built in memory), in `keys` order:
    # their terms are numbered in order of first appearance, in C loops over the count dicts.
    base_n = index._base_n
    own = [s for s in slots.tolist() if not (s < base_n and not index._base_dead[s])]
    docs_terms = [index._doc_terms[s] or {} for s in own]
    if docs_terms:
        first_seen = dict.fromkeys(itertools.chain(vocab, itertools.chain.from_iterable(docs_terms)))
        for term in itertools.islice(first_seen, len(vocab), None):
            term_id[term] = len(vocab)
            vocab.append(term)
        lengths = np.fromiter(map(len, docs_terms), dtype=np.int64, count=len(docs_terms))
        total = int(lengths.sum())
        term_parts.append(
            np.fromiter(
                map(term_id.__getitem__, itertools.chain.from_iterable(docs_terms)),
                dtype=np.int64,
                count=total,
            )
        )
        doc_parts.append(np.repeat(new_id[np.asarray(own, dtype=np.int64)], lengths))
        tf_parts.append(
            np.fromiter(
                itertools.chain.from_iterable(c.values() for c in docs_terms), dtype=np.int64, count=total
            )
        )
    terms = np.concatenate(term_parts) if term_parts else np.zeros(0, dtype=np.int64)
    docs = np.concatenate(doc_parts) if doc_parts else np.zeros(0, dtype=np.int64)
    tfs = np.concatenate(tf_parts) if tf_parts else np.zeros(0, dtype=np.int64)
    # Drop terms no kept document has, renumbering the rest in their order.
    used = np.zeros(len(vocab), dtype=bool)
    used[terms] = True
    remap = np.cumsum(used) - 1
    vocab = [w for w, u in zip(vocab, used.tolist()) if u]
    terms = remap[terms]
    # Each (term, document) pair occurs once, so one sort of a combined key orders them as a
    # lexsort of the two would (and costs half as much).
    by_term = np.argsort(terms * max(d, 1) + docs)
    by_doc = np.argsort(docs * max(len(vocab), 1) + terms)
    v = len(vocab)
    arrays: dict[str, np.ndarray] = {
        "doc_len": index._doc_len[slots].astype(np.int64),
        "post_ptr": np.concatenate([[0], np.cumsum(np.bincount(terms, minlength=v))]).astype(np.int64),
        "post_doc": docs[by_term].astype(np.int32),
        "post_tf": tfs[by_term].astype(np.int32),
        "doc_ptr": np.concatenate([[0], np.cumsum(np.bincount(docs, minlength=d))]).astype(np.int64),
        "fwd_term": terms[by_doc].astype(np.int32),
        "fwd_tf": tfs[by_doc].astype(np.int32),
    }
    return vocab, arrays
