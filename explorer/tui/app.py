"""The Textual app: a thin App over the main screen; its engine session holds the index, model, watcher and server."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.message import Message
from textual.reactive import var
from textual.screen import Screen
from textual.worker import Worker, WorkerState, get_current_worker

from explorer.config import Settings
from explorer.engine import Session, SessionHooks
from explorer.engine.shared import SharedSession
from explorer.index.backend import ModelState as Model
from explorer.tui import keys
from explorer.tui.messages import (
    BackToSearch,
    EditNote,
    IndexFailed,
    IndexOpened,
    IndexProgress,
    IndexReady,
    IndexUnavailable,
    IndexUpdated,
    ModelReady,
    ModelState,
    OpenNote,
    QuerySubmitted,
    ResultsShown,
    VaultChanged,
    WatcherState,
)
from explorer.tui.safe import screen_text
from explorer.tui.screens.help import HelpScreen
from explorer.tui.screens.main import MainScreen
from explorer.tui.screens.note import NoteScreen, Place
from explorer.tui.screens.writer import WriterScreen
from explorer.tui.state import UIState, default_state_path, load_state, save_state
from explorer.tui.text import note_titles
from explorer.tui.themes import SHIPPED_THEMES_DIR, load_themes, user_themes_dir
from explorer.tui.widgets.status_bar import StatusInfo

if TYPE_CHECKING:
    from explorer.index.backend import Encoder, IndexBackend
    from explorer.search.core.pipeline import SearchPipeline

DEFAULT_THEME = "explorer-dark"
PipelineFactory = Callable[["IndexBackend", Settings], "SearchPipeline"]


def settle_heap() -> None:
    """Move every object alive now out of the reach of Python's full garbage collections.

    The index of a large vault is a heap of long-lived objects (at 10,000 notes a full
    collection walks it for 0.6-0.8 s), and a collection runs in whichever thread allocates,
    holding the interpreter: the app froze for that long at random moments while typing.
    Frozen objects are still freed by reference counting when they are let go; only garbage
    caught in reference cycles after a freeze stays until exit (the index's and the pipeline's
    records are plain dataclasses, lists and dicts). Collections then only walk what is new.
    Called when the index, the model or a search's results have settled.
    """
    gc.freeze()


class ExplorerApp(App[int]):
    """Explore one vault: live hybrid search, context, explanations, notes, writing.

    The first frame is drawn before anything heavy happens: the engine session (explorer.engine)
    opens the index in a thread worker (then lexical search works), then runs the watcher, the
    embedding loop (then results upgrade to hybrid) and the search server for `explorer search`;
    every search runs in an exclusive thread worker.
    """

    CSS_PATH = "explorer.tcss"
    TITLE = "Explorer"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]  # noqa: RUF012 - typed by Textual

    BINDINGS = keys.APP

    status: var[StatusInfo] = var(StatusInfo)
    """What the status bar shows (replaced, never mutated)."""

    def __init__(
        self,
        vault: Path,
        settings: Settings | None = None,
        *,
        index: IndexBackend | None = None,
        embedder: Encoder | None = None,
        pipeline_factory: PipelineFactory | None = None,
        state_path: Path | None = None,
        theme_dirs: Iterable[Path] | None = None,
        watch: bool = True,
        load_model: bool = True,
        notices: Iterable[str] = (),
        shared: SharedSession | None = None,
    ) -> None:
        """Set up the app; nothing is read from the vault until it runs.

        Args:
            vault: The vault root.
            settings: Settings (default: defaults).
            index: An already opened index to use (tests, embedding apps); not closed on exit.
            embedder: An embedding model to give the index the app opens.
            pipeline_factory: Builds the SearchPipeline (default `explorer.engine.make_pipeline`).
            state_path: Where the theme choice and query history are kept (None: nowhere).
            theme_dirs: Theme folders (default: the shipped `themes/` and the user's).
            watch: Start the file watcher when it is available.
            load_model: Load the embedding model and embed pending shards in the background.
            notices: Warnings from loading the settings (unknown keys), shown once the app is up.
            shared: A session several apps share (the browser tabs of `explorer serve`): the app
                opens, watches and embeds nothing itself, hears the session, and leaves it open.
        """
        super().__init__()
        self._notices = tuple(notices)
        self.vault = Path(vault)
        self.settings = settings or Settings()
        self.index: IndexBackend | None = None
        self.pipeline: SearchPipeline | None = None
        self._hooks = SessionHooks(
            on_batch=self._session_batch,
            on_watcher=self._watch_state,
            on_model=lambda state, detail: self.post_message(ModelState(state, detail)),
            on_progress=self._progress,
            on_error=self._session_error,
        )
        self._shared = shared
        self._unsubscribe: Callable[[], None] | None = None
        self.session = (
            shared.session
            if shared is not None
            else Session(
                self.vault,
                self.settings,
                index=index,
                embedder=embedder,
                pipeline_factory=pipeline_factory,
                on_message=self.notify_any_thread,
                interactive=True,
                hooks=self._hooks,
            )
        )
        """The engine session: index, pipeline, watcher, embedding loop and search server."""
        self.state_path = state_path
        self.ui_state: UIState = load_state(state_path)
        self.theme_dirs = (
            list(theme_dirs) if theme_dirs is not None else [SHIPPED_THEMES_DIR, user_themes_dir()]
        )
        self.theme_errors: list[str] = []
        self._watch = watch
        self._load_model = load_model
        self.main_screen = MainScreen(history=self.ui_state.queries(self.vault))
        self.note_screen: NoteScreen | None = None
        """The note view, made on the first open and kept (installed) for the later ones."""

    @property
    def watcher(self) -> Any:
        """The session's vault watcher (None when not watching)."""
        return self.session.watcher

    def get_default_screen(self) -> Screen:
        """The main (search) screen."""
        return self.main_screen

    # -- start-up ----------------------------------------------------------------------
    def on_mount(self) -> None:
        """Register themes, pick the remembered one, then open the index in a worker."""
        self._register_themes()
        llm = self.settings.llm
        self.status = replace(
            self.status,
            llm=llm.model if llm.configured else "off",
            rerank=self.settings.rerank.enabled,
            model="off" if not self.settings.index.embeddings else "not loaded",
        )
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        self.call_after_refresh(self._open_index)

    def _register_themes(self) -> None:
        loaded = load_themes(self.theme_dirs)
        for theme in loaded.themes:
            self.register_theme(theme)
        errors = list(loaded.errors)
        wanted = [self.ui_state.theme, self.settings.ui.theme, DEFAULT_THEME]
        chosen = next((name for name in wanted if name and name in self.available_themes), None)
        for name in (self.ui_state.theme, self.settings.ui.theme):
            if name and name not in self.available_themes:
                errors.append(f"theme “{name}” is not installed")
                break
        if chosen:
            self.theme = chosen
        self.theme_errors = errors
        if errors:
            self.notify("\n".join(errors), title="Themes", severity="warning", timeout=8)

    def _theme_changed(self, theme: Any) -> None:
        """Remember the user's theme choice."""
        if theme.name != self.ui_state.theme:
            self.ui_state.theme = theme.name
            self._save_state()

    def _save_state(self) -> None:
        error = save_state(self.state_path, self.ui_state)
        if error:
            self.notify(error, severity="warning", timeout=5)

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: Any = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Every notification of the app (screens and widgets delegate here) is plain text.

        Messages carry file names, vault text and error details: they are never parsed as markup
        (`markup` is ignored) and their control characters are made visible.
        """
        super().notify(
            screen_text(message), title=screen_text(title), severity=severity, timeout=timeout, markup=False
        )

    def notify_any_thread(self, message: str) -> None:
        """A warning notification, from the UI thread or any other."""
        if threading.get_ident() == self._thread_id:
            self.notify(message, severity="warning", timeout=8)
        else:
            self.call_from_thread(self.notify, message, severity="warning", timeout=8)

    def on_query_submitted(self, message: QuerySubmitted) -> None:
        """Keep a submitted query in the history file."""
        self.ui_state.add_query(self.vault, message.query)
        self._save_state()

    @work(thread=True, exclusive=True, group="index", exit_on_error=False)
    def _open_index(self) -> None:
        """Open (load + refresh) the session's index and build the pipeline, off the UI thread."""
        t0 = time.perf_counter()
        if self._shared is not None:
            self._wait_shared(self._shared)
            report = None
        else:
            report = self.session.open(progress=self._progress)
        index, pipeline = self.session.index, self.session.pipeline
        assert index is not None and pipeline is not None
        summary = f"{index.note_count()} notes"
        if report is not None:
            summary += (
                f" ({len(report.added)} new, {len(report.changed)} changed, {len(report.removed)} removed)"
            )
        summary += f" in {(time.perf_counter() - t0) * 1000:.0f} ms"
        self.post_message(IndexReady(index, pipeline, summary, index.stats(), note_titles(index)))

    def _wait_shared(self, shared: SharedSession) -> None:
        """Worker thread: wait for the shared session to have opened its index (the app quitting ends the wait)."""
        worker = get_current_worker()
        while not shared.wait_open(0.1):
            if worker.is_cancelled:
                raise RuntimeError("the app quit while the index opened")
        if shared.error is not None:
            raise RuntimeError(shared.error)

    def _progress(self, stage: str, done: int, total: int) -> None:
        """Any thread: opening or embedding progressed (embedding with the time it still needs)."""
        self.post_message(
            IndexProgress(stage, done, total, self._embed_eta() if stage == "embedding" else None)
        )

    def _embed_eta(self) -> float | None:
        """Seconds the embedding loop under way still needs: its model's own estimate by text volume
        (`ModelHost.eta`, the one `explorer index` prints), None while unknown or for an index without one."""
        index = self.session.index
        return index.embed_eta() if index is not None else None

    def on_index_progress(self, message: IndexProgress) -> None:
        """Show progress in the status bar."""
        done = message.done < message.total
        self.status = replace(
            self.status,
            stage=message.stage if done else "",
            done=message.done,
            total=message.total,
            eta=message.eta if done else None,
        )

    def on_index_ready(self, message: IndexReady) -> None:
        """Lexical search works now; start the watcher and the model."""
        self.index, self.pipeline = message.index, message.pipeline
        self.log.info(f"index ready: {message.summary}")
        st = message.stats or self.index.stats()
        self.status = replace(self.status, index="ready", notes=st.notes, shards=st.shards, stage="")
        self._tell(self.main_screen, IndexOpened(message.titles))
        settle_heap()
        self._show_notices()
        self._report_problem_files()
        # The watcher, the embedding loop and, with the watcher, the server answering one-shot
        # `explorer search` of this vault while the app runs.
        if self._shared is not None:
            self._unsubscribe = self._shared.subscribe(
                self._hooks
            )  # the model and watcher states come at once
        else:
            self.session.start(watch=self._watch, embed=self._load_model, serve=self._watch)
        if not self.settings.index.embeddings:
            self.status = replace(self.status, model="off")
        elif not self._load_model and self.index.model_state is Model.READY:
            self.status = replace(self.status, model="ready", runtime=self.index.runtime)

    def _show_notices(self) -> None:
        """The settings warnings, once, when the main screen is up (index opened or failed)."""
        if self._notices:
            self.notify("\n".join(self._notices), title="Configuration", severity="warning", timeout=12)
            self._notices = ()

    def _report_problem_files(self) -> None:
        """One notification listing files left out or only partly indexed, with their reasons."""
        if self.index is None:
            return
        skipped = self.index.skipped_files()
        warned = self.index.warnings()
        if not skipped and not warned:
            return
        lines = [f"{path}: {reason}" for path, reason in sorted(skipped.items())]
        lines += [f"{path}: {w}" for path, ws in warned.items() for w in ws]
        shown = lines[:6] + (
            [f"… and {len(lines) - 6} more (explorer stats lists them all)"] if len(lines) > 6 else []
        )
        title = f"{len(skipped)} file{'s' if len(skipped) != 1 else ''} skipped, {len(warned)} indexed with warnings"
        self.notify("\n".join(shown), title=title, severity="warning", timeout=12)

    def on_index_failed(self, message: IndexFailed) -> None:
        """Say so; the app stays up."""
        self.status = replace(self.status, index="failed")
        self._show_notices()
        self.notify(message.error, title="Index", severity="error", timeout=15)
        if self.index is None:
            self._tell(self.main_screen, IndexUnavailable(message.error))

    def _tell(self, screen: Screen, message: Message) -> None:
        """Post `message` to `screen`, unless it is gone (late worker messages at shutdown)."""
        if screen.is_mounted:
            screen.post_message(message)

    # -- the model ----------------------------------------------------------------------------
    def on_model_state(self, message: ModelState) -> None:
        """Track the model; upgrade results when it is ready."""
        was = self.status.model
        runtime = message.detail if message.state in ("ready", "embedding") else self.status.runtime
        waiting_for = message.detail if message.state == "waiting" else ""
        self.status = replace(self.status, model=message.state, runtime=runtime, waiting_for=waiting_for)
        if message.state not in ("embedding", "waiting") and self.status.stage in ("embedding", "waiting"):
            self.status = replace(self.status, stage="")
        if message.state == "unavailable" and message.detail:
            self.notify(
                f"Searching BM25 only: {message.detail}",
                title="Embedding model",
                severity="warning",
                timeout=8,
            )
        if message.state == "ready":
            settle_heap()
        if (
            message.state in ("ready", "embedding", "waiting")
            and was not in ("ready", "embedding", "waiting")
        ) or (message.state == "ready" and was in ("embedding", "waiting")):
            self._tell(self.main_screen, ModelReady(message.state))

    # -- keeping the index current ---------------------------------------------------------
    def reindex_now(self, paths: Iterable[str]) -> None:
        """Apply changes of `paths` to the index (call from a worker thread) and tell the UI."""
        if self.index is None:
            return
        paths = tuple(paths)
        try:
            report = self.session.refresh(paths=paths)
        except Exception as exc:  # noqa: BLE001 - the UI reports it and lives on
            self.post_message(IndexFailed(f"re-indexing {', '.join(paths)} failed: {exc}"))
            return
        if not (report.added or report.changed or report.removed):
            # Nothing changed for the index; the views showing these paths still follow.
            index = self.index
            self.post_message(IndexUpdated(paths, "no change", index.stats(), note_titles(index)))

    @work(thread=True, group="reindex", exit_on_error=False)
    def reindex(self, paths: list[str]) -> None:
        """Re-index `paths` in a worker."""
        self.reindex_now(paths)

    def refresh_index(self, paths: list[str], wait: bool = False) -> None:
        """Re-index `paths`: in the calling (worker) thread when `wait`, else in a new worker."""
        if wait:
            self.reindex_now(paths)
        else:
            self.reindex(paths)

    def on_index_updated(self, message: IndexUpdated) -> None:
        """Counts, tree and results follow the change; new shards get embedded."""
        if self.index is None:
            return
        st = message.stats or self.index.stats()
        self.status = replace(self.status, notes=st.notes, shards=st.shards, index="ready")
        settle_heap()
        for screen in [self.main_screen, *(s for s in self.screen_stack if s is not self.main_screen)]:
            self._tell(screen, VaultChanged(message.paths, message.titles))

    def _session_batch(self, report: Any) -> None:
        """Session thread: a batch of changes was applied to the index (by the watcher or `reindex_now`)."""
        paths = tuple(report.added) + tuple(report.changed) + tuple(report.removed)
        if paths:
            index = self.index
            self.post_message(
                IndexUpdated(
                    paths,
                    f"{len(paths)} note(s) changed",
                    index.stats() if index is not None else None,
                    note_titles(index),
                )
            )

    def _session_error(self, error: str) -> None:
        """Session thread: the watcher or the embedding failed; the session lives on."""
        if error.startswith("embedding failed"):
            self.post_message(ModelState("unavailable", error))
        else:
            self.post_message(WatcherState("error", error))

    def _watch_state(self, state: str) -> None:
        """Watcher thread: its state changed (starting, watching, vault missing, stopped)."""
        self.post_message(WatcherState(state))

    def on_watcher_state(self, message: WatcherState) -> None:
        """Show the watcher's state."""
        if message.state == "error":
            self.notify(message.detail or "watcher error", title="Watcher", severity="warning", timeout=8)
            if self.watcher is not None:
                return
        self.status = replace(self.status, watcher=message.state)

    # -- searches and navigation -------------------------------------------------------
    def on_results_shown(self, message: ResultsShown) -> None:
        """A search finished: show its timings in the status bar."""
        if not message.final:
            return
        settle_heap()
        results = message.results
        stages = results.stage_ms
        slow = max(stages, key=lambda kv: kv[1]) if stages else None
        text = f"{results.total_ms:.0f} ms" + (f" ({slow[0]} {slow[1]:.0f})" if slow else "")
        self.status = replace(self.status, last_search=text)

    def on_open_note(self, message: OpenNote) -> None:
        """Show a note: in the open note view, or in the note view made at the first open (one screen
        for every open: composing, styling and laying out a new one cost more than the note's first
        screen itself; BENCHMARKS.md#note-opening)."""
        if self.index is None:
            return
        place = Place(message.path, message.cursor)
        screen = self.note_screen
        if isinstance(self.screen, NoteScreen):
            self.screen.run_worker(
                self.screen.go(place), exclusive=True, group="note-nav", exit_on_error=False
            )
        elif screen is None:
            self.note_screen = NoteScreen(place)
            self.install_screen(self.note_screen, "note")
            self.push_screen(self.note_screen)
        elif screen in self.screen_stack:
            self.push_screen(NoteScreen(place))  # from the writer over the note view: a view of its own
        else:
            screen.open(place)
            self.push_screen(screen)

    def on_edit_note(self, message: EditNote) -> None:
        """Open writing mode on a note."""
        if self.index is None:
            return
        if isinstance(self.screen, WriterScreen) and self.screen.path == message.path:
            return
        self.push_screen(WriterScreen(message.path, message.cursor))

    def on_back_to_search(self, message: BackToSearch) -> None:
        """Close the note view and the writer (whatever is stacked over the search screen) and focus
        the search box, its query replaced by text typed in a view (typed on when `more`)."""
        while len(self.screen_stack) > 1 and self.screen is not self.main_screen:
            self.pop_screen()
        if message.more:
            self.main_screen.type_into_search(message.typed)
        else:
            self.main_screen.focus_search(message.typed)

    def action_help(self) -> None:
        """Show the keys of the current screen."""
        if isinstance(self.screen, HelpScreen):
            return
        self.push_screen(HelpScreen.for_screen(self.screen, self.BINDINGS))

    # -- command palette ------------------------------------------------------------------
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Every action of the current screen and its widgets (from their bindings), each theme, and Textual's own."""
        yield from super().get_system_commands(screen)
        if isinstance(screen, HelpScreen):
            return
        owners: list[Any] = [screen]
        seen_kinds: set[type] = {type(screen)}
        for widget in screen.walk_children():
            kind = type(widget)
            if (
                kind not in seen_kinds
                and kind.__module__.startswith("explorer.")
                and kind.__dict__.get("BINDINGS")
            ):
                seen_kinds.add(kind)
                owners.append(widget)
        seen: set[tuple[type, str]] = set()
        for owner in owners:
            where = "" if owner is screen else f" ({type(owner).__name__})"
            for binding in type(owner).__dict__.get("BINDINGS", []):
                if not isinstance(binding, Binding) or not binding.description:
                    continue
                if (type(owner), binding.action) in seen:
                    continue
                seen.add((type(owner), binding.action))
                keys = binding.key_display or binding.key.split(",")[0]
                yield SystemCommand(
                    f"{binding.description}{where}",
                    f"{keys} · {palette_help(owner, binding)}",
                    partial(self._run_action_on, owner, binding.action),
                )
        for name in sorted(self.available_themes):
            yield SystemCommand(
                f"Theme: {name}", "Switch to this theme (remembered)", partial(setattr, self, "theme", name)
            )

    def _run_action_on(self, owner: Any, action: str) -> None:
        owner.call_next(owner.run_action, action)

    # -- shutdown -----------------------------------------------------------------------
    def on_unmount(self) -> None:
        """Close the session: the server, the watcher and the embedding loop stop, an index it opened closes.

        A shared session stays open for the other apps: this one only stops hearing it.
        """
        if self._shared is not None:
            if self._unsubscribe is not None:
                self._unsubscribe()
            return
        try:
            self.session.close()
        except Exception:  # noqa: BLE001 - shutting down
            pass

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """Workers run with exit_on_error=False: their errors end up here, as notifications."""
        if event.state != WorkerState.ERROR:
            return
        error = event.worker.error
        group = event.worker.group
        if group == "index":
            self.post_message(IndexFailed(f"Cannot open the index: {error}"))
        else:
            self.notify(f"{group}: {error}", title="Error", severity="error", timeout=10)


def palette_help(owner: Any, binding: Binding) -> str:
    """The one-line description of a binding for the palette: its tooltip, else the first sentence
    of its action's docstring (never a docstring's later lines)."""
    if binding.tooltip:
        return binding.tooltip
    name = binding.action.split("(")[0]
    method = getattr(owner, f"action_{name}", None)
    doc = " ".join((getattr(method, "__doc__", "") or "").split())
    first = doc.split(". ")[0].rstrip(".")
    return first or binding.description


def make_app(vault: Path, settings: Settings, **kwargs: Any) -> ExplorerApp:
    """The one factory for the CLI and the tests."""
    kwargs.setdefault("state_path", default_state_path())
    return ExplorerApp(vault, settings, **kwargs)


def run_app(vault: Path, settings: Settings, notices: Iterable[str] = ()) -> int:
    """Run the app on `vault` until the user quits (`notices`: settings warnings to show); returns the exit code."""
    app = make_app(vault, settings, notices=notices)
    app.run()
    # Everything is closed and written by now (the index in `on_unmount`). The interpreter's
    # final garbage collection walks every object the app, the index and the model made (over a
    # second on a large vault); freezing them first leaves that walk nothing to do, so the
    # terminal is back at once. Exit handlers still run; only that walk is skipped.
    gc.freeze()
    return app.return_code or 0
