"""Calm progressive results: one update when the full stage is close behind, never back to a lower stage, upgrades without retyping."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from explorer.engine import make_pipeline
from explorer.tui.messages import ModelState, SearchFinished
from explorer.tui.widgets.results import ResultsSummary
from explorer.tui.widgets.search_box import SearchBox
from test_tui import SIZE, make_app, search, settle, sync, wait_for


class GatedFull:
    """The real pipeline; while `gate` is clear, full (non-lexical) searches wait for it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()

    def search(self, query: str, *args: Any, dense: bool = True, two_pass: bool = True, **kwargs: Any):
        if two_pass and not self.gate.is_set():
            self.waiting.set()
            while not self.gate.wait(0.01):
                cancelled = kwargs.get("cancelled")
                if cancelled and cancelled():
                    break
        return self.inner.search(query, *args, dense=dense, two_pass=two_pass, **kwargs)


def spy_renders(screen: Any) -> list[str]:
    """Record the stage of every results render of the main screen."""
    shown: list[str] = []
    real = screen._show_results

    def show(message: SearchFinished) -> None:
        shown.append(message.stage)
        real(message)

    screen._show_results = show
    return shown


@sync
async def test_a_full_stage_close_behind_is_the_only_render(
    tui_vault: Path, embedder, tmp_path: Path, monkeypatch
) -> None:
    """When the hybrid stage follows within the hold, the lexical one is never drawn: one update per query."""
    import explorer.tui.screens.main as main_screen

    monkeypatch.setattr(main_screen, "LEXICAL_HOLD_S", 30.0)  # "close behind" on any machine
    seen: list[str] = []
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(
        size=SIZE, message_hook=lambda m: seen.append(m.stage) if isinstance(m, SearchFinished) else None
    ) as pilot:
        await settle(app, pilot)
        shown = spy_renders(app.main_screen)
        await search(app, pilot, "hamster cage")
        await settle(app, pilot)
        assert seen == ["lexical", "full"]
        assert shown == ["full"]


@sync
async def test_slow_full_stage_shows_lexical_then_upgrades_and_never_regresses(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """A slow hybrid stage: lexical results show (saying the hybrid is coming), then hybrid in place;
    a re-run of the same query keeps the hybrid list until its own hybrid stage arrives."""
    gated: list[GatedFull] = []

    def factory(index: Any, settings: Any) -> GatedFull:
        gated.append(GatedFull(make_pipeline(index, settings)))
        return gated[-1]

    app = make_app(tui_vault, embedder, tmp_path, pipeline_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        screen = app.main_screen
        pipe = gated[0]
        pipe.gate.clear()
        box = screen.query_one(SearchBox)
        box.focus()
        box.value = "hamster cage"
        assert await asyncio.to_thread(pipe.waiting.wait, 10)
        await wait_for(pilot, lambda: screen.stage == "lexical")
        assert "hybrid coming" in str(screen.query_one(ResultsSummary).content)
        pipe.gate.set()
        await wait_for(pilot, lambda: screen.stage == "full")
        full = screen.results
        assert full.mode.dense
        # The same query again (as after an index change): the lexical stage must not replace it.
        pipe.gate.clear()
        pipe.waiting.clear()
        shown = spy_renders(screen)
        screen.run_search("hamster cage")
        assert await asyncio.to_thread(pipe.waiting.wait, 10)
        await pilot.pause(0.4)
        assert screen.results is full and screen.stage == "full" and shown == []
        pipe.gate.set()
        await wait_for(pilot, lambda: screen.results is not full)
        assert shown == ["full"] and screen.results.mode.dense


@sync
async def test_results_upgrade_when_every_vector_is_in(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """Results computed while vectors were still being embedded are searched again when the model is ready."""
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        screen = app.main_screen
        app.post_message(ModelState("embedding", "onnx"))
        await pilot.pause()
        first = await search(app, pilot, "hamster cage")
        assert screen.results_model == "embedding"
        summary = str(screen.query_one(ResultsSummary).content)
        assert "hybrid" in summary
        app.post_message(ModelState("ready", "onnx"))
        await wait_for(pilot, lambda: screen.results is not first and screen.stage == "full")
        assert screen.results_model == "ready" and screen.results.query == first.query


@sync
async def test_rows_built_in_the_search_worker_draw_the_same_list(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """The results rows the search worker builds are the rows the list would build itself, and rows
    built for another layout (two-line) or other highlighted words are not used."""
    from explorer.tui.screens.main import highlight_terms
    from explorer.tui.widgets.results import ResultsList, RowLayout, prepare_rows

    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.status.index == "ready" and app.status.model == "ready", timeout=60)
        results = await search(app, pilot, "hamster cage")
        screen = app.main_screen
        rl = screen.query_one(ResultsList)

        def drawn() -> list[str]:
            return ["".join(seg.text for seg in rl.render_line(y)) for y in range(rl.size.height - 2)]

        words, phrases = highlight_terms("", "hamster cage")
        rl.show(results, words, phrases)
        await pilot.pause()
        own = drawn()
        rl.show(results, words, phrases, prepared=prepare_rows(results, words, phrases, rl.row_layout()))
        await pilot.pause()
        assert drawn() == own and "Hamster" in "".join(own)
        for stale in (
            prepare_rows(results, words, phrases, RowLayout(True, rl.row_layout().width)),
            prepare_rows(results, ["cage"], [], rl.row_layout()),
        ):
            rl.show(results, words, phrases, prepared=stale)
            await pilot.pause()
            assert drawn() == own


@sync
async def test_context_pane_follows_an_edit_of_the_shown_note(
    tui_vault: Path, embedder, tmp_path: Path, monkeypatch
) -> None:
    """The context pane skips a redraw only when nothing changed: after a word of the highlighted
    note is edited outside the app (same length, so every offset stays), the search re-run that
    keeps that result shows the edited text."""
    import explorer.tui.screens.main as main_screen
    from explorer.tui.widgets.context_pane import ContextPane

    monkeypatch.setattr(
        main_screen, "LEXICAL_HOLD_S", 60.0
    )  # only the full stage is drawn: one redraw to check

    app = make_app(tui_vault, embedder, tmp_path, watch=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.status.index == "ready" and app.status.model == "ready", timeout=60)
        await wait_for(pilot, lambda: app.status.watcher == "watching")
        await search(app, pilot, "hamster cage")
        screen = app.main_screen
        pane = screen.query_one(ContextPane)
        screen.query_one("#results").focus()
        await pilot.press("down")  # a chosen result (not the automatic first) keeps its highlight on a re-run
        await wait_for(
            pilot,
            lambda: pane.state is not None and pane.state.path == screen.results.results[1].document_path,
        )
        path, window = pane.state.path, pane.window
        word = next(
            w
            for w in window.text[pane.state.cursor - window.start :].split()
            if w.isalpha() and len(w) >= 5 and not {"hamster", "cage"} & {w.lower().rstrip("s")}
        )
        note = tui_vault / path
        text = note.read_text(encoding="utf-8")
        at = text.index(word, pane.state.cursor)
        note.write_text(text[:at] + "Q" * len(word) + text[at + len(word) :], encoding="utf-8")
        assert await asyncio.to_thread(app.watcher.wait_idle, 10)
        await wait_for(pilot, lambda: pane.window is not None and "Q" * len(word) in pane.window.text)
        assert pane.state.path == path == screen.selected.document_path
