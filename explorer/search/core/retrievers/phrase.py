"""The phrase retriever: the shards that contain every quoted phrase of the query, in its BM25 order."""

from __future__ import annotations

from collections.abc import Sequence

from explorer.config import Settings
from explorer.index.backend import Snapshot
from explorer.search.changes import NoteChanges
from explorer.search.core.retrievers.base import Request
from explorer.search.schema import Ranking

#: Weight of the ranking of passages that contain a query's quoted phrases exactly.
PHRASE_WEIGHT = 1.0


class PhraseRetriever:
    """Quoted phrases are evidence, not a filter: the shards containing them all (case and spacing
    ignored) form one ranking, and the phrase's words are searched anyway by the other retrievers,
    so a passage worded slightly differently still ranks."""

    name = "phrase"
    timing = "phrases"

    def __init__(self, settings: Settings, weights: dict[str, float], changes: NoteChanges) -> None:
        self.settings = settings

    def prepare(self, snap: Snapshot) -> None:
        pass

    def applies(self, request: Request) -> bool:
        return bool(request.phrases)

    def rank(self, request: Request, before: Sequence[Ranking]) -> list[Ranking]:
        wanted = [" ".join(p.lower().split()) for p in request.phrases if p.strip()]
        allowed = request.allowed
        hits = [
            nid
            for nid, sh in request.snap.shards.items()
            if (allowed is None or nid in allowed)
            and all(w in " ".join(sh.text.lower().split()) for w in wanted)
        ]
        order = {nid: i for r in before[:1] if r.retriever == "bm25" for i, (nid, _) in enumerate(r.items)}
        hits.sort(key=lambda nid: (order.get(nid, len(order)), nid))
        s = self.settings.experimental
        query = request.terms.all_terms[0]
        return [
            Ranking(
                query,
                "phrase",
                PHRASE_WEIGHT,
                s.query_weight,
                tuple((nid, 1.0) for nid in hits[: request.depth]),
            )
        ]
