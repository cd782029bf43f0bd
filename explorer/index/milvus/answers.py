"""The session's cache of engine answers: a ranking asked again (the next keystroke's terms, pass 2, an agent
repeating a query) is not sent to the engine twice.

An answer is kept by what was asked (the ranked field, the query text or vector, the filter) with the
number of rows it holds; a later question for as many rows or fewer reads its head (answers come best
first, so the head of a longer answer is the shorter one). What it keeps are rows' node_ids and
content hashes: a view drops rows of another version of a shard than its own, so a kept answer never
shows a shard's old text; it can only miss a shard that became a candidate since.

Consistency: the writer's own changes empty the cache (`clear`, called after every write, and when
the engine goes away or comes back), so its next search sees them (read-your-writes); another
writer's flushed change is seen by a search asked at most `ANSWER_TTL_S` after that change reached
the engine (bounded staleness, as Milvus's `Bounded` level). Answers are kept for the current
period of `ANSWER_TTL_S` (`epoch`) rather than for that long after each was asked, so that a
search's results kept by the pipeline with `stamp()` in their key are as fresh as the answers they
were made of.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

ANSWER_TTL_S = 2.0
"""How long an answer is kept: the staleness bound for other writers' changes."""
ANSWERS_KEPT = 512
"""Answers kept at most (each a few hundred rows of two short strings)."""

Row = dict[str, Any]


class Answers:
    """Engine answers by question, each kept `ANSWER_TTL_S`, emptied by the writer's own writes."""

    def __init__(self, ttl: float = ANSWER_TTL_S, kept: int = ANSWERS_KEPT) -> None:
        self.ttl = ttl
        self.kept = kept
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[Any, ...], tuple[int, int, list[Row]]] = OrderedDict()
        self._generation = 0
        self.hits = 0
        self.misses = 0

    def clear(self) -> None:
        """Forget every answer (the writer's own change reached the engine, or the engine's state changed)."""
        with self._lock:
            self._items.clear()
            self._generation += 1

    def epoch(self) -> int:
        """The current period of `ttl` seconds: answers asked in an earlier one are not read."""
        return int(time.monotonic() // max(self.ttl, 1e-6))

    def stamp(self) -> tuple[int, int]:
        """(generation, epoch): changes whenever a kept answer may no longer be read."""
        return self._generation, self.epoch()

    def ask(
        self,
        keys: Sequence[tuple[Any, ...]],
        limit: int,
        fetch: Callable[[list[int]], list[list[Row]]],
    ) -> list[list[Row]]:
        """The answers to questions `keys` for `limit` rows each; `fetch(positions)` asks the engine for the
        ones not kept (in one call) and returns their rows in the order given."""
        now = self.epoch()
        out: list[list[Row] | None] = []
        with self._lock:
            generation = self._generation
            for key in keys:
                kept = self._items.get(key)
                if (
                    kept is not None
                    and self.ttl > 0
                    and kept[0] == now
                    and (kept[1] >= limit or len(kept[2]) < kept[1])
                ):
                    self._items.move_to_end(key)
                    out.append(kept[2][:limit])
                else:
                    out.append(None)
        missing = [i for i, rows in enumerate(out) if rows is None]
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        if missing:
            got = fetch(missing)
            with self._lock:
                for i, rows in zip(missing, got, strict=True):
                    out[i] = rows
                    if generation == self._generation:  # no write landed while the engine answered
                        self._items[keys[i]] = (now, limit, rows)
                        self._items.move_to_end(keys[i])
                while len(self._items) > self.kept:
                    self._items.popitem(last=False)
        return [rows if rows is not None else [] for rows in out]
