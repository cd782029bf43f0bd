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
    """The state of an index these functions read (explorer.index.local.lexical.BM25Index)."""

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
        term_parts.append(t[keep].astype(np.int32))
        doc_parts.append(new_id[docs[keep]].astype(np.int32))
        tf_parts.append(np.asarray(b["post_tf"])[keep].astype(np.int32))
        del t, docs, keep
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
                dtype=np.int32,
                count=total,
            )
        )
        doc_parts.append(np.repeat(new_id[np.asarray(own, dtype=np.int64)].astype(np.int32), lengths))
        tf_parts.append(
            np.fromiter(
                itertools.chain.from_iterable(c.values() for c in docs_terms), dtype=np.int32, count=total
            )
        )
    del docs_terms
    # The pairs are held as int32 (the segment's own type) and each temporary is let go as soon as
    # it is used: at 50k notes (15 million pairs) int64 copies held side by side took 1.3 GB
    # at the end of a first index, on top of the count dicts the pairs are read from.
    terms, docs, tfs = (_joined(parts) for parts in (term_parts, doc_parts, tf_parts))
    del term_parts, doc_parts, tf_parts
    # Drop terms no kept document has, renumbering the rest in their order.
    used = np.zeros(len(vocab), dtype=bool)
    used[terms] = True
    remap = (np.cumsum(used) - 1).astype(np.int32)
    vocab = [w for w, u in zip(vocab, used.tolist()) if u]
    terms = remap[terms]
    del used, remap
    v = len(vocab)
    arrays: dict[str, np.ndarray] = {
        "doc_len": index._doc_len[slots].astype(np.int64),
        "post_ptr": np.concatenate([[0], np.cumsum(np.bincount(terms, minlength=v))]).astype(np.int64),
        "doc_ptr": np.concatenate([[0], np.cumsum(np.bincount(docs, minlength=d))]).astype(np.int64),
    }
    # Each (term, document) pair occurs once, so one sort of a combined key orders them as a
    # lexsort of the two would (and costs half as much).
    order = np.argsort(_pair_key(terms, max(d, 1), docs))
    arrays["post_doc"] = docs[order]
    arrays["post_tf"] = tfs[order]
    order = np.argsort(_pair_key(docs, max(v, 1), terms))
    arrays["fwd_term"] = terms[order]
    arrays["fwd_tf"] = tfs[order]
    return vocab, arrays


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """The int32 parts as one array (the part itself when there is one: no copy)."""
    if not parts:
        return np.zeros(0, dtype=np.int32)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _pair_key(major: np.ndarray, scale: int, minor: np.ndarray) -> np.ndarray:
    """major * scale + minor as int64, made in one array (no temporaries)."""
    key = major.astype(np.int64)
    key *= scale
    key += minor
    return key
