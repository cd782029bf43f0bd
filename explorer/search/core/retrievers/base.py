"""What every retriever is: the protocol, the request one retrieval hands to each, the depth helpers.

A retriever turns one request (the search terms, their query vectors, the shards the filters
allow, the snapshot) into ranked lists of shards, `Ranking` records that fusion weighs by their
`retriever` name. The retrieve stage (explorer.search.core.retrieve) runs the registered ones in
order (explorer.search.core.retrievers.REGISTRY), and each sees the rankings of those before it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from explorer.config import Settings
from explorer.index.backend import Restriction, Snapshot
from explorer.search.changes import NoteChanges
from explorer.search.core.terms import SearchTerms
from explorer.search.core.typos import Correction
from explorer.search.schema import Ranking


@dataclass(frozen=True)
class Request:
    """One retrieval: what every retriever of it reads."""

    snap: Snapshot
    terms: SearchTerms
    qvecs: dict[str, np.ndarray] | None
    """Query vectors by text (None: no embedding model)."""
    allowed: set[str] | None
    """node_ids the query's filters allow (None: all)."""
    restriction: Restriction | None
    """`allowed` as the snapshot prepared it for its top-k reads."""
    depth: int
    """Distinct notes each ranking reaches."""
    fetch: int
    """Shards asked for first, so that a ranking usually reaches `depth` notes in one go."""
    floor: float
    """The dense rankings' cosine floor."""
    corrections: list[Correction]
    """Misspelt words' corrections, searched in their place."""
    phrases: tuple[str, ...]
    """The query's quoted phrases."""
    feedback: bool
    """Whether the dense feedback ranking is wanted."""
    dialog: bool
    """Read conversation turns in their dialog (adjacent turns' words and context vectors)."""


class RankingRetriever(Protocol):
    """One kind of ranked list (BM25, dense, phrase, name, feedback)."""

    name: str
    """Its rankings' `retriever`; `timing` is its entry in the search's `timings_ms`."""
    timing: str

    def prepare(self, snap: Snapshot) -> None:
        """Build the tables it reads for the snapshot's version ahead of a query (nothing for most)."""
        ...

    def applies(self, request: Request) -> bool:
        """Whether it runs for this request (it is then timed even when it finds nothing)."""
        ...

    def rank(self, request: Request, before: Sequence[Ranking]) -> list[Ranking]:
        """Its rankings; `before`: those of the retrievers that ran before it in this retrieval."""
        ...


RetrieverFactory = Callable[[Settings, dict[str, float], NoteChanges], RankingRetriever]
"""Makes a retriever from the settings, the source weights and the pipeline's note changes."""


def shard_depth(snap: Snapshot, notes: int) -> int:
    """Shards to fetch so that a ranking usually reaches `notes` distinct notes in one go."""
    n_notes = max(1, len(snap.notes))
    per_note = len(snap.shards) / n_notes
    return max(notes, int(notes * per_note * 2) + 16)


def note_depth(
    snap: Snapshot,
    fetch: Callable[[int], list[tuple[str, float]]],
    n: int,
    notes: int,
    first: list[tuple[str, float]] | None = None,
) -> list[tuple[str, float]]:
    """A shard ranking cut after the shards of its first `notes` distinct notes.

    The candidate depth counts notes, not shards: a note cut into many shards must not crowd
    other notes out of a ranking. `fetch(n)` returns the n best shards; it is called again
    with a larger n when the first n shards cover too few notes and more exist.
    """
    items = first if first is not None else fetch(n)
    shards = snap.shards
    while True:
        seen: set[str] = set()
        for i, (node_id, _score) in enumerate(items):
            shard = shards.get(node_id)
            path = shard.path if shard is not None else node_id
            if path not in seen:
                if len(seen) == notes:
                    return items[:i]
                seen.add(path)
        if len(items) < n:
            return items
        n *= 4
        items = fetch(n)


def source_weights(snap: Snapshot, weights: dict[str, float]) -> Callable[[str], float]:
    """w_source(node_id): the weight of the shard's source type (1.0 for unknown shards and types)."""
    shards = snap.shards

    def weight(node_id: str) -> float:
        shard = shards.get(node_id)
        if shard is None:
            return 1.0
        return weights.get(shard.source_type, 1.0)

    return weight
