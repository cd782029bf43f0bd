"""A small thread-safe least-recently-used cache: the one every cache of the project is built on."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    """At most `capacity` entries; reading or writing an entry makes it the most recent.

    Every method takes an internal lock, so one cache can be shared by threads (a search worker
    and the app, say).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = max(0, int(capacity))
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._data

    def get(self, key: K) -> V | None:
        """The value of `key` (now the most recent), or None."""
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        """Store `value` as the most recent entry, evicting the least recent ones beyond capacity."""
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.capacity:
                self._data.popitem(last=False)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._data.clear()
