"""`MilvusSnapshot`: a `MilvusIndex` at one version, whose BM25 and vector rankings the collection serves.

The engine returns rows, a row reader (`_read`) turns them into (node_id, engine score) pairs and
drops rows of another version, and BM25 candidates are scored with this view's statistics
(`_scores`). The team view (explorer.index.milvus.team) is a class of its own holding one of these.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from explorer.index.backend import Hit, LexicalStats, Restriction, Scope, Snapshot, SnapshotCounts, Spread
from explorer.vault.model import Note, Shard

if TYPE_CHECKING:
    from explorer.index.local.snapshot import LocalSnapshot
    from explorer.vault.links import LinkGraph
from explorer.index.milvus.answers import Answers
from explorer.index.milvus.engine import (
    BM25_PARAMS,
    COSINE_PARAMS,
    MAX_LIMIT,
    BackendError,
    Engine,
    engine_terms,
    quote,
    shard_pk,
)
from explorer.index.milvus.stats import StatsTable

BM25_SETTLE_SHARE = 0.5
"""A first BM25 fetch settles a ranking when its kept rows are all within this share of the rows
fetched (the engine's order and Explorer's differ; BENCHMARKS.md#milvus-backend)."""


def allowed_expr(vault: str, allowed: Restriction) -> str:
    """`allowed` as an engine expression on `vault`'s row keys (built once per restriction)."""
    expr = allowed.prepared.get("milvus")
    if expr is None:
        pks = ", ".join(quote(shard_pk(vault, n)) for n in sorted(allowed.node_ids))
        expr = allowed.prepared["milvus"] = f"pk in [{pks}]"
    return str(expr)


class _Owner(Protocol):
    """The index a view was taken of (explorer.index.milvus.index.MilvusIndex)."""

    engine: Engine
    answers: Answers
    team_stats: StatsTable
    bm25_share: float
    """The share of a BM25 search's rows the kept rankings of the last searches reached (`_bm25_first`)."""
    dense_share: float
    """The share of a vector search's rows the last searches needed (`MilvusSnapshot._first_fetch`)."""

    @property
    def vault_name(self) -> str: ...

    def team_view(self, base: MilvusSnapshot, scope: Scope) -> tuple[Snapshot, str, bool]: ...

    def wait_warm(self, seconds: float | None = None) -> None: ...

    def answers_locally(self, version: int | None = None) -> bool: ...

    def local_note(self) -> str: ...

    def engine_lost(self, why: str) -> None: ...

    def view_released(self) -> None: ...


class MilvusSnapshot:
    """A `MilvusIndex` at one version: the BM25 and vector rankings come from the collection.

    It holds a snapshot of the index's local index (`local`) at the same version and delegates to it
    what the collection does not serve: notes and shards, their texts, BM25 statistics, dialog-context
    vectors, spread BM25, and every ranking while this view answers locally (`_local`).

    Rows the collection holds for another version of a shard (another content hash) or for a
    shard this view does not know are left out, so a search still reads one version. Scores are
    the raw BM25 scores of this view's index (the engine picks the candidates with the same k1
    and b) and the engine's cosines.
    """

    # What each engine row brings back (a team view also reads the row's vault and path).
    OUTPUT_FIELDS: tuple[str, ...] = ("node_id", "content_hash")

    version: int
    notes: Mapping[str, Note]
    shards: Mapping[str, Shard]
    neighbours: Mapping[str, tuple[str, ...]]
    lexical: LexicalStats

    def __init__(self, index: _Owner, local: LocalSnapshot) -> None:
        self._index = index
        self.local = local
        """The local index's view at the same version (released with this one)."""
        # Plain attributes, not properties: the search reads `shards` in its innermost loops.
        self.version = local.version
        self.notes = local.notes
        self.shards = local.shards
        self.neighbours = local.neighbours
        self.lexical = local.lexical
        self._released = False

    @property
    def index(self) -> _Owner:
        """The index this view was taken of."""
        return self._index

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._index.view_released()
            self.local.release()

    def __enter__(self) -> MilvusSnapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # -- the local view's, delegated ----------------------------------------------------------
    def prefetch(self, paths: Iterable[str]) -> None:
        self.local.prefetch(paths)

    def shard_ids(self, path: str) -> Sequence[str]:
        return self.local.shard_ids(path)

    def modified(self, path: str) -> int | None:
        return self.local.modified(path)

    def links(self) -> LinkGraph:
        return self.local.links()

    def notes_changed(self, since: int) -> frozenset[str] | None:
        """Paths whose note changed after version `since` (see `LocalSnapshot.notes_changed`)."""
        return self.local.notes_changed(since)

    def name_tokens(self, note: Note) -> tuple[frozenset[str], ...]:
        return self.local.name_tokens(note)

    def note(self, path: str) -> Note | None:
        return self.notes.get(path)

    def shard_at(self, path: str, cursor: int) -> Shard | None:
        return self.local.shard_at(path, cursor)

    def counts(self) -> SnapshotCounts:
        return self.local.counts()

    def bm25_top_spread(
        self, tokens: Sequence[str], k: int, spread: Spread, allowed: Restriction | None = None
    ) -> list[Hit]:
        """Spread BM25 stays local (the collection holds each shard's own words)."""
        return self.local.bm25_top_spread(tokens, k, spread, allowed)

    def has_vectors(self, context: bool = False) -> bool:
        return self.local.has_vectors(context)

    def expect_vectors(
        self, queries: np.ndarray, k: int, floor: float, allowed: Restriction | None = None
    ) -> None:
        """Each ranking is asked for on its own: nothing to prepare."""

    def vector(self, node_id: str) -> np.ndarray | None:
        return self.local.vector(node_id)

    def restrict(self, node_ids: AbstractSet[str]) -> Restriction:
        return self.local.restrict(node_ids)

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
        return allowed_expr(self._index.vault_name, allowed)

    def _local(self) -> bool:
        """Whether this view's rankings come from the vault's own index now (`MilvusIndex.answers_locally`:
        an app's first searches while the engine warms up, a version the engine does not hold yet, an
        engine away). They are the rankings the engine's candidates give once rescored here: the
        engine's rows of this vault are this index's shards."""
        return self._index.answers_locally(self.version)

    def _fell_back(self, exc: BackendError) -> bool:
        """A ranking met an engine fault: the index hears of it; True when this view may answer locally."""
        self._index.engine_lost(str(exc))
        return self._local()

    def freshness(self) -> tuple[Hashable, str]:
        """Answered locally: the version and what the answer says of the engine (a fault found after a
        search answered locally without one makes a new key: that answer is not kept). From the
        engine: its kept answers' generation and period (`Answers.stamp`): a write landing, the engine
        going or coming back, or `ANSWER_TTL_S` passing makes a new key."""
        ix = self._index
        if self._local():
            note = ix.local_note()
            return ("local", note), note
        return ("engine", *ix.answers.stamp()), ""

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
        return self.local.lexical.scores(tokens, ids)

    def _context_top(
        self, queries: np.ndarray, k: int, floor: float, allowed: Restriction | None
    ) -> list[list[Hit]]:
        """Dialog-context cosines (kept locally, not in the collection)."""
        return self.local.vector_top(queries, k, floor, allowed, True)

    # -- rows ---------------------------------------------------------------------------------
    def _current(self, row: dict[str, Any]) -> str | None:
        """The node_id of a row of this vault when this view holds that version of the shard, else None."""
        entity = row.get("entity", row)
        nid = entity.get("node_id")
        shard = self.shards.get(nid) if nid is not None else None
        if shard is None or shard.hash != entity.get("content_hash"):
            return None
        return nid

    def _search(
        self, field: str, data: list[Any], k: int, expr: str, params: dict[str, Any]
    ) -> list[list[Any]]:
        """One engine search of `data` on `field` (the BM25 sparse field or the vectors), read at Strong;
        questions the session asked lately are answered from its cache (`explorer.index.milvus.answers`)."""
        engine, limit = self._index.engine, min(k, MAX_LIMIT)
        fields = list(self.OUTPUT_FIELDS)

        def fetch(positions: list[int]) -> list[list[dict[str, Any]]]:
            self._index.wait_warm()
            res = engine.call(
                "search",
                lambda c: c.search(
                    engine.collection,
                    data=[data[i] for i in positions],
                    anns_field=field,
                    limit=limit,
                    filter=expr,
                    search_params=params,
                    output_fields=fields,
                    consistency_level="Strong",
                ),
            )
            return [
                [
                    {"distance": float(r.get("distance", 0.0)), "entity": dict(r.get("entity", r))}
                    for r in rows
                ]
                for rows in res
            ]

        keys = [
            (
                field,
                expr,
                tuple(fields),
                d if isinstance(d, str) else np.asarray(d, dtype=np.float32).tobytes(),
            )
            for d in data
        ]
        return self._index.answers.ask(keys, limit, fetch)

    # -- scope --------------------------------------------------------------------------------
    def widen(self, scope: Scope) -> tuple[Snapshot, str, bool]:
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
        ranking lists). The engine is first asked for fewer rows (`_bm25_first`); a list whose
        first rows do not settle its ranking (`_bm25_settled`) is asked again for all `k`.
        """
        if self._local():
            return [self.local.bm25_top(tokens, k, allowed) for tokens in queries]
        try:
            return self._engine_bm25(queries, k, allowed)
        except BackendError as exc:
            if not self._fell_back(exc):
                raise
            return [self.local.bm25_top(tokens, k, allowed) for tokens in queries]

    def _engine_bm25(
        self, queries: Sequence[Sequence[str]], k: int, allowed: Restriction | None
    ) -> list[list[Hit]]:
        out: list[list[Hit]] = [[] for _ in queries]
        asked = [i for i, toks in enumerate(queries) if toks]
        if not asked or k <= 0 or not self._searchable(allowed):
            return out
        data = [engine_terms(queries[i]) for i in asked]
        expr = self._filter(allowed)
        first = self._bm25_first(k)
        res = list(self._search("sparse", data, first, expr, BM25_PARAMS))
        ranked: dict[int, list[tuple[str, float, int]]] = {}
        again = []
        for j, (i, rows) in enumerate(zip(asked, res, strict=True)):
            ranked[j] = self._rescored(queries[i], rows)
            # Learns the depth needed from every answer; an answer shorter than asked is all there is.
            if not self._bm25_settled(ranked[j], first, k, len(rows) < first) and first < k:
                again.append(j)
        if again:
            for j, rows in zip(again, self._search("sparse", [data[j] for j in again], k, expr, BM25_PARAMS)):
                ranked[j] = self._rescored(queries[asked[j]], rows)
        for j, i in enumerate(asked):
            out[i] = [(nid, score) for nid, score, _ in ranked[j]][:k]
        return out

    def _rescored(self, tokens: Sequence[str], rows: Sequence[Any]) -> list[tuple[str, float, int]]:
        """(node_id, Explorer's BM25 score, the engine's rank) of the rows this view reads, best first."""
        ids = [nid for nid, _ in self._read(rows)]
        scores = self._scores(tokens, ids)
        hits = [(nid, float(scores.get(nid, 0.0)), rank) for rank, nid in enumerate(ids)]
        hits.sort(key=lambda h: (-h[1], h[0]))
        return hits

    def _bm25_first(self, k: int) -> int:
        """BM25 rows to ask for first: twice the engine depth recent rankings needed, with a margin."""
        return min(k, int(k * min(1.0, self._index.bm25_share * 2)) + 48)

    def _bm25_settled(
        self, hits: Sequence[tuple[str, float, int]], first: int, k: int, complete: bool
    ) -> bool:
        """Whether the engine's first `first` rows give the ranking the search keeps from `k`.

        The search keeps a ranking up to the first shard of the note after the notes a ranking
        of `k` shards is cut at (`_notes_for`). The engine orders rows by its own statistics,
        Explorer by its own, so no prefix is proven; taken as settled when every kept row is
        among the first half of the engine's rows: the engine's lower half, rescored, all fell
        below the cut, so a row below all of them is taken not to reach it either.
        (BENCHMARKS.md#milvus-backend measures how deep the kept rows reach.) Learns the depth needed.
        """
        wanted, seen, deepest = self._notes_for(k) + 1, set(), 0
        for nid, _score, rank in hits:
            deepest = max(deepest, rank)
            seen.add(self.shards[nid].path)
            if len(seen) >= wanted:
                break
        reached = len(seen) >= wanted
        settled = complete or (reached and deepest < first * BM25_SETTLE_SHARE)
        need = (deepest + 1) / k if reached or complete else 1.0
        self._index.bm25_share = 0.7 * self._index.bm25_share + 0.3 * need
        return settled

    def vector_top(
        self,
        queries: np.ndarray,
        k: int,
        floor: float,
        allowed: Restriction | None = None,
        context: bool = False,
    ) -> list[list[Hit]]:
        """The `k` best shards by cosine (at least `floor`) of each query row.

        The engine's cost grows with the rows it returns, so it is first asked for fewer
        (`_first_fetch`); a query whose first rows do not settle its ranking (`_settled`) is
        asked again for all `k`. The cosines are exact, so the first rows are the head of the
        full answer and the ranking is the same either way.
        """
        if context:
            return self._context_top(queries, k, floor, allowed)
        if self._local():
            return self.local.vector_top(queries, k, floor, allowed)
        try:
            return self._engine_vectors(queries, k, floor, allowed)
        except BackendError as exc:
            if not self._fell_back(exc):
                raise
            return self.local.vector_top(queries, k, floor, allowed)

    def _engine_vectors(
        self, queries: np.ndarray, k: int, floor: float, allowed: Restriction | None
    ) -> list[list[Hit]]:
        q = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        if not len(q) or k <= 0 or not self._searchable(allowed):
            return [[] for _ in range(len(q))]
        data = [row.tolist() for row in q]
        expr = self._filter(allowed, "has_vector == true")
        first = self._first_fetch(k)
        res = list(self._search("vector", data, first, expr, COSINE_PARAMS))
        again = [j for j, rows in enumerate(res) if first < k and not self._settled(rows, first, k, floor)]
        if again:
            for j, rows in zip(
                again, self._search("vector", [data[j] for j in again], k, expr, COSINE_PARAMS)
            ):
                res[j] = rows
        out: list[list[Hit]] = []
        for rows in res:
            hits = [(nid, score) for nid, score in self._read(rows) if score >= floor]
            hits.sort(key=lambda h: (-h[1], h[0]))
            out.append(hits[:k])
        return out

    # -- how many rows to ask for -------------------------------------------------------------
    def _notes_for(self, k: int) -> int:
        """The distinct notes a ranking of `k` shards is meant to reach: the inverse of the search's
        candidate depth (`explorer.search.retrieve.Retriever._shard_depth`: notes x shards per note
        x 2 + 16), rounded up, so that a first fetch is never taken as settled too early."""
        per_note = len(self.shards) / max(1, len(self.notes))
        return max(1, math.ceil((k - 16) / max(1e-9, 2 * per_note)))

    def _first_fetch(self, k: int) -> int:
        """Rows to ask for first: the share of `k` recent searches of this vault needed, with a margin."""
        share = self._index.dense_share
        return min(k, int(k * min(1.0, share * 1.5)) + 32)

    def _settled(self, rows: Sequence[Any], first: int, k: int, floor: float) -> bool:
        """Whether the engine's first `first` rows (best first) give the ranking the search reads from
        `k`: they are all there are, or they reach below the cosine floor (every later row is
        cut), or they cover the notes a ranking of `k` shards is cut at. Learns the share needed."""
        need = len(rows)
        settled = len(rows) < first or (bool(rows) and float(rows[-1].get("distance", 0.0)) < floor)
        if settled:
            need = next((i for i, r in enumerate(rows) if float(r.get("distance", 0.0)) < floor), len(rows))
        else:
            wanted, seen = self._notes_for(k) + 1, set()
            for i, (nid, score) in enumerate(self._read(rows)):
                if score < floor:
                    break
                seen.add(self.shards[nid].path)
                if len(seen) >= wanted:
                    settled, need = True, i + 1
                    break
        share = need / k if settled else 1.0
        self._index.dense_share = 0.7 * self._index.dense_share + 0.3 * share
        return settled
