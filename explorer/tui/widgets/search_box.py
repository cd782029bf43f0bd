"""The search box: an Input with query history (up/down) and a search-mode toggle shown in its border."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message
from textual.reactive import reactive

from explorer.tui import keys
from explorer.tui.safe import SafeInput
from explorer.tui.text import MODE_CYCLE, split_mode

MODE_LABELS = {
    "": "search",
    "phrase": "phrase",
    "and": "AND",
    "fuzzy": "fuzzy",
    "tfidf": "TF-IDF",
}


class SearchBox(SafeInput):
    """Where queries are typed. Up/down walk the history; ctrl+t cycles the search mode.

    A `/phrase `, `/and `, `/fuzzy ` or `/tfidf ` prefix picks a classic tool for one query.
    """

    DEFAULT_CSS = """
    SearchBox {
        border: tall $border-blurred;
        border-title-color: $text-muted;
    }
    SearchBox:focus {
        border: tall $border;
        border-title-color: $text-accent;
    }
    """

    BINDINGS = keys.SEARCH_BOX

    mode: reactive[str] = reactive("")
    """The search mode when no prefix is typed: '' (hybrid) or a classic tool."""

    @dataclass
    class ModeChanged(Message):
        """The mode toggle moved. Handler: `on_search_box_mode_changed`."""

        search_box: SearchBox
        """The search box."""
        mode: str
        """The new mode ('' is the hybrid pipeline)."""

        @property
        def control(self) -> SearchBox:
            """The search box."""
            return self.search_box

    @dataclass
    class LeaveDown(Message):
        """Down was pressed past the newest history entry. Handler: `on_search_box_leave_down`."""

        search_box: SearchBox
        """The search box."""

    def __init__(self, history: list[str] | None = None, **kwargs) -> None:
        super().__init__(
            placeholder='Search the vault…  (/phrase /and /fuzzy /tfidf · tag: path: "…")',
            select_on_focus=False,
            **kwargs,
        )
        self.history: list[str] = list(history or [])
        self._history_pos: int | None = None
        self._draft = ""
        self._model = ""

    def on_mount(self) -> None:
        """Show the mode in the border; follow the model's state (the pipeline is hybrid only with it)."""
        self._show_mode()
        if hasattr(self.app, "status"):
            self.watch(self.app, "status", self._status_changed, init=True)

    def _status_changed(self, status: object) -> None:
        model = getattr(status, "model", "")
        if model != self._model:
            self._model = model
            self._show_mode()

    def remember(self, query: str) -> None:
        """Add a submitted query to the history."""
        query = query.strip()
        if not query:
            return
        self.history = [q for q in self.history if q != query] + [query]
        self._history_pos = None

    def remember_draft(self) -> None:
        """Keep the current text in the (session) history before it may be replaced."""
        if self.value.strip() and (not self.history or self.history[-1] != self.value.strip()):
            self.remember(self.value)

    def begin(self, typed: str = "") -> SearchBox:
        """Start a new query: the current one selected (typing replaces it), or replaced by `typed`;
        the draft is kept in the history. Returns the box, to focus."""
        self.remember_draft()
        if typed:
            self.value = typed
            self.cursor_position = len(self.value)
        else:
            self.select_all()
        return self

    def type_text(self, text: str) -> None:
        """Type `text` as its keys would (a selection is replaced)."""
        selection = self.selection
        if selection.is_empty:
            self.insert_text_at_cursor(text)
        else:
            self.replace(text, *selection)

    def action_history(self, step: int) -> None:
        """Walk the query history: -1 older, +1 newer (past the newest: back to the draft, then down)."""
        if not self.history:
            if step > 0:
                self.post_message(self.LeaveDown(self))
            return
        if self._history_pos is None:
            if step > 0:
                self.post_message(self.LeaveDown(self))
                return
            self._draft = self.value
            self._history_pos = len(self.history) - 1
        else:
            pos = self._history_pos + step
            if pos < 0:
                pos = 0
            if pos >= len(self.history):
                self._history_pos = None
                self.value = self._draft
                self.cursor_position = len(self.value)
                return
            self._history_pos = pos
        self.value = self.history[self._history_pos]
        self.cursor_position = len(self.value)

    def action_cycle_mode(self) -> None:
        """Next search mode: hybrid → phrase → AND → fuzzy → TF-IDF → hybrid."""
        i = MODE_CYCLE.index(self.mode) if self.mode in MODE_CYCLE else 0
        self.mode = MODE_CYCLE[(i + 1) % len(MODE_CYCLE)]

    def watch_mode(self, mode: str) -> None:
        """Tell the screen and update the border."""
        self._show_mode()
        self.post_message(self.ModeChanged(self, mode))

    def _watch_value(self, value: str) -> None:
        super()._watch_value(value)
        self._show_mode()

    def effective_mode(self) -> str:
        """The mode the current text searches in (a prefix wins over the toggle)."""
        return split_mode(self.value, self.mode)[0]

    def _show_mode(self) -> None:
        mode = self.effective_mode()
        label = pipeline_label(self._model) if not mode else MODE_LABELS.get(mode, mode)
        self.border_title = f"Search · {label}"


def pipeline_label(model: str) -> str:
    """What the search pipeline is, truthfully, for an embedding model state (StatusInfo.model)."""
    if model in ("ready", "embedding", "waiting"):
        return "hybrid"
    return {
        "off": "lexical (embeddings off)",
        "unavailable": "lexical (no embedding model)",
        "loading": "lexical until the model loads",
        "not loaded": "lexical until the model loads",
    }.get(model, "lexical")
