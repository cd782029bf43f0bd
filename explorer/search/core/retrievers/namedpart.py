"""The part of a named note that a query also names: its headings' words and the section they credit.

The name ranking (explorer.search.core.retrievers.name) credits a named note through one of its shards; these
helpers pick the section whose headings hold the query's other words ("the section on Diet in Hamsters").
"""

from __future__ import annotations

from explorer.index.backend import Snapshot
from explorer.text.tokenize import tokenize


class HeadingWords:
    """The words of each note's headings, kept per note until the index changes."""

    def __init__(self) -> None:
        self._cache: tuple[int, dict[str, frozenset[str]]] = (-1, {})

    def __call__(self, snap: Snapshot, path: str) -> frozenset[str]:
        """The words of a note's headings (from its shards' heading paths), as the query's tokens are
        written; kept per note until the index changes."""
        version, cache = self._cache
        if version != snap.version:
            cache = {}
            self._cache = (snap.version, cache)
        hit = cache.get(path)
        if hit is None:
            hit = cache[path] = read_heading_words(snap, path)
        return hit


def read_heading_words(snap: Snapshot, path: str) -> frozenset[str]:
    """The words of a note's headings, read from its shards (each distinct heading path once)."""
    words: set[str] = set()
    seen: set[tuple[str, ...]] = set()
    for node_id in snap.shard_ids(path):
        shard = snap.shards.get(node_id)
        if shard is not None and shard.heading_path and shard.heading_path not in seen:
            seen.add(shard.heading_path)
            for heading in shard.heading_path:
                words.update(tokenize(heading))
    return frozenset(words)


def named_part(
    snap: Snapshot,
    path: str,
    toks: list[str],
    allowed: set[str] | None,
    names: frozenset[str],
    heads: frozenset[str],
) -> str | None:
    """The section of a named note that the query also names: among the note's shards, the one
    whose heading path holds the most (IDF-weighted) of the query's words that are in the note's
    headings (`heads`) and not in its names (`names`), then the best BM25 score of the query's other
    words (first in note order on a tie); None when no such word names a heading of the note.

    A note's first shard carries its name, aliases and tags, so it wins the dense and feedback
    rankings of any query that names the note; crediting the name there too would leave a
    section the query also names ("the section on Diet in Hamsters") second in its own note.
    Words that name no heading ("sleep better at night") leave the credit to the fused order.
    """
    rest = [t for t in dict.fromkeys(toks) if t not in names]
    wanted = [t for t in rest if t in heads]
    if not wanted:
        return None
    ids = [n for n in snap.shard_ids(path) if allowed is None or n in allowed]
    if len(ids) < 2:
        return None
    idf = snap.lexical.idf()
    overlap: dict[str, float] = {}
    for node_id in ids:
        shard = snap.shards.get(node_id)
        words = {w for h in shard.heading_path for w in tokenize(h)} if shard is not None else set()
        overlap[node_id] = sum(idf.get(t, 0.0) for t in wanted if t in words)
    top = max(overlap.values())
    if top <= 0.0:
        return None
    tied = [n for n in ids if overlap[n] == top]
    if len(tied) == 1:
        return tied[0]
    scores = snap.lexical.scores(rest, tied)
    return max(tied, key=lambda n: scores.get(n, 0.0))
