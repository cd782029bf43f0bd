"""Views that stay quick on big inputs: long notes, a large vault tree, the why pane only when shown.

The apps that open long notes run without their embedding loop (`load_model=False`): the tests look at
the note view, and the loop would embed the notes' sections meanwhile."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Markdown, TabbedContent, Tree

from benchmarks.note_open import make_note
from conftest import SIZE, make_app, open_note, search, settle, sync, wait_for
from explorer.index.transclusion import embeds_in
from explorer.tui.messages import OpenNote
from explorer.tui.screens.main import MainScreen
from explorer.tui.screens.note import FIRST_SCREEN_CHARS, PLAIN_VIEW_CHARS, NoteScreen
from explorer.tui.widgets.long_text import LongText
from explorer.tui.widgets.search_box import SearchBox
from explorer.tui.widgets.vault_tree import VaultTree
from explorer.tui.widgets.why_pane import WhyPane


@sync
async def test_long_notes_open_plain_or_in_two_steps(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """A note over the plain-view size opens as read-only text with a flag in the title; a long Markdown
    note shows its start first and then the whole; typing in either view goes back to the search box."""
    big = make_note(PLAIN_VIEW_CHARS // 1000 + 8)
    mid = make_note(FIRST_SCREEN_CHARS // 1000 * 3)
    (tui_vault / "Long").mkdir()
    (tui_vault / "Long/big.md").write_text(big, encoding="utf-8")
    (tui_vault / "Long/mid.md").write_text(mid, encoding="utf-8")
    app = make_app(tui_vault, embedder, tmp_path, load_model=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.refresh_index(["Long/big.md", "Long/mid.md"])
        await settle(app, pilot)
        app.post_message(OpenNote("Long/big.md", cursor=big.index("## Section 20")))
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, NoteScreen) and screen.view == "plain" and screen.first_screen_s is not None
        plain = screen.query_one("#note-plain", LongText)
        assert plain.display and plain.text == big
        assert plain.mark is not None and plain.line(plain.mark).startswith("## Section 20")
        # The view opens one line above the place, and draws that place on screen.
        assert plain.top_line() == plain.mark - 1
        drawn = "\n".join(plain.render_line(y).text for y in range(plain.size.height))
        assert "## Section 20" in drawn
        assert "plain view" in str(screen.query_one("#note-title").content)
        assert screen.focused is plain  # the scrolling keys scroll the view on screen
        top = plain.top_line()
        await pilot.press("pagedown")
        assert plain.top_line() > top
        await pilot.press("x")
        assert plain.text in (big, "")  # nothing typed into it (a closed view lets its text go)
        await settle(app, pilot)
        assert isinstance(app.screen, MainScreen) and app.main_screen.query_one(SearchBox).value == "x"
        shown: list[str] = []
        await open_note(app, pilot, "Long/mid.md")
        shown.append(app.screen.view)
        await wait_for(pilot, lambda: app.screen.view == "markdown")
        md = app.screen.query_one("#note-md", Markdown)
        assert shown == ["partial"] or shown == ["markdown"]  # the rest may be in by the first look
        assert "rendering" not in str(app.screen.query_one("#note-title").content)
        assert md.source.rstrip().endswith(mid.rstrip()[-40:])


@sync
async def test_long_note_with_an_embed_comes_in_parts_to_the_whole(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """A long Markdown note with an embed: its first screen shows its start with the embed boxed
    (resolved off the UI thread), the rest comes a part per frame, and the view ends with the whole
    note's Markdown, nothing lost or doubled; a key typed then goes back to the search box."""
    from explorer.tui.safe import screen_text
    from explorer.tui.text import note_markdown

    long = make_note(FIRST_SCREEN_CHARS // 1000 * 3).replace(
        "## Section 1\n", "## Section 1\n\n![[hamster-cages-and-bedding]]\n", 1
    )
    (tui_vault / "Long").mkdir()
    (tui_vault / "Long/embeds.md").write_text(long, encoding="utf-8")
    app = make_app(tui_vault, embedder, tmp_path, load_model=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.refresh_index(["Long/embeds.md"])
        await settle(app, pilot)
        await open_note(app, pilot, "Long/embeds.md")
        screen = app.screen
        md = screen.query_one("#note-md", Markdown)
        first = md.source
        assert "embedded from Pets/hamster-cages-and-bedding.md" in first
        await wait_for(pilot, lambda: screen.view == "markdown")
        index = app.index
        assert md.source == screen_text(
            note_markdown(index.note("Long/embeds.md"), embeds_in(index, "Long/embeds.md"), index.note)
        )
        await pilot.press("q")
        await settle(app, pilot)
        assert isinstance(app.screen, MainScreen) and app.main_screen.query_one(SearchBox).value == "q"


@sync
async def test_vault_tree_fills_folders_when_they_open(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """Hidden at 120 columns, the tree is built when shown, top level first; a folder fills as it opens."""
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        box = app.main_screen.query_one(VaultTree)
        tree = box.query_one(Tree)
        assert not box.display and not tree.root.children
        await pilot.press("f2")
        await pilot.pause()
        folders = [n for n in tree.root.children if n.data is None]
        assert folders and all(not n.children for n in folders)
        pets = next(n for n in folders if str(n.label) == "Pets/")
        pets.expand()
        await pilot.pause()
        assert {n.data for n in pets.children if n.data} == {
            p for p in app.index.notes if p.startswith("Pets/")
        }


@sync
async def test_why_pane_draws_when_shown_and_why_not_follows_the_query(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """The why pane is drawn when its tab opens; a why-not verdict is recomputed for each new query and cleared with it."""
    from textual.widgets import Input

    from explorer.tui.widgets.why_pane import FitTable

    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        screen = app.main_screen
        why = screen.query_one(WhyPane)
        await search(app, pilot, "hamster cage")
        assert why.query_one("#why-contrib", FitTable).row_count == 0, "hidden: not drawn"
        await pilot.press("f6")
        await pilot.pause()
        assert screen.query_one(TabbedContent).active == "tab-why"
        assert why.query_one("#why-contrib", FitTable).row_count > 0
        box = why.query_one("#why-not", Input)
        box.value = "Garden/composting.md"
        box.focus()
        await pilot.press("enter")
        await pilot.pause()
        first = why.report
        assert first is not None and first.path == "Garden/composting.md"
        await search(app, pilot, "composting")
        assert why.report is not first and why.report.path == "Garden/composting.md"
        assert any(r.stage == "final list" and r.found for r in why.report.rows)
        screen.run_search("")
        await settle(app, pilot)
        assert str(why.query_one("#why-not-verdict").content) == ""


def test_result_badges_show_the_ranks_of_the_explain_table(sample_index) -> None:
    """The BM25 / embedding ranks on a result are the ones in its why-ranked table (the tabulated shard)."""
    from explorer.config import Settings
    from explorer.engine import make_pipeline
    from explorer.tui.widgets.results import badges

    pipeline = make_pipeline(sample_index, Settings().with_overrides({"rerank.enabled": False}))
    checked = 0
    for query in ("hamster cage", "compost bedding", "index funds"):
        for r in pipeline.search(query, record=False).results:
            if r.explanation is None:
                continue
            texts = [t for t, _ in badges(r)]
            for retriever, label in (("bm25", "bm25"), ("dense", "emb")):
                ranks = [c.rank for c in r.explanation.contributions if c.retriever == retriever]
                shown = [t for t in texts if t.startswith(f"{label} #")]
                assert shown == ([f"{label} #{min(ranks)}"] if ranks else [])
            checked += 1
    assert checked > 10


@sync
async def test_long_text_draws_only_rows_folded_at_its_width() -> None:
    """The long-note view wraps lines between words at its width (folds a text without spaces by
    cells, for wide characters too), numbers each line's first row, opens at a line, and keeps the
    top line when the width changes."""
    from rich.cells import cell_len
    from textual.app import App, ComposeResult

    class One(App):
        def compose(self) -> ComposeResult:
            yield LongText()

    lines = [f"line {i} " + " ".join(["word"] * (i % 40)) for i in range(2000)] + [
        "日本語のテキスト" * 20,
        "end",
    ]

    def drawn(view: LongText) -> list[str]:
        return [view.render_line(y).text for y in range(view.size.height)]

    def line_from_rows(view: LongText, rows: list[str], number: int) -> str:
        """Line `number` (1-based) put back together from its drawn rows (one space where a row ends)."""
        gutter = view._gutter
        out, inside = [], False
        for row in rows:
            head = row[:gutter].strip()
            if head:
                inside = head == str(number)
            if inside:
                out.append(row[gutter:].rstrip())
        return " ".join(out)

    app = One()
    async with app.run_test(size=(60, 20)) as pilot:
        view = app.query_one(LongText)
        view.set_text("\n".join(lines), mark=1500)
        view.scroll_to_line(1499)
        await pilot.pause()
        assert view.line_count == len(lines) and view.top_line() == 1499
        rows = drawn(view)
        assert rows[0].split()[:3] == ["1500", "line", "1499"]
        width = view.scrollable_content_region.width
        assert all(cell_len(r) == width for r in rows)
        assert line_from_rows(view, rows, 1501).split() == lines[1500].split()  # no word broken
        assert sum(1 for r in rows if r[: view._gutter].strip() == "") > 0  # long lines fold
        view.scroll_to_line(2000)
        await pilot.pause()
        rows = drawn(view)
        assert all(cell_len(r) == width for r in rows)
        assert line_from_rows(view, rows, 2001).replace(" ", "") == lines[2000]
        view.scroll_to_line(1499)
        await pilot.resize_terminal(40, 20)
        await pilot.pause()
        assert view.top_line() == 1499
        rows = drawn(view)
        assert all(cell_len(r) == view.scrollable_content_region.width for r in rows)
        assert line_from_rows(view, rows, 1501).split() == lines[1500].split()


@sync
async def test_note_view_opens_again_at_the_new_note(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """After the note view was closed, opening another note shows that note with a fresh history
    (its side lists follow after the first frame); the index's objects are out of the
    collector's reach once it opened."""
    import gc

    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        assert gc.get_freeze_count() > 0
        await open_note(app, pilot, "Coffee/cold-brew.md")
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
        text = app.index.note("Astronomy/jupiter-moons.md").text
        await open_note(app, pilot, "Astronomy/jupiter-moons.md", len(text) - 1)
        screen = app.screen
        assert screen.history == [screen.place] and screen.place.path == "Astronomy/jupiter-moons.md"
        assert "Astronomy/jupiter-moons.md" in str(screen.query_one("#note-title").content)
        await settle(app, pilot)
        md = screen.query_one("#note-md", Markdown)
        assert md.source.strip() and "cold brew" not in md.source.lower()
        assert screen.query_one("#note-links").border_title.startswith("Links (")
        await pilot.press("alt+left")  # no history before the reopened note
        assert app.screen.place.path == "Astronomy/jupiter-moons.md"
