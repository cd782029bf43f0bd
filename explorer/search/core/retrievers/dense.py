"""The dense retriever: one cosine ranking per embedded search term (the matrix scanned once for all)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from explorer.config import Settings
from explorer.index.backend import Snapshot
from explorer.search.changes import NoteChanges
from explorer.search.core.retrievers.base import Request, note_depth
from explorer.search.schema import Ranking


class DenseRetriever:
    """Per embedded term, the shards above the cosine floor; with `dialog`, a turn's cosine is the
    better of its own vector's and its dialog-context vector's (explorer.index.local.dialog)."""

    name = "dense"
    timing = "dense"

    def __init__(self, settings: Settings, weights: dict[str, float], changes: NoteChanges) -> None:
        self.settings = settings

    def prepare(self, snap: Snapshot) -> None:
        pass

    def applies(self, request: Request) -> bool:
        return request.qvecs is not None

    def rank(self, request: Request, before: Sequence[Ranking]) -> list[Ranking]:
        s = self.settings.experimental
        qvecs, terms = request.qvecs, request.terms
        assert qvecs is not None
        snap, fetch, depth, floor, restriction = (
            request.snap,
            request.fetch,
            request.depth,
            request.floor,
            request.restriction,
        )
        embedded = embedded_terms(request, s.term_retrievers)
        if not embedded:
            return []
        rankings: list[Ranking] = []
        matrix = np.stack([qvecs[t] for t in embedded])
        hits = snap.vector_top(matrix, fetch, floor, restriction)
        in_context = (
            snap.vector_top(matrix, fetch, floor, restriction, context=True)
            if request.dialog and snap.has_vectors(context=True)
            else None
        )
        for j, (term, items) in enumerate(zip(embedded, hits)):
            tw = s.query_weight if term == terms.all_terms[0] else s.term_weight
            row = matrix[j : j + 1]
            items = note_depth(
                snap,
                lambda n: snap.vector_top(row, n, floor, restriction)[0],  # noqa: B023 - called at once
                fetch,
                depth,
                items,
            )
            if in_context is not None:
                items = _better_of(items, in_context[j])
            rankings.append(Ranking(term, "dense", s.dense_weight, tw, tuple(items)))
        return rankings


def embedded_terms(request: Request, term_retrievers: str) -> list[str]:
    """The search terms the dense rankings are made for: those with a query vector (the whole query, and
    every other term unless `experimental.term_retrievers` gives the other terms to BM25 alone)."""
    qvecs = request.qvecs or {}
    return [
        t
        for i, t in enumerate(request.terms.all_terms)
        if t in qvecs and (i == 0 or term_retrievers != "bm25")
    ]


def expect_dense(request: Request, term_retrievers: str) -> None:
    """Tell the snapshot the dense rankings this retrieval will ask for (`Snapshot.expect_vectors`)."""
    embedded = embedded_terms(request, term_retrievers)
    if embedded and request.qvecs is not None:
        matrix = np.stack([request.qvecs[t] for t in embedded])
        request.snap.expect_vectors(matrix, request.fetch, request.floor, request.restriction)


def _better_of(own: list[tuple[str, float]], context: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """One dense ranking from a turn's own cosines and its dialog-context cosines: each shard's better one."""
    best = dict(own)
    for node_id, cos in context:
        if cos > best.get(node_id, -2.0):
            best[node_id] = cos
    return sorted(best.items(), key=lambda item: (-item[1], item[0]))
