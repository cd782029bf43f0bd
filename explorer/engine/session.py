"""One engine session: a vault's index, its pipeline, the watcher, the one embedding loop and the optional server.

The app, `explorer watch` and `explorer mcp` each run one `Session`; nothing else wires these
parts together. A session opens the index (or takes one already open), builds the pipeline,
then `start` runs what keeps it current: the file watcher (change batches), the embedding loop
(loads the model, embeds every shard without a vector, wakes again when a batch or a write adds
shards) and, optionally, the search server that answers `explorer search` from other processes.
`close` stops them in the order that lets none outlive what it uses: the server (no new search),
the watcher (no new batch), the embedding loop (cancelled between model batches, then joined:
a thread left inside the model's runtime when the interpreter exits aborts the process), and
last the index.

Every hook is called from a session thread, never from the caller's; a hook that raises is
reported through `on_error` and the session lives on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from explorer.config import Settings
from explorer.engine.build import Progress, make_pipeline, new_index
from explorer.index.backend import ModelState

if TYPE_CHECKING:
    from explorer.engine.server import SearchServer
    from explorer.engine.watch import VaultWatcher
    from explorer.index.backend import BatchReport, IndexBackend
    from explorer.search.core.pipeline import SearchPipeline

PipelineFactory = Callable[["IndexBackend", Settings], "SearchPipeline"]

#: Model states the embedding loop reports through `SessionHooks.on_model`.
MODEL_LOADING = "loading"
MODEL_EMBEDDING = "embedding"
MODEL_WAITING = "waiting"
"""Another process embeds into the same index folder: the detail names it; its vectors come in as it goes."""
MODEL_READY = "ready"
MODEL_UNAVAILABLE = "unavailable"
MODEL_OFF = "off"

#: Seconds a read-your-writes sync waits for the watcher to apply what was saved before it.
SYNC_TIMEOUT_S = 10.0


class SessionClosed(RuntimeError):
    """The session was closed: it opens and starts nothing any more."""


def _noop(*_args: object) -> None:
    return None


@dataclass(frozen=True, slots=True)
class SessionHooks:
    """What a front end wants to hear from a session (each called from a session thread)."""

    on_batch: Callable[[BatchReport], object] = _noop
    """A change batch (watcher or `Session.refresh`) changed the index."""
    on_watcher: Callable[[str], object] = _noop
    """The watcher's state: starting, watching, vault missing, stopped."""
    on_model: Callable[[str, str], object] = _noop
    """The model's state (loading, embedding, waiting, ready, unavailable, off) and a detail: the
    runtime when embedding or ready, the process waited for when waiting, the reason when unavailable."""
    on_progress: Callable[[str, int, int], object] = _noop
    """Embedding progress: (stage, done, total)."""
    on_embedded: Callable[[int], object] = _noop
    """One run of the embedding loop embedded this many shards (called when it is more than 0)."""
    on_error: Callable[[str], object] = _noop
    """Something failed in the background (watcher, embedding); the session lives on."""


class EmbeddingLoop:
    """The one embedding loop of a session: load the model, embed what lacks a vector, wait to be woken.

    Runs in its own thread from `start` until `stop`. Each run calls the index's `embed_pending`,
    which embeds outside the index lock and inserts finished vectors under it, so searches and
    change batches never wait for the model. `stop` cancels between model batches and joins.
    """

    def __init__(
        self,
        index: IndexBackend,
        hooks: SessionHooks,
        after: Callable[[Callable[[], bool]], object] | None = None,
    ) -> None:
        self.index = index
        self.hooks = hooks
        self.after = after
        """Called after each run that was not cancelled, with the cancel test (the pipeline's `warm_turns`)."""
        self._cond = threading.Condition()
        self._wanted = True
        self._running = False
        self._stopping = False
        self._paused = 0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread: it loads the model, then embeds every pending shard."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="explorer-embed", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Shards may lack vectors now (a batch or a write added some): embed them."""
        with self._cond:
            self._wanted = True
            self._cond.notify_all()

    def pause(self) -> None:
        """Stop embedding at the next model batch and wait until no vector is being written.

        The loop stays paused until as many `resume()` calls (the watcher pauses it while it
        opens the store again).
        """
        with self._cond:
            self._paused += 1
            self._cond.notify_all()
            if self._thread is not threading.current_thread():
                self._cond.wait_for(lambda: not self._running)

    def resume(self) -> None:
        """Let a paused loop go on, embedding what is pending."""
        with self._cond:
            self._paused = max(0, self._paused - 1)
            self._wanted = True
            self._cond.notify_all()

    def cancel(self) -> None:
        """Ask the loop to end at its next model batch boundary (returns at once)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def stop(self) -> None:
        """Cancel and wait for the thread, however long its model batch (or model load) takes."""
        self.cancel()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait until nothing is left to embed (or the loop ended); False on timeout."""
        with self._cond:
            return self._cond.wait_for(
                lambda: self._stopping or self._thread is None or not (self._wanted or self._running), timeout
            )

    def _cancelled(self) -> bool:
        return self._stopping or self._paused > 0

    def _run(self) -> None:
        try:
            if not self._load():
                return
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._stopping or (self._wanted and not self._paused))
                    if self._stopping:
                        return
                    self._wanted = False
                    self._running = True
                try:
                    self._embed()
                finally:
                    with self._cond:
                        self._running = False
                        self._cond.notify_all()
        finally:
            with self._cond:
                self._stopping = True
                self._cond.notify_all()

    def _load(self) -> bool:
        """Load the model; False (and the state said) when there is none to load."""
        index = self.index
        if index.model_state is not ModelState.READY:
            self._call(self.hooks.on_model, MODEL_LOADING, "")
        try:
            emb = index.embedder()
        except Exception as exc:  # noqa: BLE001 - searches go on BM25 only
            self._call(self.hooks.on_model, MODEL_UNAVAILABLE, f"{type(exc).__name__}: {exc}")
            return False
        if emb is None:
            off = index.model_state is ModelState.OFF
            self._call(self.hooks.on_model, MODEL_OFF if off else MODEL_UNAVAILABLE, index.model_error)
            return False
        return True

    def _embed(self) -> None:
        index = self.index
        done = 0
        try:
            while index.pending() and not self._cancelled():
                self._call(self.hooks.on_model, MODEL_EMBEDDING, index.runtime)
                n = index.embed_pending(
                    progress=self.hooks.on_progress, cancelled=self._cancelled, waiting=self._waiting
                )
                done += n
                if not n:
                    break  # nothing could be embedded (vectors refused): wait for the next wake
        except Exception as exc:  # noqa: BLE001 - embedding failures must not stop the session
            self._call(self.hooks.on_error, f"embedding failed: {type(exc).__name__}: {exc}")
        if done:
            self._call(self.hooks.on_embedded, done)
        if not self._cancelled():
            self._call(self.hooks.on_model, MODEL_READY, index.runtime)
        if self.after is not None and not self._cancelled():
            try:
                self.after(self._cancelled)
            except Exception as exc:  # noqa: BLE001 - searches make what a warm-up could not
                self._call(self.hooks.on_error, f"warming the turns failed: {type(exc).__name__}: {exc}")

    def _waiting(self, holder: str) -> None:
        """Another process holds the embedding lock (`holder` names it), or '' once this one embeds."""
        if holder:
            self._call(self.hooks.on_model, MODEL_WAITING, holder)
        else:
            self._call(self.hooks.on_model, MODEL_EMBEDDING, self.index.runtime)

    def _call(self, hook: Callable[..., object], *args: Any) -> None:
        _call(hook, self.hooks.on_error, *args)


def _call(hook: Callable[..., object], on_error: Callable[[str], object], *args: Any) -> None:
    try:
        hook(*args)
    except Exception as exc:  # noqa: BLE001 - a failing hook must not stop a session thread
        if hook is not on_error:
            try:
                on_error(f"hook {getattr(hook, '__name__', hook)!s} failed: {type(exc).__name__}: {exc}")
            except Exception:  # noqa: BLE001
                pass


class Session:
    """A vault's index, pipeline, watcher, embedding loop and optional search server, run as one.

    Args:
        vault: The vault root.
        settings: Loaded settings.
        index: An index already open to use instead of opening one (it is not closed by `close`).
        embedder: An embedding model for the index the session opens (tests, embedding apps).
        pipeline_factory: Builds the pipeline (default `explorer.engine.make_pipeline`).
        hooks: What the front end wants to hear (called from session threads).
        on_message: Store and model messages of the index the session opens (default: stderr).
        interactive: The app's session: its index may answer from the vault's own index while a
            backend engine gets ready (`explorer.engine.build.new_index`).
    """

    def __init__(
        self,
        vault: Path,
        settings: Settings,
        *,
        index: IndexBackend | None = None,
        embedder: Any = None,
        pipeline_factory: PipelineFactory | None = None,
        hooks: SessionHooks | None = None,
        on_message: Callable[[str], None] | None = None,
        interactive: bool = False,
    ) -> None:
        self.vault = Path(vault)
        self._interactive = interactive
        self.settings = settings
        self.hooks = hooks or SessionHooks()
        self._given_index = index
        self._embedder = embedder
        self._pipeline_factory = pipeline_factory or make_pipeline
        self._on_message = on_message
        self.index: IndexBackend | None = index
        self.pipeline: SearchPipeline | None = None
        self.watcher: VaultWatcher | None = None
        self.embedding: EmbeddingLoop | None = None
        self.server: SearchServer | None = None
        self.updated_at = time.time()
        """When the index last changed (opened, a batch applied, vectors added)."""
        self._write_lock = threading.Lock()
        self._life = threading.Lock()
        self._closed = False

    # -- opening -----------------------------------------------------------------------------
    def open(
        self, progress: Progress | None = None, load_model: bool = False, defer: bool = False
    ) -> BatchReport | None:
        """Open (load + refresh) the index, unless one was given, and build the pipeline.

        Returns the opening's report (None for a given index, or with `defer`). Whatever was
        opened is closed again when this fails.

        Args:
            progress: Called with (stage, done, total) while the index opens.
            load_model: Start loading the embedding model meanwhile (the two loads overlap).
            defer: Leave the opening to `start`: the watcher's first batch opens the index (it
                reconciles the disk anyway, so opening first would read the vault twice).
        """
        report = None
        index = self.index
        try:
            if index is None:
                index = new_index(
                    self.vault, self.settings, self._on_message, self._embedder, interactive=self._interactive
                )
                if load_model:
                    index.load_model_in_background()
                if not defer:
                    report = index.open(progress=progress)
            self.pipeline = self._pipeline_factory(index, self.settings)
        except BaseException:
            if index is not None and index is not self._given_index:
                index.close()
            raise
        with self._life:
            closed = self._closed
            if not closed:
                self.index = index
        if closed:  # closed while opening (the app quit meanwhile): nothing may stay open
            if index is not self._given_index:
                index.close()
            raise SessionClosed("the session was closed while its index opened")
        self.updated_at = time.time()
        return report

    def start(self, *, watch: bool = True, embed: bool = True, serve: bool = False) -> None:
        """Run what keeps the index current and reachable; each part is optional.

        Args:
            watch: Apply file changes with a VaultWatcher (when it cannot start, `on_error` says
                why and the session goes on without it).
            embed: Run the embedding loop (when `index.embeddings` is on).
            serve: Answer `explorer search` of this vault from other processes (not when another
                process serves it already).
        """
        if self._closed:
            raise SessionClosed("the session is closed")
        index = self._opened()
        if embed and self.settings.index.embeddings:
            # a pipeline from another factory (a wrapper, a test's) may not warm turns
            self.embedding = EmbeddingLoop(
                index,
                replace(self.hooks, on_embedded=self._embedded),
                after=getattr(self.pipeline, "warm_turns", None),
            )
        if watch:
            self._start_watcher(index)
        if self.watcher is None and index.version == 0:
            index.open()  # deferred, and no watcher to open it
        if self.embedding is not None:
            self.embedding.start()
        if serve:
            from explorer.engine.server import SearchServer

            server = SearchServer(
                self.vault, index, self.settings, sync=self.sync, pipeline=self.pipeline, load_model=False
            )
            self.server = server if server.start() else None

    def _opened(self) -> IndexBackend:
        if self.index is None or self.pipeline is None:
            raise RuntimeError("the session is not open")
        return self.index

    def _start_watcher(self, index: IndexBackend) -> None:
        try:
            from explorer.engine.watch import VaultWatcher

            watcher = VaultWatcher(
                index,
                self.settings,
                embedding=self.embedding,  # the one embedding loop: paused while the watcher opens the store again
                on_batch=self._batch,
                on_state=self._watcher_state,
                on_error=lambda msg: _call(self.hooks.on_error, _noop, msg),
            )
            watcher.start()
        except Exception as exc:  # noqa: BLE001 - watching is optional
            _call(self.hooks.on_error, _noop, f"cannot watch the vault: {type(exc).__name__}: {exc}")
            return
        self.watcher = watcher

    # -- changes ----------------------------------------------------------------------------
    def _watcher_state(self, state: str) -> None:
        from explorer.engine.watch import WATCHING

        if state == WATCHING and self.embedding is not None:
            # Watching again after a full reconcile (the first batch, a vault back): it may have
            # brought shards without vectors that no batch report counted.
            self.embedding.wake()
        _call(self.hooks.on_watcher, self.hooks.on_error, state)

    def _batch(self, report: BatchReport) -> None:
        """A change batch landed (watcher thread, or a caller's `refresh`)."""
        self.updated_at = time.time()
        if self.embedding is not None:
            # Not only new shards: an edited shard keeps its node_id with a new text, and a turn's
            # neighbours changing asks for a new dialog-context vector. The loop finds what is pending.
            self.embedding.wake()
        _call(self.hooks.on_batch, self.hooks.on_error, report)

    def _embedded(self, n: int) -> None:
        self.updated_at = time.time()
        _call(self.hooks.on_embedded, self.hooks.on_error, n)

    def refresh(self, paths: Iterable[str] | None = None, reread: bool = False) -> BatchReport:
        """Apply changes of `paths` (None: the whole vault) now, in the calling thread.

        For a front end that wrote a note and wants it searchable at once; new shards wake the
        embedding loop and `on_batch` hears of it like a watcher batch.
        """
        index = self._opened()
        with self._write_lock:
            report = index.refresh(paths=None if paths is None else list(paths), reread=reread)
        if not report.empty:
            self._batch(report)
        return report

    def sync(self) -> None:
        """Bring the index up to date with every change saved before this call (read-your-writes).

        With a watcher, waits until it applied them (at most SYNC_TIMEOUT_S; while the vault
        folder is missing the index keeps its last content); without one, refreshes from the disk.
        """
        if self.watcher is not None:
            self.watcher.wait_idle(timeout=SYNC_TIMEOUT_S)
        else:
            self.refresh()

    # -- closing ----------------------------------------------------------------------------
    def close(self, exiting: bool = False) -> None:
        """Stop serving, watching and embedding, then close an index the session opened.

        Idempotent. Every thread that may be inside the model's runtime has ended when this
        returns.

        Args:
            exiting: The process ends next (see `VaultIndex.close`).
        """
        with self._life:
            if self._closed:
                return
            self._closed = True
        if self.embedding is not None:
            self.embedding.cancel()  # stops at its next model batch while the rest shuts down
        if self.server is not None:
            self.server.stop()
        if self.watcher is not None:
            try:
                self.watcher.stop()
            except Exception as exc:  # noqa: BLE001 - shutting down: the rest must still close
                _call(self.hooks.on_error, _noop, f"stopping the watcher: {type(exc).__name__}: {exc}")
        if self.embedding is not None:
            self.embedding.stop()
        if self.index is not None and self._given_index is None:
            self.index.close(exiting=exiting)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
