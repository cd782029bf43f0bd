"""The name retriever as a retriever: notes whose names the query names, each credited through one shard.

The name table and its scoring are explorer.search.core.retrievers.names; the part of a named
note the query's other words name is explorer.search.core.retrievers.namedpart.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from explorer.config import Settings
from explorer.index.backend import Snapshot
from explorer.search.changes import NoteChanges
from explorer.search.core.retrievers.base import Request, source_weights
from explorer.search.core.retrievers.namedpart import HeadingWords, named_part
from explorer.search.core.retrievers.names import NameIndex
from explorer.search.core.typos import corrected_tokens
from explorer.search.fusion import rrf
from explorer.search.schema import Ranking
from explorer.text.tokenize import tokenize


class NameRetriever:
    """The name ranking of the query (retriever `name`), its table kept per index version.

    Each named note is credited through one of its shards: the part of the note the query's
    other words name (`namedpart.named_part`: "Docker setup troubleshooting" credits the section on
    troubleshooting), else the best one in the fused rankings before it, else its first shard.
    """

    name = "name"
    timing = "names"

    def __init__(self, settings: Settings, weights: dict[str, float], changes: NoteChanges) -> None:
        self.settings = settings
        self.weights = weights
        self._changes = changes
        self._names = NameIndex()
        self._heading_words = HeadingWords()
        """The words of each note's headings (explorer.search.core.retrievers.namedpart), per index version."""
        self._lock = threading.Lock()
        """Held while the name table is read or rebuilt (it is changed in place)."""

    def prepare(self, snap: Snapshot) -> None:
        """Bring the name table to the snapshot's version."""
        with self._lock:
            self._refresh(snap)

    def _refresh(self, snap: Snapshot) -> None:
        """Bring the name table to the snapshot's version (the caller holds `_lock`)."""
        if self._names.version == snap.version:
            return
        changed = self._changes.since(snap, self._names.version if self._names.version >= 0 else None)
        self._names.refresh(snap.notes, snap.version, snap.name_tokens, changed)

    def applies(self, request: Request) -> bool:
        return self.settings.experimental.name_weight > 0

    def rank(self, request: Request, before: Sequence[Ranking]) -> list[Ranking]:
        s = self.settings.experimental
        snap, allowed, depth = request.snap, request.allowed, request.depth
        query = request.terms.all_terms[0]
        toks = tokenize(query)
        if request.corrections:
            toks = corrected_tokens(toks, request.corrections)
        if not toks:
            return []

        def first_shard(path: str) -> str | None:
            for node_id in snap.shard_ids(path):
                if allowed is None or node_id in allowed:
                    return node_id
            return None

        idf = snap.lexical.idf()
        with self._lock:
            self._refresh(snap)
            found = self._names.search(
                toks,
                lambda t: idf.get(t, 0.0),
                depth,
                allowed=None if allowed is None else lambda p: first_shard(p) is not None,
                part_words=lambda path: self._heading_words(snap, path),
            )
        if not found:
            return []
        best: dict[str, str] = {}
        # The best fused shard of each named note: the fusion of the named notes' shards alone.
        theirs = {node_id for path, _ in found for node_id in snap.shard_ids(path)}
        for f in rrf(before, s.rrf_k, source_weights(snap, self.weights), only=theirs):
            shard = snap.shards.get(f.node_id)
            if shard is not None:
                best.setdefault(shard.path, f.node_id)
        items = []
        for path, score in found:
            part = named_part(
                snap, path, toks, allowed, self._names.words(path), self._heading_words(snap, path)
            )
            node_id = part or best.get(path) or first_shard(path)
            if node_id is not None:
                items.append((node_id, score))
        return [Ranking(query, "name", s.name_weight, s.query_weight, tuple(items))] if items else []
