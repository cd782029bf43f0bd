"""A team reader: a shared collection searched with no vault on disk (`explorer search --team URI`).

`TeamReader` is an `IndexBackend` whose notes are the engine's rows: it reads, parses and keeps
nothing of a vault. Every search covers the whole collection (`vault:*`; `vault:NAME` narrows it);
its BM25 and vector candidates come from the engine as a writer's team search gets them
(explorer.index.milvus.team), its BM25 scores from the collection's statistics (the table the writers
keep, `table_statistics`; a scan of the rows, `read_statistics`, for a collection written without it),
and the shards the rankings return (texts, headings, dates, frontmatter, words) from the text
collection, read by key once per search (with the notes the name ranking opens, whole): a search
asks the engine at most twice, its second pass and feedback ranking the rows (and vectors) the
first request returned. The search pipeline runs on it unchanged.

Read-only: the reader never creates, loads into or writes to a collection beyond what a search
needs (`ReadOnlyEngine`), and writes nothing to disk; a collection that does not exist, or an
engine that cannot be reached, is one `BackendError` line naming the URI.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import partial
from operator import methodcaller
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from explorer.index.backend import (
    ALL_VAULTS,
    ClassicQueryError,
    ClassicResult,
    Hit,
    ModelState,
    Restriction,
    Scope,
    SnapshotCounts,
    Spread,
)
from explorer.index.local.lexical import BM25_B, BM25_EPSILON, BM25_K1
from explorer.index.local.model_host import ModelHost
from explorer.index.local.store import name_tokens
from explorer.index.milvus.engine import (
    MAX_LIMIT,
    ROW_FIELDS,
    BackendError,
    Engine,
    decode_terms,
    engine_terms,
    quote,
)
from explorer.index.milvus.stats import HEADER, STATS_SUFFIX
from explorer.index.milvus.team import (
    FOREIGN,
    Cosines,
    ForeignRows,
    foreign_key,
    foreign_note,
    named_files,
    request,
)
from explorer.text.tokenize import tokenize
from explorer.vault.links import LinkGraph
from explorer.vault.model import display_title

if TYPE_CHECKING:
    from explorer.config import Settings
    from explorer.index.local.embed import Embedder
    from explorer.vault.model import Note, Shard

STATS_MAX_AGE_S = 30.0
"""A reader reads the collection's BM25 statistics again when they are older than this (and its row
count moved) - a long-lived reader (`explorer mcp --team`) follows the writers within this bound."""
STATS_BATCH = 4000
"""Rows per page when the statistics are read."""
ROW_OUTPUT = ("node_id", "content_hash", "vault", "path")
"""What each ranked row brings back."""


def split_target(target: str, collection: str) -> tuple[str, str]:
    """(URI, collection) of a reader's `URI[/COLLECTION]` (`http://host:19530/team`, `~/team.db/team`);
    without a collection named, `collection`."""
    target = target.strip()
    if "://" in target:
        scheme, _, rest = target.partition("://")
        host, slash, name = rest.partition("/")
        return f"{scheme}://{host}", (name.strip("/") if slash and name.strip("/") else collection)
    head, sep, name = target.rpartition(".db/")
    if sep and name.strip("/") and "/" not in name.strip("/"):
        return head + ".db", name.strip("/")
    return target, collection


class ReadOnlyEngine(Engine):
    """An `Engine` that creates nothing: a missing collection, or a `.db` path that is not there, is a fault."""

    def client(self) -> Any:
        if "://" not in self.uri and self.uri and not Path(self.uri).expanduser().exists():
            raise self.fail("unreachable (no such Milvus Lite file; a reader creates nothing)")
        return super().client()

    def _prepare(self, client: Any) -> None:
        for name in (self.collection, self.text_collection):
            if not client.has_collection(name):
                raise self.fail(
                    f"collection {name!r} does not exist (a reader creates nothing: a writer of the team "
                    "makes it; name another with /COLLECTION or index.collection)"
                )
        self._check(client.describe_collection(self.collection))
        client.load_collection(self.collection)
        self._text_loaded = False


# -- the statistics BM25 reads -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TeamStatistics:
    """BM25 statistics of a whole collection (every vault's rows): documents, length, document frequencies.

    Scores are `rank_bm25.BM25Okapi`'s over the collection's rows (the local backend's formula:
    explorer.index.local.lexical.BM25Index), so a score never depends on who asks.
    """

    n: int
    """Rows (shards) of the collection."""
    total: int
    """Tokens over all rows."""
    df: Mapping[str, int]
    """Token -> rows holding it."""
    notes: int = 0
    """Distinct (vault, path) of the rows."""
    vectors: int = 0
    """Rows with a vector."""
    vaults: frozenset[str] = frozenset()
    """The vaults of the collection."""
    k1: float = BM25_K1
    b: float = BM25_B
    epsilon: float = BM25_EPSILON
    _idf: dict[str, float] = field(default_factory=dict, compare=False, repr=False)
    _eps: list[float] = field(default_factory=list, compare=False, repr=False)

    @property
    def avgdl(self) -> float:
        return self.total / self.n if self.n else 0.0

    def floor(self) -> float:
        """`epsilon` x the mean raw idf over the vocabulary (what a negative idf is raised to)."""
        if not self._eps:
            if self.df:
                df = np.fromiter(self.df.values(), dtype=np.float64, count=len(self.df))
                raw = np.log(self.n - df + 0.5) - np.log(df + 0.5)
                self._eps.append(self.epsilon * (float(raw.sum()) / len(raw)))
            else:
                self._eps.append(0.0)
        return self._eps[0]

    def idf(self, token: str) -> float | None:
        """The token's idf (None when no row holds it)."""
        value = self._idf.get(token)
        if value is not None:
            return value
        df = self.df.get(token, 0)
        if df <= 0:
            return None
        raw = float(np.log(np.float64(self.n - df + 0.5)) - np.log(np.float64(df + 0.5)))
        value = self._idf[token] = self.floor() if raw < 0 else raw
        return value

    def score(self, tokens: Sequence[str], counts: Mapping[str, int]) -> float:
        """BM25 of one row (its token counts) for the query tokens (repeats count, as in BM25Okapi)."""
        avgdl = self.avgdl
        if not avgdl:
            return 0.0
        dl = sum(counts.values())
        k1, b = self.k1, self.b
        score = 0.0
        for t in tokens:
            tf = counts.get(t, 0)
            if not tf:
                continue
            w = self.idf(t)
            if w is None:
                continue
            score += w * (tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)))
        return score


class _IdfView(Mapping[str, float]):
    """Token -> idf of a `TeamStatistics` (computed per token when asked)."""

    def __init__(self, stats: TeamStatistics) -> None:
        self._stats = stats

    def __getitem__(self, token: str) -> float:
        value = self._stats.idf(token)
        if value is None:
            raise KeyError(token)
        return value

    def __contains__(self, token: object) -> bool:
        return isinstance(token, str) and self._stats.df.get(token, 0) > 0

    def __iter__(self) -> Iterator[str]:
        return iter(self._stats.df)

    def __len__(self) -> int:
        return len(self._stats.df)


def read_statistics(engine: Engine) -> TeamStatistics:
    """The collection's BM25 statistics, read from the engine: one pass over every row's `terms`.

    A reader reads the statistics table its writers keep instead (`table_statistics`); this scan is
    for a collection whose table is missing or does not account for every row. Its cost grows with
    the collection (a read of the token column: seconds at 100k rows).
    """
    name = engine.collection

    def read(c: Any) -> TeamStatistics:
        df: Counter[str] = Counter()
        n = total = vectors = 0
        notes: set[tuple[str, str]] = set()
        it = c.query_iterator(
            name, batch_size=STATS_BATCH, filter="", output_fields=["vault", "path", "terms", "has_vector"]
        )
        try:
            while True:
                page = it.next()
                if not page:
                    break
                for r in page:
                    counts = decode_terms(str(r.get("terms") or ""))
                    n += 1
                    total += sum(counts.values())
                    df.update(counts.keys())
                    vectors += bool(r.get("has_vector"))
                    notes.add((str(r.get("vault")), str(r.get("path"))))
        finally:
            it.close()
        return TeamStatistics(
            n=n,
            total=total,
            df=dict(df),
            notes=len(notes),
            vectors=vectors,
            vaults=frozenset(v for v, _ in notes),
        )

    return engine.call("read", read)


def table_statistics(engine: Engine) -> TeamStatistics | None:
    """The collection's BM25 statistics from the table its writers keep (`<collection>_stats`,
    explorer.index.milvus.stats): one query of the table and three counts, whatever the collection's size.

    None when the collection has no such table, or when the table does not account for every row (a
    vault whose writer predates it, or one that has not synced since): `read_statistics` scans the rows
    then. Negative idf is floored as `TeamStatistics` floors it (at the vocabulary's mean), from the
    table's full vocabulary.
    """
    name = engine.collection + STATS_SUFFIX
    fields = ["vault", "bucket", "docs", "length", "dfs"]

    def read(c: Any) -> list[dict[str, Any]] | None:
        if not c.has_collection(name):
            return None
        c.load_collection(name)
        rows = c.query(name, filter=f"bucket >= {HEADER}", output_fields=fields, limit=MAX_LIMIT)
        if len(rows) < MAX_LIMIT:
            return [dict(r) for r in rows]
        out: list[dict[str, Any]] = []
        it = c.query_iterator(
            name, batch_size=STATS_BATCH, filter=f"bucket >= {HEADER}", output_fields=fields
        )
        try:
            while page := it.next():
                out.extend(dict(r) for r in page)
        finally:
            it.close()
        return out

    rows = engine.call("stats", read)
    heads = [r for r in rows or () if int(r["bucket"]) == HEADER]
    n = sum(int(r["docs"]) for r in heads)
    if not n or n != row_count(engine):
        return None
    df: Counter[str] = Counter()
    for r in rows or ():
        if int(r["bucket"]) != HEADER:
            words = str(r.get("dfs") or "").split(" ")
            for i in range(0, len(words) - 1, 2):
                df[words[i]] += int(words[i + 1])
    vectors = _count(engine, engine.collection, "has_vector == true")
    notes = _count(engine, engine.text_collection, "ordinal == 0")
    return TeamStatistics(
        n=n,
        total=sum(int(r["length"]) for r in heads),
        df=_decoded(df),
        notes=notes,
        vectors=vectors,
        vaults=frozenset(str(r["vault"]) for r in heads),
    )


def _decoded(df: Counter[str]) -> dict[str, int]:
    """Document frequencies by Explorer token (the table's words are in `engine_term` form)."""
    out: dict[str, int] = {}
    for word, count in df.items():
        if word.startswith("q_"):
            try:
                word = bytes.fromhex(word[2:]).decode("utf-8")
            except ValueError:
                continue
        out[word] = out.get(word, 0) + count
    return out


def _count(engine: Engine, collection: str, expr: str) -> int:
    def count(c: Any) -> int:
        if collection == engine.text_collection:
            c.load_collection(collection)
        rows = c.query(collection, filter=expr, output_fields=["count(*)"])
        return int(rows[0]["count(*)"]) if rows else 0

    return int(engine.call("read", count))


def row_count(engine: Engine) -> int:
    """Rows of the search collection now (one count query)."""
    rows = engine.call(
        "read", methodcaller("query", engine.collection, filter="", output_fields=["count(*)"])
    )
    return int(rows[0]["count(*)"]) if rows else 0


# -- the backend ---------------------------------------------------------------------------------
class TeamReader:
    """A shared collection as a read-only index backend (explorer.index.backend.IndexBackend)."""

    backend_name = "milvus"

    def __init__(
        self,
        uri: str,
        collection: str,
        settings: Settings,
        token: str = "",
        embedder: Embedder | None = None,
        on_message: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.engine = ReadOnlyEngine(uri, collection, token)
        self.on_message = on_message or (lambda _m: None)
        self.model = ModelHost(settings, embedder, self.on_message)
        self.root = Path(f"{FOREIGN}*")
        """No vault on disk: a name no file has (nothing reads or writes under it)."""
        self._stats: TeamStatistics | None = None
        self._stats_at = 0.0
        self._stats_rows = -1
        self._refreshing = False
        self._version = 0
        self._lock = threading.Lock()

    @property
    def backend_uri(self) -> str:
        return self.engine.label

    @property
    def cache_dir(self) -> Path:
        return self.root

    @property
    def model_state(self) -> ModelState:
        return self.model.state

    @property
    def runtime(self) -> str:
        return self.model.runtime

    @property
    def version(self) -> int:
        return self._version

    def open(self) -> TeamReader:
        """Connect, check the collection, read its statistics; raises BackendError (one line) when it cannot."""
        self.statistics()
        return self

    def statistics(self) -> TeamStatistics:
        """The collection's statistics (read at open). Older than `STATS_MAX_AGE_S`, they are checked in a
        background thread (the row count; read again when it moved) while searches go on with them: a
        search asks the engine only for its rankings and rows."""
        with self._lock:
            stats = self._stats
            if stats is None:
                stats = self._read_statistics()
            elif time.monotonic() - self._stats_at >= STATS_MAX_AGE_S and not self._refreshing:
                self._refreshing = True
                threading.Thread(target=self._refresh, name="explorer-team-stats", daemon=True).start()
            return stats

    def _read_statistics(self) -> TeamStatistics:
        stats = table_statistics(self.engine) or read_statistics(self.engine)
        self._stats, self._stats_at, self._stats_rows = stats, time.monotonic(), stats.n
        return stats

    def _refresh(self) -> None:
        """Check the statistics against the row count; read them again when it moved (a fault keeps them)."""
        try:
            if row_count(self.engine) == self._stats_rows:
                with self._lock:
                    self._stats_at = time.monotonic()
                return
            stats = table_statistics(self.engine) or read_statistics(self.engine)
            with self._lock:
                self._stats, self._stats_at, self._stats_rows = stats, time.monotonic(), stats.n
        except BackendError:
            pass
        finally:
            with self._lock:
                self._refreshing = False

    def snapshot(self) -> ReaderSnapshot:
        """A view of the collection for one search. Each view is a new version: its notes are the ones
        its rankings read, so what a search keeps per version (the name table, the knowledge shards)
        is made again from them."""
        stats = self.statistics()
        with self._lock:
            self._version += 1
            version = self._version
        return ReaderSnapshot(self, version, stats, Scope((ALL_VAULTS,)))

    def embedder(self) -> Embedder | None:
        return self.model.embedder()

    def load_model_in_background(self) -> None:
        self.model.load_in_background()

    @property
    def shards(self) -> Mapping[str, Shard]:
        """No shard of its own: every note is another vault's, read by `foreign_note`."""
        return {}

    @property
    def many_vaults(self) -> bool:
        """Every note a reader knows is a vault's of the collection (`vault:NAME/PATH`)."""
        return True

    def skipped_files(self) -> dict[str, str]:
        return {}

    def resolve_note(self, name: str) -> str | None:
        """A `vault:NAME/PATH` the collection holds, else None."""
        found = self.foreign_note(name)
        return found[0].path if found is not None else None

    def note(self, path: str) -> Note | None:
        found = self.foreign_note(path)
        return found[0] if found is not None else None

    def foreign_note(self, target: str) -> tuple[Note, list[Shard]] | None:
        """The note (and its shards) a `vault:NAME/PATH[#...]` names, read from the text collection."""
        if not target.startswith(FOREIGN):
            return None
        vault, _, rest = target[len(FOREIGN) :].partition("/")
        path = rest.partition("#")[0]
        if not vault or not path:
            return None
        found = read_notes(self.engine, [(vault, path)])
        return (found[0][0], found[0][1]) if found else None

    def local_copy(self, root: Path, settings: Settings) -> Any:
        raise BackendError(
            f"milvus at {self.engine.label}: why-not needs a vault on disk (a team reader has none)"
        )

    def classic_search(
        self,
        mode: str,
        keywords: Sequence[str] | str,
        max_results: int | None = None,
        context_chars: int | None = None,
        window: int | None = None,
    ) -> ClassicResult:
        raise ClassicQueryError("the classic tools read a vault on disk: a team reader has none")

    def close(self, exiting: bool = False) -> None:
        self.model.close()
        self.engine.close(final=True)


def read_notes(
    engine: Engine, wanted: Iterable[tuple[str, str]]
) -> list[tuple[Note, list[Shard], dict[str, Counter[str]]]]:
    """Notes of the collection by (vault, path), read whole from the text collection (one query per vault
    and 100 notes): (note named `vault:NAME/PATH`, its shards, their tokens) of each that it holds."""
    by_vault: dict[str, list[str]] = {}
    for vault, path in wanted:
        by_vault.setdefault(vault, []).append(path)
    out: list[tuple[Note, list[Shard], dict[str, Counter[str]]]] = []
    for vault, paths in sorted(by_vault.items()):
        paths.sort()
        for i in range(0, len(paths), 100):
            part = paths[i : i + 100]
            expr = f"vault == {quote(vault)} and path in [{', '.join(quote(p) for p in part)}]"
            rows = engine.text_call(
                "read",
                methodcaller(
                    "query", engine.text_collection, filter=expr, output_fields=ROW_FIELDS, limit=MAX_LIMIT
                ),
            )
            grouped: dict[str, list[dict[str, Any]]] = {}
            for r in rows:
                grouped.setdefault(str(r["path"]), []).append(dict(r))
            out.extend(foreign_note(vault, path, parts) for path, parts in grouped.items())
    return out


def foreign_split(node_id: str) -> tuple[str, str]:
    """(vault, node_id in its vault) of a `vault:NAME/...` node_id (the inverse of `foreign_key`)."""
    vault, _, rest = node_id[len(FOREIGN) :].partition("/")
    return vault, rest


# -- the snapshot --------------------------------------------------------------------------------
class _ReaderLexical:
    """A reader snapshot's BM25 statistics (explorer.index.backend.LexicalStats): the collection's."""

    __slots__ = ("_snap",)

    def __init__(self, snap: ReaderSnapshot) -> None:
        self._snap = snap

    def n_docs(self) -> int:
        return self._snap.n_docs()

    def idf(self) -> Mapping[str, float]:
        return self._snap.idf()

    def doc_freq(self, token: str) -> int:
        return self._snap.doc_freq(token)

    def avgdl(self) -> float:
        return self._snap._stats.avgdl

    def tokens(self, node_id: str) -> Collection[str]:
        return self._snap.tokens(node_id)

    def term_counts(self, node_id: str) -> Mapping[str, int]:
        return self._snap._loaded.tokens.get(node_id, Counter())

    def scores(self, tokens: Sequence[str], node_ids: Sequence[str]) -> dict[str, float]:
        return self._snap.bm25_scores(tokens, node_ids)

    def spread(self, triples: Sequence[tuple[str, str, float]]) -> Spread:
        return self._snap.spread(triples)


class ReaderSnapshot:
    """The collection at one statistics version, over the vaults of `scope` (explorer.index.backend.Snapshot).

    It starts with no notes: a note joins `notes` and `shards` (as `vault:NAME/PATH`) when a ranking
    first returns one of its rows, read by key from the text collection, and is read whole when the
    search shows it (`prefetch`) or reads its shards (`shard_ids`), so results, context windows
    and explanations work for it; rows of another content hash than the one read are left out (one
    version per search). Filters: `tag:`, `after:`/`before:`/`on:` and the vaults are engine
    expressions; `path:`, `file:`, `section:`, `-word` and `[property:value]` are checked on the
    rows returned, as a writer's team search checks other vaults' rows.
    """

    def __init__(
        self,
        owner: TeamReader,
        version: int,
        stats: TeamStatistics,
        scope: Scope,
        loaded: _Loaded | None = None,
    ) -> None:
        self._owner = owner
        self.version = version
        self._stats = stats
        self._scope = scope
        self._loaded = loaded if loaded is not None else _Loaded()
        self.notes: Mapping[str, Note] = self._loaded.notes
        self.shards: Mapping[str, Shard] = self._loaded.shards
        self.neighbours: Mapping[str, tuple[str, ...]] = {}
        self._expr = self._scope_expr()
        self.lexical = _ReaderLexical(self)
        self._expected: tuple[np.ndarray, int] | None = None
        self._kinds: set[str] = set()
        """The kinds of query (`lexical`, `dense`) this view's engine request carried: the rankings its rows answer."""
        self._words: set[str] = set()
        self._pool: list[str] = []
        self._vectors: dict[str, np.ndarray] = {}
        self._cosines = Cosines([], {})

    # -- notes and shards -------------------------------------------------------------------
    def prefetch(self, paths: Iterable[str]) -> None:
        """The notes a ranking returned some shards of are read whole (every shard) when something reads
        their shards (`shard_ids`), all of those named here in one query (a search's results need only
        the shards it ranked; reading a note by its path scans the text collection). A note whose shown
        title is made of its text (a conversation turn's first words) is read now."""
        self._loaded.hint(self._owner.engine, paths)

    def shard_ids(self, path: str) -> Sequence[str]:
        """A note's shards known to this search (read whole only with the search's rows when its file
        name holds a word of the search, `named_files`): the search asks the engine at most twice."""
        return self._loaded.paths.get(path, ())

    def modified(self, path: str) -> int | None:
        note = self.notes.get(path)
        if note is None or not isinstance(note.metadata, dict):
            return None
        seconds = int(note.metadata.get("mtime") or 0)
        return seconds * 1_000_000_000 if seconds > 0 else None

    def tokens(self, node_id: str) -> Collection[str]:
        return self._loaded.tokens.get(node_id, Counter()).keys()

    def links(self) -> LinkGraph:
        return LinkGraph(self.notes)

    def name_tokens(self, note: Note) -> tuple[frozenset[str], ...]:
        return name_tokens(note)

    def counts(self) -> SnapshotCounts:
        s = self._stats
        return SnapshotCounts(notes=s.notes, shards=s.n, pending=s.n - s.vectors, version=self.version)

    # -- lexical ----------------------------------------------------------------------------
    def n_docs(self) -> int:
        return self._stats.n

    def idf(self) -> Mapping[str, float]:
        return _IdfView(self._stats)

    def doc_freq(self, token: str) -> int:
        return self._stats.df.get(token, 0)

    def bm25_top(self, tokens: Sequence[str], k: int, allowed: Restriction | None = None) -> list[Hit]:
        return self.bm25_top_many([tokens], k, allowed)[0]

    def bm25_top_many(
        self, queries: Sequence[Sequence[str]], k: int, allowed: Restriction | None = None
    ) -> list[list[Hit]]:
        """Each token list's ranking of the rows of the search's one engine request (`_ask`: its BM25
        and dense queries together), scored with the collection's statistics; later rankings (the
        second pass) rescore the rows it returned."""
        expected, self._expected = self._expected, None
        if "lexical" not in self._kinds:
            dense = expected[0] if expected is not None else np.zeros((0, 1), dtype=np.float32)
            self._ask(queries, k, dense, expected[1] if expected is not None else 0)
        kept = self._loaded.tokens
        out: list[list[Hit]] = []
        for toks in queries:
            if not toks or k <= 0:
                out.append([])
                continue
            wanted = set(toks)
            ids = [n for n in self._pool if not wanted.isdisjoint(kept.get(n, ()))]
            scores = self.bm25_scores(toks, ids)
            hits = sorted(((n, scores.get(n, 0.0)) for n in ids), key=lambda h: (-h[1], h[0]))
            out.append(hits[:k])
        return out

    def spread(self, triples: Sequence[tuple[str, str, float]]) -> Spread:
        return Spread(self.version, 0, None)

    def bm25_top_spread(
        self, tokens: Sequence[str], k: int, spread: Spread, allowed: Restriction | None = None
    ) -> list[Hit]:
        # Words read with a turn's neighbours are a writer's own: a team search ranks every vault's own words.
        return self.bm25_top(tokens, k, allowed)

    def bm25_scores(self, tokens: Sequence[str], node_ids: Sequence[str]) -> dict[str, float]:
        stats, kept = self._stats, self._loaded.tokens
        return {nid: stats.score(tokens, kept[nid]) for nid in node_ids if nid in kept}

    # -- vectors ----------------------------------------------------------------------------
    def has_vectors(self, context: bool = False) -> bool:
        return not context and self._stats.vectors > 0

    def vector_top(
        self,
        queries: np.ndarray,
        k: int,
        floor: float,
        allowed: Restriction | None = None,
        context: bool = False,
    ) -> list[list[Hit]]:
        q = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        if context or not len(q) or k <= 0:
            return [[] for _ in range(len(q))]
        if "dense" not in self._kinds:
            self._ask([], 0, q, k)
        return self._dense(q, k, floor)

    def expect_vectors(
        self, queries: np.ndarray, k: int, floor: float, allowed: Restriction | None = None
    ) -> None:
        """The dense rankings the retrieval asks for after its BM25 rankings: asked for with them (`_ask`)."""
        self._expected = (np.atleast_2d(np.asarray(queries, dtype=np.float32)), k)

    def _ask(self, queries: Sequence[Sequence[str]], k: int, dense: np.ndarray, dense_k: int) -> None:
        """The search's one engine request (explorer.index.milvus.team.request): every BM25 query and
        every dense query, the filters as engine expressions, the rows' vectors returned; the shards
        among them read in one query of the text collection (`_read`)."""
        engine = self._owner.engine
        lexical_k, dense_k = min(max(k, 0), MAX_LIMIT), min(max(dense_k, 0), MAX_LIMIT)
        texts = [engine_terms(t) for t in queries if t] if lexical_k > 0 else []
        vectors = [r.tolist() for r in dense] if dense_k > 0 and len(dense) else []
        if lexical_k > 0:
            self._kinds.add("lexical")
        if dense_k > 0:
            self._kinds.add("dense")
        for toks in queries:
            self._words.update(toks)
        if not texts and not vectors:
            return
        res = engine.call(
            "search",
            partial(
                request,
                collection=engine.collection,
                texts=texts,
                lexical_k=lexical_k,
                lexical_expr=self._expr,
                vectors=vectors,
                dense_k=dense_k,
                dense_expr=f"({self._expr}) and has_vector == true" if self._expr else "has_vector == true",
                fields=[*ROW_OUTPUT, *(("has_vector", "vector") if vectors else ())],
            ),
        )
        rows = [h for hits in res for h in hits]
        ids = [nid for nid, _ in self._read(rows)]
        kept = set(ids)
        found: dict[str, np.ndarray] = {}
        for r in rows:
            e = r.get("entity", r)
            nid = foreign_key(str(e["vault"]), str(e["node_id"]))
            if nid in kept and e.get("has_vector") and e.get("vector") is not None:
                found.setdefault(nid, np.asarray(e["vector"], dtype=np.float32))
        self._pool = list(dict.fromkeys(self._pool + ids))
        self._vectors.update(found)
        self._cosines = Cosines(self._pool, self._vectors)

    def _dense(self, queries: np.ndarray, k: int, floor: float) -> list[list[Hit]]:
        """Each query row's cosine ranking of the rows of the search's request (its best `k` at or above `floor`)."""
        return [[h for h in self._cosines.ranking(row)[:k] if h[1] >= floor] for row in queries]

    def vector(self, node_id: str) -> np.ndarray | None:
        """A shard's vector as the search's request returned it (None for a shard it did not return: the
        search asks the engine at most twice)."""
        return self._vectors.get(node_id)

    def restrict(self, node_ids: AbstractSet[str]) -> Restriction:
        return Restriction(node_ids)

    # -- scope ------------------------------------------------------------------------------
    def widen(self, scope: Scope) -> tuple[ReaderSnapshot, str, bool]:
        """This view over the vaults (and with the filters) `scope` names; a note names vaults the collection lacks.

        The third value is True: every note the view reads is one the search covers. The filters
        apply here, on every vault's rows (the search's own filter pass sees only the notes read so far).
        """
        missing = [v for v in scope.vaults if v != ALL_VAULTS and v not in self._stats.vaults]
        note = (
            f"no vault {', '.join(repr(m) for m in missing)} in the collection {self._owner.engine.collection!r}"
            if missing
            else ""
        )
        return ReaderSnapshot(self._owner, self.version, self._stats, scope, self._loaded), note, True

    def _scope_expr(self) -> str:
        sc = self._scope
        parts = []
        if not sc.everything:
            parts.append(f"vault in [{', '.join(quote(v) for v in sc.vaults)}]")
        parts.extend(f"array_contains(tags, {quote(t)})" for t in sc.tags)
        if sc.days is not None:
            lo, hi = sc.days
            parts.extend([f"day >= {max(lo, 1)}", f"day < {hi}"])
        return " and ".join(parts)

    def _passes(self, shard: Shard) -> bool:
        """A row's shard under the query's path:, file:, section:, -word and [property] filters."""
        sc = self._scope
        low = shard.path.partition("/")[2].lower()  # the path inside its vault
        if sc.paths and not all(p.lower() in low for p in sc.paths):
            return False
        if sc.files and not all(f.lower() in low.rsplit("/", 1)[-1] for f in sc.files):
            return False
        if sc.sections and not all(
            any(x.lower() in h.lower() for h in shard.heading_path) for x in sc.sections
        ):
            return False
        note = self.notes.get(shard.path)
        if sc.note_passes is not None and not sc.note_passes(note.frontmatter if note is not None else {}):
            return False
        if sc.excluded:
            for nid in self._loaded.paths.get(shard.path, ()):
                toks = self._loaded.tokens.get(nid, Counter())
                if any(ex and all(t in toks for t in tokenize(ex)) for ex in sc.excluded):
                    return False
        return True

    # -- rows -------------------------------------------------------------------------------
    def _read(self, rows: Iterable[Any]) -> list[tuple[str, float]]:
        """(node_id, engine score) of the rows this view reads, in the engine's order; their notes loaded."""
        flat = [dict(r.get("entity", r)) | {"distance": float(r.get("distance", 0.0))} for r in rows]
        if self._scope.excluded:  # `-word` reads every shard of a note
            self._loaded.load(self._owner.engine, {(str(r["vault"]), str(r["path"])) for r in flat})
        else:
            self._loaded.load_rows(
                self._owner.engine,
                {(str(r["vault"]), str(r["node_id"])) for r in flat},
                named_files(self._words, flat, self._loaded.seen),
            )
        out = []
        for r in flat:
            nid = foreign_key(str(r["vault"]), str(r["node_id"]))
            shard = self._loaded.shards.get(nid)
            if shard is None or shard.hash != r.get("content_hash") or not self._passes(shard):
                continue
            out.append((nid, float(r["distance"])))
        return out

    def freshness(self) -> tuple[Hashable, str]:
        return ("reader", self.version, math.floor(time.monotonic())), ""

    def release(self) -> None:
        pass

    def __enter__(self) -> ReaderSnapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class _Loaded:
    """The notes one search has read from the text collection (shared by a view and its widened views)."""

    def __init__(self) -> None:
        self.notes: dict[str, Note] = {}
        self.shards: dict[str, Shard] = {}
        self.paths: dict[str, list[str]] = {}
        self.tokens: dict[str, Counter[str]] = {}
        self._fetched = ForeignRows()
        self._seen = self.seen = self._fetched.whole
        """Notes read whole."""
        self._asked: set[tuple[str, str]] = set()
        """(vault, node_id) of the shards read by key (found or not)."""
        self._hinted: set[tuple[str, str]] = set()
        """Notes a search named to read whole with the next one read (`hint`)."""
        self._lock = threading.Lock()

    def load(self, engine: Engine, wanted: set[tuple[str, str]]) -> None:
        """Read the notes `wanted` names ((vault, path)) whole; shards read already keep their version."""
        with self._lock:
            for key in self._fetched.read_whole(engine, wanted):
                self._build(key)

    def load_rows(
        self, engine: Engine, wanted: set[tuple[str, str]], whole: set[tuple[str, str]] | None = None
    ) -> None:
        """Read the shards `wanted` names ((vault, node_id)) by key in one query, their notes not whole
        but those of `whole` ((vault, path)), read whole in the same query."""
        with self._lock:
            todo = {
                (v, n)
                for v, n in wanted
                if foreign_key(v, n) not in self.shards and (v, n) not in self._asked
            }
            self._asked |= todo
            for key in self._fetched.read(engine, todo, whole or set()):
                self._build(key)

    def hint(self, engine: Engine, paths: Iterable[str]) -> None:
        """Name notes to read whole with the next one read; read them now when one's shown title is its text."""
        now = False
        for path in paths:
            note = self.notes.get(path)
            if note is not None and foreign_split(path) not in self._seen:
                self._hinted.add(foreign_split(path))
                now = now or display_title(note) != note.title
        if now:
            self.load(engine, set(self._hinted))

    def _build(self, key: tuple[str, str]) -> None:
        note, shards, tokens = foreign_note(key[0], key[1], list(self._fetched.rows[key].values()))
        for sh in shards:
            self.shards[sh.node_id] = sh
        self.tokens.update(tokens)
        self.paths[note.path] = [sh.node_id for sh in shards]
        self.notes[note.path] = note
