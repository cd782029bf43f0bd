"""Where a local index is saved, and what happens when saving fails: the store and its faults.

`StoreKeeper` opens the store in the index folder, or, when that folder takes no writes, the
saved index as it is (changes kept in memory), the user cache folder, or memory; one line says
which. Every write goes through `save`: a full disk or a read-only folder is reported once and
the index keeps working in memory until writes succeed again; a damaged store is started again
and the whole in-memory index written into it (`rewrite`, the writer's).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from explorer.config import Settings, cache_dir_for
from explorer.index.local.store import Store, StoreError, classify, describe, user_cache_dir

__all__ = ["StoreKeeper"]


class StoreKeeper:
    """The store of one index, and its faults (disk full, read-only folder, damage)."""

    def __init__(self, root: Path, settings: Settings, on_message: Callable[[str], None]) -> None:
        self.root = root
        self.cache_dir = cache_dir_for(root, settings)
        """The folder the index is saved in (the user cache folder when the configured one is read-only)."""
        self.on_message = on_message
        self.lock: threading.RLock | None = None
        """The index lock, held while a damaged store is rebuilt (the index's, set when it is assembled)."""
        self.rewrite: Callable[[], None] = lambda: None
        """Writes the whole in-memory index into the current store (the writer's)."""
        self._fault = ""
        self._memory_reason = ""
        self.store = self.open_store()
        self.relay()

    @property
    def save_fault(self) -> str:
        """'' while the store takes every write; 'full' or 'readonly' while writes fail."""
        return self._fault

    @property
    def not_saved(self) -> str:
        """Why the index on disk is not this index ('' when every change is saved).

        Writes failing (disk full, read-only folder), or the index kept in memory for this run
        because no folder took it: a command whose job is the saved index reports it as a failure.
        """
        if self._fault:
            what = "disk full" if self._fault == "full" else f"{self.cache_dir} is read-only"
            return f"{what}: changes are not saved; the saved index is the previous one"
        return self._memory_reason if self.store.memory else ""

    def open_store(self) -> Store:
        """The store in the index folder.

        When that folder takes no writes (read-only, or the disk is full) the saved index is used
        as it is and changes stay in memory; with no usable saved index, a read-only folder falls
        back to the user cache folder, and failing that, to memory. One line says which.
        """
        try:
            return Store(self.cache_dir)
        except (StoreError, OSError) as exc:
            kind = classify(exc)
            if kind not in ("full", "readonly"):
                raise
        wanted = self.cache_dir
        what = "disk full" if kind == "full" else f"{wanted} is read-only"
        self._fault = kind
        if (wanted / "index.sqlite").is_file():
            try:
                store = Store(wanted, frozen=kind)
                self.on_message(
                    f"{what}: searching the saved index as it is; changes are kept in memory for this run"
                )
                return store
            except (StoreError, OSError):
                pass
        if kind == "readonly":
            fallback = user_cache_dir(self.root)
            try:
                store = Store(fallback)
                self.cache_dir = fallback
                self._fault = ""
                self.on_message(f"{what}: keeping the index in {fallback}")
                return store
            except (StoreError, OSError) as exc:
                if classify(exc) not in ("full", "readonly"):
                    raise
        self._fault = ""
        self._memory_reason = f"{what}: the index is kept in memory for this run"
        self.on_message(f"{what}: keeping the index in memory for this run")
        return Store(None, memory=True)

    def relay(self) -> None:
        """Pass the store's one-line messages on."""
        while self.store.messages:
            self.on_message(self.store.messages.pop(0))

    def fault(self, exc: StoreError) -> None:
        """Answer a store fault: rebuild a damaged store from memory; report a full or read-only one once."""
        if exc.kind == "damaged":
            assert self.lock is not None
            with self.lock:
                self.reset(f"index damaged ({exc.detail})")
                self.rewrite()
            return
        if self._fault != exc.kind:
            self.on_message(describe(exc.kind, exc.detail))
        self._fault = exc.kind

    def reset(self, why: str) -> None:
        """Start the store again after damage (a store that takes no writes is replaced by memory)."""
        if self.store.frozen:
            self._memory_reason = f"{why}: the index is kept in memory for this run"
            self.on_message(f"{why}: keeping the index in memory for this run")
            self.store = Store(None, memory=True)
        else:
            self.store.reset(why)
            self._fault = ""
        self.relay()

    def save(self, write: Callable[[], None]) -> bool:
        """Run one store write; a fault is answered by `fault` and False returned."""
        try:
            write()
        except StoreError as exc:
            self.fault(exc)
            return False
        if self._fault:
            self.on_message("the index is being saved again")
            self._fault = ""
        return True

    def reopen(self) -> None:
        """Start a fresh store file and write the current in-memory index into it.

        For a cache folder that vanished under a running index (the vault folder was deleted
        and created again): without this, later writes would go to an unlinked database.
        """
        assert self.lock is not None
        with self.lock:
            old = self.store
            self.store = self.open_store()
            self.relay()
            self.rewrite()
        try:
            old.close()
        except Exception:  # noqa: BLE001 - the old file is gone; closing it may fail harmlessly
            pass
