"""`MilvusIndex`: a vault's local index (held, not extended) whose shards are also kept in one Milvus collection.

Writes: after every change batch and every vector batch the collection is brought to the
index's state (`sync`: the difference of content hashes, upserted and deleted, then flushed, so
the next search reads them: read-your-writes at consistency level Strong). When the engine is
unreachable, nothing is lost: the difference is simply recomputed and applied when it is back
(a background retry, or the next batch). Nothing is written into the vault. A text another
writer of the collection has embedded is borrowed, not embedded again (`borrow_vectors`).

Reads: this vault's searches are answered from the vault's own index (the same rankings) whenever
the engine does not hold the state a search reads: while an app's engine warms up, while a batch
is on its way to it, and while it is unreachable (`answers_locally`; the search then says so,
naming the URI). Searches of other vaults need the engine and fail with its fault. Answers the
session keeps (`Answers`) are dropped when a write lands and when the engine goes away or comes
back, so a search never reads an answer from before either.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from operator import methodcaller
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from explorer.config import Settings
from explorer.index.backend import (
    ALL_VAULTS,
    BatchReport,
    ClassicResult,
    EmbedRun,
    FileState,
    IndexStats,
    ModelState,
    Progress,
    Scope,
    Snapshot,
)
from explorer.index.local.dense import DenseIndex
from explorer.index.local.lexical import BM25Index
from explorer.index.local.vault_index import VaultIndex
from explorer.index.milvus.answers import Answers
from explorer.index.milvus.engine import (
    DIM,
    FIELDS,
    MAX_LIMIT,
    MAX_PROPS,
    MAX_TERMS,
    MAX_TEXT,
    ROW_FIELDS,
    TOKEN_ENV,
    UPSERT_BATCH,
    BackendError,
    Engine,
    clip,
    engine_terms,
    quote,
    shard_pk,
    tag_ancestors,
    text_row,
)
from explorer.index.milvus.snapshot import MilvusSnapshot
from explorer.index.milvus.stats import StatsTable, state_of, stored_state, vault_statistics
from explorer.index.milvus.team import FOREIGN, TeamSnapshot, foreign_note
from explorer.text.dates import note_date
from explorer.vault.model import Note, Shard

if TYPE_CHECKING:
    from explorer.index.local.embed import Embedder
    from explorer.vault.links import LinkGraph


ENGINE_START_DELAY_S = 2.0
"""An interactive index's engine starts at the latest this long after the open (sooner after a first
search). Not tuned: about the time an app takes from its open to a first search typed at once."""


class MilvusIndex:
    """A vault's index whose rankings a Milvus collection serves (explorer.index.backend.IndexBackend).

    It keeps a local index of the vault (`local`, a `VaultIndex`: reading, parsing and sharding the
    vault, vectors cached by content hash) and delegates to it explicitly: the face's writes and
    reads are the local index's, with the collection brought to its state after each write, and
    snapshots are `MilvusSnapshot`s over a local snapshot.
    """

    backend_name = "milvus"

    def __init__(
        self,
        root: Path,
        settings: Settings | None = None,
        embedder: Embedder | None = None,
        on_message: Callable[[str], None] | None = None,
        interactive: bool = False,
        one_shot: bool = False,
    ) -> None:
        self.local = VaultIndex(
            root, settings, embedder=embedder, on_message=on_message, on_batch=self._batch_applied
        )
        """The vault's own index: what this backend keeps locally, and answers from while the engine cannot."""
        self.root = self.local.root
        self.settings = self.local.settings
        ix = self.settings.index
        self.engine = Engine(ix.milvus_uri, ix.collection, os.environ.get(TOKEN_ENV, ""))
        self.interactive = interactive
        """An app's index: `open` returns once the engine is connected, and this vault's searches are
        answered from the vault's own index until the engine is warm and holds this vault's state
        (`engine_current`); a command's `open` brings the collection up to date before it returns."""
        self.one_shot = one_shot
        """A command that searches once (or not at all) and ends (search, why-not, open, find, context,
        index, stats): its open sends no warm-up (the search itself pays for Milvus Lite's first BM25
        search, and a warm-up beside it doubled the engine's work: two engine searches, 2.5-3 s at 300k
        shards), and a team search reads the statistics of its own words only, not the whole table kept
        for later ones."""
        self.answers = Answers()
        """Engine answers of recent searches (emptied by this writer's own writes)."""
        self.team_stats = StatsTable(self.engine, whole=not one_shot)
        """The collection's BM25 statistics (explorer.index.milvus.stats): this vault's kept by `sync`."""
        self._stats_written: dict[int, str] | None = None
        self.bm25_share = 0.5
        """The engine depth kept BM25 rankings of recent searches reached, as a share (`MilvusSnapshot._bm25_first`)."""
        self.dense_share = 0.5
        """The share of a vector search's rows recent searches needed (`MilvusSnapshot._first_fetch`)."""
        self._pushed: dict[str, tuple[str, bool]] | None = None
        """node_id -> (content hash, has a vector) of this vault's rows in the collection, as last known."""
        self._reread = False
        """An engine fault came since `_pushed` was read: the next `sync` reads it again."""
        self._sync_lock = threading.Lock()
        self._retry: threading.Thread | None = None
        self._closing = threading.Event()
        self.behind = 0
        """Shard changes not in the collection yet (the engine was unreachable)."""
        self.engine_fault = ""
        self.retry_seconds = 1.0
        self._opened = False
        self._synced = threading.Event()
        """Set by the first `sync` that brought the collection to this index's state."""
        self._catch_up: threading.Thread | None = None
        self._go = threading.Event()
        """An interactive index's engine may start (`_catch_up_engine`)."""
        self._caught_up = threading.Event()
        self._answered_locally = False
        self._engine_version = -1
        """The index version the collection was last brought to (`sync`): a view of a later version
        reads shards the engine may not hold yet, and is answered from the vault's own index."""
        self.borrowed = 0
        self._foreign: dict[tuple[str, str], tuple[float, tuple[Note, list[Shard]] | None]] = {}
        self._foreign_lock = threading.Lock()
        """Shards given a vector another writer of the collection had already computed."""

    @property
    def backend_uri(self) -> str:
        return self.engine.label

    @property
    def many_vaults(self) -> bool:
        """A shared collection holds other vaults' notes beside this vault's."""
        return True

    def backend_info(self) -> dict[str, str]:
        """The URI without credentials, the collection and this vault's name in it."""
        return {
            "backend_uri": self.backend_uri,
            "collection": self.engine.collection,
            "vault_name": self.vault_name,
        }

    # -- writes -------------------------------------------------------------------------------
    def open(self, progress: Progress | None = None) -> BatchReport:
        """Open as the local backend does, the engine connecting meanwhile (`Engine.start`).

        A command's open then waits for the engine (raising BackendError, naming the URI, when
        it cannot serve) and brings this vault's rows of the collection up to date (`sync`). An
        interactive open returns with the vault's own index alone and leaves the engine to a
        background thread (`_catch_up_engine`); a fault there is said through `on_message` and
        met by the next search, as any later fault is.
        """
        if not self.interactive:
            self.engine.start(warm=False)
        report = self.local.open(progress)
        self._opened = True
        if self.interactive:
            self._catch_up = threading.Thread(
                target=self._catch_up_engine, name="explorer-milvus-sync", daemon=True
            )
            self._catch_up.start()
            return report
        self.engine.client()  # waits for the connection the start began; a fault is raised here
        self._said_migrated()
        self.sync()
        if not self.one_shot:
            self.engine.warm_later()  # after the state read: the two would share one interpreter
        return report

    def _catch_up_engine(self) -> None:
        """An interactive open's background part: start the engine, warm it up, read this vault's row
        state and sync; then this vault's searches go to the engine.

        The engine starts once the first search answered from the vault's own index is over, or
        `ENGINE_START_DELAY_S` after the open when none comes first: importing pymilvus, opening
        the collection, Milvus Lite's warm-up (in process) and reading the row state take seconds
        of the same interpreter that the app's start, the model and that search need
        (BENCHMARKS.md#milvus-backend).
        """
        try:
            self._go.wait(ENGINE_START_DELAY_S)
            self._go.set()
            if self._closing.is_set():
                return
            self.engine.start(warm=True)
            self.engine.wait_warm()
            if self._closing.is_set():
                return
            self._sync_soft()
            self._said_migrated()
        finally:
            self._caught_up.set()

    def _said_migrated(self) -> None:
        if self.engine.migrated:
            self.on_message(
                f"milvus at {self.engine.label}: {self.engine.migrated} rows of collection "
                f"{self.engine.collection!r} moved to the search and text collections (one time)"
            )

    @property
    def engine_current(self) -> bool:
        """Whether the engine is warm and has held this vault's state since the open (a sync completed)."""
        return self._synced.is_set() and self.engine.warmed

    def answers_locally(self, version: int | None = None) -> bool:
        """Whether this vault's searches (of a view at `version`, the current one when None) are answered
        from its own index now: the engine is unreachable, or does not hold that version yet (a batch or
        vectors on their way to it; an app's engine still starting: `engine_current`)."""
        version = self.version if version is None else version
        local = (
            bool(self.engine_fault)
            or version > self._engine_version
            or (self.interactive and not self.engine_current)
        )
        if local:
            self._answered_locally = True
        return local

    def local_note(self) -> str:
        """What a search answered from this vault's own index says, when the engine is unreachable ("" else)."""
        if not self.engine_fault:
            return ""
        return (
            f"milvus at {self.engine.label} is unreachable: answered from this vault's own index "
            "(its notes only; changes are kept and sent when it is back)"
        )

    def engine_lost(self, why: str) -> None:
        """A search met an engine fault: this vault's searches are answered locally until it is back."""
        self._fell_behind(why)

    def view_released(self) -> None:
        """A view of this index was released: after a search answered from the vault's own index,
        the engine's start (`_catch_up_engine`) need wait no longer."""
        if self._answered_locally:
            self._go.set()

    def wait_warm(self, seconds: float | None = None) -> None:
        """Wait for the engine's warm-up (at most `seconds`; None: as long as it runs, `Engine.wait_warm`)."""
        self.engine.wait_warm(seconds)

    def _batch_applied(self) -> None:
        self._sync_soft()

    def embed_pending(
        self,
        progress: Progress | None = None,
        cancelled: Callable[[], bool] | None = None,
        batch: int | None = None,
        waiting: Callable[[str], object] | None = None,
    ) -> int:
        """The local index's `embed_pending`, after borrowing what the collection already holds; the
        collection is brought up to date after."""
        if self.interactive and self.pending():
            # Vectors may be borrowed from the collection: the engine starts now, and is waited for.
            self._go.set()
            self._caught_up.wait(60.0)
        borrowed = self.borrow_vectors()
        done = self.local.embed_pending(progress, cancelled, batch, waiting)
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
                    f"model == {quote(model)} and has_vector == true and "
                    f"content_hash in [{', '.join(quote(h) for h in part)}]"
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
        given = self.local.put_vectors(found)
        self.borrowed += given
        return given

    def _sync_soft(self) -> None:
        """`sync`, an engine fault kept for the retry loop instead of raised."""
        if not self._opened:
            return  # `open` syncs once, at its end, and raises
        if self.interactive and not self._go.is_set():
            return  # the engine has not started: `_catch_up_engine` syncs every change so far
        try:
            self.sync()
        except BackendError as exc:
            self._fell_behind(str(exc))

    def _fell_behind(self, why: str) -> None:
        self._reread = True
        first = not self.engine_fault
        self.engine_fault = why
        if first:
            self.answers.clear()  # nothing the engine answered before it went away is read again
            self.on_message(f"{why}; changes are kept and sent when it is back")
        if self._retry is None or not self._retry.is_alive():
            self._retry = threading.Thread(target=self._retry_loop, name="explorer-milvus-retry", daemon=True)
            self._retry.start()

    def _retry_loop(self) -> None:
        while not self._closing.wait(self.retry_seconds):
            try:
                self.engine.client()  # connects again (a sync with nothing to send asks nothing of it)
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
            with self.lock:
                version = self.version
                want = {nid: (s.hash, nid in self.dense) for nid, s in self.shards.items()}
            if self._pushed is None and self._stats_written is None:
                # A process's first sync: the digest this vault's last sync left in the statistics table
                # says whether the collection holds what this index holds, without reading every row
                # (not trusted in a collection made at this open, whose rows are all gone).
                self._stats_written = self.team_stats.read_vault(self.vault_name)
                if not self.engine.created and not stored_state(self._stats_written):
                    # No digest: this vault's first open of the collection (or an earlier Explorer's, or a
                    # sync stopped half-way). A digest is left only after an open that checked the index.
                    self.engine.check_index()
                if (
                    not self._reread
                    and not self.engine.created
                    and stored_state(self._stats_written) == state_of(want)
                ):
                    self._pushed = dict(want)
            if self._pushed is None or self._reread:
                # After a fault, the engine's rows are read again: a write may have landed without its answer.
                self._reread = False
                self._pushed = self._read_pushed()
            with self.lock:
                changed = [self.shards[nid] for nid, state in want.items() if self._pushed.get(nid) != state]
                gone = [nid for nid in self._pushed if nid not in want]
            self.behind = len(changed) + len(gone)
            if not changed and not gone:
                if self._stats_written is None or not stored_state(self._stats_written):
                    self._write_stats()  # a table from before row digests: this sync leaves one
                self._caught_up_to(version)
                return 0
            try:
                return self._write(version, changed, gone)
            except BackendError:
                # A write may have landed without its answer (an insert sent again would double it):
                # the next sync reads the rows first.
                self._reread = True
                raise

    def _write(self, version: int, changed: list[Shard], gone: list[str]) -> int:
        """`sync`'s writes: `changed` shards upserted (new ones inserted), `gone` node_ids deleted, then flushed."""
        assert self._pushed is not None
        if self._stats_written and stored_state(self._stats_written):
            # The digest goes before the rows change and comes back after them: a writer stopped
            # half-way leaves none, and the next open reads the rows.
            self._stats_written = self.team_stats.forget_state(self.vault_name, self._stats_written)
        name, text_name = self.engine.collection, self.engine.text_collection
        # Shards new to the collection are inserted (an upsert looks each key up first: slower).
        fresh = [sh for sh in changed if sh.node_id not in self._pushed]
        known = [sh for sh in changed if sh.node_id in self._pushed]
        for op, batch in (("insert", fresh), ("upsert", known)):
            for i in range(0, len(batch), UPSERT_BATCH):
                # Rows are built a batch at a time: all of them at once took 8 GB for 200k shards.
                with self.lock:
                    part = [self._row(sh) for sh in batch[i : i + UPSERT_BATCH]]
                # The text row first (upserted: it may be there from a write stopped half-way); a
                # search row then says both are there (`_read_pushed` reads the search collection).
                # A vector that arrived later changes the search row only.
                text = [
                    text_row(r)
                    for r in part
                    if (self._pushed.get(r["node_id"]) or ("", False))[0] != r["content_hash"]
                ]
                if text:
                    self.engine.text_call("upsert", methodcaller("upsert", text_name, text))
                search = [{k: r[k] for k in FIELDS if k in r} for r in part]
                self.engine.call(op, methodcaller(op, name, search))
                for r in part:
                    self._pushed[r["node_id"]] = (r["content_hash"], r["has_vector"])
        for i in range(0, len(gone), UPSERT_BATCH):
            doomed = gone[i : i + UPSERT_BATCH]
            pks = [shard_pk(self.vault_name, nid) for nid in doomed]
            self.engine.call("delete", methodcaller("delete", name, ids=pks))
            self.engine.text_call("delete", methodcaller("delete", text_name, ids=pks))
            for nid in doomed:
                self._pushed.pop(nid, None)
        # Unflushed rows are searched ~100x slower: flush after every batch.
        self.engine.call("flush", lambda c: (c.flush(text_name), c.flush(name)))
        self._write_stats()
        self.behind = 0
        self._written()
        self._caught_up_to(version)
        return len(changed) + len(gone)

    def _write_stats(self) -> None:
        """This vault's rows of the collection's BM25 statistics, brought to its index (changed buckets only)."""
        with self.lock:
            docs, length, df = vault_statistics(self.bm25)
        state = state_of(self._pushed) if self._pushed is not None else ""
        self._stats_written = self.team_stats.write_vault(
            self.vault_name, docs, length, df, self._stats_written, state
        )

    def _caught_up_to(self, version: int) -> None:
        """The collection holds this vault at `version`: searches of it go to the engine again."""
        back = bool(self.engine_fault)
        self.engine_fault = ""
        self._engine_version = max(self._engine_version, version)
        self._synced.set()
        if back:
            self.answers.clear()

    def _read_pushed(self) -> dict[str, tuple[str, bool]]:
        name = self.engine.collection
        expr = f"vault == {quote(self.vault_name)}"

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

    def _written(self) -> None:
        """This writer's change reached the engine: answers kept from before are no longer read."""
        self.answers.clear()

    def _row(self, s: Shard) -> dict[str, Any]:
        note = self.notes.get(s.path)
        state = self.local.file_state(s.path)
        vec = self.dense.vector(s.node_id)
        has = vec is not None
        if not has:
            vec = np.zeros(DIM, dtype=np.float32)
            vec[0] = 1.0  # a placeholder the `has_vector` filter keeps out of every vector search
        tags = tag_ancestors({t.name.lower() for t in note.tags})[:256] if note is not None else []
        front = note.frontmatter if note is not None and isinstance(note.frontmatter, dict) else {}
        meta = note.metadata if note is not None and isinstance(note.metadata, dict) else {}
        dated = note_date(front, meta, s.path, state.mtime_ns if state is not None else None)
        day = dated[0].toordinal() if dated is not None else 0
        try:
            props = json.dumps(front, default=str, ensure_ascii=False) if front else ""
        except (ValueError, TypeError, RecursionError):  # a self-referencing YAML value
            props = ""
        if len(props.encode("utf-8")) > MAX_PROPS:
            props = ""  # cut JSON would not parse: read as a note without properties
        row = {
            "pk": shard_pk(self.vault_name, s.node_id),
            "node_id": clip(s.node_id, 4000),
            "vault": self.vault_name,
            "path": clip(s.path, 4000),
            "owner": self.vault_name,
            "source_type": s.source_type[:64],
            "heading_path": clip(" > ".join(s.heading_path), 4000),
            "tags": [clip(t, 250) for t in tags],
            "mtime": int(state.mtime_ns // 1_000_000_000) if state is not None else 0,
            "ordinal": s.ordinal,
            "start": s.start,
            "end": s.end,
            "text": clip(s.text, MAX_TEXT),
            "content_hash": s.hash,
            "model": self.model_id[:512],
            # Each token as often as the shard holds it: the engine's BM25 needs the term counts and length.
            "terms": clip(
                engine_terms(t for t, n in self.bm25.terms(s.node_id).items() for _ in range(n)), MAX_TERMS
            ),
            "vector": np.asarray(vec, dtype=np.float32).tolist(),
            "has_vector": has,
            "day": day,
            "props": props,
        }
        return row

    # -- reads --------------------------------------------------------------------------------
    def note(self, path: str) -> Note | None:
        """The note at `path`; another vault's (`vault:NAME/PATH`, as a team search names it) is read from the collection."""
        found = self.local.note(path)
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
        expr = f"vault == {quote(vault)} and path == {quote(path)}"
        try:
            rows = self.engine.text_call(
                "read",
                lambda c: c.query(
                    self.engine.text_collection,
                    filter=expr,
                    output_fields=ROW_FIELDS,
                    limit=MAX_LIMIT,
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

    def team_view(self, base: MilvusSnapshot, scope: Scope) -> tuple[Snapshot, str, bool]:
        """`base` over the vaults `scope` names: (the view, a note naming vaults the collection lacks, own vault covered)."""
        own = self.vault_name
        missing = []
        for name in scope.vaults:
            if name in (own, ALL_VAULTS):
                continue
            expr = f"vault == {quote(name)}"
            rows = self.engine.call(
                "read",
                methodcaller("query", self.engine.collection, filter=expr, output_fields=["pk"], limit=1),
            )
            if not rows:
                missing.append(name)
        note = (
            f"no vault {', '.join(repr(m) for m in missing)} in the collection {self.engine.collection!r}"
            if missing
            else ""
        )
        return TeamSnapshot(base, scope), note, scope.everything or own in scope.vaults

    def snapshot(self) -> MilvusSnapshot:
        """A view at the current version: a local snapshot, whose rankings the collection serves."""
        return MilvusSnapshot(self, self.local.snapshot())

    def close(self, exiting: bool = False) -> None:
        self._closing.set()
        self._go.set()
        try:
            self.local.close(exiting)
        finally:
            self.engine.close(final=True)

    # -- the local index's, delegated ----------------------------------------------------------
    @property
    def on_message(self) -> Callable[[str], None]:
        """Where store, model and engine messages go."""
        return self.local.on_message

    @on_message.setter
    def on_message(self, hook: Callable[[str], None]) -> None:
        self.local.on_message = hook

    @property
    def lock(self) -> threading.RLock:
        return self.local.lock

    @property
    def version(self) -> int:
        return self.local.version

    @property
    def notes(self) -> dict[str, Note]:
        return self.local.notes

    @property
    def shards(self) -> dict[str, Shard]:
        return self.local.shards

    @property
    def dense(self) -> DenseIndex:
        return self.local.dense

    @property
    def bm25(self) -> BM25Index:
        return self.local.bm25

    @property
    def vault_name(self) -> str:
        return self.local.vault_name

    @property
    def model_state(self) -> ModelState:
        return self.local.model_state

    @property
    def model_error(self) -> str:
        return self.local.model_error

    @property
    def model_id(self) -> str:
        return self.local.model_id

    @property
    def runtime(self) -> str:
        return self.local.runtime

    @property
    def cache_dir(self) -> Path:
        return self.local.cache_dir

    @property
    def not_saved(self) -> str:
        return self.local.not_saved

    @property
    def embed_run(self) -> EmbedRun | None:
        return self.local.embed_run

    def refresh(
        self,
        paths: Iterable[str] | None = None,
        progress: Progress | None = None,
        reread: bool = False,
        reparse: bool = False,
    ) -> BatchReport:
        return self.local.refresh(paths, progress, reread, reparse)

    def pending(self) -> list[Shard]:
        return self.local.pending()

    def load_model_in_background(self) -> None:
        self.local.load_model_in_background()

    def prune_vectors(self) -> int:
        return self.local.prune_vectors()

    def embedder(self) -> Embedder | None:
        return self.local.embedder()

    def encode_query(self, text: str) -> np.ndarray | None:
        return self.local.encode_query(text)

    def embed_eta(self) -> float | None:
        return self.local.embed_eta()

    def store_lost(self) -> bool:
        return self.local.store_lost()

    def reopen_store(self) -> None:
        self.local.reopen_store()

    def stats(self) -> IndexStats:
        return self.local.stats()

    def note_titles(self) -> dict[str, str]:
        return self.local.note_titles()

    def note_count(self) -> int:
        return self.local.note_count()

    def shard(self, node_id: str) -> Shard | None:
        return self.local.shard(node_id)

    def shard_at(self, path: str, cursor: int) -> Shard | None:
        return self.local.shard_at(path, cursor)

    def links(self) -> LinkGraph:
        return self.local.links()

    def warnings(self) -> dict[str, tuple[str, ...]]:
        return self.local.warnings()

    def paths_under(self, folder: str) -> list[str]:
        return self.local.paths_under(folder)

    def skipped_files(self) -> dict[str, str]:
        return self.local.skipped_files()

    def ignored_files(self) -> dict[str, str]:
        return self.local.ignored_files()

    def file_state(self, path: str) -> FileState | None:
        return self.local.file_state(path)

    def resolve_note(self, name: str) -> str | None:
        return self.local.resolve_note(name)

    def local_copy(self, root: Path, settings: Settings) -> VaultIndex:
        return self.local.local_copy(root, settings)

    def classic_search(
        self,
        mode: str,
        keywords: Sequence[str] | str,
        max_results: int | None = None,
        context_chars: int | None = None,
        window: int | None = None,
    ) -> ClassicResult:
        return self.local.classic_search(mode, keywords, max_results, context_chars, window)


def wait_until(check: Callable[[], bool], seconds: float) -> bool:
    """Poll `check` until true or `seconds` pass (for callers waiting on the retry loop)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.05)
    return check()
