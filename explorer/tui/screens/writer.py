"""Writing mode: an editor on a note with a live list of related notes; saves are atomic and re-indexed."""

from __future__ import annotations

import stat
from typing import cast

from textual import events, on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import OptionList, Static, TextArea
from textual.widgets.option_list import Option
from textual.widgets.text_area import Document
from textual.worker import get_current_worker

from explorer.search.writing.suggest import (
    LinkSuggester,
    Suggestion,
    Suggestions,
    paragraph_bounds,
    plain_query,
    sentence_bounds,
)
from explorer.text.cells import cell_len, clip
from explorer.text.files import write_atomic
from explorer.text.safe import has_controls
from explorer.tui import keys
from explorer.tui.host import Host
from explorer.tui.messages import BackToSearch, OpenNote, RelatedFound
from explorer.tui.safe import plain, safe_content, screen_text
from explorer.tui.text import body_start, read_note_file
from explorer.tui.widgets.footer import KeyFooter
from explorer.tui.widgets.results import badges
from explorer.tui.widgets.status_bar import StatusBar

RELATED_K = 8
#: Quiet time after a keystroke or cursor move before the list is asked for (BENCHMARKS.md#link-suggestions).
RELATED_DELAY = 0.1
#: Quiet time after a key that ends a word (a space, a punctuation mark, a new line): the word is
#: whole, so the list is asked for sooner than in the middle of one (BENCHMARKS.md#link-suggestions).
WORD_END_DELAY = 0.05


class WriterScreen(Screen):
    """Edit one note. The side list follows the paragraph around the cursor."""

    BINDINGS = keys.WRITER

    def __init__(self, path: str, cursor: int | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.start_cursor = cursor
        self.saved_text = ""
        self.related_paths: list[str] = []
        self.paragraph = ""
        self.suggestions: list[Suggestion] = []
        """The list as shown (mentions, related, linked)."""
        self._suggester: LinkSuggester | None = None
        self._prepared: LinkSuggester | None = None
        """The suggester whose sentence vectors were prepared for this note."""
        self._asked: tuple | None = None
        self._seq = 0
        self._timer: Timer | None = None
        self._warned_dirty = False
        self.save_count = 0
        self.file_mode: int | None = None
        """The note's permission bits when it was opened (a save to a deleted path keeps them)."""
        self.load_error = ""
        """Why the note could not be read ('' when it was): then nothing is ever written."""

    @property
    def explorer(self) -> Host:
        """The app, as screens see it."""
        return cast(Host, self.app)

    @property
    def dirty(self) -> bool:
        """True when the editor holds unsaved changes."""
        return self.query_one(TextArea).text != self.saved_text

    def compose(self) -> ComposeResult:
        """Title line, then editor | related notes."""
        yield Static(id="writer-title")
        with Horizontal(id="writer-body"):
            yield TextArea(id="editor", soft_wrap=True, tab_behavior="indent")
            with Vertical(id="writer-side"):
                yield Static(
                    "Links for the paragraph you are writing: named notes first, then related ones.",
                    id="related-head",
                )
                yield OptionList(id="related")
        yield StatusBar()
        yield KeyFooter()

    def on_mount(self) -> None:
        """Load the file (as on disk) into the editor."""
        editor = self.query_one(TextArea)
        file = self.explorer.vault / self.path
        try:
            text = read_note_file(file)
            self.file_mode = stat.S_IMODE(file.stat().st_mode)
        except (OSError, UnicodeDecodeError) as exc:
            self.load_error = f"Cannot open {self.path}: {exc}"
            self.notify(f"{self.load_error} (saving is off, the file stays as it is)", severity="error")
            text = ""
            editor.read_only = True
        if has_controls(text):
            # The editor would send them to the terminal as they are; escaped, saving would change the file.
            self.load_error = f"{self.path} contains control characters (escape sequences)"
            self.notify(
                f"{self.load_error}: not opened for writing; the note view shows them escaped",
                severity="warning",
            )
            text = ""
            editor.read_only = True
        self.saved_text = text
        editor.load_text(text)
        start = self.start_cursor if self.start_cursor is not None else body_start(text)
        loc = _document(editor).get_location_from_index(min(start, len(text)))
        editor.move_cursor(loc, center=True)
        editor.focus()
        self.query_one("#related", OptionList).border_title = "Related"
        self._title()
        # Not 0: a zero-interval timer divides by zero in Textual when the event loop runs late.
        self._schedule(0.001)

    def _title(self) -> None:
        mark = ("● modified", "bold $text-warning") if self.dirty else ("saved", "$text-success")
        self.query_one("#writer-title", Static).update(
            Content.assemble(("Writing ", "bold"), plain(self.path, "$text-primary"), "  ", mark)
        )

    # -- related notes --------------------------------------------------------------------
    @on(TextArea.Changed)
    def _changed(self, event: TextArea.Changed) -> None:
        self._warned_dirty = False
        self._title()
        self._schedule(WORD_END_DELAY if _word_ended(event.text_area) else None)

    @on(TextArea.SelectionChanged)
    def _moved(self, event: TextArea.SelectionChanged) -> None:
        # A typed key moves the cursor too (after `_changed`): both follow one rule.
        self._schedule(WORD_END_DELAY if _word_ended(event.text_area) else None)

    def _schedule(self, delay: float | None = None) -> None:
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(RELATED_DELAY if delay is None else delay, self.action_related)

    def _link_suggester(self) -> LinkSuggester | None:
        """The suggester over the app's current pipeline (a new one when the pipeline changed)."""
        pipeline = self.explorer.pipeline
        if pipeline is None:
            return None
        if self._suggester is None or self._suggester.pipeline is not pipeline:
            self._suggester = LinkSuggester(pipeline)
        return self._suggester

    def action_related(self, force: bool = False) -> None:
        """Suggest links for the paragraph around the cursor: named notes first, then related ones."""
        suggester = self._link_suggester()
        if suggester is None:
            return
        editor = self.query_one(TextArea)
        text = editor.text
        index = _document(editor).get_index_from_location(editor.cursor_location)
        if self._prepared is not suggester:
            # First ask with this suggester (the note just opened, or a new pipeline): embed the
            # note's sentences ahead in the background.
            self._prepared = suggester
            self._prepare(suggester, text, index)
        start, end = paragraph_bounds(text, index)
        paragraph = plain_query(text[start:end])
        # The sentence at the cursor ranks the named notes: moving to another sentence asks again.
        key = (text[start:end], sentence_bounds(text, index, start, end))
        if not paragraph or (key == self._asked and not force):
            return
        self._asked = key
        self.paragraph = paragraph
        self._seq += 1
        self.query_one("#related-head", Static).update(Content.styled("searching…", "$text-muted"))
        self._related(self._seq, suggester, text, index, self.explorer.status.hybrid)

    @work(thread=True, exclusive=True, group="prepare", exit_on_error=False)
    def _prepare(self, suggester: LinkSuggester, text: str, cursor: int) -> None:
        """Embed the note's sentences ahead, nearest the cursor first, so the first word typed in a
        paragraph embeds only its own sentence (the list comes sooner); stops when the screen goes."""
        worker = get_current_worker()
        suggester.prepare(text, cursor, cancelled=lambda: worker.is_cancelled)

    @work(thread=True, exclusive=True, group="related", exit_on_error=False)
    def _related(self, seq: int, suggester: LinkSuggester, text: str, cursor: int, dense: bool) -> None:
        """Find the link suggestions (names in the paragraph, then one hybrid pass) in a thread."""
        from explorer.search.core.pipeline import QueryError, SearchCancelled

        worker = get_current_worker()

        def named(first: Suggestions) -> None:
            # The named notes show at once; the related search completes the list after.
            if first.items and not worker.is_cancelled:
                self.post_message(RelatedFound(seq, first.query, first))

        try:
            found = suggester.suggest(
                text,
                cursor,
                path=self.path,
                k=RELATED_K,
                dense=dense,
                cancelled=lambda: worker.is_cancelled,
                early=named,
            )
        except (SearchCancelled, QueryError):
            return
        if not worker.is_cancelled:
            self.post_message(RelatedFound(seq, found.query, found))

    def on_related_found(self, message: RelatedFound) -> None:
        """Show the suggestions: named-but-unlinked notes, related notes, notes linked already."""
        if message.seq != self._seq:
            return
        items = [s for s in message.suggestions.items if s.path != self.path][:RELATED_K]
        self.suggestions = items
        self.related_paths = [s.path for s in items]
        related = self.query_one("#related", OptionList)
        # A refreshed list keeps the note the person had moved to highlighted.
        kept = (
            related.get_option_at_index(related.highlighted).id if related.highlighted is not None else None
        )
        related.clear_options()
        # Inside the list's border, padding and scrollbar; a path longer than that loses folders, not letters.
        room = max(12, related.scrollable_content_region.width - 1)
        for s in items:
            if s.kind == "mention" and s.mention is not None:
                note = (
                    "named here" + (" (typo)" if s.mention.fuzzy else "") + ": " + clip(s.mention.typed, 30),
                    "$text-accent",
                )
            elif s.kind == "linked":
                note = ("linked", "$text-success")
            else:
                note = (
                    " · ".join([b for b, _ in badges(s.result)][:2]) if s.result is not None else "",
                    "$text-muted",
                )
            related.add_option(
                Option(
                    safe_content(
                        Content.assemble(
                            (whole_words(s.title, room), "bold"),
                            "\n",
                            (short_path(s.path, room), "$text-muted"),
                            "  ",
                            note,
                        )
                    ),
                    id=s.path,
                )
            )
        if kept in self.related_paths:
            related.highlighted = self.related_paths.index(kept)
        # The paragraph as written (the search's own text leads with the sentence at the cursor,
        # which would show a one-sentence paragraph twice).
        para = clip(self.paragraph or message.paragraph, 70)
        results = message.suggestions.results
        head = "searching…" if results is None else "hybrid" if results.mode.dense else "BM25"
        self.query_one("#related-head", Static).update(
            Content.assemble((f"Links ({head})", "bold"), "\n", plain(f"“{para}”", "$text-muted"))
        )

    def action_insert_link(self) -> None:
        """Insert the highlighted suggestion as a link: over its mention, or at the cursor (undoable)."""
        editor = self.query_one(TextArea)
        if editor.read_only or not self.suggestions:
            return
        related = self.query_one("#related", OptionList)
        pick = related.highlighted if related.highlighted is not None else 0
        if not 0 <= pick < len(self.suggestions):
            return
        s = self.suggestions[pick]
        if s.kind == "linked":
            self.notify(
                f"{screen_text(s.title)} is linked in this paragraph already.", markup=False, timeout=3
            )
            return
        if not s.link:
            self.notify(
                "This note's name holds control characters: link it by hand.", severity="warning", timeout=4
            )
            return
        doc = _document(editor)
        m = s.mention
        if m is not None and editor.text[m.start : m.end] == m.typed:
            result = editor.replace(
                s.link, doc.get_location_from_index(m.start), doc.get_location_from_index(m.end)
            )
        else:
            result = editor.insert(s.link)
        editor.move_cursor(result.end_location)
        editor.focus()

    def action_focus_related(self) -> None:
        """Move to the related list (ctrl+l again: back to the editor)."""
        related = self.query_one("#related", OptionList)
        if related.has_focus:
            self.query_one(TextArea).focus()
        else:
            related.focus()

    @on(OptionList.OptionSelected, "#related")
    def _open_related(self, event: OptionList.OptionSelected) -> None:
        if event.option.id:
            self.post_message(OpenNote(event.option.id))

    # -- saving ----------------------------------------------------------------------------
    def action_save(self) -> None:
        """Write the file atomically, then re-index it."""
        if self.load_error:
            self.notify(f"{self.load_error}: not saving over it.", severity="error", timeout=6)
            return
        text = self.query_one(TextArea).text
        self._save(text)

    @work(thread=True, group="save", exit_on_error=False)
    def _save(self, text: str) -> None:
        """Write (temp file + rename) and refresh the index for this path, off the UI thread."""
        app = self.explorer
        file = app.vault / self.path
        if not file.exists():
            self.app.call_from_thread(
                self.notify,
                f"{self.path} was deleted meanwhile: saved again with its original permissions.",
                severity="warning",
                timeout=6,
            )
        try:
            write_atomic(file, text, self.file_mode)
        except OSError as exc:
            self.app.call_from_thread(self.notify, f"Save failed: {exc}", severity="error")
            return
        self.app.call_from_thread(self._saved, text)
        app.refresh_index([self.path], wait=True)

    def _saved(self, text: str) -> None:
        self.saved_text = text
        self.save_count += 1
        self._title()
        self.notify(f"Saved {self.path}", timeout=2)

    def action_close(self) -> None:
        """Leave writing mode (a second Escape discards unsaved changes)."""
        if self.dirty and not self._warned_dirty:
            self._warned_dirty = True
            self.notify(
                "Unsaved changes: ctrl+s saves, Escape again discards them.", severity="warning", timeout=4
            )
            return
        self.post_message(BackToSearch())

    def action_document(self, direction: int, select: bool = False) -> None:
        """Cursor to the start (-1) or end (1) of the note, extending the selection with `select`."""
        editor = self.query_one(TextArea)
        editor.move_cursor((0, 0) if direction < 0 else editor.document.end, select=select)

    def on_key(self, event: events.Key) -> None:
        """Printable keys outside the editor (in the related list) type into the editor, never run a command."""
        editor = self.query_one(TextArea)
        if self.focused is not editor and keys.is_text_key(event, self.focused):
            event.stop()
            event.prevent_default()
            self.set_focus(editor)
            editor.insert(event.character or "")


def whole_words(text: str, width: int) -> str:
    """`text` with each part without spaces that is wider than `width` cells clipped with `…`
    (wrapped, it would be folded mid-word)."""
    return " ".join(clip(part, width) if cell_len(part) > width else part for part in text.split(" "))


def short_path(path: str, width: int) -> str:
    """`path` within lines of `width` cells: when a part of it without spaces is too wide, its
    folders become `…/` (the note's name kept), then such parts are clipped."""
    if all(cell_len(part) <= width for part in path.split(" ")):
        return path
    name = path.rsplit("/", 1)[-1]
    return whole_words(f"…/{name}" if name != path else name, width)


def _word_ended(editor: TextArea) -> bool:
    """True when the character before the cursor ends a word (white space or punctuation, or a line start)."""
    row, column = editor.cursor_location
    if column == 0:
        return True
    line = editor.document.get_line(row)
    before = line[column - 1 : column]
    return not before or not (before.isalnum() or before in "_'’-")


def _document(editor: TextArea) -> Document:
    """The editor's document with its offset <-> location API (a TextArea always holds a Document)."""
    return cast(Document, editor.document)
