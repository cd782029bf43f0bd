"""The note view: rendered Markdown with wikilink navigation, backlinks and tags, back/forward history."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual import events, on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Markdown, OptionList, Static
from textual.widgets.markdown import MarkdownBlock
from textual.widgets.option_list import Option

from explorer.text.safe import safe_text
from explorer.tui import keys
from explorer.tui.messages import EditNote
from explorer.tui.safe import plain, safe_content
from explorer.tui.text import line_of, note_markdown, parse_wikilink_href
from explorer.vault.parse import markdown_link_target
from explorer.tui.widgets.status_bar import StatusBar

if TYPE_CHECKING:
    from explorer.tui.app import ExplorerApp


@dataclass(frozen=True, slots=True)
class Place:
    """A stop in the note view's history."""

    path: str
    """The note."""
    cursor: int | None = None
    """Where to scroll (None: the top)."""
    heading: str = ""
    """A heading to scroll to, from a `[[note#heading]]` link."""


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

    @property
    def explorer(self) -> ExplorerApp:
        """The app, typed."""
        return self.app  # type: ignore[return-value]

    @property
    def place(self) -> Place:
        """Where the view is."""
        return self.history[self.position]

    def compose(self) -> ComposeResult:
        """Title line, then Markdown | side panel (tags, backlinks, links)."""
        yield Static(id="note-title")
        with Horizontal(id="note-body"):
            with VerticalScroll(id="note-scroll"):
                yield Markdown(open_links=False, id="note-md")
            with Vertical(id="note-side"):
                yield Static(id="note-tags")
                yield OptionList(id="note-backlinks")
                yield OptionList(id="note-links")
        yield StatusBar()
        yield Footer()

    async def on_mount(self) -> None:
        """Show the first place."""
        self.query_one("#note-backlinks", OptionList).border_title = "Backlinks"
        self.query_one("#note-links", OptionList).border_title = "Links"
        self.query_one("#note-scroll").focus()
        await self.show_place(self.place)

    # -- navigation ---------------------------------------------------------------------
    async def go(self, place: Place) -> None:
        """Visit `place`, dropping any forward history."""
        del self.history[self.position + 1:]
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
        self.explorer.back_to_search()

    def on_key(self, event: events.Key) -> None:
        """A printable key is the start of a new search: back to the search box with it."""
        if keys.is_text_key(event, self.focused):
            event.stop()
            event.prevent_default()
            self.explorer.back_to_search(event.character or "")

    def action_edit(self) -> None:
        """Write in this note."""
        self.post_message(EditNote(self.place.path, self.place.cursor))

    def action_copy_path(self) -> None:
        """Copy the note's path."""
        self.app.copy_to_clipboard(self.place.path)
        self.notify(self.place.path, title="Copied path", timeout=3)

    async def show_place(self, place: Place) -> None:
        """Render the note of `place` and scroll to its cursor or heading."""
        index = self.explorer.index
        note = index.note(place.path) if index is not None else None
        title = self.query_one("#note-title", Static)
        md = self.query_one("#note-md", Markdown)
        if note is None:
            title.update(Content.assemble(("Not in the index: ", "bold $text-error"), plain(place.path)))
            await md.update("")
            return
        nav = f"  {self.position + 1}/{len(self.history)}" if len(self.history) > 1 else ""
        title.update(safe_content(Content.assemble((note.title, "bold"), "  ", (note.path, "$text-muted"),
                                                   f"  · {note.source_type}", (nav, "$text-muted"))))
        await md.update(safe_text(note_markdown(note)))
        self._fill_side(note)
        if place.heading:
            self._scroll_to_heading(note, place.heading)
        elif place.cursor is not None:
            self._scroll_to_line(line_of(note.text, place.cursor))
        else:
            self.query_one("#note-scroll").scroll_home(animate=False)

    def _fill_side(self, note) -> None:
        index = self.explorer.index
        tags = note.tag_names
        self.query_one("#note-tags", Static).update(
            Content.assemble(("Tags ", "bold"), plain("  ".join(f"#{t}" for t in tags) if tags else "none", "$text-accent")))
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
            label = safe_content(Content.assemble((src.title if src else b.source, "bold"), "\n", (b.source, "$text-muted")))
            bl.add_option(Option(label, id=f"bl:{b.source}"))
        bl.border_title = f"Backlinks ({len(seen)})"
        out = self.query_one("#note-links", OptionList)
        out.clear_options()
        self.links_shown = []
        for link, target in graph.outgoing(note.path):
            if target is None or target in self.links_shown or target == note.path:
                continue
            self.links_shown.append(target)
            dst = index.note(target)
            out.add_option(Option(safe_content(Content.assemble((dst.title if dst else target, ""), "\n", (target, "$text-muted"))),
                                  id=f"ln:{target}"))
        out.border_title = f"Links ({len(self.links_shown)})"

    def _blocks_at(self, line: int) -> list[MarkdownBlock]:
        md = self.query_one("#note-md", Markdown)
        hits = [b for b in md.query(MarkdownBlock) if b.source_range[0] <= line < max(b.source_range[1], b.source_range[0] + 1)]
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
        wanted = heading.split("#")[-1].strip().lower()
        for h in note.headings:
            if h.text.strip().lower() == wanted:
                self._scroll_to_line(line_of(note.text, h.start))
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
            block = next((b for b in note.blocks if b.id == heading[1:]), None)
            place = Place(path, block.start if block else None)
        else:
            place = Place(path, None, heading)
        await self.go(place)

    @on(OptionList.OptionSelected)
    async def _side_selected(self, event: OptionList.OptionSelected) -> None:
        """A backlink or link was chosen: go there."""
        option_id = event.option.id or ""
        if option_id[:3] in ("bl:", "ln:"):
            await self.go(Place(option_id[3:]))
