"""Calm progressive results: one update when the full stage is close behind, never back to a lower stage, upgrades without retyping."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from conftest import SIZE, make_app, quiet_settings, search, settle, sync, wait_for
from explorer.engine import make_pipeline
from explorer.tui.messages import ModelState, ResultsShown, SearchFinished
from explorer.tui.widgets.results import ResultsSummary
from explorer.tui.widgets.search_box import SearchBox


class GatedFull:
    """The real pipeline; while `gate` is clear, a search waits after reporting its lexical stage."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()

    def search(self, query: str, *args: Any, on_stage: Any = None, **kwargs: Any):
        cancelled = kwargs.get("cancelled")

        def stage(name: str, results: Any) -> None:
            if on_stage is not None:
                on_stage(name, results)
            if name == "lexical" and not self.gate.is_set():
                self.waiting.set()
                while not self.gate.wait(0.01):
                    if cancelled and cancelled():
                        break

        return self.inner.search(query, *args, on_stage=stage, **kwargs)


def shown_stages(seen: list[Any]) -> list[str]:
    """The stages the main screen drew, from the messages it posted (each once, though it is seen
    again as it bubbles up to the app)."""
    shown = {id(m): m for m in seen if isinstance(m, ResultsShown)}
    return [m.stage for m in shown.values()]


@sync
async def test_a_full_stage_close_behind_is_the_only_render(
    tui_vault: Path, embedder, tmp_path: Path, monkeypatch
) -> None:
    """When the hybrid stage follows within the hold, the lexical one is never drawn: one update per query."""
    import explorer.tui.screens.main as main_screen

    monkeypatch.setattr(main_screen, "LEXICAL_HOLD_S", 30.0)  # "close behind" on any machine
    seen: list[Any] = []
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
        await settle(app, pilot)
        seen.clear()
        await search(app, pilot, "hamster cage")
        await settle(app, pilot)
        assert [m.stage for m in seen if isinstance(m, SearchFinished)] == ["lexical", "full"]
        assert shown_stages(seen) == ["full"]


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

    seen: list[Any] = []
    app = make_app(tui_vault, embedder, tmp_path, pipeline_factory=factory)
    async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
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
        # its ResultsShown reaches the app after the screen has handled it: let that happen before clearing
        await settle(app, pilot)
        # An index change searches the same query again: its lexical stage must not replace the list.
        pipe.gate.clear()
        pipe.waiting.clear()
        seen.clear()
        (tui_vault / "Inbox" / "new idea.md").parent.mkdir(exist_ok=True)
        (tui_vault / "Inbox" / "new idea.md").write_text("# New idea\n\nA kite.\n", encoding="utf-8")
        app.refresh_index(["Inbox/new idea.md"])
        assert await asyncio.to_thread(pipe.waiting.wait, 10)
        await pilot.pause(0.4)
        assert screen.results is full and screen.stage == "full" and shown_stages(seen) == []
        pipe.gate.set()
        await wait_for(pilot, lambda: screen.results is not full)
        assert shown_stages(seen) == ["full"] and screen.results.mode.dense


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
    from explorer.tui.searching import highlight_terms
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


@sync
async def test_one_term_writer_call_per_query(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """With an LLM term writer, a query's lexical stage and its hybrid result come from one search:
    the endpoint (a real HTTP server on 127.0.0.1) is asked for terms once per query, also when
    it fails (a failed reply is not cached, so a second search would ask again)."""
    from explorer.search.core.llm import TERMS_SYSTEM
    from llm_server import FakeLLMServer, error, prompt_of, text

    def answer(request: dict[str, Any]):
        if request["messages"][0]["content"] == TERMS_SYSTEM:
            return error(500)
        return text("SUFFICIENT")

    seen: list[Any] = []
    with FakeLLMServer(answer) as server:
        settings = quiet_settings(
            **{"llm.base_url": server.base_url, "llm.model": "fake-model", "llm.timeout_s": 5.0}
        )
        app = make_app(tui_vault, embedder, tmp_path, settings=settings)
        async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
            await wait_for(pilot, lambda: app.status.index == "ready" and app.status.model == "ready")
            await settle(app, pilot)
            seen.clear()
            results = await search(app, pilot, "hamster cage")
            await settle(app, pilot)
        asked = [r for r in server.requests if r["messages"][0]["content"] == TERMS_SYSTEM]
        assert len(asked) == 1 and "hamster cage" in prompt_of(asked[0])
    stages = {id(m): m for m in seen if isinstance(m, SearchFinished)}.values()
    assert [m.stage for m in stages] == ["lexical", "full"]
    assert all(m.results.mode.terms == "llm->keywords" for m in stages)
    assert results.mode.dense and not next(iter(stages)).results.mode.dense


def test_lexical_stage_is_the_lexical_search(sample_pipeline) -> None:
    """The lexical stage a search reports is what a BM25-only, one-pass search of the query gives."""
    stages: list[tuple[str, Any]] = []
    full = sample_pipeline.search(
        "hamster cage bedding", on_stage=lambda n, r: stages.append((n, r)), lexical_stage=True, record=False
    )
    lexical = sample_pipeline.search("hamster cage bedding", dense=False, two_pass=False, rerank=False)
    assert [n for n, _ in stages] == ["lexical", "pass1", "quality"]
    staged = stages[0][1]
    assert [(r.document_path, round(r.score, 9)) for r in staged.results] == [
        (r.document_path, round(r.score, 9)) for r in lexical.results
    ]
    assert not staged.mode.dense and full.mode.dense
    assert staged.quality.level == lexical.quality.level


@sync
async def test_context_pane_draws_the_window_the_search_worker_built(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """The pane's first window of a result (its matches in the whole note, the window, its embeds) is
    the one built in the search's worker thread with the results, not computed again on the UI thread;
    another result, or another window size, is computed for itself."""
    from explorer.tui.widgets.context_pane import ContextPane

    seen: list[Any] = []
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
        await wait_for(pilot, lambda: app.status.index == "ready" and app.status.model == "ready")
        results = await search(app, pilot, "hamster cage")
        screen = app.main_screen
        pane = screen.query_one(ContextPane)
        final = [m for m in seen if isinstance(m, SearchFinished) and m.results is results][-1]
        ready = final.context
        assert ready is not None and ready.path == results.results[0].document_path
        await wait_for(pilot, lambda: pane.window is not None and pane.state.path == ready.path)
        assert pane.window is ready.window and pane.matches is ready.matches
        assert ready.window.highlights and ready.matches
        screen.query_one("#results").focus()
        await pilot.press("down")
        await wait_for(pilot, lambda: pane.state is not None and pane.state.path != ready.path)
        assert pane.window is not ready.window and pane.window.path == results.results[1].document_path
