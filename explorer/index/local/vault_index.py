"""The live index of one vault (the local backend): a thin facade over its writer, reader, model host and store.

`VaultIndex` assembles the parts of a local index, each doing one job, and keeps the API the
rest of Explorer calls:

- `IndexReader` (explorer.index.local.reader): the live tables, BM25 index and vectors, their lock and
  version, copy-on-write snapshots, and the read methods;
- `IndexWriter` (explorer.index.local.writer): opening, scanning the vault, applying change batches;
  with its `VectorWriter` (explorer.index.local.vector_writer) putting vectors in from the cache and the model;
- `StoreKeeper` (explorer.index.local.keeper): the store, and what happens when writes fail;
- `ModelHost` (explorer.index.local.model_host): the embedding model, its `ModelState`, the one
  embedding loop;
- `DialogContext` (explorer.index.local.dialog_context), inside the reader: conversation turns.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from explorer.config import Settings
from explorer.index.backend import ModelState
from explorer.index.local.dense import DenseIndex
from explorer.index.local.dialog_context import DialogContext
from explorer.index.local.embed import Embedder
from explorer.index.local.keeper import StoreKeeper
from explorer.index.local.lazy import Pending
from explorer.index.local.lexical import BM25Index
from explorer.index.local.model_host import EMBED_BATCH, ModelHost
from explorer.index.local.reader import IndexReader, IndexStats
from explorer.index.local.snapshot import LocalSnapshot
from explorer.index.local.store import FileState, Store
from explorer.index.local.vector_writer import EmbedRun
from explorer.index.local.writer import COMMIT_EVERY, BatchReport, IndexWriter, Progress
from explorer.vault.links import LinkGraph, resolve_note_name
from explorer.vault.model import Note, Shard
from explorer.vault.scan import check_vault

if TYPE_CHECKING:
    from explorer.index.backend import ClassicResult
    from explorer.index.local.classic import ClassicIndex

__all__ = ["COMMIT_EVERY", "EMBED_BATCH", "BatchReport", "EmbedRun", "IndexStats", "Progress", "VaultIndex"]


class VaultIndex:
    """Everything the search pipeline reads, for one vault (the local `IndexBackend`, explorer.index.backend).

    Writers apply a whole batch under `lock`. A search reads a `snapshot()`: the tables, BM25 and
    vectors as they were at one version. Taking one marks those objects shared; the next writer
    forks what it is about to change (copy-on-write: tables copied, BM25 postings per term on
    first change, the vector matrix shared with rows never overwritten), so the snapshot keeps
    its version while the batch lands, and no search copies anything. Embedding runs outside the
    lock and only inserts finished vectors under it, so lexical updates and searches never wait
    for the model.
    """

    backend_name = "local"

    def __init__(
        self,
        root: Path,
        settings: Settings | None = None,
        embedder: Embedder | None = None,
        on_message: Callable[[str], None] | None = None,
        on_batch: Callable[[], None] | None = None,
    ) -> None:
        self.root = check_vault(root)
        self.settings = settings or Settings()
        self.on_message = on_message or (lambda _msg: None)
        self.on_batch = on_batch or (lambda: None)
        """Called after each change batch is applied (a backend that mirrors this index sends it on)."""

        def say(msg: str) -> None:
            self.on_message(msg)

        self.reader = IndexReader(self.settings)
        """The tables, BM25 and vectors as they are now; snapshots and the read methods."""
        self.model = ModelHost(self.settings, embedder, say, on_model_change=self._model_changed)
        """The embedding model: its loading, its state and the one embedding loop."""
        self.keeper = StoreKeeper(self.root, self.settings, say)
        """The store, and its faults."""
        self.writer = IndexWriter(
            self.root, self.settings, self.reader, self.keeper, self.model, say, on_batch=self._batch_applied
        )
        """Opening, scanning, change batches and vectors."""
        self.keeper.lock = self.reader.lock
        self.keeper.rewrite = self.writer.write_all
        self.reader.complete_notes = self.writer.load_notes

    def _model_changed(self, model_id: str) -> None:
        self.writer.vectors.model_changed(model_id)

    def _batch_applied(self) -> None:
        self.on_batch()

    # -- the live state (explorer.index.local.reader) ---------------------------------------------
    @property
    def lock(self) -> threading.RLock:
        """Held by a writer for a whole batch (readers outside index/ use the read methods instead)."""
        return self.reader.lock

    @property
    def version(self) -> int:
        """The current version (each applied change batch or vector insert raises it)."""
        return self.reader.version

    @property
    def notes(self) -> dict[str, Note]:
        """Notes by vault-relative path."""
        return self.reader.notes

    @property
    def shards(self) -> dict[str, Shard]:
        """Shards by node_id."""
        return self.reader.shards

    @property
    def shards_by_path(self) -> dict[str, list[str]]:
        """node_ids of each note's shards, in note order."""
        return self.reader.shards_by_path

    @property
    def skipped(self) -> dict[str, str]:
        """Files left out, with reasons."""
        return self.reader.skipped

    @property
    def ignored(self) -> dict[str, str]:
        """What the ignore rules left out at the last full scan (folders end in `/`), with the rule."""
        return self.reader.ignored

    @property
    def bm25(self) -> BM25Index:
        """The lexical index."""
        return self.reader.bm25

    @property
    def dense(self) -> DenseIndex:
        """The shards' vectors."""
        return self.reader.dense

    @property
    def dialog(self) -> DialogContext:
        """Conversation turns: which are adjacent, and each turn shard's dialog-context vector."""
        return self.reader.dialog

    @property
    def context(self) -> DenseIndex:
        """Dialog-context vectors of conversation turns (node_id -> the turn read with its neighbours)."""
        return self.reader.dialog.vectors

    @property
    def neighbours(self) -> dict[str, tuple[str, ...]]:
        """Turn note path -> its adjacent turns' paths (see explorer.index.local.dialog)."""
        return self.reader.dialog.neighbours

    # -- the model --------------------------------------------------------------------------
    @property
    def model_state(self) -> ModelState:
        """Where the embedding model stands."""
        return self.model.state

    @property
    def model_error(self) -> str:
        """Why the embedding model is unavailable ('' otherwise)."""
        return self.model.reason

    @property
    def model_id(self) -> str:
        """The id this index's vectors are cached under."""
        return self.model.model_id

    @property
    def runtime(self) -> str:
        """The embedding runtime (empty before the model loads)."""
        return self.model.runtime

    # -- the store (explorer.index.local.keeper) --------------------------------------------------
    @property
    def store(self) -> Store:
        """The store the index is saved in."""
        return self.keeper.store

    @property
    def cache_dir(self) -> Path:
        """The folder the index is saved in."""
        return self.keeper.cache_dir

    @property
    def save_fault(self) -> str:
        """'' while the store takes every write; 'full' or 'readonly' while writes fail."""
        return self.keeper.save_fault

    @property
    def not_saved(self) -> str:
        """Why the index on disk is not this index ('' when every change is saved)."""
        return self.keeper.not_saved

    def store_lost(self) -> bool:
        """Whether the store's file is gone (deleted with the vault folder)."""
        return not Path(self.store.path).exists()

    def reopen_store(self) -> None:
        """Start a fresh store file and write the current in-memory index into it (the cache folder vanished)."""
        self.keeper.reopen()

    # -- writing (explorer.index.local.writer) ----------------------------------------------------
    def open(self, progress: Progress | None = None) -> BatchReport:
        """Load the stored index, then bring it up to date with the vault on disk."""
        return self.writer.open(progress)

    def refresh(
        self,
        paths: Iterable[str] | None = None,
        progress: Progress | None = None,
        reread: bool = False,
        reparse: bool = False,
    ) -> BatchReport:
        """Re-read what changed on disk: the whole vault, or only `paths` (see `IndexWriter.refresh`)."""
        return self.writer.refresh(paths, progress, reread, reparse)

    def save_segment(self) -> None:
        """Save the lexical index as one segment (the next open loads arrays instead of rebuilding postings)."""
        self.writer.save_segment()

    def prune_vectors(self) -> int:
        """Drop cached vectors that no current shard uses (of the current model); returns how many."""
        return self.writer.vectors.prune_vectors()

    def supply_records(self, waiting: list[Pending]) -> None:
        """Fill lazily opened notes from their stored records in one query (no index lock: a search's
        read). A record whose stored hash is not the one the note was opened with is left out, so a
        note never takes another version's text; what is left loads on first use as before."""
        store = self.store
        if store is None or not waiting:
            return
        try:
            records = store.load_records({p.path: p.hash for p in waiting})
        except Exception:  # noqa: BLE001 - a store fault, or a store closed since: first use reads it
            return
        for p in waiting:
            got = records.get(p.path)
            if got is not None:
                p.supply(*got)

    def load_all_notes(self) -> None:
        """Make every lazily opened note whole now, in one pass over the store."""
        self.writer.load_all_notes()

    # -- embedding (explorer.index.local.model_host) -----------------------------------------------
    def embedder(self, progress: Callable[[str], None] | None = None) -> Embedder | None:
        """The embedding model, loaded on first use; None when embeddings are off or unavailable."""
        return self.model.embedder(progress)

    def load_model_in_background(self) -> None:
        """Start loading the embedding model in a thread, so that it loads while the index opens."""
        self.model.load_in_background()

    def put_vectors(self, by_hash: Mapping[str, np.ndarray]) -> int:
        """Give every shard without a vector whose text's content hash is in `by_hash` that vector
        (computed elsewhere: another writer of a shared collection), cached by the current model;
        returns the shards given one. A new version when any was."""
        if not by_hash:
            return 0
        self.keeper.save(lambda: self.store.put_vectors(self.model_id, dict(by_hash)))
        given = 0
        with self.lock:
            self.reader.own("dense")
            for s in list(self.shards.values()):
                vec = by_hash.get(s.hash)
                if vec is not None and s.node_id not in self.dense:
                    self.dense.set(s.node_id, vec)
                    given += 1
            self.reader.log_version(())  # vectors only: no note changed
        return given

    def embed_pending(
        self,
        progress: Progress | None = None,
        cancelled: Callable[[], bool] | None = None,
        batch: int | None = None,
        waiting: Callable[[str], object] | None = None,
    ) -> int:
        """Embed every shard that lacks a vector, batch by batch; returns how many texts were embedded.

        While another process embeds into the same index folder, this one waits for it and takes
        in its vectors; `waiting` hears whom it waits for, then '' when the wait is over.
        """
        return self.writer.vectors.embed_pending(progress, cancelled, batch, waiting)

    @property
    def embed_run(self) -> EmbedRun | None:
        """What the last `embed_pending` did: texts embedded, vectors taken from another process, whom it waited for."""
        return self.writer.vectors.last_run

    def embed_eta(self) -> float | None:
        """Seconds the embedding run under way still needs, by text volume (None while unknown)."""
        return self.model.eta()

    def encode_query(self, text: str) -> np.ndarray | None:
        """The query vector, or None when no model is available."""
        return self.model.encode_query(text)

    # -- snapshots and reading (explorer.index.local.reader) ---------------------------------------
    def snapshot(self) -> LocalSnapshot:
        """A read view of the index at its current version, unchanged by later batches until released."""
        return self.reader.snapshot(LocalSnapshot, self)

    def _unpin(self) -> None:
        """A snapshot was released."""
        self.reader.unpin()

    def links_at(self, version: int, notes: Mapping[str, Note]) -> LinkGraph:
        """The wikilink graph of `notes`, the notes of a snapshot at `version`."""
        return self.reader.links_at(version, notes)

    @property
    def many_vaults(self) -> bool:
        """The local backend holds one vault."""
        return False

    @property
    def backend_uri(self) -> str:
        """An embedded index: no engine to reach."""
        return ""

    def backend_info(self) -> dict[str, str]:
        """Nothing besides the cache folder."""
        return {}

    def foreign_note(self, target: str) -> tuple[Note, list[Shard]] | None:
        """The local backend holds one vault: no other vault's notes."""
        return None

    @property
    def vault_name(self) -> str:
        """This vault's name among others (`index.vault_name`, default the folder's name; `vault:` in a query)."""
        return self.settings.index.vault_name or self.root.name

    def links(self) -> LinkGraph:
        """Wikilink graph of the current notes."""
        return self.reader.links()

    def classic(self) -> ClassicIndex:
        """The positional index of the classic cursor tools over the same notes."""
        return self.reader.classic()

    def resolve_note(self, name: str) -> str | None:
        """The indexed note `name` names, or None (the backend interface's `resolve_note`).

        A vault path (with or without `.md`, slashes either way) wins; else `name` resolves as an
        Obsidian link target does (path suffix, file stem or alias, case-insensitively).
        """
        return resolve_note_name(name, self.notes, self.links)

    def local_copy(self, root: Path, settings: Settings) -> VaultIndex:
        """A new local index over `root` (a copy of this vault) with this index's model when it is
        loaded; not opened yet (the backend interface's `local_copy`)."""
        return VaultIndex(
            root, settings, embedder=self.embedder() if self.model_state is ModelState.READY else None
        )

    def classic_search(
        self,
        mode: str,
        keywords: Sequence[str] | str,
        max_results: int | None = None,
        context_chars: int | None = None,
        window: int | None = None,
    ) -> ClassicResult:
        """One classic cursor tool over the current notes (the backend interface's `classic_search`)."""
        return self.classic().run(mode, keywords, max_results, context_chars, window)

    def stats(self) -> IndexStats:
        """Counts for status displays."""
        return self.reader.stats(self.model)

    def pending(self) -> list[Shard]:
        """Shards that have no vector yet (or, a conversation turn, no dialog-context vector)."""
        return self.reader.pending()

    def note(self, path: str) -> Note | None:
        """The note at `path`, or None."""
        return self.reader.note(path)

    def note_titles(self) -> dict[str, str]:
        """{path: title} of every note, a copy."""
        return self.reader.note_titles()

    def note_count(self) -> int:
        """How many notes are indexed."""
        return self.reader.note_count()

    def shard_ids(self, path: str) -> tuple[str, ...]:
        """node_ids of the shards of `path`, in note order."""
        return self.reader.shard_ids(path)

    def shard(self, node_id: str) -> Shard | None:
        """The shard `node_id` names, or None (lock-free: a shard object is replaced whole, never changed)."""
        return self.reader.shards.get(node_id)

    def shard_at(self, path: str, cursor: int) -> Shard | None:
        """The shard of `path` that contains `cursor` (the nearest one before it otherwise)."""
        return self.reader.shard_at(path, cursor)

    def skipped_files(self) -> dict[str, str]:
        """{path: reason} of the files that are not indexed, a copy."""
        return self.reader.skipped_files()

    def warnings(self) -> dict[str, tuple[str, ...]]:
        """Notes indexed with a problem (truncated, frontmatter ignored), path -> what happened."""
        return self.reader.warnings()

    def ignored_files(self) -> dict[str, str]:
        """What the ignore rules left out at the last full scan, with the rule, a copy."""
        with self.lock:
            return dict(self.reader.ignored)

    def file_state(self, path: str) -> FileState | None:
        """What the index last recorded of a vault-relative file (size, mtime, hash), or None."""
        return self.reader.file_state(path)

    def paths_under(self, folder: str) -> list[str]:
        """Known files (notes and skipped files) at or below a vault-relative folder; '' is the root."""
        return self.reader.paths_under(folder)

    def tokens(self, node_id: str) -> Collection[str]:
        """The distinct BM25 tokens of a shard."""
        return self.reader.tokens(node_id)

    def close(self, exiting: bool = False) -> None:
        """Close the store (after a background model load, if one runs, has ended).

        The objects the open froze for the garbage collector are unfrozen again, except with
        `exiting` (a one-shot command about to end): its interpreter's last collection would walk
        them all once more only to free memory the exit frees anyway (about 0.15 s at 10k notes).
        """
        self.model.close()
        self.store.close()
        if not exiting:
            gc.unfreeze()
