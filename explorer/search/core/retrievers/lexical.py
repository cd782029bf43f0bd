"""The BM25 retriever: one ranking per search term, conversation turns read in their dialog when asked."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from explorer.config import Settings
from explorer.index.backend import Snapshot, Spread
from explorer.search.changes import NoteChanges
from explorer.search.core.retrievers.base import Request, note_depth
from explorer.search.core.typos import corrected_tokens
from explorer.search.schema import Ranking
from explorer.text.tokenize import tokenize

#: Turns away a turn's BM25 document reaches for its neighbours' words, the share
#: (`experimental.dialog_words`) multiplied at each step: 2 = the adjacent turns at 0.5, the next at 0.25.
DIALOG_REACH = 2


class BM25Retriever:
    """Per term, its words (a misspelt word's corrections in its place) ranked by BM25.

    With `dialog`, a turn's BM25 document also holds its adjacent turns' words at
    `experimental.dialog_words` per step (explorer.index.local.dialog); the pairs are kept per index version.
    """

    name = "bm25"
    timing = "bm25"

    def __init__(self, settings: Settings, weights: dict[str, float], changes: NoteChanges) -> None:
        self.settings = settings
        self._pairs_cache: tuple[tuple[int, float, int] | None, Spread | None] = (None, None)

    def prepare(self, snap: Snapshot) -> None:
        pass

    def applies(self, request: Request) -> bool:
        return True

    def rank(self, request: Request, before: Sequence[Ranking]) -> list[Ranking]:
        s = self.settings.experimental
        snap, fetch, depth, restriction = request.snap, request.fetch, request.depth, request.restriction
        pairs = (
            self._dialog_pairs(snap, s.dialog_words, DIALOG_REACH)
            if request.dialog and s.dialog_words > 0
            else None
        )
        lexical: list[tuple[str, float, list[str]]] = []
        for i, term in enumerate(request.terms.all_terms):
            if i and s.term_retrievers == "dense":
                continue
            toks = tokenize(term)
            if request.corrections:
                toks = corrected_tokens(toks, request.corrections)
            lexical.append((term, s.query_weight if i == 0 else s.term_weight, toks))
        spread = pairs is not None and pairs.pairs
        # Every term's first fetch in one call (an engine backend answers them in one round trip).
        firsts = iter(
            () if spread else snap.bm25_top_many([t for _, _, t in lexical if t], fetch, restriction)
        )
        rankings: list[Ranking] = []
        for term, tw, toks in lexical:
            if not toks:
                rankings.append(Ranking(term, "bm25", s.bm25_weight, tw, ()))
                continue
            if spread:
                assert pairs is not None
                items = note_depth(
                    snap, partial(snap.bm25_top_spread, toks, spread=pairs, allowed=restriction), fetch, depth
                )
            else:
                items = note_depth(
                    snap, partial(snap.bm25_top, toks, allowed=restriction), fetch, depth, next(firsts)
                )
            rankings.append(Ranking(term, "bm25", s.bm25_weight, tw, tuple(items)))
        return rankings

    def _dialog_pairs(self, snap: Snapshot, share: float, reach: int) -> Spread:
        """BM25 (dst, src, weight): every shard of a turn note with every shard of the turns up to
        `reach` steps away in its session, at `share` per step (share ** steps); per index version."""
        key = (snap.version, share, reach)
        cached = self._pairs_cache
        if cached[0] != key or cached[1] is None:
            neighbours = snap.neighbours
            shard_ids = snap.shard_ids
            triples: list[tuple[str, str, float]] = []
            for path in neighbours:
                seen, frontier = {path}, [path]
                for step in range(1, reach + 1):
                    frontier = [q for p in frontier for q in neighbours.get(p, ()) if q not in seen]
                    seen.update(frontier)
                    w = share**step
                    triples += [
                        (dst, src, w) for q in frontier for dst in shard_ids(path) for src in shard_ids(q)
                    ]
            cached = self._pairs_cache = (key, snap.lexical.spread(triples))
        assert cached[1] is not None
        return cached[1]
