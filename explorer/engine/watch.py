"""Keep a VaultIndex current while files change: watchdog events, debounced into change batches."""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from watchdog.events import (
    DirAttribEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileAttribEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)

from explorer.config import Settings, VaultSettings
from explorer.engine.debounce import Debouncer
from explorer.vault.scan import is_ignored, with_sidecar

if TYPE_CHECKING:
    from watchdog.observers.api import BaseObserver

    from explorer.index.backend import BatchReport, IndexBackend

logger = logging.getLogger(__name__)

# watchdog warns when a folder created during its recursive registration is registered twice;
# the second registration simply wins, so the message is noise (and would print over a TUI).
warnings.filterwarnings(
    "ignore", message=r"Callback with id .* already exists for watch", category=RuntimeWarning
)

#: Event kinds the observer is asked for. Opens and read-only closes are left out, so the
#: indexer reading a note never wakes the watcher; directory "modified" events only repeat
#: what the file events already say.
WATCHED_EVENTS: tuple[type[FileSystemEvent], ...] = (
    FileCreatedEvent,
    FileModifiedEvent,
    FileClosedEvent,
    FileAttribEvent,
    FileMovedEvent,
    FileDeletedEvent,
    DirCreatedEvent,
    DirMovedEvent,
    DirDeletedEvent,
    DirAttribEvent,
)

#: Watcher states reported through `on_state`.
STARTING = "starting"
WATCHING = "watching"
VAULT_MISSING = "vault missing"
STOPPED = "stopped"

_SYNC_PREFIX = "watch-sync-"
_SIDECAR = "metadata.json"


class Pausable(Protocol):
    """An embedding loop the watcher pauses while it opens the store again (an engine session's)."""

    def pause(self) -> None: ...
    def resume(self) -> None: ...


@dataclass(frozen=True, slots=True)
class RawEvent:
    """One file-system event as the observer callback recorded it (no disk access, no index access)."""

    kind: str
    """watchdog event type: created, modified, closed, attrib, moved, deleted; or `recheck`."""
    is_dir: bool
    """True for a folder event."""
    src: str | None
    """Vault-relative POSIX path ('' is the vault root), None when outside the vault."""
    dest: str | None = None
    """Destination of a move, vault-relative, None when outside the vault or not a move."""


@dataclass(frozen=True, slots=True)
class ChangeSet:
    """What one batch of raw events asks the indexer to do."""

    paths: frozenset[str]
    """Vault-relative files to re-read (created, changed, moved, deleted, chmod-ed)."""
    full: bool = False
    """A full scan is needed (folder permissions changed, the vault came back)."""
    root_gone: bool = False
    """An event says the vault folder itself was deleted or moved away."""


def _noop(*_args: object) -> None:
    return None


class _OverflowListener(logging.Handler):
    """Hears watchdog report a kernel event-queue overflow and has every running watcher rescan.

    watchdog only logs the overflow (the lost events are gone, and it cannot say which folder they
    concerned), so its log records are the one signal there is.
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.watchers: weakref.WeakSet[VaultWatcher] = weakref.WeakSet()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a logging handler must not raise
            return
        if "overflow" in message.lower():
            for watcher in list(self.watchers):
                watcher.request_full_refresh("file events were lost (event queue overflowed)")


def _not_a_stop_race(record: logging.LogRecord) -> bool:
    """False for watchdog's record of an event read while its emitter is being stopped.

    Stopping the observer while the emitter thread is between two reads makes watchdog log an
    ERROR ("queue_events() called when the thread is inactive") that means nothing but "stopped";
    where a program logs to stderr (the MCP server does), it would read as a failure on every exit.
    """
    try:
        return "when the thread is inactive" not in record.getMessage()
    except Exception:  # noqa: BLE001 - a logging filter must not raise
        return True


_OVERFLOW = _OverflowListener()
for _name in (
    "watchdog.observers.inotify_c",
    "watchdog.observers.inotify",
    "watchdog.observers.inotify_buffer",
):
    logging.getLogger(_name).addHandler(_OVERFLOW)
    logging.getLogger(_name).addFilter(_not_a_stop_race)


class VaultWatcher:
    """Watch a vault folder and apply its changes to a `VaultIndex` in debounced batches.

    Two threads cooperate. The watchdog observer's callback only records each event (kind and
    vault-relative paths) under a condition variable. The watcher thread waits for a burst to go
    quiet for `debounce_ms` (or for `max_latency_ms` since its first event, so an endless stream
    still flushes: `explorer.engine.debounce.Debouncer`), turns the burst into a set of paths (a folder move or delete becomes every
    note the index knows under it, a new folder is walked) and applies it with
    `VaultIndex.refresh(paths=..., reread=True)`. Events that arrive while a batch is applied
    wait for the next batch, and a file that changed again between the indexer's stat and read
    is scheduled again, so nothing written during a batch is lost. The watcher embeds nothing:
    vectors come from the one embedding loop of an engine session (explorer.engine.session),
    which hears of each batch through `on_batch` and which the watcher pauses (`embedding`)
    while it opens the store again.

    When the vault folder disappears the state becomes "vault missing": the observer is
    dropped, the folder is polled until it returns, then the observer is re-armed and a full
    refresh reconciles the index. The index keeps its last content while the vault is missing.

    Hooks are called from the watcher threads; an exception in a hook is reported through
    `on_error` and never stops the loop.

    Args:
        index: The index to keep current. When it was never opened (`index.version == 0`) the
            first batch is `index.open()`, otherwise a full `index.refresh()`; either reconciles
            what changed while nothing was watching.
        settings: Defaults to the index's settings (`experimental.watch_debounce_ms`, vault ignore rules).
        on_batch: Called with each applied batch that changed something.
        on_state: Called with the new state: "starting", "watching", "vault missing", "stopped".
        on_error: Called with a message when something failed; the watcher lives on.
        debounce_ms: Quiet period closing a batch (default `settings.experimental.watch_debounce_ms`).
        max_latency_ms: Longest wait from a batch's first event to its flush
            (default: the larger of 2 s and ten quiet periods).
        poll_interval: Seconds between health checks of the vault folder and the observer, and
            between polls while the vault is missing.
        use_polling: Use watchdog's polling observer instead of the native one.
        embedding: The embedding loop of the session the watcher runs in, paused while the store
            is opened again (its `pause()` returns once no vector is being written; `resume()`
            lets it go on).
    """

    def __init__(
        self,
        index: IndexBackend,
        settings: Settings | None = None,
        *,
        on_batch: Callable[[BatchReport], None] | None = None,
        on_state: Callable[[str], None] | None = None,
        on_error: Callable[[str], None] | None = None,
        debounce_ms: int | None = None,
        max_latency_ms: int | None = None,
        poll_interval: float = 0.5,
        use_polling: bool = False,
        embedding: Pausable | None = None,
    ) -> None:
        self.index = index
        self.settings = settings or index.settings
        self.root = Path(index.root)
        self._root_str = os.fspath(self.root)
        self.on_batch: Callable[[BatchReport], None] = on_batch or _noop
        self.on_state: Callable[[str], None] = on_state or _noop
        self.on_error: Callable[[str], None] = on_error or (lambda msg: logger.warning("%s", msg))
        ms = self.settings.experimental.watch_debounce_ms if debounce_ms is None else debounce_ms
        self.debounce = max(0.0, ms / 1000)
        cap = max(2000, 10 * ms) if max_latency_ms is None else max_latency_ms
        self.max_latency = max(self.debounce, cap / 1000)
        self.poll_interval = poll_interval
        self.use_polling = use_polling
        self.embedding = embedding
        self.state = STOPPED
        self.observer_kind = ""
        """'native' or 'polling' once armed."""
        self.batches = 0
        """Batches applied, including those that changed nothing."""
        self.rechecks = 0
        """Files scheduled again because they changed while being read."""
        self.full_requests = 0
        """Full rescans asked for after events were lost (kernel queue overflow)."""

        self._cond = threading.Condition()
        self._batches: Debouncer[RawEvent] = Debouncer(self.debounce, self.max_latency, self._cond)
        """Raw events until their burst goes quiet (shares `_cond` with the rest of the watcher's state)."""
        self._stopping = False
        self._sync_seen: set[str] = set()
        self._sync_counter = 0
        self._observer: BaseObserver | None = None
        self._recorder: _Recorder | None = None
        self._retiring: list[_Retiring] = []
        self._root_id: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None
        self._backoff = 0.0

    # -- life cycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Arm the observer and start the watcher thread; returns at once.

        Events are recorded from the moment this returns. The first batch reconciles the index
        with the disk (open or full refresh).
        """
        if self._thread is not None:
            raise RuntimeError("watcher already started")
        self._set_state(STARTING)
        self._batches.full_now()
        armed = self._arm()
        _OVERFLOW.watchers.add(self)
        self._thread = threading.Thread(target=self._run, name="explorer-watch", daemon=True)
        self._thread.start()
        if not armed:
            self._batches.push(RawEvent("deleted", True, ""))

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop observing and join the watcher thread (at most `timeout` seconds).

        Pending events are dropped: the next start reconciles them.
        """
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self._disarm()
        _OVERFLOW.watchers.discard(self)
        self._set_state(STOPPED)

    def __enter__(self) -> VaultWatcher:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # -- waiting (for tests and scripts) ------------------------------------------------------
    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until every change made before this call is applied and no batch is running.

        A marker file written into the index folder (when it lies inside the vault) travels
        through the same event stream, so events still in flight are waited for. Returns False
        on timeout, while the vault is missing, or when the watcher is stopped.

        Args:
            timeout: Seconds to wait at most.
        """
        called = time.monotonic()
        deadline = called + timeout
        token = self._write_marker()

        def remaining() -> float:
            return max(0.0, deadline - time.monotonic())

        with self._cond:
            if token is not None:
                if not self._cond.wait_for(lambda: token in self._sync_seen or self._stopping, remaining()):
                    return False
                self._sync_seen.discard(token)
            else:
                # No marker possible: settle for a quiet period longer than the event pipeline's
                # delay (a polling observer sees a change only at its next snapshot).
                quiet = max(self.debounce, 0.1) + (1.5 if self.observer_kind == "polling" else 0.6)
                while time.monotonic() - max(self._batches.last_event, called) < quiet:
                    if not remaining() or self._stopping:
                        return False
                    self._cond.wait(min(remaining(), quiet))

            def idle() -> bool:
                if self._stopping or self.state == VAULT_MISSING:
                    return True
                # A replaced observer may still hold events the new one started too late to hear:
                # it has delivered them once it hears the handoff marker written after the new one started.
                return self._batches.idle() and not any(r.token and not r.drained for r in self._retiring)

            ok = self._cond.wait_for(idle, remaining())
            return bool(ok) and not self._stopping and self.state != VAULT_MISSING

    def _write_marker(self, entry: _Retiring | None = None) -> str | None:
        """Write and remove a marker file in the index folder; its token, or None when none can be heard.

        With `entry`, the token is its handoff marker (set before the file exists, so it cannot be heard first).
        """
        folder = self.index.cache_dir
        try:
            Path(folder).resolve().relative_to(self.root)
        except (ValueError, OSError):
            return None
        if self._observer is None or self.observer_kind != "native" or self.state == VAULT_MISSING:
            return None
        with self._cond:
            self._sync_counter += 1
            token = f"{_SYNC_PREFIX}{os.getpid()}-{self._sync_counter}"
            if entry is not None:
                entry.token = token
        marker = Path(folder) / token
        try:
            marker.write_bytes(b"")
            marker.unlink()
        except OSError:
            return None
        return token

    # -- observer -----------------------------------------------------------------------------
    def _arm(self, overlap: bool = False) -> bool:
        """Start an observer on the vault root; False when the root cannot be watched.

        With `overlap`, the running observer keeps running a while after the new one starts (no
        moment unwatched, and the events it still holds, such as a move it waits to pair, reach the
        watcher; an event heard by both is read twice, which changes nothing). The new one is of the
        same kind; when it cannot start (e.g. the system's inotify watch limit, reached by two
        observers at once), the running one stays, as it was.
        """
        old = self._observer if overlap else None
        old_recorder = self._recorder if overlap else None
        if not overlap:
            self._disarm()
        try:
            st = self.root.stat()
        except OSError:
            return False
        handler = _Recorder(self)
        observer: BaseObserver | None = None
        kinds = ("polling",) if self.use_polling else ("native", "polling")
        if old is not None:  # a fresh observer of the running kind, or none (the running one stays)
            kinds = (self.observer_kind,)
        for kind in kinds:
            try:
                observer = _make_observer(kind)
                observer.schedule(handler, self._root_str, recursive=True, event_filter=list(WATCHED_EVENTS))
                observer.start()
            except OSError as exc:
                if not self.root.is_dir() or old is not None:
                    _stop_observer(observer)
                    return False
                self._report_error(f"cannot watch {self.root} with the {kind} observer: {exc}")
                _stop_observer(observer)
                observer = None
                continue
            self.observer_kind = kind
            break
        if observer is None:
            return False
        with self._cond:
            self._observer, self._recorder = observer, handler
        self._root_id = (st.st_dev, st.st_ino)
        if old is not None:
            self._retire(old, old_recorder)
        return True

    def _retire(self, old: BaseObserver, recorder: _Recorder | None) -> None:
        """Stop a replaced observer once it has delivered every event it heard before its successor started.

        Its events may lag far behind the new observer's (watchdog holds everything behind a move
        it waits to pair, and a loaded machine delays its threads more), and what happened just
        before the new observer started is heard by the old one only. A marker written now, after
        the new observer started, reaches the old one behind all of those: the old observer stops
        when it hears it (`_heard_marker`), and `wait_idle` waits for that. Without a marker (index
        folder outside the vault) the old observer runs `_RETIRE_SECONDS` more.
        """
        entry = _Retiring(old, recorder)
        with self._cond:
            self._retiring.append(entry)
        if self._write_marker(entry) is None:
            with self._cond:
                entry.token = None
        deadline = time.monotonic() + (_DRAIN_SECONDS if entry.token else _RETIRE_SECONDS)
        thread = threading.Thread(
            target=self._stop_when_drained, args=(entry, deadline), name="explorer-watch-retire", daemon=True
        )
        thread.start()

    def _stop_when_drained(self, entry: _Retiring, deadline: float) -> None:
        with self._cond:
            self._cond.wait_for(
                lambda: entry.drained or entry.cancelled or self._stopping,
                max(0.0, deadline - time.monotonic()),
            )
            if entry.cancelled:
                return
            lagging = entry.token is not None and not entry.drained and not self._stopping
            entry.drained = True
        _stop_observer(entry.observer)
        if lagging:  # what it still held is lost: reconcile everything
            self.request_full_refresh("a replaced file observer did not catch up")
        with self._cond:
            if entry in self._retiring:
                self._retiring.remove(entry)
            self._cond.notify_all()

    def _disarm(self) -> None:
        with self._cond:
            observer, self._observer = self._observer, None
            retiring, self._retiring = self._retiring, []
            for entry in retiring:
                entry.cancelled = True
            self._cond.notify_all()
        _stop_observer(observer)
        for entry in retiring:
            _stop_observer(entry.observer)

    def _healthy(self) -> bool:
        """True when the vault folder is the one being watched and the observer still runs."""
        try:
            st = self.root.stat()
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) != self._root_id:
            return False
        observer = self._observer
        if observer is None or not observer.is_alive():
            return False
        try:
            return all(e.is_alive() for e in list(observer.emitters))
        except RuntimeError:  # the emitter set changed while being read
            return True

    def _heard_marker(self, event: FileSystemEvent, recorder: _Recorder) -> bool:
        """Note a marker file heard by one observer (True); False for any other event."""
        if event.is_directory:
            return False
        src = self._rel(event.src_path)
        if src is None or not _is_sync_marker(src):
            return False
        token = src.rsplit("/", 1)[-1]
        with self._cond:
            handoff = [entry for entry in self._retiring if entry.token == token]
            if not handoff:
                self._sync_seen.add(token)
            for entry in handoff:
                if entry.recorder is recorder:
                    entry.drained = True
            self._cond.notify_all()
        return True

    def _record(self, event: FileSystemEvent) -> None:
        """The observer callback: turn an event into a RawEvent and queue it. Cheap and thread-safe."""
        src = self._rel(event.src_path)
        dest = self._rel(event.dest_path) if event.dest_path else None
        vault = self.settings.vault
        is_dir = event.is_directory
        if is_dir:
            keep = src == "" or any(
                p is not None and not is_ignored(p, vault, is_dir=True) for p in (src, dest)
            )
        else:
            keep = _note_path(src, vault) is not None or _note_path(dest, vault) is not None
        if not keep:
            return
        self._push(RawEvent(event.event_type, is_dir, src, dest))

    def request_full_refresh(self, reason: str = "") -> None:
        """Reconcile the whole vault with the index at the next batch (events may have been lost)."""
        with self._cond:
            self._batches.push_full()
            self.full_requests += 1
        if reason:
            self._call(self.on_error, f"{reason}: rescanning the vault")

    def _push(self, raw: RawEvent) -> None:
        self._batches.push(raw)

    def _rel(self, path: bytes | str) -> str | None:
        p = os.fsdecode(path)
        if p == self._root_str:
            return ""
        if p.startswith(self._root_str + os.sep):
            rel = p[len(self._root_str) + 1 :]
            return rel.replace(os.sep, "/") if os.sep != "/" else rel
        return None

    # -- the watcher loop --------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            taken = self._next_batch()
            if taken is None:
                return
            events, full = taken
            try:
                self._handle(events, full)
                self._backoff = 0.0
            except Exception as exc:  # the loop must live on
                self._backoff = min(60.0, max(1.0, self._backoff * 2))
                self._report_error(
                    f"change batch failed, retrying in {self._backoff:.0f} s: {type(exc).__name__}: {exc}"
                )
                logger.debug("change batch failed", exc_info=True)
                self._batches.put_back(events, full, self._backoff)  # due after the backoff
            finally:
                self._batches.finished()

    def _next_batch(self) -> tuple[list[RawEvent], bool] | None:
        """Wait for a quiet burst (or the latency cap) and take it; None when stopping.

        While nothing is pending, the vault folder and the observer are checked every
        `poll_interval` seconds.
        """
        while True:
            taken = self._batches.wait(time.monotonic() + self.poll_interval, lambda: self._stopping)
            if taken is not None or self._stopping:
                return taken
            # Outside the lock: the observer callback must never wait on disk access.
            if self.state == WATCHING and not self._healthy():
                self._push(RawEvent("deleted", True, ""))

    def _handle(self, events: list[RawEvent], full: bool) -> None:
        if self._observer is not None and self.observer_kind == "native" and _new_folders(events):
            # A folder made and filled (or made, filled and renamed) faster than the kernel
            # observer adds its watches stays unwatched: nothing later below it would be heard.
            # A fresh observer watches every folder as the tree is now, before the new folders
            # are walked for their notes, so a note is either walked or heard.
            self._arm(overlap=True)
        changes = expand_events(events, self.root, self.settings.vault, self.index)
        if (changes.root_gone or self.state != STARTING) and not self._healthy():
            if not self._recover():
                return
            full = True
        if changes.full:
            full = True
        if full:
            if self.index.version == 0:
                report = self.index.open()
            else:
                report = self.index.refresh()
            paths: frozenset[str] = frozenset()
        elif changes.paths:
            report = self.index.refresh(paths=sorted(changes.paths), reread=True)
            paths = changes.paths
        else:
            if self.state != WATCHING:
                self._set_state(WATCHING)
            return
        self.batches += 1
        self._recheck(paths)
        if not report.empty:
            self._call(self.on_batch, report)
        if self.state != WATCHING:
            self._set_state(WATCHING)

    def _recheck(self, paths: frozenset[str]) -> None:
        """Schedule again each file that changed after the indexer's stat (caught half-written)."""
        for rel in paths:
            try:
                st = (self.root / rel).stat()
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            known = self.index.file_state(rel)
            size, mtime_ns = with_sidecar(self.root / rel, st.st_size, st.st_mtime_ns)
            if known is None or known.mtime_ns != mtime_ns or known.size != size:
                self.rechecks += 1
                self._push(RawEvent("recheck", False, rel))

    def _recover(self) -> bool:
        """Re-arm after the observer died or the vault folder changed identity.

        When the folder is there, the observer is simply re-armed; otherwise the state becomes
        "vault missing" until it returns. Returns False when the watcher was stopped meanwhile.
        """
        if self.root.is_dir() and self._arm():
            self._reattach_store()
            return True
        return self._wait_for_vault()

    def _reattach_store(self) -> None:
        """A store file deleted with the vault is written anew from the in-memory index."""
        if not self.index.store_lost():
            return
        if self.embedding is not None:
            self.embedding.pause()
        try:
            self.index.reopen_store()
        finally:
            if self.embedding is not None:
                self.embedding.resume()

    def _wait_for_vault(self) -> bool:
        """Drop the observer, report "vault missing", poll until the folder is back, re-arm.

        Returns False when the watcher was stopped meanwhile.
        """
        self._disarm()
        self._batches.clear()
        self._set_state(VAULT_MISSING)
        while True:
            with self._cond:
                if self._stopping:
                    return False
                # Events of the dead tree are meaningless; the full refresh below covers them.
                self._batches.clear()
            if self.root.is_dir() and self._arm():
                break
            with self._cond:
                if self._stopping:
                    return False
                self._cond.wait(self.poll_interval)
        self._reattach_store()
        return True

    # -- hooks -------------------------------------------------------------------------------
    def _set_state(self, state: str) -> None:
        with self._cond:
            self.state = state
            self._cond.notify_all()
        self._call(self.on_state, state)

    def _call(self, hook: Callable[..., None], *args: object) -> None:
        try:
            hook(*args)
        except Exception as exc:  # noqa: BLE001 - a failing hook must not stop the watcher
            if hook is not self.on_error:
                self._report_error(
                    f"hook {getattr(hook, '__name__', hook)!s} failed: {type(exc).__name__}: {exc}"
                )

    def _report_error(self, msg: str) -> None:
        try:
            self.on_error(msg)
        except Exception:  # noqa: BLE001
            logger.warning("%s", msg)


class _Recorder(FileSystemEventHandler):
    """The observer's handler: records every event, nothing else."""

    def __init__(self, watcher: VaultWatcher) -> None:
        super().__init__()
        self._watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        if not self._watcher._heard_marker(event, self):
            self._watcher._record(event)


@dataclass(slots=True, eq=False)
class _Retiring:
    """A replaced observer still running until it has delivered what it heard before its successor started."""

    observer: BaseObserver
    recorder: _Recorder | None
    token: str | None = None
    """The handoff marker it must hear; None when none could be written (it then runs a fixed time)."""
    drained: bool = False
    cancelled: bool = False


def expand_events(events: list[RawEvent], root: Path, vault: VaultSettings, index: IndexBackend) -> ChangeSet:
    """Turn raw events into paths to re-read (folders become the notes under them, as `index` and the disk know them)."""
    paths: set[str] = set()
    full = root_gone = False

    def add_file(p: str | None) -> None:
        note = _note_path(p, vault)
        if note is not None:
            paths.add(note)

    for ev in events:
        if ev.kind == "recheck":
            add_file(ev.src)
            continue
        if not ev.is_dir:
            add_file(ev.src)
            add_file(ev.dest)
            continue
        if ev.src == "":
            if ev.kind in ("deleted", "moved"):
                root_gone = True
            elif ev.kind == "attrib":
                full = True
            continue
        if ev.kind == "attrib" and ev.src is not None:
            # Folder permissions decide what can be read below it. A readable folder is
            # rescanned; an unreadable one needs the full scan that records it as skipped.
            prefix = ev.src + "/"
            folder_skip = any(k == ev.src or k.startswith(prefix) for k in index.skipped_files())
            if os.access(root / ev.src, os.R_OK | os.X_OK) and not folder_skip:
                paths.update(index.paths_under(ev.src))
                paths.update(walk_notes(root, ev.src, vault))
            else:
                full = True
            continue
        if ev.src is not None and ev.kind in ("deleted", "moved", "created"):
            paths.update(index.paths_under(ev.src))
        if ev.kind == "created" and ev.src is not None:
            paths.update(walk_notes(root, ev.src, vault))
        if ev.kind == "moved" and ev.dest is not None:
            paths.update(index.paths_under(ev.dest))
            paths.update(walk_notes(root, ev.dest, vault))
    return ChangeSet(frozenset(paths), full, root_gone)


_RETIRE_SECONDS = 2.0
"""How long a replaced observer keeps running when no handoff marker can be written (watchdog holds a move up to half a second to pair it)."""
_DRAIN_SECONDS = 60.0
"""How long a replaced observer is waited for to hear its handoff marker before it is stopped and the vault rescanned."""


def _new_folders(events: list[RawEvent]) -> bool:
    """Whether a folder inside the vault was made or moved (its subfolders may be unwatched)."""
    return any(ev.is_dir and ev.kind in ("created", "moved") and ev.src != "" for ev in events)


def walk_notes(root: Path, folder: str, vault: VaultSettings) -> list[str]:
    """Note paths below a vault-relative folder, by the vault's ignore rules."""
    if is_ignored(folder, vault, is_dir=True):
        return []
    out: list[str] = []
    seen: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root / folder, followlinks=vault.follow_symlinks):
        try:
            st = os.stat(dirpath)
            key = (st.st_dev, st.st_ino)
        except OSError:
            dirnames[:] = []
            continue
        if key in seen:
            dirnames[:] = []
            continue
        seen.add(key)
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        dirnames[:] = [d for d in dirnames if not is_ignored(f"{rel_dir}/{d}", vault, is_dir=True)]
        out.extend(f"{rel_dir}/{name}" for name in filenames if not is_ignored(f"{rel_dir}/{name}", vault))
    return out


def _note_path(rel: str | None, vault: VaultSettings) -> str | None:
    """The note a file event concerns: the file itself, or for a turn's metadata.json its context.md."""
    if not rel:
        return None
    head, _, name = rel.rpartition("/")
    if name == _SIDECAR:
        rel = f"{head}/context.md" if head else "context.md"
    return None if is_ignored(rel, vault) else rel


def _is_sync_marker(rel: str) -> bool:
    return rel.rsplit("/", 1)[-1].startswith(_SYNC_PREFIX)


def _make_observer(kind: str) -> BaseObserver:
    if kind == "polling":
        from watchdog.observers.polling import PollingObserver

        return PollingObserver(timeout=0.5)
    from watchdog.observers import Observer

    return Observer()


def _stop_observer(observer: BaseObserver | None) -> None:
    if observer is None:
        return
    try:
        observer.stop()
        if observer.is_alive():
            observer.join(5)
    except Exception:  # a dead observer may fail to stop; nothing else to do
        logger.debug("observer stop failed", exc_info=True)
