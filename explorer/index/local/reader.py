"""The live state of a local index and every read of it: snapshots at one version, and the read methods of other layers.

`IndexReader` holds the tables (notes, shards, shard ids by path, file states, skipped and
ignored files), the BM25 index, the vectors and the dialog context of one index, its lock and
its version. Writers (explorer.index.local.writer, the embedding loop) change them under `lock`,
calling `own` first; readers take a `snapshot` or use the read methods here, which take the lock
briefly or none at all.

Copy-on-write: a snapshot keeps references to the current objects and marks them shared;
`own` forks a shared object before its first change (tables copied, BM25 postings per term
on first change, the vector matrix shared with rows never overwritten), so the snapshot keeps
its version while the batch lands, and no search copies anything.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, TypeVar

from explorer.config import Settings
from explorer.index.backend import IndexStats
from explorer.index.local.dense import DenseIndex
from explorer.index.local.dialog_context import DialogContext
from explorer.index.local.lazy import pending_of
from explorer.index.local.lexical import BM25Index
from explorer.index.local.snapshot import NoteLog
from explorer.index.local.store import FileState
from explorer.vault.links import LinkGraph
from explorer.vault.model import Note, Shard
from explorer.vault.shard import shard_at_cursor

if TYPE_CHECKING:
    from explorer.index.local.classic import ClassicIndex
    from explorer.index.local.model_host import ModelHost
    from explorer.index.local.snapshot import LocalSnapshot, SnapshotOwner

__all__ = ["IndexReader", "IndexStats"]

S = TypeVar("S", bound="LocalSnapshot")

#: The parts of an index a snapshot reads as they are (forked by `own` before a change).
PARTS = ("tables", "bm25", "dense", "context")
#: Versions whose changed note paths the index keeps (`IndexReader.note_log`).
NOTE_LOG = 64


class IndexReader:
    """The tables, BM25 index and vectors of one local index as they are now, and the reads of them."""

    def __init__(self, settings: Settings) -> None:
        self.lock = threading.RLock()
        """Held by a writer for a whole batch; readers take it briefly or not at all."""
        self.version = 0
        """Raised by each change batch and vector insert."""
        self.note_log: NoteLog = ()
        """The notes each of the last versions changed (see `log_version`); replaced whole, read without the lock."""
        self.notes: dict[str, Note] = {}
        self.shards: dict[str, Shard] = {}
        self.shards_by_path: dict[str, list[str]] = {}
        self.states: dict[str, FileState] = {}
        """What the index last recorded of each known file (size, mtime, content hash)."""
        self.skipped: dict[str, str] = {}
        self.ignored: dict[str, str] = {}
        """What the ignore rules left out at the last full scan (folders end in `/`), with the rule."""
        self.bm25 = BM25Index()
        self.dense = DenseIndex()
        self.dialog = DialogContext(settings.experimental.dialog_context)
        """Conversation turns: which are adjacent, and each turn shard's dialog-context vector."""
        self.complete_notes: Callable[[Iterable[str] | None], None] = lambda _paths: None
        """Makes lazily opened notes whole (all of them with None): the writer's, which reads the store."""
        self._pins = 0
        """Snapshots not released yet."""
        self._shared: set[str] = set()
        """Parts a snapshot reads as they are (see PARTS): forked before a change."""
        self._graph: tuple[int, LinkGraph] | None = None
        """The last wikilink graph built and its version: one attribute replaced whole, read without the lock."""
        self._classic: ClassicIndex | None = None

    # -- copy-on-write ----------------------------------------------------------------------
    def snapshot(self, cls: type[S], owner: SnapshotOwner) -> S:
        """A read view (of class `cls`, for `owner`) at the current version, unchanged by later batches until released.

        Cheap: it keeps references, and marks what it keeps as shared so that the next writer
        forks it before changing it (`own`). Release it (`release()` or a `with` block): a
        snapshot held keeps the rows of removed vectors from being reused.
        """
        with self.lock:
            self._shared = set(PARTS)
            self._pins += 1
            snap = cls(
                owner,
                self.version,
                self.notes,
                self.shards,
                self.shards_by_path,
                self.dialog.neighbours,
                self.bm25,
                self.dense,
                self.dialog.vectors,
                states=self.states,
            )
            snap._note_log = self.note_log
            return snap

    def log_version(self, paths: Iterable[str] | None) -> None:
        """Raise the version (under the lock) and log the note paths the change added, replaced or
        removed (None: any may have; an insert of vectors changes none). A search's per-note tables
        then follow the changed notes without comparing every note with the last version's."""
        self.version += 1
        entry = (self.version, None if paths is None else frozenset(paths))
        self.note_log = (*self.note_log[-(NOTE_LOG - 1) :], entry)

    def unpin(self) -> None:
        """A snapshot was released."""
        with self.lock:
            self._pins -= 1

    def own(self, *parts: str) -> None:
        """Before a change (under the lock): fork the parts a snapshot still reads (all, or `parts`).

        With no snapshot held, nothing is copied and the rows retired while one was are freed.
        """
        if not self._pins:
            self._shared.clear()
            self.dense.recycle()
            self.dialog.vectors.recycle()
            return
        shared = self._shared.intersection(parts) if parts else set(self._shared)
        if "tables" in shared:
            self.notes = dict(self.notes)
            self.shards = dict(self.shards)
            self.shards_by_path = dict(self.shards_by_path)
            self.states = dict(self.states)
        if "bm25" in shared:
            self.bm25 = self.bm25.fork()
        if "dense" in shared:
            self.dense = self.dense.fork()
        if "context" in shared:
            self.dialog.vectors = self.dialog.vectors.fork()
        self._shared -= shared

    # -- links and the classic tools --------------------------------------------------------
    def links_at(self, version: int, notes: Mapping[str, Note]) -> LinkGraph:
        """The wikilink graph of `notes`, the notes of a snapshot at `version` (they do not change).

        Without the lock: the graph already built for `version` is returned as it is; else it is
        built here from `notes` and kept unless a newer one was kept meanwhile. A reader resolving
        names (the note view, embeds) never waits for a writer's batch.
        """
        graph = self._graph
        if graph is not None and graph[0] == version:
            return graph[1]
        if version == self.version:
            self.complete_notes(None)  # one pass over the store for every lazily opened note
        for p in [p for p in (pending_of(n) for n in list(notes.values())) if p is not None]:
            p.load()
        built = LinkGraph(notes)
        graph = self._graph
        if graph is None or graph[0] < version:
            self._graph = (version, built)
        return built

    def links(self) -> LinkGraph:
        """Wikilink graph of the current notes (rebuilt when the index changed)."""
        with self.lock:
            return self.links_at(self.version, self.notes)

    def classic(self) -> ClassicIndex:
        """The positional index of the classic cursor tools over the same notes.

        Built on first use; each later use (and each search on it) re-tokenizes only the notes
        whose object changed since the version it last saw, under this index's lock.
        """
        with self.lock:
            if self._classic is None:
                from explorer.index.local.classic import ClassicIndex

                self._classic = ClassicIndex(self.shard_at, self.lock, lambda: (self.version, self.notes))
            self.complete_notes(None)
            self._classic.update()
            return self._classic

    # -- reading ----------------------------------------------------------------------------
    def stats(self, model: ModelHost) -> IndexStats:
        """Counts for status displays, with the state of `model`."""
        with self.lock:
            # The dense index only ever holds vectors of current shards.
            pending = len(self.shards) - len(self.dense)
            return IndexStats(
                notes=len(self.notes),
                shards=len(self.shards),
                skipped=len(self.skipped),
                embedded=len(self.shards) - pending,
                pending=pending,
                model_state=model.state,
                model_id=model.model_id,
                runtime=model.runtime,
                version=self.version,
            )

    def note(self, path: str) -> Note | None:
        """The note at `path`, or None (lock-free: a note object is replaced whole, never changed)."""
        return self.notes.get(path)

    def note_titles(self) -> dict[str, str]:
        """{path: title} of every note, a copy taken under the lock."""
        with self.lock:
            return {p: n.title for p, n in self.notes.items()}

    def note_count(self) -> int:
        """How many notes are indexed."""
        return len(self.notes)

    def shard_ids(self, path: str) -> tuple[str, ...]:
        """node_ids of the shards of `path`, in note order (lock-free, as `shard_at`)."""
        return tuple(self.shards_by_path.get(path, ()))

    def skipped_files(self) -> dict[str, str]:
        """{path: reason} of the files that are not indexed, a copy."""
        with self.lock:
            return dict(self.skipped)

    def warnings(self) -> dict[str, tuple[str, ...]]:
        """Notes indexed with a problem (truncated, frontmatter ignored), path -> what happened."""
        with self.lock:
            return {path: note.warnings for path, note in sorted(self.notes.items()) if note.warnings}

    def file_state(self, path: str) -> FileState | None:
        """What the index last recorded of a vault-relative file (size, mtime, hash), or None."""
        with self.lock:
            return self.states.get(path)

    def paths_under(self, folder: str) -> list[str]:
        """Known files (notes and skipped files) at or below a vault-relative folder; '' is the root."""
        prefix = folder.rstrip("/") + "/" if folder else ""
        with self.lock:
            return sorted(p for p in self.states if p == folder or p.startswith(prefix))

    def tokens(self, node_id: str) -> Collection[str]:
        """The distinct BM25 tokens of a shard."""
        return self.bm25.tokens(node_id)

    def pending(self) -> list[Shard]:
        """Shards that have no vector yet: no vector of their own, or (a conversation turn) no dialog-context vector."""
        with self.lock:
            out = [s for s in self.shards.values() if s.node_id not in self.dense]
            if not self.dialog.complete:
                seen = {s.node_id for s in out}
                out += [self.shards[n] for n in self.dialog.missing() if n not in seen and n in self.shards]
            return out

    def shard_at(self, path: str, cursor: int) -> Shard | None:
        """The shard of `path` that contains `cursor` (the nearest one before it otherwise).

        Lock-free, so the app's event loop never waits on a search or a batch holding the index
        lock: the path's id list is replaced whole when the note changes, and a shard removed
        meanwhile is skipped.
        """
        return shard_at_cursor((self.shards.get(n) for n in self.shards_by_path.get(path, ())), cursor)
