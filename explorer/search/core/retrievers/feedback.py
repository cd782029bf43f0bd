"""The dense feedback retriever: the query vector moved toward the best fused passages, searched again."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from explorer.config import Settings
from explorer.index.backend import Snapshot
from explorer.search.changes import NoteChanges
from explorer.search.core.retrievers.base import Request, note_depth
from explorer.search.fusion import rrf
from explorer.search.schema import Ranking

#: Weight of the feedback passages' mean vector added to the query vector.
FEEDBACK_BETA = 1.0
#: Weight of the dense feedback ranking.
FEEDBACK_WEIGHT = 1.0


class FeedbackRetriever:
    """Rocchio feedback on the embeddings (retriever `feedback`).

    The vectors of the top `feedback_shards` fused shards that are semantic matches of the query
    (in its dense ranking, so above the cosine floor; one per note) are averaged, added to the
    query vector with weight `FEEDBACK_BETA`, and the normalised sum searches the matrix like a
    query (same cosine floor, same depth). The ranking's `sources` name the shards it was built from.
    """

    name = "feedback"
    timing = "feedback"

    def __init__(self, settings: Settings, weights: dict[str, float], changes: NoteChanges) -> None:
        self.settings = settings

    def prepare(self, snap: Snapshot) -> None:
        pass

    def applies(self, request: Request) -> bool:
        return (
            request.qvecs is not None
            and request.feedback
            and self.settings.experimental.feedback_shards > 0
            and request.terms.all_terms[0] in request.qvecs
        )

    def rank(self, request: Request, before: Sequence[Ranking]) -> list[Ranking]:
        s = self.settings.experimental
        snap, query = request.snap, request.terms.all_terms[0]
        assert request.qvecs is not None
        qvec = request.qvecs[query]
        semantic = {nid for r in before if r.retriever == "dense" and r.term == query for nid, _ in r.items}
        seen: set[str] = set()
        used: list[str] = []
        vecs: list[np.ndarray] = []
        # Chosen by retrieval evidence alone: a source weight (knowledge 1.5) must not make a
        # passage barely over the cosine floor a feedback passage, whose own vector would then
        # rank it again near the top of the feedback list (weighted again).
        # Fused over every ranking, but only the semantic matches are read: the others are left out of the sum.
        for f in rrf(before, s.rrf_k, only=semantic):
            shard = snap.shards.get(f.node_id)
            if shard is None or shard.path in seen:
                continue
            vec = snap.vector(f.node_id)
            if vec is None:
                continue
            seen.add(shard.path)
            used.append(f.node_id)
            vecs.append(vec)
            if len(vecs) == s.feedback_shards:
                break
        if not vecs:
            return []
        moved = np.asarray(qvec, dtype=np.float32) + FEEDBACK_BETA * np.mean(vecs, axis=0)
        norm = float(np.linalg.norm(moved))
        if norm == 0.0:
            return []
        row = (moved / norm).reshape(1, -1).astype(np.float32)
        floor, restriction = request.floor, request.restriction
        items = note_depth(
            snap, lambda n: snap.vector_top(row, n, floor, restriction)[0], request.fetch, request.depth
        )
        return [Ranking(query, "feedback", FEEDBACK_WEIGHT, s.query_weight, tuple(items), tuple(used))]
