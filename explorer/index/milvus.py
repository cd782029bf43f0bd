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
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from operator import methodcaller
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from explorer.index.backend import Hit, Restriction
from explorer.index.lexical import BM25_B, BM25_K1
from explorer.index.snapshot import LocalSnapshot
from explorer.index.vault_index import VaultIndex

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

    @property
    def label(self) -> str:
        """The URI as shown to a user."""
        return public_uri(self.uri)

    def fail(self, what: str, exc: BaseException | None = None) -> BackendError:
        detail = ""
        if exc is not None:
            text = str(getattr(exc, "message", "") or exc).strip().splitlines()
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
                raise self.fail(self._why(exc), exc) from None
            try:
                self._prepare(self._client)
            except BackendError:
                self.close()
                raise
            except Exception as exc:  # noqa: BLE001
                self.close()
                raise self.fail(self._why(exc), exc) from None
            self._ready = True
            return self._client

    @staticmethod
    def _why(exc: BaseException) -> str:
        text = str(exc).lower()
        if "auth" in text or "token" in text or "permission" in text or "credential" in text:
            return "the token was refused (set EXPLORER_MILVUS_TOKEN)"
        return "unreachable"

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
            raise self.fail(f"{what} failed: {self._why(exc)}", exc) from None

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
        self.vault_name = ix.vault_name or self.root.name
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
        tags = sorted({t.name.lower() for t in note.tags})[:256] if note is not None else []
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

    def _current(self, row: dict[str, Any]) -> str | None:
        entity = row.get("entity", row)
        nid = entity.get("node_id")
        shard = self.shards.get(nid) if nid is not None else None
        if shard is None or shard.hash != entity.get("content_hash"):
            return None
        return nid

    def bm25_top(self, tokens: Sequence[str], k: int, allowed: Restriction | None = None) -> list[Hit]:
        if not tokens or k <= 0 or (allowed is not None and not allowed.node_ids):
            return []
        ix = self._index
        query = engine_terms(tokens)
        expr = self._filter(allowed)
        limit = min(k, MAX_LIMIT)
        res = ix.engine.call(
            "search",
            lambda c: c.search(
                ix.engine.collection,
                data=[query],
                anns_field="sparse",
                limit=limit,
                filter=expr,
                search_params={
                    "metric_type": "BM25",
                    "params": {"bm25_k1": BM25_K1, "bm25_b": BM25_B},
                },
                output_fields=["node_id", "content_hash"],
                consistency_level="Strong",
            ),
        )
        ids = [nid for nid in (self._current(r) for r in res[0]) if nid is not None]
        scores = self._bm25.get_scores(tokens, keys=ids)
        # Every row the engine returns holds a query token, as every document the local ranking lists.
        hits = [(nid, float(scores.get(nid, 0.0))) for nid in ids]
        hits.sort(key=lambda h: (-h[1], h[0]))
        return hits[:k]

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
        ix = self._index
        expr = self._filter(allowed, "has_vector == true")
        res = ix.engine.call(
            "search",
            lambda c: c.search(
                ix.engine.collection,
                data=[row.tolist() for row in q],
                anns_field="vector",
                limit=min(k, MAX_LIMIT),
                filter=expr,
                search_params={"metric_type": "COSINE"},
                output_fields=["node_id", "content_hash"],
                consistency_level="Strong",
            ),
        )
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
