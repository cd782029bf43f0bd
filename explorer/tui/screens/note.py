"""The note view: rendered Markdown with wikilink navigation, backlinks and tags, back/forward history."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, cast

from textual import events, on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Markdown, OptionList, Static
from textual.widgets.markdown import MarkdownBlock
from textual.widgets.option_list import Option

from explorer.index.transclusion import embeds_in
from explorer.tui import keys, launch
from explorer.tui.host import Host
from explorer.tui.messages import BackToSearch, EditNote, VaultChanged
from explorer.tui.safe import plain, safe_content, screen_text
from explorer.tui.text import NoteSource, line_of, note_source, parse_wikilink_href, property_rows
from explorer.tui.widgets.fit_table import FitTable
from explorer.tui.widgets.footer import KeyFooter
from explorer.tui.widgets.long_text import LongText
from explorer.tui.widgets.status_bar import StatusBar
from explorer.vault.model import Note
from explorer.vault.parse import markdown_link_target
from explorer.vault.pdf import is_pdf
from explorer.vault.shard import link_heading

#: Notes longer than this (characters) open in a plain text view: rendering Markdown costs
#: about 40 ms per KB, the plain view (`LongText`) draws only the rows on screen.
PLAIN_VIEW_CHARS = 64_000

#: Longer Markdown notes show about this much first (a screenful at 160 columns); the rest is
#: appended after the first frame, REST_CHUNK_CHARS at a time (each a frame of its own, so keys
#: typed meanwhile are answered between them). Textual's Markdown widget mounts a widget per block:
#: a note's first screen costs what its first part holds (BENCHMARKS.md, note view).
FIRST_SCREEN_CHARS = 4_000
REST_CHUNK_CHARS = 12_000


@dataclass(frozen=True, slots=True)
class Place:
    """A stop in the note view's history."""

    path: str
    """The note."""
    cursor: int | None = None
    """Where to scroll (None: the top)."""
    heading: str = ""
    """A heading to scroll to, from a `[[note#heading]]` link."""


def _heading_key(text: str) -> str:
    """A heading as links name it (Obsidian's link form, case-folded): `[[Note#C tips]]` finds `## C# tips`."""
    return link_heading(text).casefold()


def _first_screen_cut(source: str, chars: int = FIRST_SCREEN_CHARS, start: int = 0) -> int:
    """Where to split a long Markdown source after `start` for a part of about `chars`: a blank line
    outside code fences (fences are counted from the top)."""
    pos = 0
    fence = False
    cut = 0
    for line in source.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fence = not fence
        pos += len(line)
        if pos > start and not fence and not stripped and pos >= start + chars // 2:
            cut = pos
            if pos >= start + chars:
                break
    return cut or len(source)


def _parts(source: str, first: int) -> list[str]:
    """`source` cut after its first `first` characters, the rest in pieces of about REST_CHUNK_CHARS."""
    parts, pos = [source[:first]], first
    while pos < len(source):
        cut = _first_screen_cut(source, REST_CHUNK_CHARS, pos)
        parts.append(source[pos:cut])
        pos = cut
    return parts


def _rendered(index: Any, note: Note) -> NoteSource:
    """The note as the view's Markdown, its embeds expanded (`explorer.index.transclusion`)."""
    return note_source(note, embeds_in(index, note.path), index.note)


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
        self.first_screen_s: float | None = None
        """Seconds from the start of the last `show_place` to its first frame with the note on screen."""
        self._leaving = False
        self._showing = 0
        """Counts `show_place` calls: work of an earlier one stops when a later one started."""
        self._source = NoteSource("")
        """The Markdown shown and where the raw lines went (embed boxes push lines down)."""

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
            with VerticalScroll(id="note-scroll"):
                yield FitTable(("property", "value"), ratios=(None, 1), id="note-props")
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
        Markdown note over FIRST_SCREEN_CHARS shows its start first and the rest after that frame
        (the title says "rendering…" meanwhile), unless the place to show lies beyond the start.
        """
        started = time.perf_counter()
        self.first_screen_s = None
        self._showing += 1
        showing = self._showing
        index = self.explorer.index
        note = index.note(place.path) if index is not None else None
        title = self.query_one("#note-title", Static)
        md = self.query_one("#note-md", Markdown)
        plain_view = self.query_one("#note-plain", LongText)
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
            line = self._place_line(note, place)
            plain_view.set_text(
                screen_text(text), mark=line if place.cursor is not None or place.heading else None
            )
            plain_view.scroll_to_line(line - 1)
            self._first_frame(started)
            self.call_after_refresh(self._fill_side, note)
            return
        self._use_plain(False)
        self._show_properties(note)
        if any(link.embed for link in note.links):
            # Embeds name other notes: resolving them reads the index (its lock too) - not on the UI thread.
            rendered = await asyncio.to_thread(_rendered, index, note)
            if showing != self._showing:
                return  # another place was asked for meanwhile
        else:
            rendered = note_source(note)
        self._source = rendered
        source = screen_text(rendered.text)
        line = rendered.line(self._place_line(note, place))
        cut = _first_screen_cut(source) if len(source) > FIRST_SCREEN_CHARS else len(source)
        if cut < len(source) and source.count("\n", 0, cut) > line + 5:
            self.view = "partial"
            self._title(note, "rendering…")
            parts = _parts(source, cut)
            await md.update(parts[0])
            self._first_frame(started)
            self._scroll_to_place(note, place)
            self.call_after_refresh(self._render_rest, note, showing, parts[1:])
        else:
            self.view = "markdown"
            self._title(note)
            await md.update(source)
            self._first_frame(started)
            self._scroll_to_place(note, place)
        self.call_after_refresh(self._fill_side, note)

    async def _render_rest(self, note, showing: int, rest: list[str]) -> None:
        """Append the rest of a long note once its start is on screen, a part per frame (unless
        another note or place was shown meanwhile)."""
        if showing != self._showing:
            return
        await self.query_one("#note-md", Markdown).append(rest[0])
        if rest[1:]:
            self.call_after_refresh(self._render_rest, note, showing, rest[1:])
            return
        self.view = "markdown"
        self._title(note)

    def _show_properties(self, note) -> None:
        """The frontmatter as a properties table (hidden when the note has none)."""
        props = self.query_one("#note-props", FitTable)
        props.clear()
        for key, value in property_rows(note.frontmatter):
            props.add_row(key, value)
        props.display = props.row_count > 0

    def _title(self, note, flag: str = "") -> None:
        nav = f"  {self.position + 1}/{len(self.history)}" if len(self.history) > 1 else ""
        self.query_one("#note-title", Static).update(
            safe_content(
                Content.assemble(
                    (note.title, "bold"),
                    "  ",
                    (note.path, "$text-muted"),
                    f"  · {note.source_type}",
                    (nav, "$text-muted"),
                    (f"  · {flag}" if flag else "", "$text-warning"),
                )
            )
        )

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

        self.call_after_refresh(done)

    def _place_line(self, note, place: Place) -> int:
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

    def _scroll_to_place(self, note, place: Place) -> None:
        if place.heading:
            self._scroll_to_heading(note, place.heading)
        elif place.cursor is not None:
            self._scroll_to_line(self._source.line(line_of(note.text, place.cursor)))
        else:
            self.query_one("#note-scroll").scroll_home(animate=False)

    def _fill_side(self, note) -> None:
        index = self.explorer.index
        tags = note.tag_names
        self.query_one("#note-tags", Static).update(
            Content.assemble(
                ("Tags ", "bold"), plain("  ".join(f"#{t}" for t in tags) if tags else "none", "$text-accent")
            )
        )
        graph = index.links()
        backlinks = graph.backlinks(note.path)
        bl = self.query_one("#note-backlinks", OptionList)
        bl.clear_options()
        seen: set[str] = set()
        for b in backlinks:
            if b.source in seen:
                continue
            seen.add(b.source)
            src = index.note(b.source)
            label = safe_content(
                Content.assemble((src.title if src else b.source, "bold"), "\n", (b.source, "$text-muted"))
            )
            bl.add_option(Option(label, id=f"bl:{b.source}"))
        bl.border_title = f"Backlinks ({len(seen)})"
        out = self.query_one("#note-links", OptionList)
        out.clear_options()
        self.links_shown = []
        for _link, target in graph.outgoing(note.path):
            if target is None or target in self.links_shown or target == note.path:
                continue
            self.links_shown.append(target)
            dst = index.note(target)
            out.add_option(
                Option(
                    safe_content(
                        Content.assemble((dst.title if dst else target, ""), "\n", (target, "$text-muted"))
                    ),
                    id=f"ln:{target}",
                )
            )
        out.border_title = f"Links ({len(self.links_shown)})"

    def _blocks_at(self, line: int) -> list[MarkdownBlock]:
        md = self.query_one("#note-md", Markdown)
        hits = [
            b
            for b in md.query(MarkdownBlock)
            if b.source_range[0] <= line < max(b.source_range[1], b.source_range[0] + 1)
        ]
        return sorted(hits, key=lambda b: b.source_range[1] - b.source_range[0])

    def _scroll_to_line(self, line: int) -> None:
        blocks = self._blocks_at(line)
        if not blocks:
            md = self.query_one("#note-md", Markdown)
            before = [b for b in md.query(MarkdownBlock) if b.source_range[0] <= line and b.parent is md]
            blocks = before[-1:]
        if blocks:
            target = blocks[0]
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
        path = index.links().resolve(target, self.place.path, markdown) if target else self.place.path
        note = index.note(path) if path is not None else None
        if note is None:
            self.notify(f"No note named “{target}” (a dangling link).", severity="warning", timeout=4)
            return
        if heading.startswith("^"):
            named = next((b for b in note.blocks if b.id == heading[1:]), None)
            place = Place(path, named.start if named else None)
        else:
            place = Place(path, None, heading)
        await self.go(place)

    @on(OptionList.OptionSelected)
    async def _side_selected(self, event: OptionList.OptionSelected) -> None:
        """A backlink or link was chosen: go there."""
        option_id = event.option.id or ""
        if option_id[:3] in ("bl:", "ln:"):
            await self.go(Place(option_id[3:]))
