"""Weighted Reciprocal Rank Fusion; the explanation of every score is built while fusing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from explorer.search.schema import Contribution


@dataclass(frozen=True, slots=True)
class Ranking:
    """One ranked list: a retriever's answer to one search term."""

    term: str
    """The search term."""
    retriever: str
    """`bm25`, `dense` or `feedback` (dense search with the query vector moved toward `sources`)."""
    retriever_weight: float
    """Weight of the retriever."""
    term_weight: float
    """Weight of the term."""
    items: tuple[tuple[str, float], ...]
    """(node_id, raw score), best first; rank = position + 1."""
    sources: tuple[str, ...] = ()
    """For a feedback ranking: the shards whose vectors moved the query vector."""


@dataclass(frozen=True, slots=True)
class Fused:
    """A shard's fused score with the contributions that make it up."""

    node_id: str
    """The shard."""
    score: float
    """Sum of `contributions`."""
    contributions: tuple[Contribution, ...]
    """One per ranking the shard appears in, in ranking order."""
    best_rank: int
    """Lowest rank the shard reached in any ranking (tie-break)."""


def rrf(
    rankings: Sequence[Ranking],
    k: int = 60,
    source_weight: Callable[[str], float] = lambda _node_id: 1.0,
) -> list[Fused]:
    """Fuse rankings: score(d) = sum over rankings of w_retriever * w_term * w_source(d) / (k + rank).

    Ties break by best single rank, then node_id, so the order is deterministic.
    """
    parts: dict[str, list[Contribution]] = {}
    best: dict[str, int] = {}
    for ranking in rankings:
        for position, (node_id, raw) in enumerate(ranking.items):
            rank = position + 1
            sw = source_weight(node_id)
            value = ranking.retriever_weight * ranking.term_weight * sw / (k + rank)
            parts.setdefault(node_id, []).append(
                Contribution(
                    term=ranking.term,
                    retriever=ranking.retriever,
                    rank=rank,
                    raw_score=float(raw),
                    retriever_weight=ranking.retriever_weight,
                    term_weight=ranking.term_weight,
                    source_weight=sw,
                    contribution=value,
                )
            )
            best[node_id] = min(best.get(node_id, rank), rank)
    fused = [
        Fused(node_id, sum(c.contribution for c in contribs), tuple(contribs), best[node_id])
        for node_id, contribs in parts.items()
    ]
    fused.sort(key=lambda f: (-f.score, f.best_rank, f.node_id))
    return fused
