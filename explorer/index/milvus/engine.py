"""The engine side of the Milvus backend: one collection reached by URI, its schema, and how rows hold Explorer's data.

`Engine` connects on first use, creates the collection (or checks that an existing one is an
Explorer shard collection of the right dimension) and turns every engine fault into one
`BackendError` line naming the URI. The helpers here say how a shard becomes a row: its key
(`shard_pk`), its BM25 words (`engine_terms`, read back by `decode_terms`) and its tags
(`tag_ancestors`).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import os
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from operator import methodcaller
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from explorer.index.local.lexical import BM25_B, BM25_K1

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
NLIST = 16
"""Cells of the IVF_FLAT vector index; every search probes all of them, so it stays exact."""
VECTOR_INDEX = "IVF_FLAT"
"""The vector index: IVF_FLAT probed whole gives the exact cosines of FLAT, from vectors normalised
once when the index is built. Milvus Lite's FLAT normalises every vector of a segment on each
search and copies the matrix: 6.6x slower at 12k shards (BENCHMARKS.md#milvus-backend). On a cluster, HNSW
(approximate) is the usual choice: deploy/milvus-standalone/docker-compose.yml."""
COSINE_PARAMS = {"metric_type": "COSINE", "params": {"nprobe": NLIST}}
UPSERT_BATCH = 500
GRPC_OPTIONS = {
    "grpc.keepalive_time_ms": 600_000,
    "grpc.keepalive_timeout_ms": 20_000,
    "grpc.keepalive_permit_without_calls": False,
}
"""The client's keepalive pings: at most one every 10 minutes, none on an idle connection.

pymilvus pings every 10 s, idle or not. A gRPC server with the core's defaults (Milvus Lite's,
in process or `milvus-lite server`) accepts one ping per 5 minutes while it sends nothing (per
2 hours on an idle connection) and, at the third ping too many, ends the connection with
GOAWAY `too_many_pings`. A call longer than ~40 s (Milvus Lite builds a segment's BM25 index on
its first BM25 search: minutes at 300k rows) was cut and sent again by pymilvus's retry, while
the server went on with the first: each resend built the same index once more beside it (a
one-shot search at 300k shards: 80 s to 12 min, the server at 13 GB). A Milvus Standalone or
cluster accepts pings every 10 s; an engine that stops closes the socket, which ends a call
at once without a ping."""
FIELDS = (
    "pk",
    "node_id",
    "vault",
    "path",
    "content_hash",
    "model",
    "tags",
    "day",
    "terms",
    "vector",
    "has_vector",
    "sparse",
)
"""The search collection: only what a search ranks, filters and reads back per row (an engine builds
every column of every row it returns, so each column costs every search; BENCHMARKS.md#milvus-backend)."""
TEXT_FIELDS = (
    "pk",
    "node_id",
    "vault",
    "path",
    "owner",
    "source_type",
    "heading_path",
    "tags",
    "mtime",
    "day",
    "ordinal",
    "start",
    "end",
    "text",
    "content_hash",
    "words",
    "props",
    "nil",
)
"""The text collection (`<collection>_text`, same keys): what only a read of another vault's note needs
(its text, offsets, headings, frontmatter, and its BM25 tokens as `words`). `nil` is a 2-d zero vector:
a Milvus collection must hold a vector field."""
TEXT_SUFFIX = "_text"
WIDE_FIELDS = ("text", "ordinal", "start", "end", "heading_path", "owner", "source_type", "mtime")
"""Fields only a collection of the earlier one-collection layout has in its search collection: such a
collection is migrated at open (`Engine.migrate`)."""
MAX_PROPS = 16_000
"""Bytes of frontmatter JSON kept per shard (longer: left out, as a note without properties)."""
MIGRATE_BATCH = 500
_PLAIN = re.compile(r"[a-z0-9]+")


class BackendError(OSError):
    """The engine cannot serve: one line naming the URI (the CLI prints it and exits non-zero)."""


def quiet_grpc() -> None:
    """Keep the gRPC core's own log lines off the terminal (call before pymilvus, which loads gRPC).

    The core writes straight to stderr, past Python's logging: an engine that stops while a call is
    in flight makes it print `chttp2_transport.cc ... Got goaway` lines over a command's output or
    the app's screen; the user reads Explorer's one line naming the URI instead. gRPC reads
    `GRPC_VERBOSITY` when it loads; a value the user set (to debug gRPC) is kept. Explorer never
    calls gRPC in a forked child, so gRPC's fork handlers stay off: with them on, a child started
    while a call is in flight restarts the poller before exec and prints an epoll error on its stderr.
    """
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")


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


def clip(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


def quote(value: str) -> str:
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
        self.text_collection = collection + TEXT_SUFFIX
        """The collection of what only another vault's note view needs (`TEXT_FIELDS`)."""
        self._text_loaded = False
        self.migrated = 0
        self.created = False
        """The search collection was created at this open (it holds no vault's rows yet)."""
        """Rows copied from a collection of the earlier one-collection layout at this open."""
        self._lock = threading.RLock()
        self.calls: dict[str, int] = {}
        """Engine calls made, by kind (search, read, insert, ...): what a benchmark counts per search."""
        self._starter: threading.Thread | None = None
        self._warmer: threading.Thread | None = None
        self._warm_wanted = False
        self._start_lock = threading.Lock()
        self._warm_done = threading.Event()
        self._closing = threading.Event()

    # -- starting early -----------------------------------------------------------------------
    def start(self, warm: bool = True) -> None:
        """Connect (and with `warm`, warm up) in a background thread, at most once; `client` and
        `wait_warm` wait for it.

        Importing pymilvus, opening the collection and Milvus Lite's first BM25 and vector
        searches take seconds; started as the process starts, they overlap whatever the process
        does meanwhile (its own index, the model, the app's screen). A fault is left for the
        next `client()` to meet again and raise.
        """
        with self._start_lock:  # not `_lock`, which a connection holds until it is made
            if self._starter is not None:
                return
            self._warm_wanted = warm
            self._starter = threading.Thread(
                target=self._start, args=(warm,), name="explorer-milvus-start", daemon=True
            )
        self._starter.start()

    def _start(self, warm: bool) -> None:
        try:
            self.client()
        except BackendError:
            self._warm_done.set()
            return
        if warm:
            self.warm()

    def warm_later(self) -> None:
        """Warm up in a background thread now (a `start` without warm-up left it for later)."""
        with self._start_lock:
            if self._warmer is not None or self._warm_wanted:
                return
            self._warm_wanted = True
            self._warmer = threading.Thread(target=self.warm, name="explorer-milvus-warm", daemon=True)
        self._warmer.start()

    def warm(self) -> None:
        """Make the engine ready for a first search: one limit-1 BM25 and one vector search.

        Milvus Lite builds a segment's BM25 index on the first BM25 search of that segment
        (1.7-3.1 s at 12k shards, for every row whatever the filter) and reads a vector index on
        the first vector search. The first real search waits for this (`wait_warm`) rather than
        building the same index a second time beside it. A fault is left for that search to meet.
        """
        try:
            for field, data, params in (
                ("sparse", ["warm"], BM25_PARAMS),
                ("vector", [[1.0] + [0.0] * (DIM - 1)], COSINE_PARAMS),
            ):
                if self._closing.is_set():
                    return
                self.call(
                    "warm",
                    methodcaller(
                        "search", self.collection, data=data, anns_field=field, limit=1, search_params=params
                    ),
                )
        except BackendError:
            pass
        finally:
            self._warm_done.set()

    def wait_warm(self, seconds: float | None = None) -> None:
        """Wait for the warm-up (at once when none was started; with `seconds`, at most that long).

        Without a bound, as long as it runs: a search sent beside it makes Milvus Lite build the same
        BM25 index a second time at once (twice the memory, each build half as fast: minutes at
        300k shards). A warm-up ends with its engine (a stopped engine closes the connection)."""
        if self._warm_wanted and threading.current_thread() not in (self._starter, self._warmer):
            self._warm_done.wait(seconds)

    @property
    def warmed(self) -> bool:
        """Whether the warm-up `start` began is over (connected and warm, or failed)."""
        return self._warm_done.is_set()

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
                quiet_grpc()
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
                self._client = MilvusClient(
                    uri=self.uri, token=self._token, timeout=self.timeout, grpc_options=GRPC_OPTIONS
                )
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
        created = not client.has_collection(self.collection)
        earlier = ""
        if not created:
            desc = client.describe_collection(self.collection)
            self._check_dim(desc)
            if self._earlier_layout(desc):
                # The earlier one-collection layout: renamed, copied into the two collections, dropped.
                earlier = f"{self.collection}_earlier"
                client.rename_collection(self.collection, earlier)
                created = True
        elif client.has_collection(self.collection + "_earlier"):
            earlier = self.collection + "_earlier"  # a migration stopped half-way: copied again (upserts)
        if created:
            self._create(client)
        self.created = created
        if not client.has_collection(self.text_collection):
            self._create_text(client)
        self._check(client.describe_collection(self.collection))
        client.load_collection(self.collection)
        self._text_loaded = False  # loaded on first use (`text_call`): only team reads need it
        if earlier:
            self.migrated = self._migrate(client, earlier)

    @staticmethod
    def _earlier_layout(desc: dict[str, Any]) -> bool:
        names = {f["name"] for f in desc.get("fields", [])}
        return "text" in names and "terms" in names and "sparse" in names

    def _migrate(self, client: Any, earlier: str) -> int:
        """Copy every row of a collection of the earlier layout into the search and text collections,
        then drop it; returns the rows copied. Upserts: a copy stopped half-way is simply run again."""
        client.load_collection(earlier)
        self._load_text(client)
        names = {f["name"] for f in client.describe_collection(earlier).get("fields", [])}
        wanted = [n for n in (*FIELDS, *TEXT_FIELDS) if n in names and n not in ("sparse", "words", "nil")]
        it = client.query_iterator(earlier, batch_size=MIGRATE_BATCH, filter="", output_fields=wanted)
        copied = 0
        try:
            while True:
                page = it.next()
                if not page:
                    break
                search, text = [], []
                for r in page:
                    r = dict(r)
                    if "day" not in r:  # a collection made before rows held dates: the file's day
                        r["day"] = file_day(int(r.get("mtime") or 0))
                    r.setdefault("props", "")
                    r["tags"] = list(r.get("tags") or [])
                    r["vector"] = [float(x) for x in r["vector"]]
                    search.append({k: r[k] for k in FIELDS if k != "sparse"})
                    text.append(text_row(r))
                client.upsert(self.text_collection, text)
                client.upsert(self.collection, search)
                copied += len(page)
        finally:
            it.close()
        client.flush(self.text_collection)
        client.flush(self.collection)
        client.drop_collection(earlier)
        return copied

    def check_index(self) -> None:
        """Give a collection made with the earlier `FLAT` vector index (or none) the current one; its rows stay.

        Not part of every connection: Milvus Lite answers `describe_index` by counting every row of the
        collection (3 s at 300k shards). A writer asks once per vault, at the open that finds no
        row digest of its own in the statistics table (`MilvusIndex.sync`): a digest is left only by a
        sync after an open that asked (or that created the collection, with the current index)."""
        self.call("index", self._check_index)

    def _check_index(self, client: Any) -> None:
        try:
            desc = client.describe_index(self.collection, "vector") or {}
        except Exception:  # noqa: BLE001 - no index on the field: create it
            desc = {}
        if desc and desc.get("index_type") != "FLAT":
            return  # the current index, or one chosen for the engine (HNSW on a cluster): kept
        client.release_collection(self.collection)
        if desc:
            client.drop_index(self.collection, "vector")
        index = client.prepare_index_params()
        self._vector_index(index)
        client.create_index(self.collection, index)
        client.load_collection(self.collection)

    @staticmethod
    def _vector_index(index: Any) -> None:
        # The build parameters as one JSON `params` entry: the form every Milvus reads (Milvus Lite only this one).
        index.add_index(
            field_name="vector",
            index_type=VECTOR_INDEX,
            metric_type="COSINE",
            params={"params": {"nlist": NLIST}},
        )

    def _check_dim(self, desc: dict[str, Any]) -> None:
        names = {f["name"]: f for f in desc.get("fields", [])}
        dim = int(names.get("vector", {}).get("params", {}).get("dim", DIM))
        if dim != DIM:
            raise self.fail(
                f"collection {self.collection!r} holds vectors of dimension {dim}, not {DIM}; "
                "name another with index.collection"
            )

    def _check(self, desc: dict[str, Any]) -> None:
        self._check_dim(desc)
        names = {f["name"] for f in desc.get("fields", [])}
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
        schema.add_field("content_hash", DataType.VARCHAR, max_length=128)
        schema.add_field("model", DataType.VARCHAR, max_length=512)
        schema.add_field(
            "tags", DataType.ARRAY, element_type=DataType.VARCHAR, max_capacity=256, max_length=256
        )
        schema.add_field("day", DataType.INT64)
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
        self._vector_index(index)
        index.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        client.create_collection(
            self.collection, schema=schema, index_params=index, consistency_level="Strong"
        )

    def _create_text(self, client: Any) -> None:
        from pymilvus import DataType, MilvusClient

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
        schema.add_field("day", DataType.INT64)
        schema.add_field("ordinal", DataType.INT64)
        schema.add_field("start", DataType.INT64)
        schema.add_field("end", DataType.INT64)
        schema.add_field("text", DataType.VARCHAR, max_length=65535)
        schema.add_field("content_hash", DataType.VARCHAR, max_length=128)
        schema.add_field("words", DataType.VARCHAR, max_length=65535)
        schema.add_field("props", DataType.VARCHAR, max_length=MAX_PROPS + 64)
        schema.add_field("nil", DataType.FLOAT_VECTOR, dim=2)
        index = client.prepare_index_params()
        index.add_index(field_name="nil", index_type="FLAT", metric_type="L2")
        client.create_collection(
            self.text_collection, schema=schema, index_params=index, consistency_level="Strong"
        )

    def _load_text(self, client: Any) -> None:
        if not self._text_loaded:
            client.load_collection(self.text_collection)
            self._text_loaded = True

    def text_call(self, what: str, fn: Callable[[Any], Any]) -> Any:
        """`call` on the text collection, loaded first if it is not yet."""

        def loaded(client: Any) -> Any:
            self._load_text(client)
            return fn(client)

        return self.call(what, loaded)

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

    def close(self, final: bool = False) -> None:
        """Close the connection (the next call connects again); `final`: the owner closes, no warm-up goes on."""
        if final:
            self._closing.set()
        with self._lock:
            client, self._client, self._ready = self._client, None, False
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - closing a dead connection
                pass


def decode_terms(terms: str) -> Counter[str]:
    """The Explorer tokens of an analysed `terms` field with their counts (the inverse of `engine_terms`).

    Counted whole first (in C), then the few `q_` words decoded: a team search reads hundreds of rows."""
    out: Counter[str] = Counter(terms.split())
    coded = [w for w in out if w.startswith("q_")]
    for word in coded:
        n = out.pop(word)
        try:
            out[bytes.fromhex(word[2:]).decode("utf-8")] += n
        except ValueError:
            continue
    return out


def tag_ancestors(tags: Iterable[str]) -> list[str]:
    """Tags with every parent of a nested tag (`a/b/c` also gives `a/b` and `a`), so `tag:a` covers its children."""
    out: dict[str, None] = {}
    for tag in tags:
        parts = tag.split("/")
        for i in range(1, len(parts) + 1):
            out.setdefault("/".join(parts[:i]), None)
    return sorted(out)


ROW_FIELDS = [f for f in TEXT_FIELDS if f != "nil"]
"""What a read of another vault's note asks the text collection for."""


def file_day(seconds: int) -> int:
    """The day number (local time) of a file time in epoch seconds (0: none)."""
    if seconds <= 0:
        return 0
    try:
        return _dt.date.fromtimestamp(seconds).toordinal()
    except (OverflowError, OSError, ValueError):
        return 0


def text_row(row: dict[str, Any]) -> dict[str, Any]:
    """The text collection's row of a shard from its full row (`terms` kept as plain `words`)."""
    out = {k: row[k] for k in TEXT_FIELDS if k in row}
    out["words"] = row.get("terms", "")
    out["nil"] = [0.0, 0.0]
    return out
