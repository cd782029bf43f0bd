"""The Textual app driven headless with Pilot on private copies of sample_vault, plus its pure helpers."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from conftest import SIZE, make_app, option_text, quiet_settings, search, settle, sync, wait_for
from explorer.config import Settings
from explorer.text.files import write_atomic
from explorer.tui.messages import ModelState, SearchFinished
from explorer.tui.screens.help import HelpScreen
from explorer.tui.screens.main import MainScreen
from explorer.tui.screens.note import NoteScreen
from explorer.tui.screens.writer import WriterScreen
from explorer.tui.state import load_state
from explorer.tui.text import (
    note_markdown,
    paragraph_at,
    parse_wikilink_href,
    split_mode,
    wikilink_href,
)
from explorer.tui.themes import SHIPPED_THEMES_DIR, load_themes
from explorer.tui.widgets.context_pane import ContextPane
from explorer.tui.widgets.results import ResultsList, ResultsSummary
from explorer.tui.widgets.search_box import SearchBox
from explorer.tui.widgets.status_bar import StatusBar
from explorer.tui.widgets.vault_tree import VaultTree
from explorer.tui.widgets.why_pane import FitTable, WhyPane


# -- start-up ----------------------------------------------------------------------------------
@sync
async def test_first_frame_before_the_index_opens(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """The UI is up while opening blocks in a worker; a query typed meanwhile runs once the index is ready."""
    from explorer.engine import make_pipeline

    release = threading.Event()

    def slow_factory(index, settings):
        release.wait(20)
        return make_pipeline(index, settings)

    app = make_app(tui_vault, embedder, tmp_path, pipeline_factory=slow_factory)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.1)
        assert app.status.index == "opening"
        assert app.index is None
        assert "Opening the index" in str(app.main_screen.query_one(ResultsSummary).content)
        await pilot.press(*"hamster")
        await pilot.pause(0.3)
        assert "runs when it is ready" in str(app.main_screen.query_one(ResultsSummary).content)
        release.set()
        await wait_for(pilot, lambda: app.status.index == "ready")
        await settle(app, pilot)
        results = app.main_screen.results
        assert results is not None and results.query == "hamster"
        assert app.main_screen.query_one(ResultsList).option_count > 0


@sync
async def test_index_failure_is_reported_and_the_app_stays_up(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """An error while opening is shown in the status bar, a notification and the summary line."""

    def broken_factory(index, settings):
        raise RuntimeError("pipeline exploded")

    app = make_app(tui_vault, embedder, tmp_path, pipeline_factory=broken_factory)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        assert app.status.index == "failed"
        assert "pipeline exploded" in str(app.main_screen.query_one(ResultsSummary).content)
        assert any("pipeline exploded" in n.message for n in app._notifications)
        await pilot.press(*"ham")
        await pilot.pause(0.3)
        assert app.is_running and app.main_screen.results is None


@sync
async def test_live_search_is_progressive_lexical_then_hybrid(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """Results appear while typing: a lexical stage first, then the full hybrid pipeline."""
    seen: list[SearchFinished] = []

    def hook(message: Any) -> None:
        if isinstance(message, SearchFinished):
            seen.append(message)

    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE, message_hook=hook) as pilot:
        await settle(app, pilot)
        assert app.status.model == "ready"
        results = await search(app, pilot, "hamster cage", typing=True)
        final_seq = seen[-1].seq
        stages = [(m.stage, m.results.mode.dense) for m in seen if m.seq == final_seq]
        assert stages == [("lexical", False), ("full", True)]
        assert results.mode.dense is True
        lst = app.main_screen.query_one(ResultsList)
        assert lst.option_count > 0 and lst.highlighted is not None
        first = option_text(lst, 0)
        assert results.results[0].title in first and results.results[0].document_path in first
        assert "bm25 #" in first and "emb #" in first and "pass 1" in first
        summary = str(app.main_screen.query_one(ResultsSummary).content)
        assert "quality" in summary and "hybrid" in summary
        assert app.status.last_search.endswith(")") and "ms" in app.status.last_search
        status_text = str(app.main_screen.query_one(StatusBar).query_one("#status-right").content)
        assert "hybrid" in status_text and "LLM: off" in status_text


@sync
async def test_typing_is_debounced_and_stale_searches_are_cancelled(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """Fast typing runs one search; a slow search is cancelled by the next query and never shown."""
    from explorer.engine import make_pipeline

    cancelled_seen = threading.Event()
    started = threading.Event()
    queries: list[str] = []

    class SlowFirst:
        """A real pipeline; the query `slowquery` waits until its worker is cancelled."""

        def __init__(self, inner):
            self.inner = inner

        def search(self, query, *args, cancelled=None, **kwargs):
            queries.append(query)
            if query == "slowquery":
                started.set()
                while not (cancelled and cancelled()):
                    threading.Event().wait(0.01)
                cancelled_seen.set()
            return self.inner.search(query, *args, cancelled=cancelled, **kwargs)

    # A long pause before searching, so a slow machine typing key by key stays inside it.
    app = make_app(
        tui_vault,
        embedder,
        tmp_path,
        settings=quiet_settings(**{"experimental.typing_debounce_ms": 600}),
        pipeline_factory=lambda i, s: SlowFirst(make_pipeline(i, s)),
    )
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        box = app.main_screen.query_one(SearchBox)
        box.focus()
        for ch in "compost":
            await pilot.press(ch)
        await pilot.pause(0.8)
        await settle(app, pilot)
        assert set(queries) == {"compost"}, queries
        box.value = "slowquery"
        await pilot.pause(0.8)
        assert await asyncio.to_thread(started.wait, 5)
        box.value = "coffee"
        await pilot.pause(0.8)
        assert await asyncio.to_thread(cancelled_seen.wait, 5)
        await settle(app, pilot)
        assert app.main_screen.results.query == "coffee"
        assert "coffee" in app.main_screen.query_one(ResultsList).results[0].title.lower() or any(
            "coffee" in r.document_path.lower() for r in app.main_screen.results.results
        )


@sync
async def test_classic_modes_by_prefix_and_toggle(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """`/phrase ` runs the phrase tool; ctrl+t cycles the mode shown in the box's border."""
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        results = await search(app, pilot, "/phrase floor space")
        assert results.mode.classic == "phrase"
        assert results.results and all(r.source == "classic" for r in results.results)
        first = results.results[0]
        note = app.index.notes[first.document_path]
        cursor = first.context_shards[0].cursor
        assert note.text[cursor : cursor + 11].lower() == "floor space"
        assert "phrase tool" in str(app.main_screen.query_one(ResultsSummary).content)
        box = app.main_screen.query_one(SearchBox)
        assert box.border_title == "Search · phrase"
        box.value = ""
        await pilot.press("ctrl+t")
        assert box.mode == "phrase" and box.border_title == "Search · phrase"
        await pilot.press("ctrl+t")
        assert box.border_title == "Search · AND"
        results = await search(app, pilot, "hamster wheel")
        assert results.mode.classic == "and"
        for r in results.results:
            text = app.index.notes[r.document_path].text.lower()
            assert "hamster" in text and "wheel" in text


@sync
async def test_query_history_walks_with_up_and_down(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """Submitted queries are remembered (also on disk) and recalled with up/down."""
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        for q in ("coffee grinder", "compost heap"):
            await search(app, pilot, q)
            app.main_screen.query_one(SearchBox).focus()
            await pilot.press("enter")
            await settle(app, pilot)
        box = app.main_screen.query_one(SearchBox)
        box.focus()
        box.value = "draft"
        await pilot.press("up")
        assert box.value == "compost heap"
        await pilot.press("up")
        assert box.value == "coffee grinder"
        await pilot.press("down")
        assert box.value == "compost heap"
        await pilot.press("down")
        assert box.value == "draft"
        box.value = "compost heap"
        await pilot.press("enter")
        await settle(app, pilot)
        summary = str(app.main_screen.query_one(ResultsSummary).content)
        assert "advice:" in summary and "already searched" in summary
    state = load_state(tmp_path / "state.json")
    assert state.queries(tui_vault) == ["coffee grinder", "compost heap"]


@sync
async def test_no_good_match_is_said_honestly(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """Zero results and low quality each get their own plain statement above the list."""
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        results = await search(app, pilot, "tag:nonexistenttag zebra")
        summary = app.main_screen.query_one(ResultsSummary)
        assert not results.results
        assert summary.has_class("-none") and "No match" in str(summary.content)
        results = await search(app, pilot, "quantum chromodynamics lattice gauge")
        assert results.quality is not None and results.quality.level == "low"
        assert summary.has_class("-low") and "No good match" in str(summary.content)
        assert app.main_screen.query_one(ResultsList).has_class("-weak")


@sync
async def test_results_mark_reaches_the_terminal_after_the_drawn_list(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """experimental.mark_results (for benchmarks.browser): once a search's list has been drawn, the
    terminal's title says its stage and query, a control character in the query only ever shown."""
    settings = quiet_settings(**{"experimental.mark_results": True})
    app = make_app(tui_vault, embedder, tmp_path, settings=settings)
    async with app.run_test(size=SIZE) as pilot:
        written: list[tuple[str, int]] = []
        results_list = app.main_screen.query_one(ResultsList)
        drawn = [0]
        draw = results_list.render_lines

        def counted(crop):
            drawn[0] += 1
            return draw(crop)

        results_list.render_lines = counted  # type: ignore[method-assign]
        assert app._driver is not None
        app._driver.write = lambda data: written.append((data, drawn[0]))  # type: ignore[method-assign]
        await settle(app, pilot)
        await search(app, pilot, "hamster cage")
        marks = [(d, n) for d, n in written if d.startswith("\x1b]2;")]
        assert marks and marks[-1][0] == "\x1b]2;explorer:full:hamster cage\x07", marks
        assert marks[-1][1] > 0  # written after the list was drawn
        app.main_screen.run_search("hamster\x1b]2;owned\x07 cage")
        await wait_for(pilot, lambda: len([d for d, _ in written if d.startswith("\x1b]2;")]) > len(marks))
        await settle(app, pilot)
        last = [d for d, _ in written if d.startswith("\x1b]2;")][-1]
        assert last.count("\x1b") == 1 and last.count("\x07") == 1 and "owned" in last, last


@sync
async def test_context_pane_moves_widens_copies_and_opens(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """The context pane centres on the best shard; keys widen, narrow, step matches and shards, copy, open."""
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        results = await search(app, pilot, "hamster cage")
        screen = app.main_screen
        screen.query_one(ResultsList).focus()
        pane = screen.query_one(ContextPane)
        res = screen.selected
        assert res is results.results[0]
        assert pane.state.path == res.document_path and pane.state.cursor == res.context_shards[0].cursor
        head = str(pane.query_one("#ctx-head").content)
        assert pane.node_id in head and res.document_path in head
        assert pane.window.highlights, "matches are highlighted"
        text = app.index.notes[res.document_path].text
        for h in pane.window.highlights:
            assert text[h.start : h.end].lower().startswith(("hamster", "cage"))
        chars = pane.state.chars
        await pilot.press("ctrl+up")
        assert pane.state.chars > chars
        await pilot.press("ctrl+down", "ctrl+down")
        assert pane.state.chars < chars
        start_match = pane.state.match
        await pilot.press("ctrl+n")
        assert pane.state.match == (start_match + 1) % len(pane.matches)
        assert pane.state.cursor == pane.matches[pane.state.match].start
        await pilot.press("ctrl+b")
        assert pane.state.match == start_match
        if len(res.context_shards) > 1:
            await pilot.press("shift+down")
            assert pane.state.shard == 1 and pane.state.cursor == res.context_shards[1].cursor
            await pilot.press("shift+up")
            assert pane.state.shard == 0
        await pilot.press("ctrl+y")
        assert app.clipboard == pane.node_id
        cursor = pane.state.cursor
        await pilot.press("f3")
        await settle(app, pilot)
        assert isinstance(app.screen, NoteScreen)
        assert app.screen.place.path == res.document_path and app.screen.place.cursor == cursor


@sync
async def test_why_ranked_pane_and_why_not(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """The why pane tabulates each contribution; “Why not?” traces a missing note stage by stage."""
    from textual.widgets import Input, TabbedContent

    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        results = await search(app, pilot, "hamster cage")
        screen = app.main_screen
        screen.query_one(ResultsList).focus()
        await pilot.press("f6")
        assert screen.query_one(TabbedContent).active == "tab-why"
        why = screen.query_one(WhyPane)
        res = results.results[0]
        table = why.query_one("#why-contrib", FitTable)
        assert table.row_count == len(res.explanation.contributions)
        row = table.rows[0]
        c = res.explanation.contributions[0]
        assert row[0] == c.term and row[1] == c.retriever and row[2] == f"#{c.rank}"
        assert (
            abs(sum(x.contribution for x in res.explanation.contributions) - res.explanation.fused_score)
            < 1e-9
        )
        head = str(why.query_one("#why-head").content)
        assert f"fused {res.explanation.fused_score:.5f}" in head and "pass 1" in head
        timings = str(why.query_one("#why-timings").content)
        assert "timings" in timings and "pass1" in timings
        facts = str(why.query_one("#why-search").content)
        assert "terms:" in facts and "rerank: not run" in facts
        # Why not: a note about money is nowhere in a hamster search.
        await pilot.press("f7")
        box = why.query_one("#why-not", Input)
        assert box.has_focus
        box.value = "Finance/index-funds.md"
        await pilot.press("enter")
        await pilot.pause()
        verdict = why.query_one("#why-not-verdict")
        assert verdict.has_class("-missing")
        assert why.report.path == "Finance/index-funds.md"
        stages = [r.stage for r in why.report.rows]
        assert any(s.startswith("bm25 ") for s in stages) and any(s.startswith("dense ") for s in stages)
        assert stages[-2:] == ["fusion (pass 1)", "final list"]
        assert why.query_one("#why-not-table", FitTable).row_count == len(why.report.rows)
        # The proof follows from a worker: each change it shows was run as a search (tests/test_whynot.py).
        await settle(app, pilot)
        assert why.proof is not None and why.proof.path == "Finance/index-funds.md"
        shown = str(why.query_one("#why-not-proof").content)
        assert shown.startswith(why.proof.summary) and why.proof.facts
        assert all(c.claim in shown for c in why.proof.changes)
        # ...and a note in the list is found at its rank, by title.
        box.value = results.results[1].title
        await pilot.press("enter")
        await pilot.pause()
        assert verdict.has_class("-found")
        assert why.proof is None and not str(why.query_one("#why-not-proof").content)
        assert "#2" in str(verdict.content)


@sync
async def test_why_pane_shows_rerank_movement(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """With reranking on, the pane reports the backend, its passes and each result's movement."""
    app = make_app(tui_vault, embedder, tmp_path, settings=Settings())
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        results = await search(app, pilot, "hamster cage")
        why = app.main_screen.query_one(WhyPane)
        await pilot.press("f6")  # the pane is drawn when it is shown
        await pilot.pause()
        facts = str(why.query_one("#why-search").content)
        assert "rerank: " in facts and (results.rerank.backend or "") in facts
        if results.rerank.applied:
            head = str(why.query_one("#why-head").content)
            assert "rerank" in head and "→" in head


@sync
async def test_note_view_links_backlinks_tags_and_history(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """Wikilinks navigate, backlinks and tags are listed, back/forward walk the history."""
    from textual.widgets import Markdown, OptionList

    from explorer.tui.messages import OpenNote

    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.post_message(OpenNote("Pets/hamster-cages-and-bedding.md"))
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, NoteScreen)
        md = screen.query_one("#note-md", Markdown)
        assert (
            "syrian-hamster-care" in md.source
            and "wikilink:" in md.source
            and "[[" not in md.source.split("```")[-1]
        )
        tags = str(screen.query_one("#note-tags").content)
        assert "#pets/hamster" in tags
        backlinks = screen.query_one("#note-backlinks", OptionList)
        expected = {b.source for b in app.index.links().backlinks("Pets/hamster-cages-and-bedding.md")}
        assert backlinks.option_count == len(expected) > 0
        md.post_message(Markdown.LinkClicked(md, wikilink_href("syrian-hamster-care", "Cage size")))
        await settle(app, pilot)
        assert screen.place.path == "Pets/syrian-hamster-care.md" and screen.place.heading == "Cage size"
        assert len(screen.history) == 2
        md.post_message(Markdown.LinkClicked(md, wikilink_href("no-such-note")))
        await settle(app, pilot)
        assert screen.place.path == "Pets/syrian-hamster-care.md"
        await pilot.press("alt+left")
        await settle(app, pilot)
        assert screen.place.path == "Pets/hamster-cages-and-bedding.md"
        await pilot.press("alt+right")
        await settle(app, pilot)
        assert screen.place.path == "Pets/syrian-hamster-care.md"
        backlinks.focus()
        backlinks.highlighted = 0
        target = backlinks.get_option_at_index(0).id.removeprefix("bl:")
        await pilot.press("enter")
        await settle(app, pilot)
        assert screen.place.path == target and len(screen.history) == 3
        await pilot.press("escape")
        await settle(app, pilot)
        assert isinstance(app.screen, MainScreen)


@sync
async def test_vault_tree_filters_and_opens(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """F2 shows the tree; its filter narrows the notes; Enter on a note opens it."""
    from textual.widgets import Tree

    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        screen = app.main_screen
        tree_box = screen.query_one(VaultTree)
        assert not tree_box.display
        screen.query_one(ResultsList).focus()
        await pilot.press("f2")
        assert tree_box.display
        assert len(tree_box.visible_paths()) == len(app.index.notes)
        tree_box.action_focus_filter()
        await pilot.press(*"guinea")
        await pilot.pause(0.3)
        assert tree_box.visible_paths() == ["Pets/guinea-pig-basics.md"]
        await pilot.press("enter")
        tree = tree_box.query_one(Tree)
        assert tree.has_focus
        leaf = next(n for n in _walk(tree.root) if n.data)
        tree.move_cursor(leaf)
        await pilot.press("enter")
        await settle(app, pilot)
        assert isinstance(app.screen, NoteScreen) and app.screen.place.path == "Pets/guinea-pig-basics.md"


def _walk(node):
    for child in node.children:
        yield child
        yield from _walk(child)


@sync
async def test_writing_mode_related_notes_save_and_search(
    tui_vault: Path, remembering_embedder, tmp_path: Path
) -> None:
    """Typing updates related notes; ctrl+s saves atomically; the new words are then found by the search box."""
    from textual.widgets import OptionList, TextArea

    path = "Garden/composting.md"
    app = make_app(tui_vault, remembering_embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        results = await search(app, pilot, "composting")
        assert results.results[0].document_path == path
        app.main_screen.query_one(ResultsList).focus()
        await pilot.press("f4")
        await settle(app, pilot)
        writer = app.screen
        assert isinstance(writer, WriterScreen) and writer.path == path
        editor = writer.query_one(TextArea)
        assert editor.text == (tui_vault / path).read_text(encoding="utf-8")
        end = editor.document.end
        editor.move_cursor(end)
        editor.insert("\n\nMy hamster Biscuit hoards sunflower seeds in her bedding ")
        await pilot.press(*"zorblax", "space", *"quimzel", "full_stop")
        await pilot.pause(0.5)
        await settle(app, pilot)
        assert writer.dirty
        assert "zorblax" in writer.paragraph
        related = writer.query_one("#related", OptionList)
        assert related.option_count > 0 and path not in writer.related_paths
        assert any("hamster" in p for p in writer.related_paths)
        await pilot.press("ctrl+s")
        await settle(app, pilot)
        await wait_for(pilot, lambda: writer.save_count == 1 and not writer.dirty)
        on_disk = (tui_vault / path).read_text(encoding="utf-8")
        assert on_disk == editor.text and "zorblax quimzel" in on_disk
        assert not [p for p in (tui_vault / "Garden").iterdir() if p.name.endswith(".tmp")]
        await pilot.press("escape")
        await settle(app, pilot)
        assert isinstance(app.screen, MainScreen)
        results = await search(app, pilot, "zorblax")
        assert results.results and results.results[0].document_path == path
        # The session's embedding loop embeds the saved note's new shards in its own thread.
        await wait_for(pilot, lambda: not app.index.pending())
        await wait_for(pilot, lambda: app.status.model == "ready")


@sync
async def test_model_loads_in_background_and_results_upgrade(
    tui_vault: Path, embedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Until the model is ready the status says lexical (model loading) and so do the results; then they turn hybrid."""
    from explorer.index.local import model_host
    from explorer.index.local.vault_index import VaultIndex

    gate = threading.Event()

    def slow_load(*_args, **_kwargs):
        """Loading the model waits for the test's signal."""
        gate.wait(20)
        return embedder

    monkeypatch.setattr(model_host, "load_embedder", slow_load)
    index = VaultIndex(tui_vault, quiet_settings())
    index.open()
    states: list[str] = []
    app = make_app(tui_vault, None, tmp_path, index=index)
    async with app.run_test(
        size=SIZE, message_hook=lambda m: states.append(m.state) if isinstance(m, ModelState) else None
    ) as pilot:
        await wait_for(pilot, lambda: app.status.model == "loading")
        status_text = str(app.main_screen.query_one(StatusBar).query_one("#status-right").content)
        assert "lexical · model loading" in status_text
        box = app.main_screen.query_one(SearchBox)
        box.focus()
        await pilot.press(*"hamster cage")
        await pilot.pause(0.3)
        await wait_for(pilot, lambda: app.main_screen.results is not None and app.main_screen.stage == "full")
        assert app.main_screen.results.mode.dense is False
        assert "lexical (model loading)" in str(app.main_screen.query_one(ResultsSummary).content)
        gate.set()
        await wait_for(pilot, lambda: app.status.model == "ready")
        await wait_for(pilot, lambda: app.main_screen.results.mode.dense is True)
        assert "hybrid" in str(app.main_screen.query_one(StatusBar).query_one("#status-right").content)
    assert states[0] == "loading" and states[-1] == "ready"
    index.close()


@sync
async def test_embeddings_off_says_bm25_only(tui_vault: Path, tmp_path: Path) -> None:
    """With embeddings off, no model is loaded and the status says so."""
    app = make_app(tui_vault, None, tmp_path, settings=quiet_settings(**{"index.embeddings": False}))
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        assert app.status.model == "off"
        results = await search(app, pilot, "hamster")
        assert results.mode.dense is False and results.results
        assert "embeddings off" in str(
            app.main_screen.query_one(StatusBar).query_one("#status-right").content
        )
        summary = str(app.main_screen.query_one(ResultsSummary).content)
        assert "lexical (embeddings off)" in summary and "not available" not in summary


@sync
async def test_progress_while_indexing_and_embedding(tmp_path: Path, embedder) -> None:
    """A cold vault reports reading and embedding progress; the bar shows while a stage runs and hides after."""
    from dataclasses import replace

    from textual.widgets import ProgressBar

    from explorer.tui.messages import IndexProgress

    vault = tmp_path / "cold"
    vault.mkdir()
    for i in range(6):
        (vault / f"note{i}.md").write_text(
            f"# Note {i}\n\nHamster fact number {i}: they hoard seeds.\n", encoding="utf-8"
        )
    progress: list[IndexProgress] = []
    app = make_app(vault, embedder, tmp_path)
    async with app.run_test(
        size=SIZE, message_hook=lambda m: progress.append(m) if isinstance(m, IndexProgress) else None
    ) as pilot:
        await settle(app, pilot)
        await wait_for(pilot, lambda: app.status.model == "ready")
        await settle(app, pilot)
        assert {m.stage for m in progress} == {"reading", "embedding"}
        assert any(m.stage == "embedding" and m.done == m.total == 6 for m in progress)
        assert not app.index.pending() and app.status.notes == 6
        bar_widget = app.main_screen.query_one(StatusBar)
        bar = bar_widget.query_one(ProgressBar)
        assert not bar.has_class("-active") and app.status.stage == ""
        bar_widget.show(replace(app.status, stage="embedding", done=3, total=10))
        assert bar.has_class("-active") and bar.progress == 3 and bar.total == 10
        assert "embedding 3/10" in str(bar_widget.query_one("#status-left").content)


@sync
async def test_llm_mode_is_shown(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """A configured LLM is named in the status bar (no search is run: nothing is contacted)."""
    settings = quiet_settings(**{"llm.base_url": "http://127.0.0.1:9/v1", "llm.model": "tiny-test-model"})
    app = make_app(tui_vault, embedder, tmp_path, settings=settings)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        assert app.status.llm == "tiny-test-model"
        assert "LLM: tiny-test-model" in str(
            app.main_screen.query_one(StatusBar).query_one("#status-right").content
        )


@sync
async def test_watcher_follows_outside_edits(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """With the watcher on, a note edited outside the app is re-indexed and the results follow."""
    app = make_app(tui_vault, embedder, tmp_path, watch=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await wait_for(pilot, lambda: app.status.watcher == "watching")
        assert await asyncio.to_thread(app.watcher.wait_idle, 10)
        await search(app, pilot, "frobnicated")
        note = tui_vault / "Coffee" / "new-brew.md"
        note.write_text("# New brew\n\nA frobnicated cold brew recipe.\n", encoding="utf-8")
        assert await asyncio.to_thread(app.watcher.wait_idle, 10)
        await wait_for(
            pilot,
            lambda: any(
                r.document_path == "Coffee/new-brew.md"
                for r in (app.main_screen.results.results if app.main_screen.results else [])
            ),
        )
        await settle(app, pilot)
        assert "Coffee/new-brew.md" in app.main_screen.query_one(VaultTree).titles
        # A note open in the note view is re-rendered when it changes on disk.
        from textual.widgets import Markdown

        from explorer.tui.messages import OpenNote

        app.post_message(OpenNote("Coffee/cold-brew.md"))
        await settle(app, pilot)
        cold = tui_vault / "Coffee" / "cold-brew.md"
        cold.write_text(
            cold.read_text(encoding="utf-8") + "\nAdded outside: quuxberry syrup.\n", encoding="utf-8"
        )
        assert await asyncio.to_thread(app.watcher.wait_idle, 10)
        md = app.screen.query_one("#note-md", Markdown)
        await wait_for(pilot, lambda: "quuxberry" in md.source)


# -- themes, palette, help, sizes, mouse -------------------------------------------------------
@sync
async def test_themes_register_switch_from_palette_and_are_remembered(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """Shipped themes (light and dark) register; a palette command switches; the choice survives a restart."""
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        shipped = load_themes([SHIPPED_THEMES_DIR]).themes
        assert len(shipped) >= 3 and {t.dark for t in shipped} == {True, False}
        assert all(t.name in app.available_themes for t in shipped)
        assert app.theme == "explorer-dark"
        commands = {c.title: c for c in app.get_system_commands(app.screen)}
        assert "Theme: explorer-light" in commands
        await pilot.press("ctrl+p")
        await pilot.pause(0.2)
        await pilot.press(*"explorer-light")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await settle(app, pilot)
        assert app.theme == "explorer-light"
    assert json.loads((tmp_path / "state.json").read_text())["theme"] == "explorer-light"
    again = make_app(tui_vault, embedder, tmp_path)
    async with again.run_test(size=SIZE) as pilot:
        await settle(again, pilot)
        assert again.theme == "explorer-light"


@sync
async def test_bad_theme_files_are_reported_in_one_notification(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """Every broken theme file is named in a single warning; the good ones still load."""
    themes = tmp_path / "themes"
    themes.mkdir()
    (themes / "good.toml").write_text('name = "good"\nprimary = "#336699"\ndark = false\n')
    (themes / "bad-colour.toml").write_text('name = "bad"\nprimary = "not-a-colour"\n')
    (themes / "broken.json").write_text("{not json")
    (themes / "unknown-key.toml").write_text('primary = "#123456"\nsparkle = true\n')
    app = make_app(tui_vault, embedder, tmp_path, theme_dirs=[SHIPPED_THEMES_DIR, themes])
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        assert "good" in app.available_themes
        assert len(app.theme_errors) == 3
        notes = [n for n in app._notifications if n.title == "Themes"]
        assert len(notes) == 1
        for name in ("bad-colour.toml", "broken.json", "unknown-key.toml"):
            assert name in notes[0].message


@sync
async def test_palette_lists_every_action_and_f1_shows_keys(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """Each described binding of the screen is a palette command; F1 opens the key help."""
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        titles = {c.title for c in app.get_system_commands(app.screen)}
        for binding in MainScreen.BINDINGS:
            assert binding.description in titles
        assert {"Mode (SearchBox)", "Filter notes (VaultTree)", "Theme: explorer-sepia"} <= titles
        commands = {c.title: c for c in app.get_system_commands(app.screen)}
        await search(app, pilot, "hamster")
        commands["Why"].callback()
        await settle(app, pilot)
        from textual.widgets import TabbedContent

        assert app.main_screen.query_one(TabbedContent).active == "tab-why"
        app.main_screen.query_one(ResultsList).focus()
        await pilot.press("f1")
        await settle(app, pilot)
        assert isinstance(app.screen, HelpScreen)
        text = " ".join(str(s.content) for s in app.screen.query("Static"))
        for words in ("Widen context", "Next match", "Copy node id", "Previous query", "Keys", "always type"):
            assert words in text
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


@sync
async def test_works_at_80x24(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """At 80x24 every main part is on screen with room to read."""
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        await search(app, pilot, "hamster cage")
        screen = app.main_screen
        for selector in ("#search", "#summary", "#results", "#detail", "StatusBar", "Footer"):
            region = screen.query_one(selector).region
            assert region.width >= 20 and region.height >= 1, selector
            assert region.bottom <= 24 and region.right <= 80, selector
        assert screen.query_one("#results").region.height >= 8
        assert screen.query_one(ContextPane).region.height >= 6


@sync
async def test_mouse_selects_results_and_tabs(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """Clicking a result highlights it; clicking the tab shows the why pane."""
    from textual.widgets import TabbedContent

    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        results = await search(app, pilot, "hamster cage")
        assert app.main_screen.selected is results.results[0]
        await pilot.click(ResultsList, offset=(5, 12))
        await settle(app, pilot)
        chosen = app.main_screen.selected
        assert chosen is not None and chosen is not results.results[0]
        assert app.main_screen.query_one(ContextPane).state.path == chosen.document_path
        await pilot.click("#detail Tab#--content-tab-tab-why")
        await pilot.pause()
        assert app.main_screen.query_one(TabbedContent).active == "tab-why"


# -- pure helpers ------------------------------------------------------------------------------
def test_split_mode_prefixes() -> None:
    """Prefixes pick a classic tool; the toggle is the default; `/hybrid` forces the pipeline."""
    assert split_mode("/phrase floor space") == ("phrase", "floor space")
    assert split_mode("  /AND a b") == ("and", "a b")
    assert split_mode("/fuzzy hamstr") == ("fuzzy", "hamstr")
    assert split_mode("hamster", "fuzzy") == ("fuzzy", "hamster")
    assert split_mode("/hybrid hamster", "fuzzy") == ("", "hamster")
    assert split_mode("/unknown x") == ("", "/unknown x")


def test_note_markdown_keeps_lines_and_turns_wikilinks_into_links(sample_index) -> None:
    """Line numbers survive the conversion; every wikilink becomes a resolvable wikilink: link."""
    for path, note in sample_index.notes.items():
        md = note_markdown(note)
        assert md.count("\n") == note.text.count("\n"), path
        body = md[note.body_start :] if not note.body_start else md
        if any(link.start >= note.body_start for link in note.links):
            assert "](wikilink:" in body, path
    note = sample_index.notes["Pets/hamster-cages-and-bedding.md"]
    md = note_markdown(note)
    # Parsed frontmatter is shown as a properties table: its lines stay, blank.
    front_lines = note.text.count("\n", 0, note.body_start)
    assert note.frontmatter and md.split("\n")[:front_lines] == [""] * front_lines
    assert md.split("\n")[front_lines:] == note_markdown(note).split("\n")[front_lines:]
    assert "title:" not in md and "```yaml" not in md
    assert "[research notes on wheel sizes](wikilink:" in md
    href = wikilink_href("Users/alice/research_cache/hamster-wheel-sizes", "Sizes")
    assert parse_wikilink_href(href) == ("Users/alice/research_cache/hamster-wheel-sizes", "Sizes")
    assert parse_wikilink_href("https://example.org") is None


def test_paragraph_at_and_atomic_write(tmp_path: Path) -> None:
    """The paragraph around a cursor grows backwards when short; saves go through a temp file."""
    text = "First paragraph has quite a few words in it here.\n\nShort one.\n\nThird paragraph."
    assert (
        paragraph_at(text, text.index("Short"))
        == "First paragraph has quite a few words in it here. Short one."
    )
    assert paragraph_at(text, 3) == "First paragraph has quite a few words in it here."
    target = tmp_path / "note.md"
    target.write_text("old", encoding="utf-8")
    target.chmod(0o640)
    write_atomic(target, "new\r\ntext")
    assert target.read_bytes() == b"new\r\ntext"
    assert oct(target.stat().st_mode & 0o777) == oct(0o640)
    assert [p.name for p in tmp_path.iterdir()] == ["note.md"]
