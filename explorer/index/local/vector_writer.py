"""The vectors of a local index: loaded from the cache by content hash, embedded by the model host, pruned.

`VectorWriter` inserts vectors into an `IndexReader`'s dense index and dialog context under its
lock (after `own`), so a search holding a snapshot keeps the vectors it had. New vectors come
from the `ModelHost`'s one embedding loop: the texts of every shard without a vector (shards
sharing a content hash embedded once) and the dialog-context texts of conversation turns; each
finished chunk is saved to the store's cache and inserted, and the version raised.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from explorer.index.backend import EmbedRun, ModelState
from explorer.index.local.keeper import StoreKeeper
from explorer.index.local.model_host import ModelHost
from explorer.index.local.reader import IndexReader
from explorer.index.local.store import StoreError
from explorer.index.local.store.owner import EmbedOwner
from explorer.vault.model import Shard

__all__ = ["EmbedRun", "VectorWriter"]

Progress = Callable[[str, int, int], object]
Waiting = Callable[[str], object]
"""Told whom the embedding waits for (the owner's description), then '' when this process embeds."""

#: Seconds between a waiting process's looks at the embedding lock and at the vectors its owner wrote.
WAIT_POLL_S = 0.25


class VectorWriter:
    """Puts vectors into one index's live state: from the cache, from the model, and prunes the cache."""

    def __init__(self, reader: IndexReader, keeper: StoreKeeper, model: ModelHost) -> None:
        self.reader = reader
        self.keeper = keeper
        self.model = model
        self.last_run: EmbedRun | None = None
        """What the last `embed_pending` did (None before the first)."""
        self._rows_seen: int | None = None
        """The model's vector rows in the store when this index last took in what others wrote."""

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
        waiting: Waiting | None = None,
    ) -> int:
        """Embed every shard that lacks a vector, batch by batch; returns how many were embedded.

        Vectors already in the cache under the same content hash are reused, never recomputed.
        One process at a time embeds into an index folder (`EmbedOwner`): while another holds
        it, this one waits (`waiting` hears whom for), taking in the vectors the owner commits
        as they land, and then embeds only what is still missing.
        """
        if self.model.embedder() is None:
            return 0
        owner = self.keeper.store.owner
        borrowed, waited_for = 0, ""
        if owner is not None and not owner.acquire():
            waited_for = owner.holder()
            got = self._wait(owner, waited_for, progress, cancelled, waiting)
            if got is None:
                self.last_run = EmbedRun(0, 0, waited_for)
                return 0
            borrowed = got
        try:
            if owner is not None:
                # Vectors another process committed since this index last looked (before it held the lock).
                borrowed += self.take_in()
            done = self._embed_pending(progress, cancelled, batch)
        finally:
            if owner is not None:
                owner.release()
        self.last_run = EmbedRun(done, borrowed, waited_for)
        return done

    def _wait(
        self,
        owner: EmbedOwner,
        holder: str,
        progress: Progress | None,
        cancelled: Callable[[], bool] | None,
        waiting: Waiting | None,
    ) -> int | None:
        """Wait for `owner`'s lock, taking in the vectors its holder commits meanwhile.

        Returns how many shard vectors were taken in, once this process holds the lock; None
        when cancelled first.
        """
        if waiting is not None:
            waiting(holder)
        total = len(self.reader.pending())
        taken = 0
        while True:
            taken += self.take_in()
            if progress is not None and total:
                progress("waiting", total - min(total, len(self.reader.pending())), total)
            if cancelled is not None and cancelled():
                return None
            if owner.acquire():
                break
            time.sleep(WAIT_POLL_S)
        if waiting is not None:
            waiting("")
        return taken

    def take_in(self) -> int:
        """Give shards without a vector the ones the cache holds now (another process may have
        written them since this index looked); returns how many shards got one.

        Cheap when nothing changed: the model's row count in the store is compared first.
        """
        if self.model.state is ModelState.OFF:
            return 0
        try:
            rows = self.keeper.store.vector_rows(self.model.model_id)
        except StoreError:
            return 0
        if rows == self._rows_seen:
            return 0
        with self.reader.lock:
            self._rows_seen = rows
            missing = [s for s in self.reader.shards.values() if s.node_id not in self.reader.dense]
            contexts = not self.reader.dialog.complete
            if not missing and not contexts:
                return 0
            self.reader.own("dense", "context")
            before = len(self.reader.dense)
            self.load(missing)
            if contexts:
                self.refresh_dialog()
            got = len(self.reader.dense) - before
            if got or contexts:
                self.reader.log_version(())  # vectors only: no note changed
            return got

    def _embed_pending(
        self,
        progress: Progress | None,
        cancelled: Callable[[], bool] | None,
        batch: int | None,
    ) -> int:
        """Embed what lacks a vector now (this process holds the embedding lock, or there is none)."""
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
            if self.keeper.save(
                lambda: self.keeper.store.put_vectors(self.model.model_id, dict(zip(chunk, vecs)))
            ):
                # What this process wrote is no news to `take_in` (no other process embeds meanwhile).
                try:
                    self._rows_seen = self.keeper.store.vector_rows(self.model.model_id)
                except StoreError:
                    self._rows_seen = None
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
