"""Retrievers: each makes one kind of ranked list, behind one protocol (base.py: `RankingRetriever`).

- `lexical`: BM25, one ranking per search term (conversation turns read in their dialog when asked);
- `dense`: cosine, one ranking per embedded term (turns: the better of own and dialog-context vector);
- `phrase`: the shards holding every quoted phrase, in BM25 order;
- `name`: notes whose title, file name or alias the query names (its table `names`, the part of a
  named note `namedpart`);
- `feedback`: the query vector moved toward the best fused passages, searched again.

The retrieve stage (explorer.search.core.retrieve) builds one of each in `REGISTRY`'s order and
runs them in it: each sees the rankings of those before it (phrase orders by BM25, name and
feedback fuse what came before).
"""

from __future__ import annotations

from explorer.config import Settings
from explorer.search.changes import NoteChanges
from explorer.search.core.retrievers.base import RankingRetriever, RetrieverFactory
from explorer.search.core.retrievers.dense import DenseRetriever
from explorer.search.core.retrievers.feedback import FeedbackRetriever
from explorer.search.core.retrievers.lexical import BM25Retriever
from explorer.search.core.retrievers.name import NameRetriever
from explorer.search.core.retrievers.phrase import PhraseRetriever

#: Every retriever by its rankings' name, in the order a retrieval runs them.
REGISTRY: dict[str, RetrieverFactory] = {
    "bm25": BM25Retriever,
    "dense": DenseRetriever,
    "phrase": PhraseRetriever,
    "name": NameRetriever,
    "feedback": FeedbackRetriever,
}


def build_retrievers(
    settings: Settings, weights: dict[str, float], changes: NoteChanges
) -> list[RankingRetriever]:
    """One retriever of each registered kind, in the order they run."""
    return [make(settings, weights, changes) for make in REGISTRY.values()]
