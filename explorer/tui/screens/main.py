"""The main screen: live search box, results, context and why-ranked panes, vault tree."""

from __future__ import annotations

import time
from typing import Any, cast

from textual import events, on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Input, OptionList, TabbedContent, TabPane
from textual.worker import get_current_worker

from explorer.search.schema import SearchResult, SearchResults
from explorer.tui import keys, launch
from explorer.tui.host import Host
from explorer.tui.marks import missing_marked, save_mark
from explorer.tui.messages import (
    ContextsPrepared,
    EditNote,
    IndexOpened,
    IndexUnavailable,
    ModelReady,
    OpenNote,
    QuerySubmitted,
    ResultsShown,
    SearchFailed,
    SearchFinished,
    VaultChanged,
)
from explorer.tui.searching import SearchJob, highlight_terms, search_in_thread
from explorer.tui.text import note_titles, split_mode
from explorer.tui.widgets.context_pane import ContextPane, PreparedContext
from explorer.tui.widgets.footer import KeyFooter
from explorer.tui.widgets.results import CorrectionLine, ResultsList, ResultsSummary, RowLayout
from explorer.tui.widgets.search_box import SearchBox
from explorer.tui.widgets.status_bar import StatusBar
from explorer.tui.widgets.vault_tree import VaultTree
from explorer.tui.widgets.why_pane import WhyPane

#: How long a lexical first stage waits for the full stage of the same search before it is shown
#: (when the full stage comes sooner, only it is drawn: one calm update instead of two).
LEXICAL_HOLD_S = 0.15

#: After a results update, the panes follow the new list this much after it is drawn (a frame of their own).
CONTEXT_AFTER_LIST_S = 0.01

#: The vault tree shows by itself from this many columns (F2 toggles it at any width).
TREE_MIN_WIDTH = 140

#: Below this many columns the results and the panes stack, and results are two lines each.
COMPACT_WIDTH = 100

#: Actions on the selected result (greyed while nothing is selected).
RESULT_ACTIONS = frozenset(
    "widen match shard copy_node_id copy_link open_obsidian open_editor open_at_cursor edit".split()
)

#: Stages by rank: a stage never replaces a higher one of the same query.
STAGE_RANK = {"lexical": 1, "full": 2, "classic": 2}


class MainScreen(Screen):
    """Search-first: the query drives the results; the highlighted result drives the panes."""

    AUTO_FOCUS = "#search"

    BINDINGS = keys.MAIN

    def __init__(self, history: list[str] | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self._history = history or []
        self._seq = 0
        self._debounce: Timer | None = None
        self._had_selection = False
        self._held: SearchFinished | None = None
        self._focus_results = False
        self._hold_timer: Timer | None = None
        self._context_pending_since = 0.0
        self._tree_choice: bool | None = None
        self._started_model = ""
        self._prepared: dict[str, PreparedContext] = {}
        """The context pane's windows the search worker built, by note path (the shown results')."""
        self.results_model = ""
        """The model state when the shown results were computed (they upgrade once it is `ready`)."""
        self.shown_query = ""
        """The query of the shown results."""
        self.query_text = ""
        self.results: SearchResults | None = None
        self.stage = ""
        self.words: list[str] = []
        self.phrases: list[str] = []
        self.as_typed = ""
        """The query searched with every word as typed (ctrl+r); any other query has its typos corrected."""

    @property
    def explorer(self) -> Host:
        """The app, as screens see it."""
        return cast(Host, self.app)

    def compose(self) -> ComposeResult:
        """Search box, summary, then tree | results | panes, status bar and footer."""
        yield SearchBox(history=self._history, id="search")
        yield ResultsSummary("Type to search.", id="summary")
        with Horizontal(id="body"):
            yield VaultTree(id="tree")
            with Vertical(id="results-column"):
                yield CorrectionLine(id="correction")
                yield ResultsList(id="results")
            # No `initial`: the first pane (the context) is shown, and Textual's tabs pick it from the
            # tabs they hold; naming it made their mount look it up, which raised when the app quit
            # while the screen was still mounting (ctrl+q at once: "No Tab with id ...", exit 1).
            with TabbedContent(id="detail"):
                with TabPane("Context", id="tab-context"):
                    yield ContextPane(id="context")
                with TabPane("Why ranked", id="tab-why"):
                    yield WhyPane(id="why")
        yield StatusBar()
        yield KeyFooter()

    def on_mount(self) -> None:
        """Fit the layout to the terminal; show the opening state."""
        try:
            self._fit(self.app.size.width)
            if self.explorer.index is None:
                self.query_one(ResultsSummary).message("Opening the index… (you can type already)", "warning")
        except NoMatches:
            pass  # the app quit before the screen was whole (ctrl+q at once): nothing to fit

    def on_resize(self, event: events.Resize) -> None:
        """Follow the terminal's width: the tree and the result layout."""
        try:
            self._fit(event.size.width)
        except NoMatches:
            pass  # as in on_mount: the screen is being taken down

    def _fit(self, width: int) -> None:
        """Under TREE_MIN_WIDTH columns the tree hides (F2 shows it) unless the person opened it;
        under COMPACT_WIDTH results drop their snippet (the context pane below shows the text)."""
        tree = self.query_one(VaultTree)
        if self._tree_choice is None and tree.display != (width >= TREE_MIN_WIDTH):
            tree.display = width >= TREE_MIN_WIDTH
            if tree.display:
                tree.fill()
        self.query_one(ResultsList).two_line = width < COMPACT_WIDTH
        self.query_one(ResultsSummary).set_class(width >= COMPACT_WIDTH, "-roomy")
        self.query_one(Footer).compact = width < COMPACT_WIDTH

    # -- what the app tells (index lifecycle) ------------------------------------------------
    def on_index_opened(self, message: IndexOpened) -> None:
        """The index opened: fill the tree, run any query typed meanwhile."""
        self._fill_tree(message.titles)
        box = self.query_one(SearchBox)
        if box.value.strip():
            self.run_search(box.value)
        else:
            self.query_one(ResultsSummary).message("Type to search.")

    def on_index_unavailable(self, message: IndexUnavailable) -> None:
        """The index could not be opened: say so where results would be."""
        self.query_one(ResultsSummary).message(f"{message.error} — searching is not possible.", "error")

    def on_model_ready(self, message: ModelReady) -> None:
        """Embeddings became available (or every vector is in): upgrade the shown results in place."""
        if self.query_text and self.results is not None and self.results_model != message.state:
            self.run_search(self.query_text)

    def on_vault_changed(self, message: VaultChanged) -> None:
        """Files changed: refresh the tree and the current results."""
        self._fill_tree(message.titles)
        if self.query_text:
            self.run_search(self.query_text)

    def _fill_tree(self, titles: dict[str, str] | None) -> None:
        titles = titles if titles is not None else note_titles(self.explorer.index)
        if titles is not None:
            self.query_one(VaultTree).set_notes(titles)
            self.query_one(WhyPane).set_suggestions(sorted(titles) + sorted(set(titles.values())))

    # -- searching --------------------------------------------------------------------
    @on(Input.Changed, "#search")
    def _query_changed(self, event: Input.Changed) -> None:
        """Debounce: search once typing pauses."""
        if self._debounce is not None:
            self._debounce.stop()
        self._focus_results = False
        delay = self.explorer.settings.experimental.typing_debounce_ms / 1000
        self._debounce = self.set_timer(delay, lambda: self.run_search(event.value))

    @on(Input.Submitted, "#search")
    def _query_submitted(self, event: Input.Submitted) -> None:
        """Enter: search now, remember the query, move to the results."""
        if self._debounce is not None:
            self._debounce.stop()
        query = event.value.strip()
        if query:
            self.query_one(SearchBox).remember(query)
            self.post_message(QuerySubmitted(query))
        self.run_search(event.value, record=True)
        results = self.query_one(ResultsList)
        self._focus_results = not results.option_count  # then when this search's results come
        if results.option_count:
            results.focus()

    def on_search_box_mode_changed(self, event: SearchBox.ModeChanged) -> None:
        """The mode toggle moved: search again in the new mode."""
        if event.control.value.strip():
            self.run_search(event.control.value)

    def on_search_box_leave_down(self, event: SearchBox.LeaveDown) -> None:
        """Down past the newest query: go to the results."""
        self.query_one(ResultsList).focus()

    def run_search(self, query: str, record: bool = False) -> None:
        """Start a search (cancelling any running one); empty queries clear the list."""
        self._seq += 1
        query = query.strip()
        summary = self.query_one(ResultsSummary)
        mode, text = split_mode(query, self.query_one(SearchBox).mode)
        if not text:
            self.query_text = ""
            self.results = None
            self.shown_query = ""
            self.workers.cancel_group(self, "search")
            self.query_one(ResultsList).clear()
            self.query_one(CorrectionLine).show(None)
            self._show_selected_later()
            summary.message("Type to search." if not query else "Type words after the mode prefix.")
            return
        if self.explorer.index is None or self.explorer.pipeline is None:
            summary.message("Opening the index… your search runs when it is ready.", "warning")
            return
        self.query_text, self._started_model = query, self.explorer.status.model
        layout = (self.query_one(ResultsList).row_layout(), self.query_one(ContextPane).chars)
        job = SearchJob(mode, text, self.explorer.status.hybrid, record, correct=query != self.as_typed)
        self._search(self._seq, query, job, *layout)

    @work(thread=True, exclusive=True, group="search", exit_on_error=False)
    def _search(self, seq: int, query: str, job: SearchJob, rows: RowLayout, chars: int) -> None:
        """Progressive search in a thread (explorer.tui.searching.search_in_thread); stale runs stop early."""
        app, layout = self.explorer, (rows, chars)
        system = (app.pipeline, app.index, app.settings)
        search_in_thread(job, seq, query, layout, system, self.post_message, get_current_worker())

    def on_search_finished(self, message: SearchFinished) -> None:
        """Show results unless a newer search has started; stages only ever go up for one query.

        A lexical first stage is held back for LEXICAL_HOLD_S: when the full stage comes in
        that time only the full one is drawn. A lexical stage never replaces the full results of
        the same query (a re-run after an index change or the model becoming ready updates them
        in place, keeping the highlighted note).
        """
        if message.seq != self._seq:
            return
        if self._hold_timer is not None:
            self._hold_timer.stop()
        self._held, self._hold_timer = None, None
        if message.stage == "lexical" and not message.final:
            if self.shown_query == message.query and STAGE_RANK.get(self.stage, 0) > STAGE_RANK["lexical"]:
                return
            self._held = message
            self._hold_timer = self.set_timer(LEXICAL_HOLD_S, self._show_held)
            return
        self._show_results(message)

    def _show_held(self) -> None:
        held, self._held, self._hold_timer = self._held, None, None
        if held is not None and held.seq == self._seq:
            self._show_results(held)

    def _show_results(self, message: SearchFinished) -> None:
        results = message.results
        results_list = self.query_one(ResultsList)
        previous = results_list.selected
        if previous is not None and results_list.results and previous is results_list.results[0]:
            previous = None  # the automatic first highlight is no choice to keep
        self.results = results
        self._prepared = {message.context.path: message.context} if message.context is not None else {}
        self.stage = message.stage
        self.shown_query = message.query
        self.results_model = self._started_model
        self.words, self.phrases = highlight_terms(*split_mode(message.query, self.query_one(SearchBox).mode))
        self.query_one(ResultsSummary).show(results, message.stage, message.final, self.explorer.status.model)
        self.query_one(CorrectionLine).show(
            results, as_typed=message.query == self.as_typed and not results.mode.classic
        )
        self.query_one(ResultsList).show(
            results,
            self.words,
            self.phrases,
            keep=previous.document_path if previous else None,
            prepared=message.rows,
        )
        if self.explorer.settings.experimental.mark_results:
            results_list.mark = f"explorer:{message.stage}:{message.query}"
        self._show_selected_later()
        if self._focus_results and results.results:
            self._focus_results = False
            if self.focused is self.query_one(SearchBox):
                self.query_one(ResultsList).focus()
        self.post_message(ResultsShown(results, message.stage, message.final))

    def on_contexts_prepared(self, message: ContextsPrepared) -> None:
        """The other results' windows, computed in the search worker: the pane draws them as the
        highlight moves down the list instead of computing them on the UI thread."""
        if message.seq != self._seq or self.results is None:
            return
        for prepared in message.contexts:
            self._prepared.setdefault(prepared.path, prepared)

    def on_search_failed(self, message: SearchFailed) -> None:
        """Say why the search could not run."""
        if message.seq < self._seq:
            return
        self.query_one(ResultsSummary).message(message.error, "error")
        if message.keep and self.results is not None:
            return
        self.query_one(ResultsList).clear()
        self.query_one(CorrectionLine).show(None)
        self.results = None
        self.shown_query = ""
        self._show_selected()

    # -- selection ------------------------------------------------------------------------
    @on(OptionList.OptionHighlighted, "#results")
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if not self._context_pending:  # a pending update shows the highlighted result anyway
            self._show_selected()

    @property
    def _context_pending(self) -> bool:
        """A deferred panes update is on its way (one that has not come within a second, say while
        another screen was on top, no longer holds highlight moves back)."""
        return time.monotonic() - self._context_pending_since < 1.0

    def _show_selected_later(self) -> None:
        """Show the selected result in the panes once the new list is on screen, in a frame of its own.

        Drawing the new list and the context of its first result in one frame took 20-40 ms at
        120x40; apart, each frame is short and a key typed meanwhile is never held up by both."""
        if self._context_pending:
            return
        self._context_pending_since = time.monotonic()

        def show() -> None:
            self._context_pending_since = 0.0
            self._show_selected()

        self.call_after_refresh(self.set_timer, CONTEXT_AFTER_LIST_S, show)

    @on(OptionList.OptionSelected, "#results")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        """Enter or click on a result: open the note at its best shard."""
        res = self.selected
        if res is not None:
            cursor = res.context_shards[0].cursor if res.context_shards else None
            self.post_message(OpenNote(res.document_path, cursor))

    @property
    def selected(self) -> SearchResult | None:
        """The highlighted result."""
        return self.query_one(ResultsList).selected

    def _show_selected(self) -> None:
        res = self.selected
        index = self.explorer.index
        prepared = self._prepared.get(res.document_path) if res is not None else None
        self.query_one(ContextPane).show(index, res, self.words, self.phrases, prepared)
        why_visible = self.query_one(TabbedContent).active == "tab-why"
        why = self.query_one(WhyPane)
        why.pipeline = self.explorer.pipeline
        why.show(index, self.results, res, visible=why_visible)
        # The footer recomposes on every bindings refresh: only when the greyed actions change.
        if (res is not None) != self._had_selection:
            self._had_selection = res is not None
            self.refresh_bindings()

    @on(TabbedContent.TabActivated, "#detail")
    def _tab_activated(self, event: TabbedContent.TabActivated) -> None:
        """The why pane is drawn only while it is on screen: catch up when its tab opens; the
        context pane, updated while hidden, brings its match into view."""
        if event.pane.id == "tab-why":
            self.query_one(WhyPane).render_pending()
        elif event.pane.id == "tab-context":
            self.query_one(ContextPane).keep_match_in_view()

    # -- actions ------------------------------------------------------------------------
    def action_focus_search(self) -> None:
        """Back to the search box, its query selected: typing starts a new one (up brings it back)."""
        self.focus_search()

    def focus_search(self, typed: str = "") -> None:
        """Focus the search box with its query selected, or replaced by `typed` when given."""
        self.set_focus(self.query_one(SearchBox).begin(typed))

    def type_into_search(self, text: str) -> None:
        """Type `text` into the search box as its keys would (a selection is replaced)."""
        self.query_one(SearchBox).type_text(text)

    def on_key(self, event: events.Key) -> None:
        """Printable keys are text: from any non-text widget they type into the search box (or the tree filter)."""
        focused = self.focused
        if isinstance(focused, Input) and event.is_printable and event.character:
            # An Input stops the printable keys it types, so this one was sent to the widget that had
            # focus before the first key of a burst moved it here: it belongs to the same text.
            target: Input = focused
        elif not keys.is_text_key(event, focused):
            return
        else:
            tree = self.query_one(VaultTree)
            in_tree = focused is not None and tree in focused.ancestors
            target = tree.filter_box if in_tree else self.query_one(SearchBox)
        event.stop()
        event.prevent_default()
        target.cursor_position = len(target.value)
        target.insert_text_at_cursor(event.character or "")
        if self.focused is not target:
            self.set_focus(target)

    def action_as_typed(self) -> None:
        """ctrl+r, or a click on the word in the correction line: search the query's words as typed
        (no typo correction); again: correct them again."""
        query = self.query_text
        if not query:
            return
        self.as_typed = "" if self.as_typed == query else query
        self.run_search(query)

    def action_toggle_tree(self) -> None:
        """Show or hide the vault tree."""
        tree = self.query_one(VaultTree)
        tree.display = not tree.display
        self._tree_choice = tree.display
        if tree.display:
            tree.fill()
            tree.query_one("#vault-tree").focus()

    def action_show_tab(self, tab: str) -> None:
        """Switch the detail pane to a tab."""
        self.query_one(TabbedContent).active = tab

    def action_why_not(self) -> None:
        """Open the why-ranked tab and focus its “Why not?” box, offering a note marked relevant
        for this query that the results lack."""
        self.query_one(TabbedContent).active = "tab-why"
        box = self.query_one("#why-not", Input)
        index = self.explorer.index
        missing = missing_marked(index, self.query_text, self.results) if index and self.query_text else []
        if missing and not box.value:
            box.value = missing[0]
            self.notify(f"{len(missing)} note(s) you marked relevant for this query are not in the results")
        box.focus()
        # The tab switch lays the pane out after this call: bring the box into view then (80x24 hid it).
        self.call_after_refresh(box.scroll_visible, animate=False)

    def action_mark(self, mark: str) -> None:
        """F8 / F9: mark the selected result relevant / not relevant for the current query."""
        res, index = self.selected, self.explorer.index
        if res is None or index is None or not self.query_text:
            self.notify("Select a result of a search to mark it.", severity="warning")
            return
        said, severity = save_mark(index, self.query_text, res, mark)
        self.notify(said, severity=severity)  # type: ignore[arg-type]

    def action_widen(self, step: int) -> None:
        """Widen (1) or narrow (-1) the context window."""
        self.query_one(TabbedContent).active = "tab-context"
        self.query_one(ContextPane).widen(step)

    def action_match(self, step: int) -> None:
        """Step to the next (1) or previous (-1) match in the note."""
        self.query_one(TabbedContent).active = "tab-context"
        self.query_one(ContextPane).step_match(step)

    def action_shard(self, step: int) -> None:
        """Step to the next (1) or previous (-1) shard of the result."""
        self.query_one(TabbedContent).active = "tab-context"
        self.query_one(ContextPane).step_shard(step)

    def action_copy_node_id(self) -> None:
        """Copy the node_id under the context cursor to the clipboard."""
        node_id = self.query_one(ContextPane).node_id or (self.selected.node_id if self.selected else "")
        if node_id:
            self.app.copy_to_clipboard(node_id)
            self.notify(node_id, title="Copied node_id", timeout=3)

    def _target(self) -> tuple[str, int | None, str] | None:
        """(path, cursor, node_id) of the context cursor, else of the selected result; None when nothing is selected."""
        return self.query_one(ContextPane).target(self.selected)

    def action_copy_link(self) -> None:
        """Copy the node_id under the context cursor as an Obsidian [[link]]."""
        target, index = self._target(), self.explorer.index
        if target is not None:
            shard = index.shard(target[2]) if index is not None else None
            launch.copy_link(
                self.explorer, target[2], shard.heading_path[-1] if shard and shard.heading_path else None
            )

    def action_open_obsidian(self) -> None:
        """Open the selected note in Obsidian (obsidian://open)."""
        target = self._target()
        if target is not None:
            launch.open_in_obsidian(self.explorer, target[0])

    def action_open_editor(self) -> None:
        """Open the selected note in $EDITOR at the context cursor's line; the app steps aside until it exits."""
        target = self._target()
        if target is not None:
            launch.open_in_editor(self.explorer, target[0], target[1])

    def action_open_at_cursor(self) -> None:
        """Open the whole note at the context cursor."""
        target = self._target()
        if target is not None:
            self.post_message(OpenNote(target[0], target[1]))

    def action_edit(self) -> None:
        """Open the selected note in writing mode."""
        target = self._target()
        if target is not None:
            self.post_message(EditNote(target[0], target[1]))
        else:
            self.notify("Select a result (or a note in the tree, F2) to write in.", timeout=3)

    def check_action(self, action: str, parameters: tuple[Any, ...]) -> bool | None:
        """Result-bound actions are disabled (greyed) while nothing is selected."""
        if action in RESULT_ACTIONS:
            return True if self.selected is not None else None
        return True
