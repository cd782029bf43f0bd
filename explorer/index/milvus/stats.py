"""The BM25 statistics of a whole collection, kept in the engine, so that a `vault:*` score means one thing.

A team search scores every candidate row with one set of statistics: the collection's document
count, its average document length and the document frequencies of the query's words, summed over
every vault of the collection. Whichever vault asks, the same rows get the same scores.

They live in a small collection beside the shards (`<collection>_stats`) that the writers keep: per
vault a header row (bucket -1: its documents and their total length in tokens, and in `dfs` a
digest of the vault's rows in the collection, `state_of`, which lets a writer's next open skip
reading them) and one row per
bucket of words (a word's bucket is a hash of it, `BUCKETS` of them), holding `word count` pairs
of the words of that bucket (words as `engine_term` writes them, so a pair never holds a space).
A writer compares its vault's table with the rows it wrote last and rewrites only the buckets that
changed (`StatsTable.write_vault`, after every sync). A reader asks for the header rows and the
whole table in one query (`StatsTable.collection`) and keeps it `STATS_TTL_S` (the writer's own
writes clear it): a search reads its words' buckets from what is kept, not from the engine. A
one-shot command (`StatsTable.whole` off) asks for the header rows and its words' buckets only. Milvus Lite keeps its own BM25 statistics per segment, and a cluster per
segment too, so the engine's BM25 scores of two vaults' rows do not compare: they only pick the
candidates.

A vault whose writer predates this table has no rows in it: its documents are not counted until
its writer syncs once with this version. Negative idf (a word in more than half of the documents)
is floored at `epsilon` times the mean idf of the query's words (BM25Okapi floors at the mean over
the whole vocabulary, which no reader of a few buckets knows).
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import methodcaller
from typing import Any

from explorer.index.backend import LexicalStats
from explorer.index.local.lexical import BM25_B, BM25_EPSILON, BM25_K1
from explorer.index.milvus.engine import MAX_LIMIT, BackendError, Engine, engine_term, quote

STATS_SUFFIX = "_stats"
BUCKETS = 256
"""Word buckets per vault: a query reads the header rows and its words' buckets (a few rows per vault)."""
HEADER = -1
"""The bucket of a vault's header row (documents, total length)."""
MAX_DFS = 65_000
"""Bytes of `word count` pairs kept per bucket row (a VARCHAR holds 65,535; a vocabulary of about a
million distinct words per vault fills it; words past it count as in no document)."""
STATS_TTL_S = 30.0
"""How long a reader keeps the statistics it read (another writer's change shifts them by little)."""


def bucket_of(term: str) -> int:
    """The bucket of a word (Explorer's token)."""
    return int.from_bytes(hashlib.blake2b(term.encode("utf-8"), digest_size=4).digest(), "big") % BUCKETS


def stats_pk(vault: str, bucket: int) -> str:
    return hashlib.blake2b(f"{vault}\0{bucket}".encode(), digest_size=16).hexdigest()


def encode_buckets(df: Mapping[str, int]) -> dict[int, str]:
    """A vault's document frequencies as bucket -> `word count ...` text (words in `engine_term` form)."""
    parts: dict[int, list[str]] = {}
    size: dict[int, int] = {}
    for term, count in sorted(df.items()):
        if count > 0:
            b = bucket_of(term)
            pair = f"{engine_term(term)} {int(count)}"
            if size.get(b, -1) + 1 + len(pair) <= MAX_DFS:
                parts.setdefault(b, []).append(pair)
                size[b] = size.get(b, -1) + 1 + len(pair)
    return {b: " ".join(pairs) for b, pairs in parts.items()}


@dataclass(frozen=True, slots=True)
class CollectionStats:
    """The statistics of the collection for some words: documents, total length, document frequencies."""

    docs: int
    length: int
    df: dict[str, int] = field(default_factory=dict)
    vaults: int = 0

    @property
    def avgdl(self) -> float:
        return self.length / self.docs if self.docs else 0.0

    def idf(self, terms: Iterable[str]) -> dict[str, float]:
        """BM25Okapi's idf of `terms` over the collection (negative idf floored, see the module)."""
        n = self.docs
        raw = {
            t: math.log(n - self.df.get(t, 0) + 0.5) - math.log(self.df.get(t, 0) + 0.5) for t in set(terms)
        }
        eps = BM25_EPSILON * (sum(raw.values()) / len(raw)) if raw else 0.0
        return {t: (v if v >= 0 else eps) for t, v in raw.items()}

    def scores(
        self,
        tokens: Sequence[str],
        docs: Mapping[str, Mapping[str, int]],
        k1: float = BM25_K1,
        b: float = BM25_B,
    ) -> dict[str, float]:
        """BM25 of each document (token -> count) for `tokens`, with these statistics."""
        idf = self.idf(tokens)
        avgdl = self.avgdl or 1.0
        out = {}
        for key, counts in docs.items():
            dl = sum(counts.values())
            score = 0.0
            for t in tokens:
                tf = counts.get(t, 0)
                if tf:
                    score += idf[t] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
            out[key] = score
        return out


class StatsTable:
    """The statistics collection of one shard collection (created on first use)."""

    def __init__(self, engine: Engine, ttl: float = STATS_TTL_S, whole: bool = True) -> None:
        self.engine = engine
        self.name = engine.collection + STATS_SUFFIX
        self.ttl = ttl
        self.whole = whole
        """A search reads the whole table and keeps it, for the next searches' words (a process that
        searches again); else only the buckets of its own words (a one-shot command: at 31 vaults the
        whole table is 8k rows, 13 MB, 0.7-1 s to read; its words' buckets ~0.05 s)."""
        self._ready = False
        self._lock = threading.Lock()
        self._kept: dict[int, tuple[float, list[dict[str, Any]]]] = {}
        self._refreshing = False

    def clear(self) -> None:
        """Forget what was read (this writer's own statistics changed)."""
        with self._lock:
            self._kept.clear()

    def _call(self, what: str, fn: Any) -> Any:
        def ready(client: Any) -> Any:
            if not self._ready:
                if not client.has_collection(self.name):
                    self._create(client)
                client.load_collection(self.name)
                self._ready = True
            return fn(client)

        return self.engine.call(what, ready)

    def _create(self, client: Any) -> None:
        from pymilvus import DataType, MilvusClient

        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("pk", DataType.VARCHAR, is_primary=True, max_length=64)
        schema.add_field("vault", DataType.VARCHAR, max_length=256)
        schema.add_field("bucket", DataType.INT64)
        schema.add_field("docs", DataType.INT64)
        schema.add_field("length", DataType.INT64)
        schema.add_field("dfs", DataType.VARCHAR, max_length=65535)
        schema.add_field("nil", DataType.FLOAT_VECTOR, dim=2)  # a Milvus collection must hold a vector field
        index = client.prepare_index_params()
        index.add_index(field_name="nil", index_type="FLAT", metric_type="L2")
        client.create_collection(self.name, schema=schema, index_params=index, consistency_level="Strong")

    # -- writers ------------------------------------------------------------------------------
    def read_vault(self, vault: str) -> dict[int, str]:
        """What the table holds for `vault`: bucket -> text (the header as `docs length`)."""
        rows = self._call(
            "stats",
            methodcaller(
                "query",
                self.name,
                filter=f"vault == {quote(vault)}",
                output_fields=["bucket", "docs", "length", "dfs"],
                limit=MAX_LIMIT,
            ),
        )
        return {int(r["bucket"]): _text(r) for r in rows}

    def write_vault(
        self,
        vault: str,
        docs: int,
        length: int,
        df: Mapping[str, int],
        previous: Mapping[int, str] | None,
        state: str = "",
    ) -> dict[int, str]:
        """Bring `vault`'s rows to these statistics, rewriting only the buckets that differ from
        `previous` (what was written last; None: read from the table). `state`: the writer's digest
        of the rows it holds in the collection (`state_of`), kept in the header row. Returns what it
        holds now."""
        if previous is None:
            previous = self.read_vault(vault)
        now = encode_buckets(df)
        now[HEADER] = _header(int(docs), int(length), state)
        rows = []
        for b, text in now.items():
            if previous.get(b) != text:
                head = b == HEADER
                rows.append(
                    {
                        "pk": stats_pk(vault, b),
                        "vault": vault,
                        "bucket": b,
                        "docs": int(docs) if head else 0,
                        "length": int(length) if head else 0,
                        "dfs": state if head else text,
                        "nil": [0.0, 0.0],
                    }
                )
        gone = [stats_pk(vault, b) for b in previous if b not in now]
        for i in range(0, len(rows), 64):
            self._call("stats", methodcaller("upsert", self.name, rows[i : i + 64]))
        if gone:
            self._call("stats", methodcaller("delete", self.name, ids=gone))
        if rows or gone:
            self.clear()
        return now

    def forget_state(self, vault: str, previous: Mapping[int, str]) -> dict[int, str]:
        """Take the row-state digest out of `vault`'s header row (its rows are about to change); returns
        what the table holds now (`previous` with the header without digest)."""
        parts = previous.get(HEADER, "0 0").split(" ")
        docs, length = int(parts[0]), int(parts[1])
        row = {
            "pk": stats_pk(vault, HEADER),
            "vault": vault,
            "bucket": HEADER,
            "docs": docs,
            "length": length,
            "dfs": "",
            "nil": [0.0, 0.0],
        }
        self._call("stats", methodcaller("upsert", self.name, [row]))
        now = dict(previous)
        now[HEADER] = _header(docs, length, "")
        return now

    # -- readers ------------------------------------------------------------------------------
    def collection(self, terms: Iterable[str]) -> CollectionStats:
        """The collection's statistics for `terms` (one query for what is not kept)."""
        terms = set(terms)
        wanted = {HEADER} | {bucket_of(t) for t in terms}
        now = time.monotonic()
        with self._lock:
            got = {b: kept[1] for b in wanted if (kept := self._kept.get(b)) and now - kept[0] < self.ttl}
        missing = sorted(wanted - got.keys())
        if missing:
            with self._lock:
                stale = {b: kept[1] for b in missing if (kept := self._kept.get(b)) is not None}
            if len(stale) == len(missing):
                # Read before and older than the bound: used by this search while a thread reads the
                # table again (a search asks the engine only for its rankings and rows).
                got.update(stale)
                self._refresh_later()
            else:
                got.update(self._read_table(missing, now))
        docs = sum(int(r["docs"]) for r in got[HEADER])
        length = sum(int(r["length"]) for r in got[HEADER])
        by_word = {engine_term(t): t for t in terms}
        df: dict[str, int] = {}
        for b, part in got.items():
            if b == HEADER:
                continue
            for r in part:
                words = str(r.get("dfs") or "").split(" ")
                for i in range(0, len(words) - 1, 2):
                    term = by_word.get(words[i])
                    if term is not None:
                        df[term] = df.get(term, 0) + int(words[i + 1])
        return CollectionStats(docs, length, df, len(got[HEADER]))

    def _read_table(self, missing: list[int], now: float) -> dict[int, list[dict[str, Any]]]:
        """Read the buckets `missing` (with `whole`, the whole table in one query, so that the next searches'
        words are read from what is kept: ~257 rows a vault; the buckets only past the engine's row limit)."""
        whole = (
            self._call("stats", methodcaller("query", self.name, filter="bucket >= -1", **_FIELDS))
            if self.whole
            else None
        )
        if whole is not None and len(whole) < MAX_LIMIT:
            rows, missing = whole, list(range(HEADER, BUCKETS))
        else:
            expr = f"bucket in [{', '.join(str(b) for b in missing)}]"
            rows = self._call("stats", methodcaller("query", self.name, filter=expr, **_FIELDS))
        fresh: dict[int, list[dict[str, Any]]] = {b: [] for b in missing}
        for r in rows:
            fresh.setdefault(int(r["bucket"]), []).append(dict(r))
        with self._lock:
            for b, part in fresh.items():
                self._kept[b] = (now, part)
        return fresh

    def _refresh_later(self) -> None:
        """Read the kept buckets again in a background thread (one at a time; a fault leaves them stale)."""
        with self._lock:
            if self._refreshing:
                return
            self._refreshing = True
            wanted = sorted(self._kept)

        def run() -> None:
            try:
                self._read_table(wanted, time.monotonic())
            except BackendError:
                pass
            finally:
                with self._lock:
                    self._refreshing = False

        threading.Thread(target=run, name="explorer-milvus-stats", daemon=True).start()


_FIELDS: dict[str, Any] = {"output_fields": ["vault", "bucket", "docs", "length", "dfs"], "limit": MAX_LIMIT}


def _text(row: Mapping[str, Any]) -> str:
    if int(row["bucket"]) == HEADER:
        return _header(int(row["docs"]), int(row["length"]), str(row.get("dfs") or ""))
    return str(row.get("dfs") or "")


def _header(docs: int, length: int, state: str) -> str:
    return f"{docs} {length} {state}" if state else f"{docs} {length}"


def stored_state(rows: Mapping[int, str]) -> str:
    """The row-state digest a vault's header row holds (what `read_vault` returned; "" when none)."""
    parts = rows.get(HEADER, "").split(" ")
    return parts[2] if len(parts) > 2 else ""


def state_of(rows: Mapping[str, tuple[str, bool]]) -> str:
    """A digest of a vault's rows in the collection: node_id -> (content hash, has a vector)."""
    h = hashlib.blake2b(digest_size=16)
    for nid in sorted(rows):
        digest, has = rows[nid]
        h.update(f"{nid}\0{digest}\0{int(has)}\n".encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def vault_statistics(bm25: Any) -> tuple[int, int, dict[str, int]]:
    """(documents, total length, word -> documents holding it) of a vault's BM25 index."""
    from explorer.index.local.lexical_segment import document_frequencies

    terms, df = document_frequencies(bm25)
    n = len(bm25)
    return n, round(bm25.avgdl * n), dict(zip(terms, (int(x) for x in df), strict=True))


def collection_scores(
    table: StatsTable,
    own: LexicalStats,
    more: Mapping[str, Mapping[str, int]],
    tokens: Sequence[str],
    ids: Sequence[str],
) -> dict[str, float]:
    """BM25 of candidates `ids` for `tokens` with the collection's statistics: another vault's rows by their
    words in `more`, this vault's by its own BM25 statistics `own`. A collection whose table holds nothing
    yet is read with this vault's own statistics."""
    stats = table.collection(tokens)
    if not stats.docs:
        n = own.n_docs()
        stats = CollectionStats(n, round(own.avgdl() * n), {t: own.doc_freq(t) for t in set(tokens)}, 1)
    docs = {nid: (more[nid] if nid in more else own.term_counts(nid)) for nid in ids}
    return stats.scores(tokens, docs, BM25_K1, BM25_B)
