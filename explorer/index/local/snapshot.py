"""The local backend's `Snapshot`: the tables, BM25 index and vector matrices of a `VaultIndex` at one version."""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Protocol

import numpy as np

from explorer.index.backend import Hit, Restriction, Scope, ScopeError, SnapshotCounts, Spread
from explorer.index.local.dense import DenseIndex
from explorer.index.local.lazy import Pending, pending_of
from explorer.index.local.lexical import BM25Index
from explorer.index.local.store import FileState, name_tokens
from explorer.vault.model import Note, Shard
from explorer.vault.shard import shard_at_cursor

if TYPE_CHECKING:
    from explorer.vault.links import LinkGraph


NoteLog = tuple[tuple[int, frozenset[str] | None], ...]
"""(version, paths whose note the batch that made it added, replaced or removed; None: any may
have), one entry per version in order."""


def notes_changed(log: NoteLog, since: int, upto: int) -> frozenset[str] | None:
    """Paths whose note changed after version `since` up to `upto`, read from `log`; None when the
    log does not hold every version between (too old, or a version that was not logged)."""
    if since == upto:
        return frozenset()
    if since > upto or not log:
        return None
    first = log[0][0]
    if since + 1 < first or upto > log[-1][0]:
        return None
    entries = log[since + 1 - first : upto + 1 - first]
    if len(entries) != upto - since or entries[0][0] != since + 1 or entries[-1][0] != upto:
        return None  # not one entry per version
    out: set[str] = set()
    for _version, paths in entries:
        if paths is None:
            return None
        out |= paths
    return frozenset(out)


class LocalLexicalStats:
    """The BM25 statistics of a local snapshot (explorer.index.backend.LexicalStats): its BM25 index at one version."""

    __slots__ = ("_bm25", "version")

    def __init__(self, bm25: BM25Index, version: int) -> None:
        self._bm25 = bm25
        self.version = version

    def n_docs(self) -> int:
        return len(self._bm25)

    def idf(self) -> Mapping[str, float]:
        return self._bm25.idf()

    def doc_freq(self, token: str) -> int:
        return self._bm25.doc_freq(token)

    def avgdl(self) -> float:
        return self._bm25.avgdl

    def tokens(self, node_id: str) -> Collection[str]:
        return self._bm25.tokens(node_id)

    def term_counts(self, node_id: str) -> Mapping[str, int]:
        return self._bm25.terms(node_id)

    def scores(self, tokens: Sequence[str], node_ids: Sequence[str]) -> dict[str, float]:
        return self._bm25.get_scores(tokens, keys=node_ids)

    def spread(self, triples: Sequence[tuple[str, str, float]]) -> Spread:
        arrays = self._bm25.spread_pairs(triples)
        return Spread(self.version, len(arrays[0]), arrays)


class SnapshotOwner(Protocol):
    """The index a snapshot was taken of (explorer.index.local.vault_index.VaultIndex)."""

    @property
    def vault_name(self) -> str: ...

    def links_at(self, version: int, notes: Mapping[str, Note]) -> LinkGraph: ...

    def _unpin(self) -> None: ...

    def supply_records(self, waiting: list[Pending]) -> None: ...


class LocalSnapshot:
    """A `VaultIndex` at one version (explorer.index.backend.Snapshot).

    It holds the objects the index had when it was taken; the index forks an object before its
    first change after that (`IndexReader.own`, explorer.index.local.reader), so these stay as they were without being copied
    here. Reads take no lock.
    """

    __slots__ = (
        "_bm25",
        "_by_path",
        "_context",
        "_dense",
        "_note_log",
        "_owner",
        "_released",
        "_states",
        "lexical",
        "neighbours",
        "notes",
        "shards",
        "version",
    )

    version: int
    notes: Mapping[str, Note]
    shards: Mapping[str, Shard]
    neighbours: Mapping[str, tuple[str, ...]]
    lexical: LocalLexicalStats

    def __init__(
        self,
        owner: SnapshotOwner,
        version: int,
        notes: dict[str, Note],
        shards: dict[str, Shard],
        by_path: dict[str, list[str]],
        neighbours: dict[str, tuple[str, ...]],
        bm25: BM25Index,
        dense: DenseIndex,
        context: DenseIndex,
        states: Mapping[str, FileState] | None = None,
    ) -> None:
        # Plain attributes, not properties: the search reads `shards` in its innermost loops.
        self._owner = owner
        self.version = version
        self.notes = notes
        self.shards = shards
        self._by_path = by_path
        self.neighbours = neighbours
        self._bm25 = bm25
        self.lexical = LocalLexicalStats(bm25, version)
        """The BM25 statistics of this view."""
        self._dense = dense
        self._context = context
        self._states: Mapping[str, FileState] = states if states is not None else {}
        self._released = False
        self._note_log: NoteLog = ()
        """The index's log of changed notes as it was at this version (set by the index)."""

    # -- notes and shards -------------------------------------------------------------------
    def prefetch(self, paths: Iterable[str]) -> None:
        """Read the texts of these notes (and their shards) in one store query, where they were
        opened lazily and are not whole yet; the notes of this view only, at the content hash they
        were opened with."""
        notes = self.notes
        waiting = [p for p in (pending_of(notes.get(path)) for path in dict.fromkeys(paths)) if p is not None]
        if waiting:
            self._owner.supply_records(waiting)

    def shard_ids(self, path: str) -> Sequence[str]:
        return self._by_path.get(path, ())

    def modified(self, path: str) -> int | None:
        state = self._states.get(path)
        return state.mtime_ns if state is not None else None

    def links(self) -> LinkGraph:
        return self._owner.links_at(self.version, self.notes)

    def links_over(self, notes: Mapping[str, Note]) -> LinkGraph:
        """The wikilink graph of `notes` (this view's notes with others' beside them: a wider view's),
        kept by the index as this view's version's graph."""
        return self._owner.links_at(self.version, notes)

    def notes_changed(self, since: int) -> frozenset[str] | None:
        """Paths whose note was added, replaced or removed after version `since` up to this one;
        None when the index no longer knows (older than the versions it logs)."""
        return notes_changed(self._note_log, since, self.version)

    def name_tokens(self, note: Note) -> tuple[frozenset[str], ...]:
        return name_tokens(note)

    def note(self, path: str) -> Note | None:
        return self.notes.get(path)

    def shard_at(self, path: str, cursor: int) -> Shard | None:
        shards = self.shards
        return shard_at_cursor((shards.get(n) for n in self._by_path.get(path, ())), cursor)

    def counts(self) -> SnapshotCounts:
        # The dense index only ever holds vectors of current shards.
        return SnapshotCounts(
            notes=len(self.notes),
            shards=len(self.shards),
            pending=len(self.shards) - len(self._dense),
            version=self.version,
        )

    # -- lexical ----------------------------------------------------------------------------
    def bm25_top(self, tokens: Sequence[str], k: int, allowed: Restriction | None = None) -> list[Hit]:
        return self._bm25.top(tokens, k, self._mask(allowed, "bm25"))

    def bm25_top_many(
        self, queries: Sequence[Sequence[str]], k: int, allowed: Restriction | None = None
    ) -> list[list[Hit]]:
        return [self.bm25_top(tokens, k, allowed) for tokens in queries]

    def bm25_top_spread(
        self, tokens: Sequence[str], k: int, spread: Spread, allowed: Restriction | None = None
    ) -> list[Hit]:
        return self._bm25.top_spread(tokens, k, spread.prepared, self._mask(allowed, "bm25"))

    # -- vectors ----------------------------------------------------------------------------
    def has_vectors(self, context: bool = False) -> bool:
        return bool(len(self._context if context else self._dense))

    def vector_top(
        self,
        queries: np.ndarray,
        k: int,
        floor: float,
        allowed: Restriction | None = None,
        context: bool = False,
    ) -> list[list[Hit]]:
        if context:
            return self._context.search_many(queries, k, floor, self._mask(allowed, "context"))
        return self._dense.search_many(queries, k, floor, self._mask(allowed, "dense"))

    def expect_vectors(
        self, queries: np.ndarray, k: int, floor: float, allowed: Restriction | None = None
    ) -> None:
        """Each ranking is asked for on its own: nothing to prepare."""

    def vector(self, node_id: str) -> np.ndarray | None:
        return self._dense.vector(node_id)

    def restrict(self, node_ids: AbstractSet[str]) -> Restriction:
        return Restriction(node_ids)

    def _mask(self, allowed: Restriction | None, part: str) -> np.ndarray | None:
        """The slot mask of `allowed` in one of this view's parts, made once per restriction."""
        if allowed is None:
            return None
        index = self._bm25 if part == "bm25" else self._dense if part == "dense" else self._context
        key = f"{part}:{id(index)}"  # slots are those of this object, not of a later fork's
        mask = allowed.prepared.get(key)
        if mask is None:
            mask = allowed.prepared[key] = index.mask(allowed.node_ids)
        return mask

    def widen(self, scope: Scope) -> tuple[LocalSnapshot, str, bool]:
        """The local backend holds one vault: its own name or `*` searches it, another name is an error."""
        own = self._owner.vault_name
        others = [v for v in scope.vaults if not scope.everything and v != own]
        if others:
            raise ScopeError(
                f"vault:{others[0]}: this index holds one vault, {own!r}; searching other vaults needs "
                "a shared Milvus collection (index.backend = milvus)"
            )
        return self, f"vault: the local index holds one vault, {own!r}: it is the one searched", True

    def freshness(self) -> tuple[Hashable, str]:
        """Nothing but the version moves a local answer."""
        return None, ""

    # -- lifetime -----------------------------------------------------------------------------
    def release(self) -> None:
        if not self._released:
            self._released = True
            self._owner._unpin()

    def __enter__(self) -> LocalSnapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
