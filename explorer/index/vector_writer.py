"""The vectors of a local index: loaded from the cache by content hash, embedded by the model host, pruned.

`VectorWriter` inserts vectors into an `IndexReader`'s dense index and dialog context under its
lock (after `own`), so a search holding a snapshot keeps the vectors it had. New vectors come
from the `ModelHost`'s one embedding loop: the texts of every shard without a vector (shards
sharing a content hash embedded once) and the dialog-context texts of conversation turns; each
finished chunk is saved to the store's cache and inserted, and the version raised.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from explorer.index.backend import ModelState
from explorer.index.keeper import StoreKeeper
from explorer.index.model_host import ModelHost
from explorer.index.reader import IndexReader
from explorer.index.store import StoreError
from explorer.vault.model import Shard

__all__ = ["VectorWriter"]

Progress = Callable[[str, int, int], object]


class VectorWriter:
    """Puts vectors into one index's live state: from the cache, from the model, and prunes the cache."""

    def __init__(self, reader: IndexReader, keeper: StoreKeeper, model: ModelHost) -> None:
        self.reader = reader
        self.keeper = keeper
        self.model = model

    def model_changed(self, model_id: str) -> None:
        """The loaded model is another than the configured one: move to its vectors."""
        with self.reader.lock:
            self.reader.own()
            self.model.model_id = model_id
            for key in list(self.reader.shards):
                self.reader.dense.remove(key)
            self.load(list(self.reader.shards.values()))
            self.reader.dialog.reset()
            self.refresh_dialog()

    def held(self) -> dict[str, np.ndarray]:
        """Every vector held, by content hash or context key (to write into a new store)."""
        vectors: dict[str, np.ndarray] = {}
        for sh in self.reader.shards.values():
            vec = self.reader.dense.vector(sh.node_id)
            if vec is not None:
                vectors[sh.hash] = vec
        vectors.update(self.reader.dialog.stored())
        return vectors

    def load(self, shards: list[Shard]) -> None:
        """Give `shards` the vectors the cache holds for their content hashes (under the lock)."""
        if not shards or self.model.state is ModelState.OFF:
            return
        try:
            found, mat = self.keeper.store.get_matrix(
                self.model.model_id, list(dict.fromkeys(s.hash for s in shards))
            )
        except StoreError as exc:
            self.keeper.fault(exc)
            found, mat = [], np.zeros((0, 0), dtype=np.float32)
        self.keeper.relay()
        if not found or mat.shape[1] != self.reader.dense.dim:
            return
        row_of = {h: i for i, h in enumerate(found)}
        keys, rows = [], []
        for s in shards:
            i = row_of.get(s.hash)
            if i is not None:
                keys.append(s.node_id)
                rows.append(i)
        if keys:
            picked = mat if rows == list(range(len(mat))) else mat[np.asarray(rows, dtype=np.int64)]
            self.reader.dense.set_many(keys, picked, adopt=True)

    def refresh_dialog(self) -> None:
        """Recompute the adjacent turns and the dialog-context vectors they want (under the lock)."""
        fetch = None if self.model.state is ModelState.OFF else self._cached_vectors
        self.reader.dialog.refresh(self.reader.notes, self.reader.shards, self.reader.shards_by_path, fetch)

    def _cached_vectors(self, keys: list[str]) -> tuple[list[str], np.ndarray] | None:
        """The store's vectors of the current model under `keys` (None after a store fault)."""
        try:
            return self.keeper.store.get_matrix(self.model.model_id, keys)
        except StoreError as exc:
            self.keeper.fault(exc)
            return None

    def embed_pending(
        self,
        progress: Progress | None = None,
        cancelled: Callable[[], bool] | None = None,
        batch: int | None = None,
    ) -> int:
        """Embed every shard that lacks a vector, batch by batch; returns how many were embedded.

        Vectors already in the cache under the same content hash are reused, never recomputed.
        """
        if self.model.embedder() is None:
            return 0
        todo = self.reader.pending()
        # Shards sharing a hash are embedded once; so are context texts sharing a key.
        by_hash: dict[str, list[Shard]] = {}
        text_of: dict[str, str] = {}
        contexts: dict[str, list[str]] = {}
        with self.reader.lock:
            for s in todo:
                if s.node_id not in self.reader.dense:
                    by_hash.setdefault(s.hash, []).append(s)
                    text_of[s.hash] = s.search_text
                key = self.reader.dialog.key(s.node_id)
                if key is not None:
                    contexts.setdefault(key, []).append(s.node_id)
                    if key not in text_of:
                        text_of[key] = self.reader.dialog.text(
                            s.node_id, self.reader.shards, self.reader.shards_by_path
                        )

        def deliver(chunk: list[str], vecs: list[np.ndarray]) -> None:
            self.keeper.save(
                lambda: self.keeper.store.put_vectors(self.model.model_id, dict(zip(chunk, vecs)))
            )
            with self.reader.lock:
                self.reader.own("dense", "context")
                for h, vec in zip(chunk, vecs):
                    for s in by_hash.get(h, ()):
                        current = self.reader.shards.get(s.node_id)
                        if current is not None and current.hash == h:
                            self.reader.dense.set(s.node_id, vec)
                    self.reader.dialog.put(contexts.get(h, ()), h, vec)
                self.reader.log_version(())  # vectors only: no note changed

        return self.model.embed(text_of, deliver, progress, cancelled, batch)

    def prune_vectors(self) -> int:
        """Drop cached vectors that no current shard uses (of the current model); returns how many."""
        with self.reader.lock:
            keep = {s.hash for s in self.reader.shards.values()} | self.reader.dialog.keys()
        try:
            return self.keeper.store.prune_vectors(self.model.model_id, keep)
        except StoreError as exc:
            self.keeper.fault(exc)
            return 0

    def prune_if_worth_it(self) -> None:
        """Compact the vector cache when a quarter or more of its rows serve no current shard."""
        if self.model.state is ModelState.OFF:
            return
        try:
            rows = self.keeper.store.vector_rows(self.model.model_id)
        except StoreError:
            return
        with self.reader.lock:
            live = len({s.hash for s in self.reader.shards.values()})
        if rows > live * 4 // 3:
            self.prune_vectors()
