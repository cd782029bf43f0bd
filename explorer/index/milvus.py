"""The Milvus backend: the rankings of a search served by a Milvus engine (Milvus Lite, Standalone, a cluster).

`MilvusIndex` is a `VaultIndex` (it reads, parses and shards the vault, and keeps its vector
cache by content hash, exactly as the local backend does) whose shards are also kept in one Milvus
collection, and whose snapshots ask that collection for the BM25 and vector rankings. Explorer's
own fusion, explanations, two-pass, quality and why-not stay above the interface: a ranking comes
back as (node_id, raw score) pairs like the local one.

The collection (one row per shard, keyed by a hash of vault and node_id): node_id, path, vault,
owner, source type, heading path, tags, modification time, offsets, the shard text, its content
hash, the 384-d vector (with `has_vector`), and `terms` - Explorer's own BM25 tokens, each made a
word the engine's `standard` tokenizer keeps whole (see `engine_terms`) - analysed into a sparse
field by Milvus's BM25 function.

Writes: after every change batch and every vector batch the collection is brought to the
index's state (`sync`: the difference of content hashes, upserted and deleted, then flushed, so
the next search reads them: read-your-writes at consistency level Strong). When the engine is
unreachable, nothing is lost: the difference is simply recomputed and applied when it is back
(a background retry, or the next batch). Nothing is written into the vault.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from operator import methodcaller
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from explorer.index.backend import ALL_VAULTS, Hit, Restriction, Scope, Spread
from explorer.index.lexical import BM25_B, BM25_K1
from explorer.index.snapshot import LocalSnapshot
from explorer.index.vault_index import VaultIndex
from explorer.text.tokenize import tokenize
from explorer.vault.model import Note, Shard, Tag

if TYPE_CHECKING:
    from explorer.config import Settings
    from explorer.index.embed import Embedder

__all__ = [
    "TOKEN_ENV",
    "BackendError",
    "Engine",
    "MilvusIndex",
    "MilvusSnapshot",
    "engine_terms",
    "public_uri",
]

TOKEN_ENV = "EXPLORER_MILVUS_TOKEN"
"""The only place the engine's token is read from."""
DIM = 384
"""The vector dimension (all-MiniLM-L6-v2)."""
MAX_TEXT = 60_000
"""Bytes of shard text kept in the collection (a VARCHAR holds at most 65,535)."""
MAX_TERMS = 60_000
"""Bytes of encoded terms kept per shard."""
MAX_LIMIT = 16_384
"""The largest top-k Milvus accepts."""
BM25_PARAMS = {"metric_type": "BM25", "params": {"bm25_k1": BM25_K1, "bm25_b": BM25_B}}
"""The engine's BM25 with Explorer's k1 and b (its scores order candidates; they are re-scored here)."""
COSINE_PARAMS = {"metric_type": "COSINE"}
UPSERT_BATCH = 500
FIELDS = (
    "pk",
    "node_id",
    "vault",
    "path",
    "owner",
    "source_type",
    "heading_path",
    "tags",
    "mtime",
    "ordinal",
    "start",
    "end",
    "text",
    "content_hash",
    "model",
    "terms",
    "vector",
    "has_vector",
    "sparse",
)
_PLAIN = re.compile(r"[a-z0-9]+")


class BackendError(OSError):
    """The engine cannot serve: one line naming the URI (the CLI prints it and exits non-zero)."""


def public_uri(uri: str) -> str:
    """`uri` without a password or user (for display)."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return uri
    if parts.scheme and "@" in parts.netloc:
        return urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[1], parts.path, parts.query, ""))
    return uri


def engine_term(token: str) -> str:
    """One Explorer token as one word of the engine's `standard` tokenizer.

    Plain lowercase letters and digits pass as they are; anything else (CJK characters and
    bigrams, which the tokenizer would cut into single characters) becomes `q_` and its UTF-8
    in hex. Explorer's tokens never hold `_`, so the two kinds never meet.
    """
    if _PLAIN.fullmatch(token):
        return token
    return "q_" + token.encode("utf-8").hex()


def engine_terms(tokens: Iterable[str]) -> str:
    """Explorer tokens joined by spaces, each as `engine_term` makes it."""
    return " ".join(engine_term(t) for t in tokens)


def _clip(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def shard_pk(vault: str, node_id: str) -> str:
    """The row key of a shard of `vault`."""
    return hashlib.blake2b(f"{vault}\0{node_id}".encode(), digest_size=16).hexdigest()


class Engine:
    """One Milvus collection reached by URI (connected on first use)."""

    def __init__(self, uri: str, collection: str, token: str = "", timeout: float = 5.0) -> None:
        self.uri = uri
        self.collection = collection
        self._token = token
        self.timeout = timeout
        self._client: Any = None
        self._ready = False
        self._lock = threading.RLock()
        self.calls: dict[str, int] = {}
        """Engine calls made, by kind (search, read, insert, ...): what a benchmark counts per search."""

    @property
    def label(self) -> str:
        """The URI as shown to a user."""
        return public_uri(self.uri)

    def fail(self, what: str, exc: BaseException | None = None) -> BackendError:
        detail = ""
        if exc is not None:
            details = getattr(exc, "details", None)  # a gRPC status: its own words
            said = details() if callable(details) else getattr(exc, "message", "")
            text = str(said or exc).strip().splitlines()
            detail = f" ({text[0][:160] if text else type(exc).__name__})"
        return BackendError(f"milvus at {self.label}: {what}{detail}")

    def client(self) -> Any:
        """The connected client, the collection created or checked and loaded."""
        with self._lock:
            if self._client is not None and self._ready:
                return self._client
            try:
                from pymilvus import MilvusClient

                # The client logs every RPC fault with a traceback; the fault reaches the user as one line instead.
                for name in ("pymilvus", "milvus_lite"):
                    logging.getLogger(name).setLevel(logging.CRITICAL)
            except ImportError as exc:
                raise BackendError(
                    "the milvus backend needs pymilvus: pip install 'explorer[milvus]'"
                ) from exc
            if not self.uri:
                raise BackendError("the milvus backend needs index.milvus_uri (or EXPLORER_INDEX_MILVUS_URI)")
            if "://" not in self.uri and self.uri.endswith(
                ".db"
            ):  # Milvus Lite in process: its folder may be new
                Path(self.uri).expanduser().parent.mkdir(parents=True, exist_ok=True)
            try:
                self._client = MilvusClient(uri=self.uri, token=self._token, timeout=self.timeout)
            except Exception as exc:  # noqa: BLE001 - every connection fault is one line
                self._client = None
                raise self.fail(*self._why(exc)) from None
            try:
                self._prepare(self._client)
            except BackendError:
                self.close()
                raise
            except Exception as exc:  # noqa: BLE001
                self.close()
                raise self.fail(*self._why(exc)) from None
            self._ready = True
            return self._client

    @staticmethod
    def _why(exc: BaseException) -> tuple[str, BaseException]:
        """What a fault means for the user: a refused token or an engine that cannot be reached.

        The client reports a refused token at connection as a failed connection whose cause is
        the server's gRPC status (UNAUTHENTICATED / PERMISSION_DENIED): the causes are read too.
        Returns (the reason, the fault whose words complete the line).
        """
        seen: BaseException | None = exc
        for _ in range(8):
            if seen is None:
                break
            code = getattr(seen, "code", None)
            if callable(code):
                try:
                    code = code()
                except Exception:  # noqa: BLE001 - a status we cannot read says nothing
                    code = None
            text = str(seen).lower()
            if getattr(code, "name", "") in ("UNAUTHENTICATED", "PERMISSION_DENIED") or any(
                w in text for w in ("auth", "token", "permission", "credential")
            ):
                return f"the token was refused (set {TOKEN_ENV})", seen
            seen = seen.__cause__ or seen.__context__
        return "unreachable", exc

    def _prepare(self, client: Any) -> None:
        if not client.has_collection(self.collection):
            self._create(client)
        else:
            self._check(client.describe_collection(self.collection))
        client.load_collection(self.collection)

    def _check(self, desc: dict[str, Any]) -> None:
        names = {f["name"]: f for f in desc.get("fields", [])}
        dim = int(names.get("vector", {}).get("params", {}).get("dim", DIM))
        if dim != DIM:
            raise self.fail(
                f"collection {self.collection!r} holds vectors of dimension {dim}, not {DIM}; "
                "name another with index.collection"
            )
        missing = [n for n in FIELDS if n not in names]
        if missing:
            raise self.fail(
                f"collection {self.collection!r} is not an Explorer shard collection "
                f"(no field {missing[0]!r}); name another with index.collection"
            )

    def _create(self, client: Any) -> None:
        from pymilvus import DataType, Function, FunctionType, MilvusClient

        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("pk", DataType.VARCHAR, is_primary=True, max_length=64)
        schema.add_field("node_id", DataType.VARCHAR, max_length=4096)
        schema.add_field("vault", DataType.VARCHAR, max_length=256)
        schema.add_field("path", DataType.VARCHAR, max_length=4096)
        schema.add_field("owner", DataType.VARCHAR, max_length=256)
        schema.add_field("source_type", DataType.VARCHAR, max_length=64)
        schema.add_field("heading_path", DataType.VARCHAR, max_length=4096)
        schema.add_field(
            "tags", DataType.ARRAY, element_type=DataType.VARCHAR, max_capacity=256, max_length=256
        )
        schema.add_field("mtime", DataType.INT64)
        schema.add_field("ordinal", DataType.INT64)
        schema.add_field("start", DataType.INT64)
        schema.add_field("end", DataType.INT64)
        schema.add_field("text", DataType.VARCHAR, max_length=65535)
        schema.add_field("content_hash", DataType.VARCHAR, max_length=128)
        schema.add_field("model", DataType.VARCHAR, max_length=512)
        schema.add_field(
            "terms",
            DataType.VARCHAR,
            max_length=65535,
            enable_analyzer=True,
            analyzer_params={"tokenizer": "standard"},
        )
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=DIM)
        schema.add_field("has_vector", DataType.BOOL)
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(
            Function(
                name="terms_bm25",
                function_type=FunctionType.BM25,
                input_field_names=["terms"],
                output_field_names=["sparse"],
            )
        )
        index = client.prepare_index_params()
        index.add_index(field_name="vector", index_type="FLAT", metric_type="COSINE")
        index.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        client.create_collection(
            self.collection, schema=schema, index_params=index, consistency_level="Strong"
        )

    def call(self, what: str, fn: Callable[[Any], Any]) -> Any:
        """`fn(client)`, every engine fault turned into one `BackendError` line (and a reconnect next time)."""
        client = self.client()
        self.calls[what] = self.calls.get(what, 0) + 1
        try:
            return fn(client)
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001
            text = str(exc).lower()
            if "collection not found" in text or "can't find collection" in text:
                with self._lock:
                    self._ready = False  # created again on the next call
                raise self.fail(f"collection {self.collection!r} is missing", exc) from None
            self.close()
            why, cause = self._why(exc)
            raise self.fail(f"{what} failed: {why}", cause) from None

    def close(self) -> None:
        with self._lock:
            client, self._client, self._ready = self._client, None, False
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - closing a dead connection
                pass


class MilvusIndex(VaultIndex):
    """A `VaultIndex` whose rankings a Milvus collection serves (explorer.index.backend.IndexBackend)."""

    backend_name = "milvus"

    def __init__(
        self,
        root: Path,
        settings: Settings | None = None,
        embedder: Embedder | None = None,
        on_message: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(root, settings, embedder=embedder, on_message=on_message)
        ix = self.settings.index
        self.engine = Engine(ix.milvus_uri, ix.collection, os.environ.get(TOKEN_ENV, ""))
        self._pushed: dict[str, tuple[str, bool]] | None = None
        """node_id -> (content hash, has a vector) of this vault's rows in the collection, as last known."""
        self._sync_lock = threading.Lock()
        self._retry: threading.Thread | None = None
        self._closing = threading.Event()
        self.behind = 0
        """Shard changes not in the collection yet (the engine was unreachable)."""
        self.engine_fault = ""
        self.retry_seconds = 1.0
        self._opened = False
        self.borrowed = 0
        self._foreign: dict[tuple[str, str], tuple[float, tuple[Note, list[Shard]] | None]] = {}
        self._foreign_lock = threading.Lock()
        """Shards given a vector another writer of the collection had already computed."""

    @property
    def backend_uri(self) -> str:
        return self.engine.label

    # -- writes -------------------------------------------------------------------------------
    def open(self, progress: Any = None) -> Any:
        report = super().open(progress)
        self._opened = True
        self.sync()  # a command fails here, naming the URI, when the engine cannot serve
        return report

    def _batch_applied(self) -> None:
        self._sync_soft()

    def embed_pending(self, *args: Any, **kwargs: Any) -> int:
        borrowed = self.borrow_vectors()
        done = super().embed_pending(*args, **kwargs)
        if done or borrowed:
            self._sync_soft()
        return done

    def borrow_vectors(self) -> int:
        """Take the vectors the collection already holds for pending shards' texts (any vault's, same model).

        A text embedded by anyone sharing the collection is never embedded again; returns the
        shards given a vector. An engine fault leaves them to the model.
        """
        if self.embedder() is None:
            return 0
        with self.lock:
            hashes = sorted({s.hash for s in self.pending() if s.node_id not in self.dense})
        if not hashes:
            return 0
        name, model = self.engine.collection, self.model_id
        found: dict[str, np.ndarray] = {}
        try:
            for i in range(0, len(hashes), 256):
                part = hashes[i : i + 256]
                expr = (
                    f"model == {_quote(model)} and has_vector == true and "
                    f"content_hash in [{', '.join(_quote(h) for h in part)}]"
                )
                rows = self.engine.call(
                    "read",
                    methodcaller(
                        "query",
                        name,
                        filter=expr,
                        output_fields=["content_hash", "vector"],
                        limit=min(MAX_LIMIT, len(part) * 8),
                    ),
                )
                for r in rows:
                    found.setdefault(r["content_hash"], np.asarray(r["vector"], dtype=np.float32))
        except BackendError:
            return 0
        if not found:
            return 0
        self.keeper.save(lambda: self.store.put_vectors(self.model_id, found))
        given = 0
        with self.lock:
            self.reader.own("dense")
            for s in list(self.shards.values()):
                vec = found.get(s.hash)
                if vec is not None and s.node_id not in self.dense:
                    self.dense.set(s.node_id, vec)
                    given += 1
            self.reader.version += 1
        self.borrowed += given
        return given

    def _sync_soft(self) -> None:
        """`sync`, an engine fault kept for the retry loop instead of raised."""
        if not self._opened:
            return  # `open` syncs once, at its end, and raises
        try:
            self.sync()
        except BackendError as exc:
            self._fell_behind(str(exc))

    def _fell_behind(self, why: str) -> None:
        first = not self.engine_fault
        self.engine_fault = why
        if first:
            self.on_message(f"{why}; changes are kept and sent when it is back")
        if self._retry is None or not self._retry.is_alive():
            self._retry = threading.Thread(target=self._retry_loop, name="explorer-milvus-retry", daemon=True)
            self._retry.start()

    def _retry_loop(self) -> None:
        while not self._closing.wait(self.retry_seconds):
            try:
                self.sync()
            except BackendError as exc:
                self.engine_fault = str(exc)
                continue
            self.on_message(f"milvus at {self.engine.label}: back; the collection is up to date")
            return

    def sync(self) -> int:
        """Bring this vault's rows of the collection to the index's state; returns the rows written.

        Raises BackendError when the engine cannot serve (nothing is lost: the next call
        computes the difference again).
        """
        with self._sync_lock:
            if self._pushed is None:
                self._pushed = self._read_pushed()
            with self.lock:
                want = {nid: (s.hash, nid in self.dense) for nid, s in self.shards.items()}
                changed = [self.shards[nid] for nid, state in want.items() if self._pushed.get(nid) != state]
                gone = [nid for nid in self._pushed if nid not in want]
                rows = [self._row(s) for s in changed]
            self.behind = len(rows) + len(gone)
            if not rows and not gone:
                self.engine_fault = ""
                return 0
            name = self.engine.collection
            # Rows new to the collection are inserted (an upsert looks each key up first: slower).
            fresh = [r for r in rows if r["node_id"] not in self._pushed]
            known = [r for r in rows if r["node_id"] in self._pushed]
            for op, batch in (("insert", fresh), ("upsert", known)):
                for i in range(0, len(batch), UPSERT_BATCH):
                    part = batch[i : i + UPSERT_BATCH]
                    self.engine.call(op, methodcaller(op, name, part))
                    for r in part:
                        self._pushed[r["node_id"]] = (r["content_hash"], r["has_vector"])
            for i in range(0, len(gone), UPSERT_BATCH):
                doomed = gone[i : i + UPSERT_BATCH]
                pks = [shard_pk(self.vault_name, nid) for nid in doomed]
                self.engine.call("delete", methodcaller("delete", name, ids=pks))
                for nid in doomed:
                    self._pushed.pop(nid, None)
            # Unflushed rows are searched ~100x slower: flush after every batch.
            self.engine.call("flush", lambda c: c.flush(name))
            self.behind = 0
            self.engine_fault = ""
            return len(rows) + len(gone)

    def _read_pushed(self) -> dict[str, tuple[str, bool]]:
        name = self.engine.collection
        expr = f"vault == {_quote(self.vault_name)}"

        def read(c: Any) -> dict[str, tuple[str, bool]]:
            out: dict[str, tuple[str, bool]] = {}
            it = c.query_iterator(
                name, batch_size=4000, filter=expr, output_fields=["node_id", "content_hash", "has_vector"]
            )
            try:
                while True:
                    page = it.next()
                    if not page:
                        break
                    for r in page:
                        out[r["node_id"]] = (r["content_hash"], bool(r["has_vector"]))
            finally:
                it.close()
            return out

        return self.engine.call("read", read)

    def _row(self, s: Any) -> dict[str, Any]:
        note = self.notes.get(s.path)
        state = self.reader.states.get(s.path)
        vec = self.dense.vector(s.node_id)
        has = vec is not None
        if not has:
            vec = np.zeros(DIM, dtype=np.float32)
            vec[0] = 1.0  # a placeholder the `has_vector` filter keeps out of every vector search
        tags = tag_ancestors({t.name.lower() for t in note.tags})[:256] if note is not None else []
        return {
            "pk": shard_pk(self.vault_name, s.node_id),
            "node_id": _clip(s.node_id, 4000),
            "vault": self.vault_name,
            "path": _clip(s.path, 4000),
            "owner": self.vault_name,
            "source_type": s.source_type[:64],
            "heading_path": _clip(" > ".join(s.heading_path), 4000),
            "tags": [_clip(t, 250) for t in tags],
            "mtime": int(state.mtime_ns // 1_000_000_000) if state is not None else 0,
            "ordinal": s.ordinal,
            "start": s.start,
            "end": s.end,
            "text": _clip(s.text, MAX_TEXT),
            "content_hash": s.hash,
            "model": self.model_id[:512],
            # Each token as often as the shard holds it: the engine's BM25 needs the term counts and length.
            "terms": _clip(
                engine_terms(t for t, n in self.bm25.terms(s.node_id).items() for _ in range(n)), MAX_TERMS
            ),
            "vector": np.asarray(vec, dtype=np.float32).tolist(),
            "has_vector": has,
        }

    # -- reads --------------------------------------------------------------------------------
    def note(self, path: str) -> Note | None:
        """The note at `path`; another vault's (`vault:NAME/PATH`, as a team search names it) is read from the collection."""
        found = super().note(path)
        if found is None and path.startswith(FOREIGN):
            other = self.foreign_note(path)
            return other[0] if other is not None else None
        return found

    def foreign_note(self, target: str) -> tuple[Note, list[Shard]] | None:
        """Another vault's note (and its shards) named by a `vault:NAME/PATH[#...]` path or node_id, or None.

        Read from the collection, at most once per second for the same note (the note view and
        the context pane ask for it on every redraw); an engine fault reads as None.
        """
        vault, _, rest = target[len(FOREIGN) :].partition("/")
        path = rest.partition("#")[0]
        if not vault or not path:
            return None
        now = time.monotonic()
        with self._foreign_lock:
            kept = self._foreign.get((vault, path))
            if kept is not None and now - kept[0] < 1.0:
                return kept[1]
        expr = f"vault == {_quote(vault)} and path == {_quote(path)}"
        try:
            rows = self.engine.call(
                "read",
                lambda c: c.query(
                    self.engine.collection, filter=expr, output_fields=_ROW_FIELDS, limit=MAX_LIMIT
                ),
            )
        except BackendError:
            return None
        found = None
        if rows:
            note, shards, _tokens = foreign_note(vault, path, rows)
            found = (note, shards)
        with self._foreign_lock:
            if len(self._foreign) > 64:
                self._foreign.clear()
            self._foreign[(vault, path)] = (now, found)
        return found

    def snapshot(self) -> MilvusSnapshot:
        return self.reader.snapshot(MilvusSnapshot, self)

    def close(self, exiting: bool = False) -> None:
        self._closing.set()
        try:
            super().close(exiting)
        finally:
            self.engine.close()


class MilvusSnapshot(LocalSnapshot):
    """A `MilvusIndex` at one version: the BM25 and vector rankings come from the collection.

    Rows the collection holds for another version of a shard (another content hash) or for a
    shard this view does not know are left out, so a search still reads one version. Scores are
    the raw BM25 scores of this view's index (the engine picks the candidates with the same k1
    and b) and the engine's cosines. Dialog-context vectors and spread BM25 stay local.
    """

    __slots__ = ()

    @property
    def _index(self) -> MilvusIndex:
        return self._owner  # type: ignore[return-value]

    def _filter(self, allowed: Restriction | None, extra: str = "") -> str:
        ix = self._index
        parts = [f"vault == {_quote(ix.vault_name)}"]
        if extra:
            parts.append(extra)
        if allowed is not None:
            expr = allowed.prepared.get("milvus")
            if expr is None:
                pks = ", ".join(_quote(shard_pk(ix.vault_name, n)) for n in sorted(allowed.node_ids))
                expr = allowed.prepared["milvus"] = f"pk in [{pks}]"
            parts.append(expr)
        return " and ".join(parts)

    def widen(self, scope: Scope) -> tuple[MilvusSnapshot, str, bool]:
        """This view over the vaults `scope` names (`TeamSnapshot`)."""
        ix = self._index
        own = ix.vault_name
        if not scope.everything and set(scope.vaults) == {own}:
            return self, "", True
        missing = []
        for name in scope.vaults:
            if name in (own, ALL_VAULTS):
                continue
            expr = f"vault == {_quote(name)}"
            rows = ix.engine.call(
                "read",
                methodcaller("query", ix.engine.collection, filter=expr, output_fields=["pk"], limit=1),
            )
            if not rows:
                missing.append(name)
        note = (
            f"no vault {', '.join(repr(m) for m in missing)} in the collection {ix.engine.collection!r}"
            if missing
            else ""
        )
        return TeamSnapshot(self, scope), note, scope.everything or own in scope.vaults

    def _current(self, row: dict[str, Any]) -> str | None:
        entity = row.get("entity", row)
        nid = entity.get("node_id")
        shard = self.shards.get(nid) if nid is not None else None
        if shard is None or shard.hash != entity.get("content_hash"):
            return None
        return nid

    # What each engine row brings back (a team view also reads the row's vault and path).
    OUTPUT_FIELDS: tuple[str, ...] = ("node_id", "content_hash")

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

    def bm25_top(self, tokens: Sequence[str], k: int, allowed: Restriction | None = None) -> list[Hit]:
        return self.bm25_top_many([tokens], k, allowed)[0]

    def bm25_top_many(
        self, queries: Sequence[Sequence[str]], k: int, allowed: Restriction | None = None
    ) -> list[list[Hit]]:
        """Every token list's BM25 ranking from one engine search (one query text per list)."""
        out: list[list[Hit]] = [[] for _ in queries]
        asked = [i for i, toks in enumerate(queries) if toks]
        if not asked or k <= 0 or (allowed is not None and not allowed.node_ids):
            return out
        data = [engine_terms(queries[i]) for i in asked]
        res = self._search("sparse", data, k, self._filter(allowed), BM25_PARAMS)
        for i, rows in zip(asked, res, strict=True):
            tokens = queries[i]
            ids = [nid for nid in (self._current(r) for r in rows) if nid is not None]
            scores = self._bm25.get_scores(tokens, keys=ids)
            # Every row the engine returns holds a query token, as every document the local ranking lists.
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
            return super().vector_top(queries, k, floor, allowed, context)
        q = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        if not len(q) or k <= 0 or (allowed is not None and not allowed.node_ids):
            return [[] for _ in range(len(q))]
        data = [row.tolist() for row in q]
        res = self._search("vector", data, k, self._filter(allowed, "has_vector == true"), COSINE_PARAMS)
        out: list[list[Hit]] = []
        for rows in res:
            hits = []
            for r in rows:
                nid = self._current(r)
                score = float(r.get("distance", 0.0))
                if nid is not None and score >= floor:
                    hits.append((nid, score))
            hits.sort(key=lambda h: (-h[1], h[0]))
            out.append(hits)
        return out


def wait_until(check: Callable[[], bool], seconds: float) -> bool:
    """Poll `check` until true or `seconds` pass (for callers waiting on the retry loop)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.05)
    return check()


FOREIGN = "vault:"
"""Another vault's notes are known in a team search as `vault:NAME/PATH` (node_ids alike)."""
_ROW_FIELDS = [
    "node_id",
    "vault",
    "path",
    "ordinal",
    "start",
    "end",
    "heading_path",
    "tags",
    "mtime",
    "text",
    "content_hash",
    "source_type",
    "terms",
]


def foreign_key(vault: str, key: str) -> str:
    """How a path or node_id of another vault is named in a team search."""
    return f"{FOREIGN}{vault}/{key}"


def decode_terms(terms: str) -> Counter[str]:
    """The Explorer tokens of an analysed `terms` field with their counts (the inverse of `engine_terms`)."""
    out: Counter[str] = Counter()
    for word in terms.split():
        if word.startswith("q_"):
            try:
                out[bytes.fromhex(word[2:]).decode("utf-8")] += 1
            except ValueError:
                continue
        else:
            out[word] += 1
    return out


def tag_ancestors(tags: Iterable[str]) -> list[str]:
    """Tags with every parent of a nested tag (`a/b/c` also gives `a/b` and `a`), so `tag:a` covers its children."""
    out: dict[str, None] = {}
    for tag in tags:
        parts = tag.split("/")
        for i in range(1, len(parts) + 1):
            out.setdefault("/".join(parts[:i]), None)
    return sorted(out)


def foreign_note(
    vault: str, path: str, rows: list[dict[str, Any]]
) -> tuple[Note, list[Shard], dict[str, Counter[str]]]:
    """Another vault's note from its rows: (the note, its shards in order, their tokens), named `vault:NAME/...`.

    The note's text is its shards' texts at their offsets (what no shard holds, such as
    frontmatter, is left out); its title is its first heading or file name, its tags the rows'.
    """
    rows = sorted(rows, key=lambda r: (int(r["ordinal"]), int(r["start"])))
    key = foreign_key(vault, path)
    text = ""
    shards: list[Shard] = []
    tokens: dict[str, Counter[str]] = {}
    for r in rows:
        start, piece = int(r["start"]), str(r["text"])
        if start >= len(text):
            text += "\n" * (start - len(text)) + piece
        elif start + len(piece) > len(text):
            text = text[:start] + piece
        nid = foreign_key(vault, str(r["node_id"]))
        shards.append(
            Shard(
                node_id=nid,
                path=key,
                ordinal=int(r["ordinal"]),
                start=start,
                end=int(r["end"]),
                heading_path=tuple(h for h in str(r["heading_path"]).split(" > ") if h),
                text=piece,
                search_text=piece,
                hash=str(r["content_hash"]),
                source_type=str(r["source_type"]) or "note",
            )
        )
        tokens[nid] = decode_terms(str(r.get("terms") or ""))
    stem = path.rsplit("/", 1)[-1]
    stem = stem[:-3] if stem.lower().endswith(".md") else stem
    first = shards[0]
    note = Note(
        path=key,
        text=text,
        title=first.heading_path[0] if first.heading_path else stem,
        frontmatter={},
        body_start=0,
        headings=(),
        links=(),
        tags=tuple(Tag(t, 0, 0) for t in rows[0].get("tags") or ()),
        blocks=(),
        source_type=first.source_type,
        metadata={"vault": vault, "mtime": int(rows[0].get("mtime") or 0)},
    )
    return note, shards, tokens


class _Overlay(Mapping[str, Any]):
    """This vault's table with other vaults' entries (fetched during one team search) after it."""

    __slots__ = ("_base", "_more")

    def __init__(self, base: Mapping[str, Any], more: dict[str, Any]) -> None:
        self._base, self._more = base, more

    def __getitem__(self, key: str) -> Any:
        try:
            return self._base[key]
        except KeyError:
            return self._more[key]

    def get(self, key: str, default: Any = None) -> Any:
        value = self._base.get(key)
        return self._more.get(key, default) if value is None else value

    def __contains__(self, key: object) -> bool:
        return key in self._base or key in self._more

    def __iter__(self) -> Iterator[str]:
        yield from self._base
        yield from self._more

    def __len__(self) -> int:
        return len(self._base) + len(self._more)


class TeamSnapshot(MilvusSnapshot):
    """A `MilvusSnapshot` over several vaults of the collection (`vault:name`, `vault:*`).

    This vault's shards are read as in `MilvusSnapshot`. Another vault's rows come from the
    collection: a note any ranking returns is read whole (all its rows, once per search) and
    joins `notes` and `shards` as `vault:NAME/PATH`, so results, context windows and the note
    view work for it; later rows of another content hash are left out (one version per search).
    Rankings score every vault alike: BM25 with this vault's statistics (see `_scores`), the
    engine's cosines. `tag:` is an engine expression on the other vaults' rows; `path:`,
    `file:`, `section:` and `-word` are checked on the rows the engine returns; dates and
    properties apply to this vault's notes only.
    """

    OUTPUT_FIELDS = ("node_id", "content_hash", "vault", "path")

    __slots__ = ("_engine_expr", "_more_notes", "_more_paths", "_more_shards", "_more_tokens", "_scope")

    def __init__(self, base: MilvusSnapshot, scope: Scope) -> None:
        super().__init__(
            base._owner,
            base.version,
            base.notes,  # type: ignore[arg-type]
            base.shards,  # type: ignore[arg-type]
            base._by_path,
            base.neighbours,  # type: ignore[arg-type]
            base._bm25,
            base._dense,
            base._context,
            states=base._states,
        )
        self._released = True  # the base view holds the pin and releases it
        self._scope = scope
        self._more_notes: dict[str, Note] = {}
        self._more_shards: dict[str, Shard] = {}
        self._more_paths: dict[str, list[str]] = {}
        self._more_tokens: dict[str, Counter[str]] = {}
        self.notes = _Overlay(base.notes, self._more_notes)
        self.shards = _Overlay(base.shards, self._more_shards)
        self._by_path = _Overlay(base._by_path, self._more_paths)  # type: ignore[assignment]
        self._engine_expr = self._scope_expr()

    # -- filters ------------------------------------------------------------------------------
    def _scope_expr(self) -> tuple[str, str]:
        """(this vault's part, the other vaults' part) of the engine filter ("" when not covered)."""
        sc, own = self._scope, self._index.vault_name
        mine = f"vault == {_quote(own)}" if sc.everything or own in sc.vaults else ""
        others = [v for v in sc.vaults if v not in (own, ALL_VAULTS)]
        if sc.everything:
            theirs = f"vault != {_quote(own)}"
        elif others:
            theirs = f"vault in [{', '.join(_quote(v) for v in others)}]"
        else:
            theirs = ""
        if theirs:
            theirs = " and ".join([theirs, *(f"array_contains(tags, {_quote(t)})" for t in sc.tags)])
        return mine, theirs

    def _filter(self, allowed: Restriction | None, extra: str = "") -> str:
        mine, theirs = self._engine_expr
        if mine and allowed is not None:
            expr = allowed.prepared.get("milvus")
            if expr is None:
                own = self._index.vault_name
                pks = ", ".join(_quote(shard_pk(own, n)) for n in sorted(allowed.node_ids))
                expr = allowed.prepared["milvus"] = f"pk in [{pks}]"
            mine = f"{mine} and {expr}"
        scope = " or ".join(f"({p})" for p in (mine, theirs) if p)
        return f"({scope}) and {extra}" if extra else scope

    def _passes(self, shard: Shard, note: Note | None) -> bool:
        """Another vault's shard under the query's path:, file:, section: and -word filters."""
        sc = self._scope
        low = shard.path.lower()
        if sc.paths and not all(p.lower() in low for p in sc.paths):
            return False
        if sc.files and not all(f.lower() in low.rsplit("/", 1)[-1] for f in sc.files):
            return False
        if sc.sections and not all(
            any(x.lower() in h.lower() for h in shard.heading_path) for x in sc.sections
        ):
            return False
        if sc.excluded and note is not None:
            for nid in self._more_paths.get(note.path, ()):
                toks = self._more_tokens.get(nid, Counter())
                if any(ex and all(t in toks for t in tokenize(ex)) for ex in sc.excluded):
                    return False
        return True

    # -- other vaults' rows -------------------------------------------------------------------
    def _rows(self, rows: Iterable[dict[str, Any]]) -> list[tuple[str, float]]:
        """(node_id, engine score) of the rows this view reads, this vault's and the others' alike."""
        own = self._index.vault_name
        rows = [r.get("entity", r) | {"distance": r.get("distance", 0.0)} for r in rows]
        self._load(
            {(r["vault"], r["path"]) for r in rows if r.get("vault") != own}
            - {(v, p) for v, p in self._loaded()}
        )
        out = []
        for r in rows:
            if r.get("vault") == own:
                nid = self._current(r)
            else:
                nid = foreign_key(r["vault"], r["node_id"])
                shard = self._more_shards.get(nid)
                if shard is None or shard.hash != r.get("content_hash"):
                    continue
                if not self._passes(shard, self._more_notes.get(shard.path)):
                    continue
            if nid is not None:
                out.append((nid, float(r["distance"])))
        return out

    def _loaded(self) -> Iterator[tuple[str, str]]:
        for key in self._more_notes:
            vault, _, path = key[len(FOREIGN) :].partition("/")
            yield vault, path

    def _load(self, wanted: set[tuple[str, str]]) -> None:
        """Read the notes of other vaults named in `wanted` whole (one query per vault and 100 notes)."""
        by_vault: dict[str, list[str]] = {}
        for vault, path in wanted:
            by_vault.setdefault(vault, []).append(path)
        ix = self._index
        for vault, paths in sorted(by_vault.items()):
            paths.sort()
            for i in range(0, len(paths), 100):
                part = paths[i : i + 100]
                expr = f"vault == {_quote(vault)} and path in [{', '.join(_quote(p) for p in part)}]"
                rows = ix.engine.call(
                    "read",
                    methodcaller(
                        "query", ix.engine.collection, filter=expr, output_fields=_ROW_FIELDS, limit=MAX_LIMIT
                    ),
                )
                notes: dict[str, list[dict[str, Any]]] = {}
                for r in rows:
                    notes.setdefault(r["path"], []).append(r)
                for path, parts in notes.items():
                    self._add_note(vault, path, parts)

    def _add_note(self, vault: str, path: str, rows: list[dict[str, Any]]) -> None:
        note, shards, tokens = foreign_note(vault, path, rows)
        for sh in shards:
            self._more_shards[sh.node_id] = sh
        self._more_tokens.update(tokens)
        self._more_paths[note.path] = [sh.node_id for sh in shards]
        self._more_notes[note.path] = note

    # -- reads --------------------------------------------------------------------------------
    def tokens(self, node_id: str) -> Collection[str]:
        more = self._more_tokens.get(node_id)
        return more.keys() if more is not None else super().tokens(node_id)

    def _scores(self, tokens: Sequence[str], ids: list[str]) -> dict[str, float]:
        """BM25 of this vault's and other vaults' candidates alike, with this vault's statistics.

        Milvus Lite keeps BM25 statistics per segment (a word in 1 of 515 rows, alone in a
        3-row segment of another vault, scored 0.9 there against 6.3 for common words in a
        big one), so the engine's scores of two vaults do not compare. Every candidate is
        scored with this view's idf, average length, k1 and b instead; a word this vault
        lacks counts as a word of no document here.
        """
        own = [n for n in ids if n not in self._more_tokens]
        out = self._bm25.get_scores(tokens, keys=own) if own else {}
        bm = self._bm25
        idf, avgdl, n = bm.idf(), bm.avgdl or 1.0, len(bm)
        unseen = math.log(n + 0.5) - math.log(0.5)
        for nid in ids:
            counts = self._more_tokens.get(nid)
            if counts is None:
                continue
            dl = sum(counts.values())
            score = 0.0
            for t in tokens:
                tf = counts.get(t, 0)
                if tf:
                    known = idf.get(t)
                    w = unseen if known is None else known
                    score += w * tf * (bm.k1 + 1) / (tf + bm.k1 * (1 - bm.b + bm.b * dl / avgdl))
            out[nid] = score
        return out

    def bm25_scores(self, tokens: Sequence[str], node_ids: Sequence[str]) -> dict[str, float]:
        return super().bm25_scores(tokens, [n for n in node_ids if n not in self._more_shards])

    def bm25_top_spread(
        self, tokens: Sequence[str], k: int, spread: Spread, allowed: Restriction | None = None
    ) -> list[Hit]:
        # Turns read with their neighbours' words are this vault's alone: a team search ranks
        # every vault's own words, so that the vaults compare.
        return self.bm25_top(tokens, k, allowed)

    def vector(self, node_id: str) -> np.ndarray | None:
        return None if node_id in self._more_shards else super().vector(node_id)

    def widen(self, scope: Scope) -> tuple[MilvusSnapshot, str, bool]:
        return MilvusSnapshot.widen(self, scope)

    def bm25_top_many(
        self, queries: Sequence[Sequence[str]], k: int, allowed: Restriction | None = None
    ) -> list[list[Hit]]:
        out: list[list[Hit]] = [[] for _ in queries]
        asked = [i for i, toks in enumerate(queries) if toks]
        if not asked or k <= 0:
            return out
        data = [engine_terms(queries[i]) for i in asked]
        res = self._search("sparse", data, k, self._filter(allowed), BM25_PARAMS)
        for i, rows in zip(asked, res, strict=True):
            ids = [nid for nid, _ in self._rows(rows)]
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
        q = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        if context or not len(q) or k <= 0:
            return [[] for _ in range(len(q))]
        data = [row.tolist() for row in q]
        res = self._search("vector", data, k, self._filter(allowed, "has_vector == true"), COSINE_PARAMS)
        out: list[list[Hit]] = []
        for rows in res:
            hits = [(nid, score) for nid, score in self._rows(rows) if score >= floor]
            hits.sort(key=lambda h: (-h[1], h[0]))
            out.append(hits)
        return out
