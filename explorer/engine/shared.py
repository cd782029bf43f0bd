"""One engine session shared by several front ends in one process (the browser tabs of `explorer serve`).

A `Session` has one set of hooks; a `SharedSession` owns one session and fans its hooks out to
every subscriber (each tab's app), replaying the watcher's and the model's last states to a
subscriber that joins late, so a tab opened after the model loaded shows it loaded. The index,
the pipeline, the watcher, the embedding loop and the search server are the session's: a second
tab opens, parses and embeds nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from explorer.config import Settings
from explorer.engine.session import Session, SessionHooks

#: Hooks whose last call a late subscriber hears again (states, not events).
_REPLAYED = ("on_watcher", "on_model")
_HOOKS = ("on_batch", "on_watcher", "on_model", "on_progress", "on_embedded", "on_error")


class SharedSession:
    """One Session, opened once, heard by every subscriber.

    Args:
        vault: The vault root.
        settings: Loaded settings.
        on_message: Store and model messages of the index (default: stderr).
        embedder: An embedding model for the index (tests).
    """

    def __init__(
        self,
        vault: Path,
        settings: Settings,
        *,
        on_message: Callable[[str], None] | None = None,
        embedder: Any = None,
    ) -> None:
        self._lock = threading.Lock()
        self._subscribers: dict[int, SessionHooks] = {}
        self._next = 0
        self._last: dict[str, tuple[Any, ...]] = {}
        self._opened = threading.Event()
        self.error: str | None = None
        """Why the index could not be opened (None while opening or once open)."""
        hooks = SessionHooks(**{name: self._fan(name) for name in _HOOKS})
        self.session = Session(vault, settings, hooks=hooks, on_message=on_message, embedder=embedder)
        """The one session: its index, pipeline, watcher, embedding loop and search server."""

    def _fan(self, name: str) -> Callable[..., None]:
        def call(*args: Any) -> None:
            with self._lock:
                if name in _REPLAYED:
                    self._last[name] = args
                targets = [getattr(hooks, name) for hooks in self._subscribers.values()]
            for hook in targets:
                try:
                    hook(*args)
                except Exception:  # noqa: BLE001 - one tab's failing hook must not starve the others
                    pass

        call.__name__ = name
        return call

    def open(self, watch: bool = True) -> None:
        """Open the index (the model loading meanwhile), then run the watcher, the embedding loop and
        the search server. Call once, from any thread; `wait_open` tells the subscribers."""
        try:
            self.session.open(load_model=self.session.settings.index.embeddings)
            self.session.start(watch=watch, embed=True, serve=True)
        except Exception as exc:  # noqa: BLE001 - every tab shows the error instead of the results
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self._opened.set()

    def wait_open(self, timeout: float | None = None) -> bool:
        """Wait until `open` finished (opened or failed); False on timeout."""
        return self._opened.wait(timeout)

    @property
    def is_open(self) -> bool:
        """Whether the index is open and searchable."""
        return self._opened.is_set() and self.error is None

    def subscribe(self, hooks: SessionHooks) -> Callable[[], None]:
        """Hear the session through `hooks` (the last watcher and model states at once); returns the unsubscribe."""
        with self._lock:
            key = self._next
            self._next += 1
            self._subscribers[key] = hooks
            replay = [(name, self._last[name]) for name in _REPLAYED if name in self._last]
        for name, args in replay:
            try:
                getattr(hooks, name)(*args)
            except Exception:  # noqa: BLE001 - as in `_fan`
                pass

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers.pop(key, None)

        return unsubscribe

    @property
    def subscribers(self) -> int:
        """How many front ends listen now."""
        with self._lock:
            return len(self._subscribers)

    def close(self, exiting: bool = False) -> None:
        """Close the session (server, watcher, embedding loop, index)."""
        self.session.close(exiting=exiting)
