"""Dense vectors of shards: a normalised float32 matrix with cosine top-k, updated in place."""

from __future__ import annotations

from collections.abc import Set as AbstractSet

import numpy as np


class DenseIndex:
    """Unit vectors keyed by id; rows are reused after removal, so updates never copy the matrix."""

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim
        self._matrix = np.zeros((256, dim), dtype=np.float32)
        self._live = np.zeros(256, dtype=bool)
        self._slot_of: dict[str, int] = {}
        self._key_of: list[str | None] = []
        self._free: list[int] = []
        self._shared_rows = False
        """True while an older view (see `fork`) may read this matrix: rows it sees are never written."""
        self._retired: list[int] = []
        """Slots freed while rows were shared: reused only after `recycle`."""

    def fork(self) -> DenseIndex:
        """A copy sharing the matrix, for a snapshot to keep this one as it is.

        The slot tables and the live mask are copied (small); the matrix is shared, and the fork
        never writes a row this index reads: a removed row is retired instead of freed, a changed
        vector goes to a new row. `recycle()` frees the retired rows once no older view remains.
        """
        twin = DenseIndex.__new__(DenseIndex)
        twin.dim = self.dim
        twin._matrix = self._matrix
        twin._live = self._live.copy()
        twin._slot_of = dict(self._slot_of)
        twin._key_of = list(self._key_of)
        twin._free = list(self._free)
        twin._shared_rows = True
        twin._retired = list(self._retired)
        return twin

    def recycle(self) -> None:
        """No older view reads the matrix any more: retired rows become free rows again."""
        if self._retired:
            self._matrix[self._retired] = 0.0
            self._free.extend(self._retired)
            self._retired = []
        self._shared_rows = False

    def __len__(self) -> int:
        return len(self._slot_of)

    @property
    def rows(self) -> int:
        """Matrix rows in use: live, free and retired ones (what a stream of changes must not grow)."""
        return len(self._key_of)

    def __contains__(self, key: str) -> bool:
        return key in self._slot_of

    def set(self, key: str, vector: np.ndarray) -> None:
        """Store the vector of `key` (normalised here if it is not)."""
        vec = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        self.set_many([key], vec)

    def set_many(self, keys: list[str], vectors: np.ndarray, adopt: bool = False) -> None:
        """Store one vector per key (rows of `vectors`, normalised here when they are not).

        `adopt`: the caller hands `vectors` over (a fresh array nobody else keeps), so an empty
        index may take it as its matrix instead of copying it.
        """
        if not keys:
            return
        given = vectors
        vecs = np.asarray(vectors, dtype=np.float32).reshape(len(keys), -1)
        if vecs.shape[1] != self.dim:
            raise ValueError(f"vector of {vecs.shape[1]} dimensions, index has {self.dim}")
        # Squared norms first (one pass, no temporary): most vectors are unit already. The bounds
        # take in every row whose norm is off by more than 1e-3 (norm^2 outside 0.998001-1.002001)
        # and then some; those rows are decided on their exact norms, as before.
        sq = np.einsum("ij,ij->i", vecs, vecs)
        maybe = np.flatnonzero((sq < 0.9985) | (sq > 1.0015))
        if len(maybe):
            norms = np.linalg.norm(vecs[maybe], axis=1)
            fix = (norms > 0) & (np.abs(norms - 1.0) > 1e-3)
            if fix.any():
                vecs = vecs.copy()
                vecs[maybe[fix]] /= norms[fix, None]
                given = vecs
        if not self._slot_of and not self._key_of and len(set(keys)) == len(keys):
            # An empty index (an open): take the rows as the matrix, no per-row copy.
            owned = adopt or given is not vectors
            self._matrix = (
                vecs
                if owned and vecs.flags.writeable and vecs.flags.c_contiguous
                else np.array(vecs, dtype=np.float32)
            )
            self._live = np.ones(len(keys), dtype=bool)
            self._slot_of = dict(zip(keys, range(len(keys))))
            self._key_of = list(keys)
            return
        slots = np.empty(len(keys), dtype=np.int64)
        for i, key in enumerate(keys):
            slot = self._slot_of.get(key)
            if slot is not None and self._shared_rows:
                # An older view reads this row: the new vector takes another.
                self._live[slot] = False
                self._key_of[slot] = None
                self._retired.append(slot)
                del self._slot_of[key]
                slot = None
            if slot is None:
                slot = self._free.pop() if self._free else len(self._key_of)
                if slot == len(self._key_of):
                    self._key_of.append(None)
                self._slot_of[key] = slot
                self._key_of[slot] = key
            slots[i] = slot
        need = len(self._key_of)
        if need > len(self._matrix):
            size = max(256, len(self._matrix) * 2, need)
            grown = np.zeros((size, self.dim), dtype=np.float32)
            grown[: len(self._matrix)] = self._matrix
            live = np.zeros(size, dtype=bool)
            live[: len(self._live)] = self._live
            self._matrix, self._live = grown, live
        self._matrix[slots] = vecs
        self._live[slots] = True

    def remove(self, key: str) -> bool:
        """Forget `key`; False when it had no vector."""
        slot = self._slot_of.pop(key, None)
        if slot is None:
            return False
        self._live[slot] = False
        self._key_of[slot] = None
        if self._shared_rows:
            self._retired.append(slot)
        else:
            self._matrix[slot] = 0.0
            self._free.append(slot)
        return True

    def vector(self, key: str) -> np.ndarray | None:
        """The stored vector of `key`, or None."""
        slot = self._slot_of.get(key)
        return None if slot is None else self._matrix[slot].copy()

    def similarities(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(slots, cosines) of every live row."""
        n = len(self._key_of)
        if not self._slot_of:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        sims = self._matrix[:n] @ np.asarray(query, dtype=np.float32).reshape(-1)
        live = np.flatnonzero(self._live[:n])
        return live, sims[live]

    def mask(self, keys) -> np.ndarray:
        """A boolean row mask of `keys`, for `search(..., allowed=mask)`."""
        m = np.zeros(len(self._key_of), dtype=bool)
        idx = [self._slot_of[k] for k in keys if k in self._slot_of]
        m[idx] = True
        return m

    def search(
        self,
        query: np.ndarray,
        k: int,
        threshold: float = -1.0,
        allowed: AbstractSet[str] | np.ndarray | None = None,
    ) -> list[tuple[str, float]]:
        """The `k` most similar (key, cosine) at or above `threshold`, ties by key."""
        return self.search_many(np.asarray(query, dtype=np.float32).reshape(1, -1), k, threshold, allowed)[0]

    def search_many(
        self,
        queries: np.ndarray,
        k: int,
        threshold: float = -1.0,
        allowed: AbstractSet[str] | np.ndarray | None = None,
    ) -> list[list[tuple[str, float]]]:
        """`search` for several query vectors at once: one pass over the matrix for all of them.

        The scan is the cost at scale (a 200k x 384 float32 matrix is 300 MB read per pass), so
        nothing else touches every row more than once: no copy of the matrix or of the live mask
        when every row is live and nothing is filtered, one matrix-vector product for a single
        query, and the floor and the top-k cut applied to the similarity vector directly.
        """
        queries = np.asarray(queries, dtype=np.float32)
        n = len(self._key_of)
        if not self._slot_of or not len(queries):
            return [[] for _ in range(len(queries))]
        rows: np.ndarray | None = None  # None: every row of the first n is a candidate
        if allowed is not None:
            m = allowed if isinstance(allowed, np.ndarray) else self.mask(allowed)
            usable = self._live[:n].copy()
            usable[: len(m)] &= m[:n]
            usable[len(m) :] = False
            rows = np.flatnonzero(usable)
        elif len(self._slot_of) < n:
            rows = np.flatnonzero(self._live[:n])
        subset = rows is not None and len(rows) <= n // 4
        matrix = self._matrix[rows] if subset else self._matrix[:n]
        if len(queries) == 1:
            sims_all = (matrix @ queries[0]).reshape(-1, 1)
        else:
            sims_all = matrix @ queries.T
        out = []
        for j in range(len(queries)):
            col = sims_all[:, j]
            if rows is None:
                slots = np.flatnonzero(col >= threshold)
                sel = col[slots]
            else:
                sims = col if subset else col[rows]
                keep = np.flatnonzero(sims >= threshold)
                slots, sel = rows[keep], sims[keep]
            if len(slots) > k > 0:
                part = np.argpartition(-sel, k - 1)[:k]
                cut = sel[part].min()
                top = sel >= cut
                slots, sel = slots[top], sel[top]
            pairs = [(self._key_of[s], float(c)) for s, c in zip(slots.tolist(), sel.tolist())]
            pairs.sort(key=lambda p: (-p[1], p[0]))
            out.append([(key, c) for key, c in pairs[:k] if key is not None])
        return out
