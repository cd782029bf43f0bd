"""Views that stay quick on big inputs: long notes, a large vault tree, the why pane only when shown."""

from __future__ import annotations

from pathlib import Path

from test_tui import SIZE, make_app, search, settle, sync, tui_vault, wait_for, warm_cache  # noqa: F401 - fixtures
from textual.widgets import Markdown, TabbedContent, TextArea, Tree

from benchmarks.note_open import make_note
from explorer.tui.messages import OpenNote
from explorer.tui.screens.main import MainScreen
from explorer.tui.screens.note import FIRST_SCREEN_CHARS, PLAIN_VIEW_CHARS, NoteScreen
from explorer.tui.widgets.search_box import SearchBox
from explorer.tui.widgets.vault_tree import VaultTree
from explorer.tui.widgets.why_pane import WhyPane


@sync
async def test_long_notes_open_plain_or_in_two_steps(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """A note over the plain-view size opens as read-only text with a flag in the title; a long Markdown
    note shows its start first and then the whole; typing in either view goes back to the search box."""
    big = make_note(PLAIN_VIEW_CHARS // 1000 + 40)
    mid = make_note(FIRST_SCREEN_CHARS // 1000 * 3)
    (tui_vault / "Long").mkdir()
    (tui_vault / "Long/big.md").write_text(big, encoding="utf-8")
    (tui_vault / "Long/mid.md").write_text(mid, encoding="utf-8")
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.refresh_index(["Long/big.md", "Long/mid.md"])
        await settle(app, pilot)
        app.post_message(OpenNote("Long/big.md", cursor=big.index("## Section 20")))
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, NoteScreen) and screen.view == "plain" and screen.first_screen_s is not None
        plain = screen.query_one("#note-plain", TextArea)
        assert plain.display and plain.read_only and plain.text == big
        assert plain.document.get_line(plain.cursor_location[0]).startswith("## Section 20")
        assert "plain view" in str(screen.query_one("#note-title").content)
        plain.focus()
        await pilot.press("x")
        assert plain.text == big
        await settle(app, pilot)
        assert isinstance(app.screen, MainScreen) and app.main_screen.query_one(SearchBox).value == "x"
        shown: list[str] = []
        app.post_message(OpenNote("Long/mid.md"))
        await wait_for(pilot, lambda: isinstance(app.screen, NoteScreen) and app.screen.first_screen_s is not None)
        shown.append(app.screen.view)
        await wait_for(pilot, lambda: app.screen.view == "markdown")
        md = app.screen.query_one("#note-md", Markdown)
        assert shown == ["partial"] or shown == ["markdown"]  # the rest may be in by the first look
        assert "rendering" not in str(app.screen.query_one("#note-title").content)
        assert md.source.rstrip().endswith(mid.rstrip()[-40:])


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
        assert {n.data for n in pets.children if n.data} == {p for p in app.index.notes if p.startswith("Pets/")}


@sync
async def test_why_pane_draws_when_shown_and_why_not_follows_the_query(tui_vault: Path, embedder, tmp_path: Path) -> None:
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
