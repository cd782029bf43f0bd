"""Fusion of rankings: weighted Reciprocal Rank Fusion, or score fusion of normalised raw scores.

The explanation of every score is built while fusing: each fused shard keeps its rankings' shares,
spelt out as `Contribution` records when read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from explorer.search.schema import Contribution, Ranking

__all__ = ["SIMILARITY_RETRIEVERS", "Entry", "Fused", "Ranking", "aggregate", "rrf", "score_fusion"]

#: Retrievers whose raw score is a cosine similarity (normalised from a floor in score fusion).
SIMILARITY_RETRIEVERS = frozenset({"dense", "feedback"})


_Part = tuple[Ranking, int, float, float, float]
"""One ranking's share of a fused shard, before it is spelt out: (ranking, rank, raw score, source weight, value)."""


class Fused:
    """A shard's fused score with the contributions that make it up (immutable).

    A fusion scores every shard of every ranking, and a search explains only the few it shows:
    the `Contribution` records of a shard are spelt out on first read, from what the fusion kept.
    """

    __slots__ = ("_contributions", "_parts", "best_rank", "node_id", "score")

    node_id: str
    """The shard."""
    score: float
    """Sum of `contributions`."""
    best_rank: int
    """Lowest rank the shard reached in any ranking (tie-break)."""
    _contributions: tuple[Contribution, ...] | None
    _parts: list[_Part] | None

    def __init__(
        self, node_id: str, score: float, contributions: tuple[Contribution, ...], best_rank: int
    ) -> None:
        _set_id(self, node_id)
        _set_score(self, score)
        _set_made(self, contributions)
        _set_parts(self, None)
        _set_best(self, best_rank)

    @property
    def contributions(self) -> tuple[Contribution, ...]:
        """One per ranking the shard appears in, in ranking order."""
        made = self._contributions
        if made is None:
            parts = self._parts or ()
            made = tuple(
                Contribution(r.term, r.retriever, rank, raw, r.retriever_weight, r.term_weight, sw, value)
                for r, rank, raw, sw, value in parts
            )
            _set_made(self, made)
        return made

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Fused is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Fused is immutable: cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Fused):
            return NotImplemented
        return (self.node_id, self.score, self.contributions, self.best_rank) == (
            other.node_id,
            other.score,
            other.contributions,
            other.best_rank,
        )

    def __hash__(self) -> int:
        return hash((self.node_id, self.score, self.contributions, self.best_rank))

    def __repr__(self) -> str:
        return (
            f"Fused(node_id={self.node_id!r}, score={self.score!r}, "
            f"contributions={self.contributions!r}, best_rank={self.best_rank!r})"
        )


_set_id = Fused.__dict__["node_id"].__set__
_set_score = Fused.__dict__["score"].__set__
_set_made = Fused.__dict__["_contributions"].__set__
_set_parts = Fused.__dict__["_parts"].__set__
_set_best = Fused.__dict__["best_rank"].__set__
_new = object.__new__


def _fused(node_id: str, parts: list[_Part], best_rank: int) -> Fused:
    """A `Fused` whose contributions are spelt out from `parts` when first read."""
    f = _new(Fused)
    _set_id(f, node_id)
    _set_score(f, sum(p[4] for p in parts))
    _set_made(f, None)
    _set_parts(f, parts)
    _set_best(f, best_rank)
    return f


def rrf(
    rankings: Sequence[Ranking],
    k: int = 60,
    source_weight: Callable[[str], float] = lambda _node_id: 1.0,
    only: AbstractSet[str] | None = None,
) -> list[Fused]:
    """Fuse rankings: score(d) = sum over rankings of w_retriever * w_term * w_source(d) / (k + rank).

    Ties break by best single rank, then node_id, so the order is deterministic. With `only`, the
    list holds those shards alone, each with the score, ranks and place among them it has in the
    whole fusion (for a caller that reads a few shards' order, not the list).
    """

    def by_rank(ranking: Ranking) -> _Value:
        return lambda rank, _raw, sw: ranking.retriever_weight * ranking.term_weight * sw / (k + rank)

    return _fuse(rankings, source_weight, by_rank, only)


def score_fusion(
    rankings: Sequence[Ranking],
    cos_floor: float,
    source_weight: Callable[[str], float] = lambda _node_id: 1.0,
) -> list[Fused]:
    """Fuse rankings by their scores: score(d) = sum over rankings of w_retriever * w_term * w_source(d) * norm(raw).

    `norm` puts each ranking's raw scores on 0-1 from its own best: a BM25 (or other lexical)
    score is divided by the ranking's best score; a cosine (SIMILARITY_RETRIEVERS) counts from
    `cos_floor`, where unrelated texts sit, as (cos - floor) / (best - floor), clipped at 0.
    Unlike RRF, which gives rank 1 and rank 2 nearly the same share whatever their scores, a
    passage that clearly beats the rest in one retriever keeps that lead. Ties break as in `rrf`.
    """

    def by_score(ranking: Ranking) -> _Value:
        top = max((float(raw) for _, raw in ranking.items), default=0.0)
        floor = cos_floor if ranking.retriever in SIMILARITY_RETRIEVERS else 0.0
        span = top - floor

        def value(rank: int, raw: float, sw: float) -> float:
            norm = min(1.0, max(0.0, (raw - floor) / span)) if span > 0 else (1.0 if rank == 1 else 0.0)
            return ranking.retriever_weight * ranking.term_weight * sw * norm

        return value

    return _fuse(rankings, source_weight, by_score)


_Value = Callable[[int, float, float], float]
"""A ranking's contribution for (rank, raw score, source weight)."""


def _fuse(
    rankings: Sequence[Ranking],
    source_weight: Callable[[str], float],
    value_for: Callable[[Ranking], _Value],
    only: AbstractSet[str] | None = None,
) -> list[Fused]:
    """Sum each shard's contributions over the rankings (`value_for` gives a ranking's formula);
    with `only`, of those shards alone (ranks still counted in the whole rankings)."""
    parts: dict[str, list[_Part]] = {}
    best: dict[str, int] = {}
    weights: dict[str, float] = {}
    for ranking in rankings:
        if not ranking.items:
            continue
        value = value_for(ranking)
        for rank, (node_id, raw) in enumerate(ranking.items, 1):
            if only is not None and node_id not in only:
                continue
            sw = weights.get(node_id)
            if sw is None:
                sw = weights[node_id] = source_weight(node_id)
            raw = float(raw)
            part = (ranking, rank, raw, sw, value(rank, raw, sw))
            have = parts.get(node_id)
            if have is None:
                parts[node_id] = [part]
                best[node_id] = rank
            else:
                have.append(part)
                if rank < best[node_id]:
                    best[node_id] = rank
    fused = [_fused(node_id, ps, best[node_id]) for node_id, ps in parts.items()]
    fused.sort(key=lambda f: (-f.score, f.best_rank, f.node_id))
    return fused


@dataclass(slots=True)
class Entry:
    """A note in a fused list: its retrieved shards, best first (the first one's score is the note's)."""

    path: str
    """The note's vault-relative path."""
    fused: list[Fused]
    """Its shards' fused scores, best first (empty for an always-include entry no ranking found)."""
    pass_: int = 1
    """The pass that found it."""
    source: str = "search"
    """`search`, or `always_include` for a note added by a rule."""
    reason: str = ""
    """Why an always-include entry was added."""
    fusion: str = "rrf"
    """How its shards' scores were fused: `rrf` or `score`."""
    recency: float | None = None
    """The share of its score a recency preference leaves it (None: no preference; explorer.search.core.notefilters)."""

    @property
    def score(self) -> float:
        """The note's score: its best shard's fused score (times `recency`)."""
        if not self.fused:
            return 0.0
        score = self.fused[0].score
        return score * self.recency if self.recency is not None else score


def aggregate(
    fused: Sequence[Fused],
    path_of: Callable[[str], str | None],
    pass_: int,
    fusion: str = "rrf",
) -> list[Entry]:
    """Shards to notes: each note keeps its shards in fused order and ranks by its best shard's score.

    `path_of(node_id)` names the shard's note (None: the shard is gone, skip it). Ties keep the
    order of the best shards.
    """
    by_path: dict[str, Entry] = {}
    order: list[Entry] = []
    for f in fused:
        path = path_of(f.node_id)
        if path is None:
            continue
        entry = by_path.get(path)
        if entry is None:
            entry = Entry(path, [f], pass_, fusion=fusion)
            by_path[path] = entry
            order.append(entry)
        else:
            entry.fused.append(f)
    return order
