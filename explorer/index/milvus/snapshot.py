"""`MilvusSnapshot`: a `MilvusIndex` at one version, whose BM25 and vector rankings the collection serves.

One ranking loop serves this vault's view and the team view (explorer.index.milvus.team): the
engine returns rows, a row reader (`_read`) turns them into (node_id, engine score) pairs and
drops rows of another version, and BM25 candidates are scored with this view's statistics
(`_scores`). A wider view overrides those two hooks and the engine filter, nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import numpy as np

from explorer.index.backend import Hit, Restriction, Scope
from explorer.index.milvus.engine import (
    BM25_PARAMS,
    COSINE_PARAMS,
    MAX_LIMIT,
    Engine,
    engine_terms,
    quote,
    shard_pk,
)
from explorer.index.snapshot import LocalSnapshot


class _Owner(Protocol):
    """The index a view was taken of (explorer.index.milvus.index.MilvusIndex)."""

    engine: Engine

    @property
    def vault_name(self) -> str: ...

    def team_view(self, base: MilvusSnapshot, scope: Scope) -> tuple[MilvusSnapshot, str, bool]: ...


class MilvusSnapshot(LocalSnapshot):
    """A `MilvusIndex` at one version: the BM25 and vector rankings come from the collection.

    Rows the collection holds for another version of a shard (another content hash) or for a
    shard this view does not know are left out, so a search still reads one version. Scores are
    the raw BM25 scores of this view's index (the engine picks the candidates with the same k1
    and b) and the engine's cosines. Dialog-context vectors and spread BM25 stay local.
    """

    __slots__ = ()

    # What each engine row brings back (a team view also reads the row's vault and path).
    OUTPUT_FIELDS: tuple[str, ...] = ("node_id", "content_hash")

    @property
    def _index(self) -> _Owner:
        return self._owner  # type: ignore[return-value]

    # -- the hooks a wider view overrides -----------------------------------------------------
    def _filter(self, allowed: Restriction | None, extra: str = "") -> str:
        """The engine expression of this view's rows (this vault's, within `allowed`) and `extra`."""
        ix = self._index
        parts = [f"vault == {quote(ix.vault_name)}"]
        if extra:
            parts.append(extra)
        if allowed is not None:
            parts.append(self._allowed_expr(allowed))
        return " and ".join(parts)

    def _allowed_expr(self, allowed: Restriction) -> str:
        """`allowed` as an engine expression on this vault's row keys (built once per restriction)."""
        expr = allowed.prepared.get("milvus")
        if expr is None:
            own = self._index.vault_name
            pks = ", ".join(quote(shard_pk(own, n)) for n in sorted(allowed.node_ids))
            expr = allowed.prepared["milvus"] = f"pk in [{pks}]"
        return str(expr)

    def _searchable(self, allowed: Restriction | None) -> bool:
        """Whether a restriction leaves this view anything to ask the engine for."""
        return allowed is None or bool(allowed.node_ids)

    def _read(self, rows: Iterable[dict[str, Any]]) -> list[tuple[str, float]]:
        """(node_id, engine score) of the engine's rows that this view reads, in the engine's order."""
        out = []
        for r in rows:
            nid = self._current(r)
            if nid is not None:
                out.append((nid, float(r.get("distance", 0.0))))
        return out

    def _scores(self, tokens: Sequence[str], ids: list[str]) -> dict[str, float]:
        """The BM25 scores of candidates `ids` for `tokens`, with this view's statistics."""
        return self._bm25.get_scores(tokens, keys=ids)

    def _context_top(
        self, queries: np.ndarray, k: int, floor: float, allowed: Restriction | None
    ) -> list[list[Hit]]:
        """Dialog-context cosines (kept locally, not in the collection)."""
        return super().vector_top(queries, k, floor, allowed, True)

    # -- rows ---------------------------------------------------------------------------------
    def _current(self, row: dict[str, Any]) -> str | None:
        """The node_id of a row of this vault when this view holds that version of the shard, else None."""
        entity = row.get("entity", row)
        nid = entity.get("node_id")
        shard = self.shards.get(nid) if nid is not None else None
        if shard is None or shard.hash != entity.get("content_hash"):
            return None
        return nid

    def _search(self, field: str, data: list[Any], k: int, expr: str, params: dict[str, Any]) -> Any:
        """One engine search of `data` on `field` (the BM25 sparse field or the vectors), read at Strong."""
        engine = self._index.engine
        return engine.call(
            "search",
            lambda c: c.search(
                engine.collection,
                data=data,
                anns_field=field,
                limit=min(k, MAX_LIMIT),
                filter=expr,
                search_params=params,
                output_fields=list(self.OUTPUT_FIELDS),
                consistency_level="Strong",
            ),
        )

    # -- scope --------------------------------------------------------------------------------
    def widen(self, scope: Scope) -> tuple[MilvusSnapshot, str, bool]:
        """This view over the vaults `scope` names (a team view, `MilvusIndex.team_view`)."""
        own = self._index.vault_name
        if not scope.everything and set(scope.vaults) == {own}:
            return self, "", True
        return self._index.team_view(self, scope)

    # -- rankings -----------------------------------------------------------------------------
    def bm25_top(self, tokens: Sequence[str], k: int, allowed: Restriction | None = None) -> list[Hit]:
        return self.bm25_top_many([tokens], k, allowed)[0]

    def bm25_top_many(
        self, queries: Sequence[Sequence[str]], k: int, allowed: Restriction | None = None
    ) -> list[list[Hit]]:
        """Every token list's BM25 ranking from one engine search (one query text per list).

        The engine picks the candidates; `_scores` scores them with this view's statistics
        (every row the engine returns holds a query token, as every document the local
        ranking lists).
        """
        out: list[list[Hit]] = [[] for _ in queries]
        asked = [i for i, toks in enumerate(queries) if toks]
        if not asked or k <= 0 or not self._searchable(allowed):
            return out
        data = [engine_terms(queries[i]) for i in asked]
        res = self._search("sparse", data, k, self._filter(allowed), BM25_PARAMS)
        for i, rows in zip(asked, res, strict=True):
            ids = [nid for nid, _ in self._read(rows)]
            scores = self._scores(queries[i], ids)
            hits = [(nid, float(scores.get(nid, 0.0))) for nid in ids]
            hits.sort(key=lambda h: (-h[1], h[0]))
            out[i] = hits[:k]
        return out

    def vector_top(
        self,
        queries: np.ndarray,
        k: int,
        floor: float,
        allowed: Restriction | None = None,
        context: bool = False,
    ) -> list[list[Hit]]:
        if context:
            return self._context_top(queries, k, floor, allowed)
        q = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        if not len(q) or k <= 0 or not self._searchable(allowed):
            return [[] for _ in range(len(q))]
        data = [row.tolist() for row in q]
        res = self._search("vector", data, k, self._filter(allowed, "has_vector == true"), COSINE_PARAMS)
        out: list[list[Hit]] = []
        for rows in res:
            hits = [(nid, score) for nid, score in self._read(rows) if score >= floor]
            hits.sort(key=lambda h: (-h[1], h[0]))
            out.append(hits)
        return out
