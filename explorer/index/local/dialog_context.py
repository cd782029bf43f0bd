"""The dialog-context vectors of an index: for each conversation turn's shard, the turn read with its neighbours.

`DialogContext` keeps which turns are adjacent (`neighbours`, see explorer.index.local.dialog), which
context vector each turn shard needs (`want`: a cache key made of the content hashes of the
turns it reads, in order) and which it has (`have`), and the vectors themselves. The index
calls `refresh` under its lock after a batch touched a turn; the embedding loop asks for the
`text` of the context vectors still missing and `put`s them back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from explorer.index.local.dense import DenseIndex
from explorer.index.local.dialog import context_key, context_text, dialog_neighbours, turn_position
from explorer.vault.model import Note, Shard

__all__ = ["DialogContext", "Fetch"]

Fetch = Callable[[list[str]], tuple[list[str], np.ndarray] | None]
"""Cached vectors by key: (the keys found, their matrix), or None when the cache cannot be read."""


class DialogContext:
    """Which conversation turns are adjacent, and the dialog-context vector of each turn shard."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        """Whether context vectors are wanted at all (`experimental.dialog_context`)."""
        self.vectors = DenseIndex()
        """node_id -> the vector of the turn shard read with its neighbours."""
        self.neighbours: dict[str, tuple[str, ...]] = {}
        """Turn note path -> its adjacent turns' paths (replaced whole by `refresh`, never changed)."""
        self.want: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {}
        """Turn shard node_id -> (context key, the turns before it, the turns after it) it needs a vector for."""
        self.have: dict[str, str] = {}
        """Turn shard node_id -> the context key of the vector it has."""

    def reset(self) -> None:
        """Drop every context vector (the model changed)."""
        self.vectors = DenseIndex()
        self.have = {}

    @property
    def complete(self) -> bool:
        """Whether every turn shard that wants a context vector has one."""
        return len(self.have) >= len(self.want)

    def missing(self) -> list[str]:
        """node_ids of turn shards still without their context vector."""
        return [n for n in self.want if n not in self.have]

    def key(self, node_id: str) -> str | None:
        """The context key `node_id` needs a vector for, when it lacks one (None otherwise)."""
        wanted = self.want.get(node_id)
        if wanted is None or node_id in self.have:
            return None
        return wanted[0]

    def keys(self) -> set[str]:
        """Every context key wanted now (for pruning the vector cache)."""
        return {want[0] for want in self.want.values()}

    def put(self, node_ids: Sequence[str], key: str, vec: np.ndarray) -> None:
        """Give `vec`, embedded for `key`, to those of `node_ids` that still want that key."""
        for node_id in node_ids:
            if self.want.get(node_id, ("",))[0] == key:
                self.vectors.set(node_id, vec)
                self.have[node_id] = key

    def stored(self) -> dict[str, np.ndarray]:
        """Context key -> vector of every context vector held (to write into a new store)."""
        out: dict[str, np.ndarray] = {}
        for node_id, key in self.have.items():
            vec = self.vectors.vector(node_id)
            if vec is not None:
                out[key] = vec
        return out

    def text(self, node_id: str, shards: Mapping[str, Shard], by_path: Mapping[str, list[str]]) -> str:
        """The text a turn shard's context vector embeds: the turns before, the shard, the turns after."""
        _key, before, after = self.want[node_id]

        def note_text(path: str) -> str:
            # The text of a note's shards, joined (a turn note is usually one shard).
            return "\n".join(shards[i].text.strip() for i in by_path.get(path, ()) if i in shards)

        return context_text(
            shards[node_id].text.strip(), [note_text(p) for p in before], [note_text(p) for p in after]
        )

    def refresh(
        self,
        notes: Mapping[str, Note],
        shards: Mapping[str, Shard],
        by_path: Mapping[str, list[str]],
        fetch: Fetch | None,
    ) -> None:
        """Recompute the adjacent turns and which context vector each turn shard needs (under the index lock);
        drop context vectors that no longer fit, and load those `fetch` finds (None: embeddings are off).

        A context vector's cache key is made of the content hashes of the turns it reads, in order,
        so no note text is read here (a lazily opened note stays unread until it is embedded).
        """
        self.neighbours = dialog_neighbours(notes)
        want: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {}
        if self.enabled:
            number = {p: pos[0] for p in self.neighbours if (pos := turn_position(notes[p])) is not None}
            for path, near in self.neighbours.items():
                before = tuple(p for p in near if number.get(p, 0) < number[path])
                after = tuple(p for p in near if number.get(p, 0) > number[path])
                around = [
                    [shards[i].hash for i in by_path.get(p, ()) if i in shards] for p in (*before, *after)
                ]
                for node_id in by_path.get(path, ()):
                    hashes = (
                        [h for hs in around[: len(before)] for h in hs]
                        + [shards[node_id].hash]
                        + [h for hs in around[len(before) :] for h in hs]
                    )
                    want[node_id] = (context_key(hashes), before, after)
        self.want = want
        for node_id, key in list(self.have.items()):
            if want.get(node_id, ("",))[0] != key:
                self.vectors.remove(node_id)
                del self.have[node_id]
        missing = {node_id: key for node_id, (key, _b, _a) in want.items() if node_id not in self.have}
        if not missing or fetch is None:
            return
        got = fetch(sorted(set(missing.values())))
        if got is None:
            return
        found, mat = got
        if not found or mat.shape[1] != self.vectors.dim:
            return
        row_of = {h: i for i, h in enumerate(found)}
        keys = [n for n, k in missing.items() if k in row_of]
        if keys:
            self.vectors.set_many(keys, mat[np.asarray([row_of[missing[n]] for n in keys], dtype=np.int64)])
            for n in keys:
                self.have[n] = missing[n]
