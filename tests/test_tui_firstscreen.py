"""The app draws what its workers computed: context panes from the search's windows, a long note's
first screen from its start alone, names resolved in a snapshot outside the index lock."""

from __future__ import annotations

import asyncio
import gc
import re
import threading
import time
from pathlib import Path
from typing import Any

from textual.widgets import Markdown, OptionList
from textual.widgets.markdown import MarkdownBlock

from benchmarks.note_open import make_note
from conftest import SIZE, make_app, open_note, search, settle, sync, wait_for
from explorer.index.transclusion import embeds_in
from explorer.tui.messages import BackToSearch, EditNote, OpenNote
from explorer.tui.safe import screen_text
from explorer.tui.screens import note as note_view
from explorer.tui.screens.main import MainScreen
from explorer.tui.screens.note import FIRST_SCREEN_CHARS, NoteScreen
from explorer.tui.screens.writer import WriterScreen
from explorer.tui.text import note_markdown, wikilink_href
from explorer.tui.widgets.context_pane import ContextPane, context_window
from explorer.tui.widgets.results import ResultsList
from explorer.vault.external import wikilink

DEEP_KB = 12
"""Size of the notes opened deep: three quarters down is past `note.DEEP_OPEN_CHARS` with three parts
of `note.REST_CHUNK_CHARS` above the place and more than a screenful below it. The split does not
depend on the size past that, and a larger note only takes longer to come in whole."""

LONG_KB = 12
"""Size of the long notes opened from the top: a first screen, then three more parts.

The apps that open these notes run without their embedding loop (`load_model=False`): the tests look
at the note view, and the loop would embed each long note's sections meanwhile."""


MARKER = "Zebra quokka passage at the cursor."
"""The paragraph a deep open is asked for (`_write_deep_note`)."""


def _write_deep_note(vault: Path, path: str, inserted: str, text: str | None = None) -> str:
    """Write a note of DEEP_KB (or `text`) at `path` in `vault` with `inserted` as paragraphs of their
    own before the section that starts three quarters down; the note's text."""
    text = text if text is not None else make_note(DEEP_KB)
    at = text.index("\n## Section", len(text) * 3 // 4)
    text = text[:at] + "\n\n" + inserted + "\n" + text[at:]
    (vault / path).parent.mkdir(parents=True, exist_ok=True)
    (vault / path).write_text(text, encoding="utf-8")
    return text


@sync
async def test_context_pane_draws_the_windows_the_search_computed(
    tui_vault: Path, remembering_embedder, tmp_path: Path
) -> None:
    """Moving down the results shows each result's window at its best shard with its matches, every
    one computed by the search worker: the pane computes none itself (its `computed` count stays 0)
    and shows what it would have computed."""
    app = make_app(tui_vault, remembering_embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        results = await search(app, pilot, "hamster cage bedding")
        await settle(app, pilot)
        screen = app.main_screen
        assert len(results.results) >= 3
        listing = screen.query_one(ResultsList)
        listing.focus()
        pane = screen.query_one(ContextPane)
        index = app.index
        for n, res in enumerate(results.results):
            if n:
                await pilot.press("down")
                await wait_for(
                    pilot, lambda res=res: pane.state is not None and pane.state.path == res.document_path
                )
            assert screen.selected is res
            cursor = res.context_shards[0].cursor if res.context_shards else 0
            assert pane.state.cursor == cursor
            fresh = context_window(
                index,
                index.note(res.document_path).text,
                res.document_path,
                cursor,
                pane.chars,
                pane.words,
                pane.phrases,
            )
            assert pane.window == fresh
        assert pane.computed == 0
        # Widening is the pane's own work (and still right).
        await pilot.press("ctrl+up")
        assert pane.window.end - pane.window.start > fresh.end - fresh.start


class _HeldCount:
    """The index lock, counting the acquisitions made in each thread (mutual exclusion unchanged)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.local = threading.local()

    def taken(self) -> int:
        return getattr(self.local, "taken", 0)

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        got = self.inner.acquire(*args, **kwargs)
        if got:
            self.local.taken = self.taken() + 1
        return got

    def release(self) -> None:
        self.inner.release()

    def __enter__(self) -> _HeldCount:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@sync
async def test_long_note_first_screen_is_its_start_and_names_resolve_outside_the_lock(
    tui_vault: Path, embedder, tmp_path: Path, monkeypatch
) -> None:
    """A long note with embeds near its top and in its last section: the first frame holds about a
    screenful (its embed boxed), the rest and the side panel come after it; every embed resolves off
    the UI thread in a snapshot, taking the index lock not once while it resolves; the whole is the
    note's Markdown, nothing lost or doubled."""
    long = make_note(LONG_KB)
    last = long[long.rindex("## Section") :].split("\n")[0]
    dangling = re.findall(r"\[\[(note-\d+)\]\]", long)[-1]  # no such note in the vault
    long = long.replace("## Section 1\n", "## Section 1\n\n![[hamster-cages-and-bedding]]\n", 1)
    long = long.replace(f"{last}\n", f"{last}\n\n![[Welcome]]\n", 1)
    (tui_vault / "Long").mkdir()
    (tui_vault / "Long/embeds.md").write_text(long, encoding="utf-8")
    (tui_vault / "Long/to-it.md").write_text("# To it\n\nSee [[embeds]].\n", encoding="utf-8")
    app = make_app(tui_vault, embedder, tmp_path, load_model=False)
    calls: list[tuple[bool, int]] = []
    real = note_view.embeds_in

    def spy(*args: Any, **kwargs: Any):
        lock = app.index.reader.lock
        before = lock.taken()
        found = real(*args, **kwargs)
        calls.append((threading.current_thread() is threading.main_thread(), lock.taken() - before))
        return found

    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.refresh_index(["Long/embeds.md", "Long/to-it.md"])
        await settle(app, pilot)
        app.index.reader.lock = _HeldCount(app.index.reader.lock)
        monkeypatch.setattr(note_view, "embeds_in", spy)
        await open_note(app, pilot, "Long/embeds.md")
        screen = app.screen
        md = screen.query_one("#note-md", Markdown)
        first = screen.first_screen_source or ""  # the frame itself: parts may follow before this line runs
        assert "embedded from Pets/hamster-cages-and-bedding.md" in first
        assert len(first) < FIRST_SCREEN_CHARS + 1_500 and last not in first
        await wait_for(pilot, lambda: screen.view == "markdown")
        index = app.index
        assert md.source == screen_text(
            note_markdown(index.note("Long/embeds.md"), embeds_in(index, "Long/embeds.md"), index.note)
        )
        assert "Welcome.md" in md.source
        backlinks = screen.query_one("#note-backlinks", OptionList)
        assert [backlinks.get_option_at_index(i).id for i in range(backlinks.option_count)] == [
            "bl:Long/to-it.md"
        ]
        assert f"{dangling}.md" not in screen.links_shown  # dangling links are not listed
        assert calls and all(not on_ui and taken == 0 for on_ui, taken in calls), calls


@sync
async def test_note_view_is_reused_and_no_collection_runs_before_the_first_frame(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """Open a long note, go back, open another: the same note view shows the second, its first frame
    holds the second note's start and nothing of the first, and it ends with the second note's whole
    Markdown. The closed view lets its blocks go. No garbage collection runs between the start of the
    open and its first frame, even with one due every 50 allocations, and they run again after it."""
    first_note, second_note = make_note(LONG_KB - 4), make_note(LONG_KB)
    (tui_vault / "Long").mkdir()
    (tui_vault / "Long/first.md").write_text(first_note, encoding="utf-8")
    (tui_vault / "Long/second.md").write_text(second_note, encoding="utf-8")
    app = make_app(tui_vault, embedder, tmp_path, load_model=False)
    collections: list[float] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(time.perf_counter())

    thresholds = gc.get_threshold()
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.refresh_index(["Long/first.md", "Long/second.md"])
        await settle(app, pilot)
        await open_note(app, pilot, "Long/first.md")
        view = app.screen
        md = view.query_one("#note-md", Markdown)
        await wait_for(pilot, lambda: view.view == "markdown")
        assert f"Long note {LONG_KB - 4} KB" in md.source
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen) and not md.query(MarkdownBlock))
        gc.callbacks.append(count)
        gc.set_threshold(50, 10, 10)
        try:
            app.post_message(OpenNote("Long/second.md"))
            await wait_for(pilot, lambda: app.screen is view and view.first_screen_s is not None)
            frame = (view.shown_at, view.shown_at + (view.first_screen_s or 0.0))
            await wait_for(pilot, lambda: any(t > frame[1] for t in collections))
        finally:
            gc.set_threshold(*thresholds)
            gc.callbacks.remove(count)
        assert gc.isenabled()
        assert not [t for t in collections if frame[0] <= t <= frame[1]]
        first = view.first_screen_source or ""
        assert f"# Long note {LONG_KB} KB" in first and "## Section 1\n" in first
        assert f"Long note {LONG_KB - 4} KB" not in first
        await wait_for(pilot, lambda: view.view == "markdown")
        index = app.index
        assert md.source == screen_text(
            note_markdown(index.note("Long/second.md"), embeds_in(index, "Long/second.md"), index.note)
        )


@sync
async def test_a_note_opened_from_the_writer_over_the_note_view_gets_a_view_of_its_own(
    tui_vault: Path, remembering_embedder, tmp_path: Path
) -> None:
    """Note view -> writer -> a note opened from the writer: a second note view over the writer shows
    it (the kept one stays under the writer); back to the search, the next open shows the kept view."""
    app = make_app(tui_vault, remembering_embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        paths = sorted(app.index.note_titles())[:3]
        await open_note(app, pilot, paths[0])
        kept = app.screen
        app.post_message(EditNote(paths[0]))
        await wait_for(pilot, lambda: isinstance(app.screen, WriterScreen))
        await open_note(app, pilot, paths[1])
        assert app.screen is not kept and app.screen.place.path == paths[1]
        assert app.screen_stack[1] is kept and kept.place.path == paths[0]
        app.post_message(BackToSearch())
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
        app.post_message(OpenNote(paths[2]))
        await wait_for(pilot, lambda: app.screen is kept and kept.first_screen_s is not None)
        assert kept.place.path == paths[2] and kept.history == [kept.place]


@sync
async def test_quitting_while_a_note_opens_leaves_the_garbage_collector_on(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """The app quits while a note's first frame is still to come: the collector is on afterwards."""
    (tui_vault / "Long").mkdir()
    (tui_vault / "Long/note.md").write_text(make_note(LONG_KB), encoding="utf-8")
    app = make_app(tui_vault, embedder, tmp_path, load_model=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.refresh_index(["Long/note.md"])
        await settle(app, pilot)
        app.post_message(OpenNote("Long/note.md"))
        for _ in range(100_000):  # until the open has started: the collector is off until its frame
            if not gc.isenabled():
                break
            await asyncio.sleep(0)
        assert not gc.isenabled()
    assert gc.isenabled()


@sync
async def test_a_long_note_opened_deep_shows_its_place_first_and_stays_there(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """A long note opened at a cursor three quarters down (a search result's passage): the first frame
    reads the note up to a screenful past the place, not the whole note; the view is scrolled to the
    place's paragraph, and it stays on screen while the rest is appended below."""
    marker = MARKER
    last = "Aardvark wombat paragraph at the note's end."
    long = _write_deep_note(tui_vault, "Long/deep.md", marker, f"{make_note(DEEP_KB)}\n{last}\n")
    app = make_app(tui_vault, embedder, tmp_path, load_model=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.refresh_index(["Long/deep.md"])
        await settle(app, pilot)
        # Once from the top, closed, then at the place: the kept note view shows it (a search result).
        app.post_message(OpenNote("Long/deep.md"))
        await wait_for(pilot, lambda: isinstance(app.screen, NoteScreen) and app.screen.view == "markdown")
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
        await settle(app, pilot)
        await open_note(app, pilot, "Long/deep.md", long.index(marker))
        screen = app.screen
        first = screen.first_screen_source or ""
        assert marker in first
        assert last not in first and len(first) < len(long) - 4_000
        scroll = screen.query_one("#note-scroll")
        md = screen.query_one("#note-md", Markdown)

        def place_on_screen() -> bool:
            blocks = (
                [b for b in md.children if isinstance(b, MarkdownBlock) and marker in (b.source or "")]
                if scroll.region
                else []
            )
            return (
                scroll.scroll_offset.y > 0
                and bool(blocks)
                and all(scroll.region.overlaps(b.region) for b in blocks)
            )

        await wait_for(pilot, place_on_screen, timeout=10.0)
        await wait_for(pilot, lambda: screen.view == "markdown")
        await settle(app, pilot)
        assert last in md.source
        assert place_on_screen()


async def _first_frame(app: Any, path: str, cursor: int) -> NoteScreen:
    """Open `path` at `cursor` and return its note view as soon as its first frame is drawn.

    The loop only yields (not `wait_for`, whose 50 ms pauses let the app run on): the view is read
    before the part above the place comes in.
    """
    app.post_message(OpenNote(path, cursor))
    while not (isinstance(app.screen, NoteScreen) and app.screen.first_screen_s is not None):
        await asyncio.sleep(0)
    return app.screen


def _top_block(md: Markdown, text: str) -> MarkdownBlock | None:
    """The top-level block of `md` whose source holds `text`."""
    return next((b for b in md.children if isinstance(b, MarkdownBlock) and text in (b.source or "")), None)


def _row(block: MarkdownBlock, scroll: Any) -> int:
    """The screen row of `block` in the view `scroll` (0: its top row)."""
    return block.region.y - scroll.region.y


@sync
async def test_a_note_opened_three_quarters_down_draws_the_part_around_the_place_and_keeps_it_there(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """A long note (frontmatter, an embed near its top) opened at a cursor three quarters down: the first
    frame's Markdown starts at the place's paragraph (not at the note's start) with the place on screen;
    the part above goes in above it while the place keeps its screen row; at the end the view holds the
    whole note's Markdown, and copy-link names the passage at the cursor."""
    marker = MARKER
    embed = "## Section 1\n\n![[hamster-cages-and-bedding]]\n"
    long = _write_deep_note(
        tui_vault, "Long/deep.md", marker, make_note(DEEP_KB).replace("## Section 1\n", embed, 1)
    )
    app = make_app(tui_vault, embedder, tmp_path, load_model=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.refresh_index(["Long/deep.md"])
        await settle(app, pilot)
        cursor = long.index(marker)
        screen = await _first_frame(app, "Long/deep.md", cursor)
        scroll = screen.query_one("#note-scroll")
        md = screen.query_one("#note-md", Markdown)
        # The first frame, as drawn: the place's part only, the place on screen.
        first = screen.first_screen_source or ""
        assert (
            first.startswith(marker)
            and f"# Long note {DEEP_KB} KB" not in first
            and "embedded from" not in first
        )
        above = screen.query_one("#note-above", Markdown)
        assert not above.source
        place = _top_block(md, marker)
        assert place is not None and 0 <= _row(place, scroll) < scroll.region.height
        row = _row(place, scroll)
        shown = [_row(place, scroll)]
        while screen.view == "partial":
            shown.append(_row(place, scroll))
            await asyncio.sleep(0.005)
        await settle(app, pilot)
        assert above.source and set(shown) == {row} and _row(place, scroll) == row
        assert _top_block(md, marker) is place and scroll.scroll_offset.y > 0
        index = app.index
        whole = screen_text(
            note_markdown(index.note("Long/deep.md"), embeds_in(index, "Long/deep.md"), index.note)
        )
        assert above.source + md.source == whole
        assert "embedded from Pets/hamster-cages-and-bedding.md" in above.source
        assert screen.query_one("#note-props").display  # the frontmatter heads the note again
        await pilot.press("ctrl+l")
        shard = index.shard_at("Long/deep.md", cursor)
        assert shard is not None and shard.start <= cursor < shard.end
        assert app.clipboard == wikilink(
            shard.node_id, shard.heading_path[-1] if shard.heading_path else None
        )
        # A link to another note, then back: the other note shows alone, then the place's part again.
        md.post_message(Markdown.LinkClicked(md, wikilink_href("Welcome")))
        await wait_for(pilot, lambda: screen.place.path == "Welcome.md" and screen.first_screen_s is not None)
        assert not above.display and not above.source and "Welcome" in md.source
        await pilot.press("alt+left")
        await wait_for(
            pilot, lambda: screen.place.path == "Long/deep.md" and screen.first_screen_s is not None
        )
        assert (screen.first_screen_source or "").startswith(marker)
        await wait_for(pilot, lambda: screen.view == "markdown")
        back = _top_block(md, marker)
        assert above.source + md.source == whole and back is not None and _row(back, scroll) == row


@sync
async def test_keys_pressed_while_the_part_above_comes_in_win(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """Opened deep, the view scrolled down a row before the part above is in stays a row down from the
    place's first row; `home` pressed then stays at the note's top when the part above arrives."""
    marker = MARKER
    long = _write_deep_note(tui_vault, "Long/deep.md", marker)
    app = make_app(tui_vault, embedder, tmp_path, load_model=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.refresh_index(["Long/deep.md"])
        await settle(app, pilot)
        for key in ("down", "home"):
            screen = await _first_frame(app, "Long/deep.md", long.index(marker))
            scroll = screen.query_one("#note-scroll")
            md = screen.query_one("#note-md", Markdown)
            place = _top_block(md, marker)
            assert place is not None and not screen.query_one("#note-above", Markdown).source
            row = _row(place, scroll)
            await pilot.press(key)
            await wait_for(pilot, lambda screen=screen: screen.view == "markdown")
            await settle(app, pilot)
            if key == "down":
                assert _row(place, scroll) == row - 1
            else:
                assert scroll.scroll_offset.y == 0
                assert f"Long note {DEEP_KB} KB" in screen.query_one("#note-above", Markdown).source
            await pilot.press("escape")
            await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))


def _top_level(source: str) -> list[tuple[str, int, int]]:
    """(kind, first line, end line) of each top-level block of `source` as Markdown parses it."""
    from markdown_it import MarkdownIt

    return [
        (t.type, t.map[0], t.map[1])
        for t in MarkdownIt("gfm-like").parse(source)
        if t.level == 0 and t.map is not None and t.nesting != -1
    ]


@sync
async def test_a_deep_open_splits_no_list_code_fence_or_table(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """Opened deep inside a loose list (an item with an indented paragraph), inside a code fence with
    blank lines and inside a table: the view shown in two parts reads as the whole note does (the
    same top-level blocks at the same lines), and the place's line is on screen in the first frame."""
    items = "\n\n".join(
        f"{n}. Item {n} of the loose list." + ("\n\n    A paragraph of item 3." if n == 3 else "")
        for n in range(1, 13)
    )
    code = "\n".join(["```python", *(f"x{n} = {n}\n" for n in range(15)), "```"])
    table = "\n".join(["| key | value |", "|---|---|", *(f"| k{n} | v{n} |" for n in range(12))])
    long = _write_deep_note(tui_vault, "Long/parts.md", f"{items}\n\nBetween.\n\n{code}\n\nAnd.\n\n{table}")
    app = make_app(tui_vault, embedder, tmp_path, load_model=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.refresh_index(["Long/parts.md"])
        await settle(app, pilot)
        index = app.index
        whole = screen_text(note_markdown(index.note("Long/parts.md"), (), index.note))
        for place in ("9. Item 9", "x9 = 9", "| k7 | v7 |"):
            screen = await _first_frame(app, "Long/parts.md", long.index(place))
            scroll = screen.query_one("#note-scroll")
            md = screen.query_one("#note-md", Markdown)
            assert f"# Long note {DEEP_KB} KB" not in (screen.first_screen_source or "")
            shown = [
                b
                for b in md.children
                if isinstance(b, MarkdownBlock)
                and scroll.region.overlaps(b.region)
                and place in (b.source or "")
            ]
            assert shown, place
            await wait_for(pilot, lambda screen=screen: screen.view == "markdown")
            above = screen.query_one("#note-above", Markdown)
            assert above.source + md.source == whole
            assert _top_level(above.source) + [
                (kind, a + above.source.count("\n"), z + above.source.count("\n"))
                for kind, a, z in _top_level(md.source)
            ] == _top_level(whole), place
            await pilot.press("escape")
            await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
