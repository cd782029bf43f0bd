"""The note view: rendered Markdown with wikilink navigation, backlinks and tags, back/forward history."""

from __future__ import annotations

import asyncio
import gc
import re
import time
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, cast

from textual import events, on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Markdown, OptionList, Static
from textual.widgets.markdown import MarkdownBlock
from textual.widgets.option_list import Option

from explorer.index.pinned import PinnedNames
from explorer.index.transclusion import embeds_in
from explorer.tui import keys, launch
from explorer.tui.host import Host
from explorer.tui.messages import BackToSearch, EditNote, VaultChanged
from explorer.tui.safe import plain, safe_content, screen_text
from explorer.tui.text import NoteSource, line_of, note_source, parse_wikilink_href, property_rows
from explorer.tui.widgets.fit_table import FitTable
from explorer.tui.widgets.footer import KeyFooter
from explorer.tui.widgets.long_text import LongText
from explorer.tui.widgets.pinned_scroll import PinnedScroll
from explorer.tui.widgets.status_bar import StatusBar
from explorer.vault.model import Note, display_title
from explorer.vault.parse import markdown_link_target
from explorer.vault.pdf import is_pdf
from explorer.vault.shard import link_heading

if TYPE_CHECKING:
    from explorer.index.backend import IndexBackend

#: Notes longer than this (characters) open in a plain text view: rendering Markdown costs
#: about 40 ms per KB, the plain view (`LongText`) draws only the rows on screen.
PLAIN_VIEW_CHARS = 64_000

#: A long Markdown note shows a screenful first: its lines up to the first blank line (outside code
#: fences) once they fill the view's rows, FIRST_SCREEN_CHARS at most. Textual's Markdown widget
#: mounts a widget per block, so the first frame costs what that part holds, whatever the note's size
#: (BENCHMARKS.md#note-opening). The rest is appended after that frame, REST_CHUNK_CHARS at a time, each
#: part a frame of its own, so keys typed meanwhile are answered between them.
FIRST_SCREEN_CHARS = 4_000
REST_CHUNK_CHARS = 4_000

#: A place further than this (characters) below the note's body start opens deep: the first frame
#: holds the part around the place only, from the start of its block (`_start_cut`) to a screenful
#: past it, and the part above goes in above it after that frame, the place kept where it is on
#: screen (`PinnedScroll`). Nearer the top the first frame holds the note from its start.
DEEP_OPEN_CHARS = FIRST_SCREEN_CHARS

_LIST_ITEM = re.compile(r"(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")


@dataclass(frozen=True, slots=True)
class Place:
    """A stop in the note view's history."""

    path: str
    """The note."""
    cursor: int | None = None
    """Where to scroll (None: the top)."""
    heading: str = ""
    """A heading to scroll to, from a `[[note#heading]]` link."""


@dataclass(frozen=True, slots=True)
class SidePanel:
    """What the side panel lists for a note, read off the UI thread: (path, title) pairs."""

    backlinks: tuple[tuple[str, str], ...]
    """Notes that link here, each once."""
    links: tuple[tuple[str, str], ...]
    """Notes this one links to, each once (not itself, not dangling links)."""


def _heading_key(text: str) -> str:
    """A heading as links name it (Obsidian's link form, case-folded): `[[Note#C tips]]` finds `## C# tips`."""
    return link_heading(text).casefold()


def _cuts(text: str, start: int, chars: int, rows: int = 0, width: int = 0, first: bool = True) -> list[int]:
    """Where to split `text` after `start` into parts: each ends past a blank line outside code fences
    (fences counted from the top) once it holds about `chars` characters or, with `rows`, fills about
    `rows` rows `width` columns wide (whichever comes first). Only the first cut with `first`.

    Reads the text up to the last cut it returns (a note's first screen reads its first part only).
    """
    cuts: list[int] = []
    pos = 0
    fence = False
    part_start, filled = start, 0
    n = len(text)
    while pos < n:
        nl = text.find("\n", pos)
        nxt = n if nl < 0 else nl + 1
        line = text[pos:nxt]
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fence = not fence
        if nxt > start:
            if rows:
                filled += len(line) // max(width, 1) + 1
            full = nxt - part_start >= chars or (rows and filled >= rows)
            if full and not fence and not stripped:
                if nxt < n:
                    cuts.append(nxt)
                if first:
                    return cuts
                part_start, filled = nxt, 0
        pos = nxt
    return cuts


def _rows(text: str, width: int) -> int:
    """About how many rows `text` fills `width` columns wide (as `_cuts` counts them)."""
    return sum(len(line) // max(width, 1) + 1 for line in text.split("\n"))


def _start_cut(text: str, start: int, pos: int, rows: int = 0, width: int = 0) -> int:
    """Where a part that shows `pos` can start: the last line start at or before `pos` (past `start`,
    the body's start) that a parse of the text from there reads as a parse of the whole text does,
    with `rows`, the last one at least about `rows` rows (`width` columns wide) above `pos`; `start`
    when there is none.

    Such a line follows a blank line outside code fences (counted from `start`), is not indented (an
    indented line continues a list item or is code), and is no list item right after a list (a loose
    list stays one list). Reads the text up to `pos` only.
    """
    found: list[tuple[int, int]] = []  # (cut, rows above it)
    fence = blank = in_list = False
    pos_rows = 0
    at = start
    while at <= pos and at < len(text):
        nl = text.find("\n", at)
        nxt = len(text) if nl < 0 else nl + 1
        line = text[at:nxt]
        stripped = line.strip()
        if (
            stripped
            and blank
            and not fence
            and at > start
            and not line[0].isspace()
            and not (in_list and _LIST_ITEM.match(line))
        ):
            found.append((at, pos_rows))
        if at == pos:
            break
        if not stripped:
            blank = True
        else:
            if not fence:
                item = bool(_LIST_ITEM.match(line))
                in_list = item or (in_list and (line[0].isspace() or not blank))
            if stripped.startswith(("```", "~~~")):
                fence = not fence
            blank = False
        pos_rows += len(line) // max(width, 1) + 1
        at = nxt
    for cut, above in reversed(found):
        if pos_rows - above >= rows:
            return cut
    return start


def _line_start(text: str, line: int) -> int:
    """Where the raw line `line` (0-based) of `text` starts (the end of the text past its last line)."""
    pos = 0
    for _ in range(line):
        nl = text.find("\n", pos)
        if nl < 0:
            return len(text)
        pos = nl + 1
    return pos


def _rendered_part(
    index: IndexBackend, note: Note, start: int, end: int | None, pinned: PinnedNames | None = None
) -> NoteSource:
    """The part `[start, end)` of the note as the view's Markdown, its embeds expanded
    (`explorer.index.transclusion`), names resolved in a snapshot (`PinnedNames`)."""
    if pinned is None:
        with index.snapshot() as snap:
            return _rendered_part(index, note, start, end, PinnedNames(index, snap, note))
    return note_source(note, embeds_in(pinned, note.path, start, end), pinned.note, start, end)


def _rest(
    index: IndexBackend, note: Note, cut: int, start: int = 0
) -> tuple[list[NoteSource], list[NoteSource], SidePanel]:
    """In a worker thread, after the first frame: the part of the note above `start` and its rest from
    `cut`, each as parts of about REST_CHUNK_CHARS (their embeds expanded), and the side panel, read
    from one snapshot."""
    with index.snapshot() as snap:
        pinned = PinnedNames(index, snap, note)
        text = note.text

        def parts(a: int, b: int) -> list[NoteSource]:
            if a >= b:
                return []
            bounds = [a, *(c for c in _cuts(text, a, REST_CHUNK_CHARS, first=False) if c < b), b]
            has_embeds = any(link.embed and a <= link.start < b for link in note.links)
            return [
                _rendered_part(index, note, x, y, pinned) if has_embeds else note_source(note, (), None, x, y)
                for x, y in pairwise(bounds)
            ]

        return parts(0, start), parts(cut, len(text)), _side_panel(pinned, note)


def _side_panel(pinned: PinnedNames, note: Note) -> SidePanel:
    """Backlinks and links of `note`, with their titles."""
    graph = pinned.links()

    def title(path: str) -> str:
        found = pinned.note(path)
        return display_title(found) if found is not None else path

    backlinks = dict.fromkeys(b.source for b in graph.backlinks(note.path))
    links = dict.fromkeys(
        target for _link, target in graph.outgoing(note.path) if target is not None and target != note.path
    )
    return SidePanel(tuple((p, title(p)) for p in backlinks), tuple((p, title(p)) for p in links))


def _side_of(index: IndexBackend, note: Note) -> SidePanel:
    """The side panel of `note` from a fresh snapshot (a worker thread's)."""
    with index.snapshot() as snap:
        return _side_panel(PinnedNames(index, snap, note), note)


def _link_target(index: IndexBackend, target: str, here: str, markdown: bool) -> Note | None:
    """The note a clicked link names (a worker thread's: names resolve in a snapshot)."""
    with index.snapshot() as snap:
        pinned = PinnedNames(index, snap)
        path = pinned.links().resolve(target, here, markdown) if target else here
        return pinned.note(path) if path is not None else None


def place_line(note: Note, place: Place) -> int:
    """The raw line of `place` (its cursor or heading; 0 for the top)."""
    if place.heading:
        wanted = _heading_key(place.heading.split("#")[-1])
        for h in note.headings:
            if _heading_key(h.text) == wanted:
                return line_of(note.text, h.start)
        for block in note.blocks:  # a PDF's `#page=N`
            if block.id == place.heading.strip():
                return line_of(note.text, block.start)
    if place.cursor is not None:
        return line_of(note.text, place.cursor)
    return 0


def show_tags(view: Static, note: Note) -> None:
    """The note's tags in the side panel's tag line."""
    tags = note.tag_names
    view.update(
        Content.assemble(
            ("Tags ", "bold"), plain("  ".join(f"#{t}" for t in tags) if tags else "none", "$text-accent")
        )
    )


def show_properties(props: FitTable, note: Note) -> None:
    """The frontmatter as a properties table (hidden when the note has none)."""
    props.clear()
    for key, value in property_rows(note.frontmatter):
        props.add_row(key, value)
    props.display = props.row_count > 0


def fill_side(backlinks: OptionList, links: OptionList, side: SidePanel) -> list[str]:
    """The side panel: the note's backlinks and links (made off the UI thread); the paths linked to."""
    backlinks.clear_options()
    for path, name in side.backlinks:
        label = safe_content(Content.assemble((name, "bold"), "\n", (path, "$text-muted")))
        backlinks.add_option(Option(label, id=f"bl:{path}"))
    backlinks.border_title = f"Backlinks ({len(side.backlinks)})"
    links.clear_options()
    for path, name in side.links:
        links.add_option(
            Option(safe_content(Content.assemble((name, ""), "\n", (path, "$text-muted"))), id=f"ln:{path}")
        )
    links.border_title = f"Links ({len(side.links)})"
    return [path for path, _name in side.links]


def blocks_at(views: list[tuple[Markdown, int]], line: int) -> list[MarkdownBlock]:
    """The rendered blocks holding the line `line` of the shown source, innermost first (`views`: each
    Markdown view with the line where its source starts)."""
    hits = [
        (b, a + offset, z + offset)
        for md, offset in views
        for b in md.query(MarkdownBlock)
        for a, z in (b.source_range,)
        if a + offset <= line < max(z, a + 1) + offset
    ]
    return [b for b, a, z in sorted(hits, key=lambda h: h[2] - h[1])]


def block_for(views: list[tuple[Markdown, int]], line: int) -> MarkdownBlock | None:
    """The innermost block holding the line `line`, else the last top-level block before it."""
    blocks = blocks_at(views, line)
    if not blocks:
        before = [
            b
            for md, offset in views
            for b in md.query(MarkdownBlock)
            if b.source_range[0] + offset <= line and b.parent is md
        ]
        blocks = before[-1:]
    return blocks[0] if blocks else None


def note_title(note: Note, nav: str = "", flag: str = "") -> Content:
    """The title line: title, path, source type, the place in the history (`nav`) and a `flag`."""
    return safe_content(
        Content.assemble(
            (display_title(note), "bold"),
            "  ",
            (note.path, "$text-muted"),
            f"  · {note.source_type}",
            (nav, "$text-muted"),
            (f"  · {flag}" if flag else "", "$text-warning"),
        )
    )


class NoteScreen(Screen):
    """One note at a time; links and backlinks navigate; alt+←/alt+→ walk the history.

    The view changes nothing: printable keys leave it for the search box, as Escape does.
    """

    BINDINGS = keys.NOTE

    def __init__(self, place: Place, **kwargs) -> None:
        super().__init__(**kwargs)
        self.history: list[Place] = [place]
        self.position = 0
        self.links_shown: list[str] = []
        self.view = "markdown"
        """How the current note is shown: `markdown`, `partial` (the rest is coming) or `plain` (a large note)."""
        self.shown_at = 0.0
        """When the last `show_place` started (`time.perf_counter()`)."""
        self.first_screen_s: float | None = None
        """Seconds from the start of the last `show_place` to its first frame with the note on screen."""
        self.first_screen_source: str | None = None
        """The Markdown view's source in that first frame (the rest of a long note is appended after it)."""
        self._leaving = False
        self._gc_paused = False
        """`show_place` turned the garbage collector off until its first frame is drawn."""
        self._showing = 0
        """Counts `show_place` calls: work of an earlier one stops when a later one started."""
        self._source = NoteSource("")
        """The Markdown shown and where the raw lines went (embed boxes push lines down): the part above
        the place's part once it is in (`#note-above`), then the Markdown view's (`#note-md`)."""
        self._md_line = 0
        """The line of `_source` where the Markdown view's source starts (past the part above)."""
        self._place_block: MarkdownBlock | None = None
        """The block the view scrolled to for the place shown (scrolled to again after the first frame
        if the view was not laid out yet)."""

    @property
    def explorer(self) -> Host:
        """The app, as screens see it."""
        return cast(Host, self.app)

    @property
    def place(self) -> Place:
        """Where the view is."""
        return self.history[self.position]

    def compose(self) -> ComposeResult:
        """Title line, then Markdown | side panel (tags, backlinks, links)."""
        yield Static(id="note-title")
        with Horizontal(id="note-body"):
            with PinnedScroll(id="note-scroll"):
                yield FitTable(("property", "value"), ratios=(None, 1), id="note-props")
                # The part above the place of a note opened deep (shown once it is in).
                yield Markdown(open_links=False, id="note-above")
                yield Markdown(open_links=False, id="note-md")
            yield LongText(id="note-plain")
            with Vertical(id="note-side"):
                yield Static(id="note-tags")
                yield OptionList(id="note-backlinks")
                yield OptionList(id="note-links")
        yield StatusBar()
        yield KeyFooter()

    async def on_mount(self) -> None:
        """Show the first place."""
        self.query_one("#note-props").border_title = "Properties"
        self.query_one("#note-backlinks", OptionList).border_title = "Backlinks"
        self.query_one("#note-links", OptionList).border_title = "Links"
        self.query_one("#note-scroll").focus()
        await self.show_place(self.place)

    def open(self, place: Place) -> None:
        """Show `place` with a history of its own: the screen opened again, for another note. Called
        before the screen is shown again: nothing of the last note is left to draw (its views were
        emptied when it closed, the side panel and the title line are emptied here)."""
        self.history = [place]
        self.position = 0
        self._leaving = False
        self.links_shown = []
        self.first_screen_s = self.first_screen_source = None
        self.query_one("#note-title", Static).update(plain(place.path, "$text-muted"))
        self.query_one("#note-tags", Static).update("")
        self.query_one("#note-props").display = False
        for name, label in (("#note-backlinks", "Backlinks"), ("#note-links", "Links")):
            side = self.query_one(name, OptionList)
            side.clear_options()
            side.border_title = label
        self.query_one("#note-scroll").focus()  # the view shown takes it from there (`_use_plain`)
        self.run_worker(self.show_place(place), exclusive=True, group="note-nav", exit_on_error=False)

    def on_screen_suspend(self) -> None:
        """Closed (not merely covered by the help or the writer): stop the note's work and let its
        blocks go now, while the search screen is shown, so the next open has nothing to remove. (A view
        that is not kept for later opens goes as a whole.)"""
        if self in self.app.screen_stack or not self.app.is_screen_installed(self):
            return
        self._showing += 1
        self.workers.cancel_node(self)
        self.run_worker(self._clear(self._showing), group="note-clear", exit_on_error=False)

    async def _clear(self, showing: int) -> None:
        """Empty the views of a closed note view (unless it was opened again meanwhile)."""
        if showing == self._showing:
            self.query_one("#note-plain", LongText).set_text("")
            await self._clear_above()
            await self.query_one("#note-md", Markdown).update("")

    async def _clear_above(self) -> None:
        """Empty and hide the part above the place (of a note opened deep), and let go of the place."""
        self.query_one("#note-scroll", PinnedScroll).unpin()
        self._md_line = 0
        above = self.query_one("#note-above", Markdown)
        if above.display or above.source or above.children:
            above.display = False
            await above.update("")

    # -- navigation ---------------------------------------------------------------------
    async def go(self, place: Place) -> None:
        """Visit `place`, dropping any forward history."""
        del self.history[self.position + 1 :]
        self.history.append(place)
        self.position = len(self.history) - 1
        await self.show_place(place)

    async def action_back(self) -> None:
        """Previous note in the history."""
        if self.position > 0:
            self.position -= 1
            await self.show_place(self.place)

    async def action_forward(self) -> None:
        """Next note in the history."""
        if self.position < len(self.history) - 1:
            self.position += 1
            await self.show_place(self.place)

    def action_close(self) -> None:
        """Back to the search box."""
        self._leaving = True
        self.post_message(BackToSearch())

    def on_key(self, event: events.Key) -> None:
        """A printable key is the start of a new search: back to the search box with it.

        Keys that still reach this screen while it closes (a busy machine) type on in the search
        box instead of each starting the query anew.
        """
        if keys.is_text_key(event, self.focused):
            event.stop()
            event.prevent_default()
            self.post_message(BackToSearch(event.character or "", more=self._leaving))
            self._leaving = True

    def on_vault_changed(self, message: VaultChanged) -> None:
        """The shown note changed on disk: show it again as it is now."""
        if self.place.path in message.paths:
            self.run_worker(
                self.show_place(self.place), exclusive=True, group="note-nav", exit_on_error=False
            )

    def action_edit(self) -> None:
        """Write in this note."""
        self.post_message(EditNote(self.place.path, self.place.cursor))

    def action_copy_path(self) -> None:
        """Copy the note's path."""
        self.app.copy_to_clipboard(self.place.path)
        self.notify(self.place.path, title="Copied path", timeout=3)

    def _cursor(self) -> int | None:
        """Where the view points in the note: its cursor, else the heading it was opened at."""
        place = self.place
        if place.cursor is not None:
            return place.cursor
        index = self.explorer.index
        note = index.note(place.path) if index is not None and place.heading else None
        if note is not None:
            want = _heading_key(place.heading)
            for h in note.headings:
                if _heading_key(h.text) == want:
                    return h.start
        return None

    def action_copy_link(self) -> None:
        """Copy the shown passage's node_id (the note's path at its top) as an Obsidian [[link]]."""
        index, cursor = self.explorer.index, self._cursor()
        shard = index.shard_at(self.place.path, cursor) if index is not None and cursor else None
        if shard is not None:
            launch.copy_link(
                self.explorer, shard.node_id, shard.heading_path[-1] if shard.heading_path else None
            )
        else:
            launch.copy_link(self.explorer, self.place.path)

    def action_open_obsidian(self) -> None:
        """Open this note in Obsidian (obsidian://open)."""
        launch.open_in_obsidian(self.explorer, self.place.path)

    def action_open_editor(self) -> None:
        """Open this note in $EDITOR at the shown passage's line; the app steps aside until it exits."""
        launch.open_in_editor(self.explorer, self.place.path, self._cursor())

    async def show_place(self, place: Place) -> None:
        """Render the note of `place` and scroll to its cursor or heading.

        A note over PLAIN_VIEW_CHARS, and a PDF's text, open in a plain text view (said in the title line); a
        longer Markdown note shows the part around the place first and the rest after that frame (the
        title says "rendering…" meanwhile): from its start up to a screenful past the place (its top,
        cursor or heading), or for a place more than DEEP_OPEN_CHARS down, from the start of the place's
        block (`_start_cut`) only, the part above going in above it after the frame while the place
        stays where it is on screen. Nothing before the first frame renders more of the note than that
        first part: the rest, the embeds outside it and the side panel are made in a worker thread from
        a snapshot of the index, after the frame.
        """
        started = self.shown_at = time.perf_counter()
        if gc.isenabled():
            # A full collection walks every unfrozen object (the closed note's blocks too: 0.1-1 s);
            # none runs before this first frame, the one that is due runs after it.
            gc.disable()
            self._gc_paused = True
        try:
            await self._show_place(place, started)
        finally:
            if not self.call_after_refresh(self._resume_gc):
                self._resume_gc()

    def _resume_gc(self) -> None:
        """Turn the garbage collector back on if `show_place` turned it off (also when the view goes
        before its frame is drawn: `on_unmount`)."""
        if self._gc_paused:
            self._gc_paused = False
            gc.enable()

    def on_unmount(self) -> None:
        """The app is closing (or the view goes): the collector is never left off."""
        self._resume_gc()

    async def _show_place(self, place: Place, started: float) -> None:
        """`show_place` without garbage collection (`started`: when it was asked for)."""
        self.first_screen_s = self.first_screen_source = None
        self._showing += 1
        self._place_block = None
        showing = self._showing
        index = self.explorer.index
        note = index.note(place.path) if index is not None else None
        title = self.query_one("#note-title", Static)
        md = self.query_one("#note-md", Markdown)
        plain_view = self.query_one("#note-plain", LongText)
        await self._clear_above()
        if showing != self._showing:
            return  # another place was asked for meanwhile
        if note is None:
            title.update(Content.assemble(("Not in the index: ", "bold $text-error"), plain(place.path)))
            self._use_plain(False)
            self.query_one("#note-props").display = False
            await md.update("")
            self._first_frame(started)
            return
        text = note.text
        if len(text) > PLAIN_VIEW_CHARS or is_pdf(note.path):
            self.view = "plain"
            self._title(
                note,
                "text of the PDF, page by page"
                if is_pdf(note.path)
                else f"plain view: {len(text) // 1000} KB is too long to render as Markdown",
            )
            self._use_plain(True)
            line = place_line(note, place)
            plain_view.set_text(
                screen_text(text), mark=line if place.cursor is not None or place.heading else None
            )
            plain_view.scroll_to_line(line - 1)
            show_tags(self.query_one("#note-tags", Static), note)
            self._first_frame(started)
            self._complete(note, showing, len(text))
            return
        self._use_plain(False)
        show_properties(self.query_one("#note-props", FitTable), note)
        show_tags(self.query_one("#note-tags", Static), note)
        line = place_line(note, place)
        start, cut = 0, len(text)
        if len(text) > FIRST_SCREEN_CHARS // 2:
            # The first frame reads the note up to a screenful past the place (its top, or the line of
            # its cursor or heading, which the view scrolls to the top of the screen).
            width, rows = self._screen_size()
            at = max(note.body_start, _line_start(text, line))
            found = _cuts(text, at, FIRST_SCREEN_CHARS, rows, width)
            if found:
                cut = found[0]
            if at - note.body_start > DEEP_OPEN_CHARS:
                # Deep: from the start of the place's block, or earlier when the note ends within a
                # screenful past the place (the first frame is full either way).
                short = 0 if found else max(0, rows - _rows(text[at:], width))
                start = _start_cut(text, note.body_start, at, short, width)
                if start - note.body_start <= DEEP_OPEN_CHARS:
                    start = 0
        scroll = self.query_one("#note-scroll", PinnedScroll)
        if any(link.embed and start <= link.start < cut for link in note.links):
            # Embeds name other notes: they resolve in a snapshot, in a thread (not on the UI thread).
            assert index is not None  # the note was read from it
            first = await asyncio.to_thread(_rendered_part, index, note, start, cut)
            if showing != self._showing:
                return  # another place was asked for meanwhile
        else:
            first = note_source(note, (), None, start, cut)
        self._source = first
        partial = start > 0 or cut < len(text)
        self.view = "partial" if partial else "markdown"
        self._title(note, "rendering…" if partial else "")
        if start:
            # The properties go in above with the part above the place (they head the note).
            self.query_one("#note-props").display = False
            scroll.scroll_to(y=0, animate=False, immediate=True)
        await md.update(screen_text(first.text))
        self._first_frame(started)
        if start:
            # The first layout scrolls the place's block to the top, then keeps the view's place as the
            # part above comes in.
            scroll.pin(block_for(self._rendered(), self._source.line(line)) or md, top=True)
        else:
            self._scroll_to_place(note, place)
        self._complete(note, showing, cut, start)

    def _screen_size(self) -> tuple[int, int]:
        """(columns, rows) of the Markdown view; the app's size until the view is laid out."""
        size = self.query_one("#note-scroll").size
        if size.width and size.height:
            return size.width, size.height
        return self.app.size.width, self.app.size.height

    def _complete(self, note: Note, showing: int, cut: int, start: int = 0) -> None:
        """After the first frame: the part above `start`, the rest of the note from `cut` and the side
        panel."""
        self.run_worker(
            self._complete_note(note, showing, cut, start),
            group="note-rest",
            exclusive=True,
            exit_on_error=False,
        )

    async def _complete_note(self, note: Note, showing: int, cut: int, start: int = 0) -> None:
        """Make the part above, the rest and the side panel in a thread (after the first frame is drawn),
        then put the part above in above the place a part per frame (the place keeps its screen row:
        `PinnedScroll`) and append the rest a part per frame; stops when another note or place is shown
        meanwhile."""
        await self._next_frame()
        index = self.explorer.index
        if showing != self._showing or index is None:
            return
        block, self._place_block = self._place_block, None
        scroll = self.query_one("#note-scroll")
        if block is not None and block.is_attached and scroll.scroll_offset.y == 0:
            # The scroll to the place ran before the blocks were laid out (it stayed at the top): now
            # they are. Appending the rest below the place moves it no more.
            block.scroll_visible(top=True, animate=False)
        if self.view == "plain":
            side = await asyncio.to_thread(_side_of, index, note)
            if showing == self._showing:
                self._fill_side(side)
            return
        above_parts, rest, side = await asyncio.to_thread(_rest, index, note, cut, start)
        if showing != self._showing:
            return
        self._fill_side(side)
        if above_parts:
            above = self.query_one("#note-above", Markdown)
            for n, part in enumerate(above_parts):
                await self._next_frame()
                if showing != self._showing:
                    return
                if n:
                    await above.append(screen_text(part.text))
                    continue
                props = self.query_one("#note-props", FitTable)
                props.display = props.row_count > 0
                above.display = True
                await above.update(screen_text(part.text))
            self._md_line = sum(p.text.count("\n") for p in above_parts)
            self._source = NoteSource.joined([*above_parts, self._source])
        md = self.query_one("#note-md", Markdown)
        for part in rest:
            await self._next_frame()
            if showing != self._showing:
                return
            await md.append(screen_text(part.text))
        if rest:
            self._source = NoteSource.joined([self._source, *rest])
        if above_parts or rest:
            await self._next_frame()  # the last part is laid out (the place kept) before letting go
            if showing != self._showing:
                return
            self.query_one("#note-scroll", PinnedScroll).unpin()
            self.view = "markdown"
            self._title(note)

    async def _next_frame(self) -> None:
        """Wait until the screen has been drawn (keys typed meanwhile are handled first)."""
        drawn = asyncio.Event()
        self.call_after_refresh(drawn.set)
        await drawn.wait()

    def _title(self, note, flag: str = "") -> None:
        nav = f"  {self.position + 1}/{len(self.history)}" if len(self.history) > 1 else ""
        self.query_one("#note-title", Static).update(note_title(note, nav, flag))

    def _use_plain(self, on: bool) -> None:
        """Show the plain view or the Markdown one; the shown one takes the focus from the hidden one
        (so the scrolling keys scroll what is on screen)."""
        scroll, plain_view = self.query_one("#note-scroll"), self.query_one("#note-plain")
        scroll.display = not on
        plain_view.display = on
        if self.focused in (None, scroll, plain_view):
            (plain_view if on else scroll).focus()

    def _first_frame(self, started: float) -> None:
        def done() -> None:
            self.first_screen_s = time.perf_counter() - started
            self.first_screen_source = self.query_one("#note-md", Markdown).source

        self.call_after_refresh(done)

    def _scroll_to_place(self, note, place: Place) -> None:
        if place.heading:
            self._scroll_to_heading(note, place.heading)
        elif place.cursor is not None:
            self._scroll_to_line(self._source.line(line_of(note.text, place.cursor)))
        else:
            self.query_one("#note-scroll").scroll_home(animate=False)

    def _fill_side(self, side: SidePanel) -> None:
        self.links_shown = fill_side(
            self.query_one("#note-backlinks", OptionList), self.query_one("#note-links", OptionList), side
        )

    def _rendered(self) -> list[tuple[Markdown, int]]:
        """The Markdown views with the line of `_source` where each one's source starts (the part above
        the place only once it is all in)."""
        md = self.query_one("#note-md", Markdown)
        if not self._md_line:
            return [(md, 0)]
        return [(self.query_one("#note-above", Markdown), 0), (md, self._md_line)]

    def _scroll_to_line(self, line: int) -> None:
        target = block_for(self._rendered(), line)
        if target is not None:
            self._place_block = target
            self.call_after_refresh(target.scroll_visible, top=True, animate=False)

    def _scroll_to_heading(self, note, heading: str) -> None:
        wanted = _heading_key(heading.split("#")[-1])
        for h in note.headings:
            if _heading_key(h.text) == wanted:
                self._scroll_to_line(self._source.line(line_of(note.text, h.start)))
                return

    # -- links ---------------------------------------------------------------------------
    async def on_markdown_link_clicked(self, event: Markdown.LinkClicked) -> None:
        """Wikilinks and Markdown links to notes navigate in the view; web links open outside."""
        event.stop()
        parsed = parse_wikilink_href(event.href)
        markdown = False
        if parsed is None:
            if event.href.startswith(("http://", "https://")):
                self.app.open_url(event.href)
                return
            dest = markdown_link_target(event.href)
            if dest is None:
                return
            target, heading, block = dest
            parsed, markdown = (target, "^" + block if block else heading), True
        target, heading = parsed
        index = self.explorer.index
        if index is None:
            return
        note = await asyncio.to_thread(_link_target, index, target, self.place.path, markdown)
        if note is None:
            self.notify(f"No note named “{target}” (a dangling link).", severity="warning", timeout=4)
            return
        if heading.startswith("^"):
            named = next((b for b in note.blocks if b.id == heading[1:]), None)
            place = Place(note.path, named.start if named else None)
        else:
            place = Place(note.path, None, heading)
        await self.go(place)

    @on(OptionList.OptionSelected)
    async def _side_selected(self, event: OptionList.OptionSelected) -> None:
        """A backlink or link was chosen: go there."""
        option_id = event.option.id or ""
        if option_id[:3] in ("bl:", "ln:"):
            await self.go(Place(option_id[3:]))
