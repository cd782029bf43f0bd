"""Calm progressive results: one update when the full stage is close behind, never back to a lower stage, upgrades without retyping."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from test_tui import SIZE, make_app, search, settle, sync, tui_vault, wait_for, warm_cache  # noqa: F401 - fixtures

from explorer.engine import make_pipeline
from explorer.tui.messages import ModelState, SearchFinished
from explorer.tui.widgets.results import ResultsSummary
from explorer.tui.widgets.search_box import SearchBox


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
async def test_a_full_stage_close_behind_is_the_only_render(tui_vault: Path, embedder, tmp_path: Path, monkeypatch) -> None:
    """When the hybrid stage follows within the hold, the lexical one is never drawn: one update per query."""
    import explorer.tui.screens.main as main_screen

    monkeypatch.setattr(main_screen, "LEXICAL_HOLD_S", 30.0)  # "close behind" on any machine
    seen: list[str] = []
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE, message_hook=lambda m: seen.append(m.stage) if isinstance(m, SearchFinished) else None) as pilot:
        await settle(app, pilot)
        shown = spy_renders(app.main_screen)
        await search(app, pilot, "hamster cage")
        await settle(app, pilot)
        assert seen == ["lexical", "full"]
        assert shown == ["full"]


@sync
async def test_slow_full_stage_shows_lexical_then_upgrades_and_never_regresses(tui_vault: Path, embedder, tmp_path: Path) -> None:
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
