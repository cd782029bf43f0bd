"""SVG snapshots of the app's main views at a fixed size, with stable content (fixed timings, no rerank, no blink)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import make_app, search, settle, sync, wait_for
from explorer.engine import make_pipeline
from explorer.tui.messages import EditNote, OpenNote

SIZE = (120, 40)


@pytest.fixture(autouse=True)
def one_results_render(monkeypatch: pytest.MonkeyPatch) -> None:
    """Draw only the final stage: whether a lexical stage is drawn first depends on machine load."""
    import explorer.tui.screens.main as main_screen

    monkeypatch.setattr(main_screen, "LEXICAL_HOLD_S", 60.0)


class FixedTimings:
    """The real pipeline, with stage timings replaced by constants so screenshots do not vary."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        # Everything else is the real pipeline's (the writer's link suggester reads its index and settings).
        return getattr(self.inner, name)

    def search(self, *args: Any, **kwargs: Any):
        results = self.inner.search(*args, **kwargs)
        results.timings_ms = dict.fromkeys(results.timings_ms, 1.0)
        return results


@pytest.fixture
def snap(snap_compare):
    """`snap_compare`, and the app must not have stopped on an error (its picture would still compare)."""

    def compare(app: Any, **kwargs: Any) -> bool:
        same = snap_compare(app, **kwargs)
        # Textual keeps an unhandled error for test frameworks (`exit` with the picture resets the return code).
        assert app._exception is None, f"the app stopped on an error before its picture: {app._exception!r}"
        return same

    return compare


def snap_app(vault: Path, embedder: Any, tmp_path: Path, **kwargs: Any):
    """The test app with stable timings."""
    return make_app(
        vault, embedder, tmp_path, pipeline_factory=lambda i, s: FixedTimings(make_pipeline(i, s)), **kwargs
    )


def no_blink(app: Any) -> None:
    """Stop every cursor from blinking (a blink phase would change the picture)."""
    for widget in app.screen.query("Input, TextArea"):
        widget.cursor_blink = False


async def ready(pilot: Any) -> None:
    """Wait for the index and the model."""
    app = pilot.app
    await wait_for(pilot, lambda: app.status.index == "ready" and app.status.model == "ready")
    await settle(app, pilot)
    no_blink(app)


async def with_results(pilot: Any, query: str = "hamster cage") -> None:
    """Search, then move to the results list."""
    await ready(pilot)
    await search(pilot.app, pilot, query)
    pilot.app.main_screen.query_one("#results").focus()
    await settle(pilot.app, pilot)
    no_blink(pilot.app)


def test_snapshot_main_results(tui_vault: Path, embedder, tmp_path: Path, snap) -> None:
    """Main screen: quality line, ranked results with badges, context of the first."""
    assert snap(snap_app(tui_vault, embedder, tmp_path), terminal_size=SIZE, run_before=with_results)


def test_snapshot_context_pane(tui_vault: Path, embedder, tmp_path: Path, snap) -> None:
    """Context pane after stepping to the next match and narrowing the window."""

    async def run_before(pilot: Any) -> None:
        await with_results(pilot)
        await pilot.press("ctrl+n", "ctrl+down")
        await settle(pilot.app, pilot)

    assert snap(snap_app(tui_vault, embedder, tmp_path), terminal_size=SIZE, run_before=run_before)


def test_snapshot_why_ranked(tui_vault: Path, embedder, tmp_path: Path, snap) -> None:
    """Why-ranked pane: contributions table, search facts, timings."""

    async def run_before(pilot: Any) -> None:
        await with_results(pilot)
        await pilot.press("f6")
        await settle(pilot.app, pilot)

    assert snap(snap_app(tui_vault, embedder, tmp_path), terminal_size=SIZE, run_before=run_before)


def test_snapshot_note_view(tui_vault: Path, embedder, tmp_path: Path, snap) -> None:
    """Note view: rendered Markdown with wikilinks, tags, backlinks and links."""

    async def run_before(pilot: Any) -> None:
        await ready(pilot)
        pilot.app.post_message(OpenNote("Pets/hamster-cages-and-bedding.md"))
        await settle(pilot.app, pilot)

    assert snap(snap_app(tui_vault, embedder, tmp_path), terminal_size=SIZE, run_before=run_before)


def test_snapshot_writing_mode(tui_vault: Path, remembering_embedder, tmp_path: Path, snap) -> None:
    """Writing mode: editor with unsaved text and the related notes of the current paragraph."""

    async def run_before(pilot: Any) -> None:
        await ready(pilot)
        pilot.app.post_message(EditNote("Garden/composting.md"))
        await settle(pilot.app, pilot)
        editor = pilot.app.screen.query_one("TextArea")
        editor.move_cursor(editor.document.end)
        editor.insert("\n\nHamster bedding (paper, aspen) can go on the compost heap.")
        editor.scroll_cursor_visible()
        await pilot.pause(0.5)
        await settle(pilot.app, pilot)
        # The picture is of the finished list: the related search's results under the named notes.
        screen = pilot.app.screen
        head = screen.query_one("#related-head")
        await wait_for(pilot, lambda: bool(screen.suggestions) and "Links (hybrid)" in str(head.content))
        await settle(pilot.app, pilot)
        # The related list takes the focus: an editor cursor's blink phase would vary.
        pilot.app.screen.query_one("#related").focus()
        await settle(pilot.app, pilot)

    assert snap(
        snap_app(tui_vault, remembering_embedder, tmp_path), terminal_size=SIZE, run_before=run_before
    )


def test_snapshot_light_theme(tui_vault: Path, embedder, tmp_path: Path, snap) -> None:
    """The main screen in the shipped light theme."""

    async def run_before(pilot: Any) -> None:
        pilot.app.theme = "explorer-light"
        await with_results(pilot, "coffee grinder")

    assert snap(snap_app(tui_vault, embedder, tmp_path), terminal_size=SIZE, run_before=run_before)


@sync
async def test_small_terminal(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """The main screen works at 80x24: results, the quality line and the context pane all show.

    (Checked by content, not by picture: at this height the context pane's scroll position
    depends on layout timing.)
    """
    app = snap_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await with_results(pilot)
        screen = app.main_screen
        results = screen.query_one("#results")
        assert results.option_count == 15
        assert results.region.width >= 30 and results.region.height >= 8
        shot = app.export_screenshot()
        assert any(
            f"quality&#160;{level}" in shot or f"quality {level}" in shot
            for level in ("high", "medium", "low")
        )
        for text in ("Results (15)", "Hamsters", "Users/alice/Knowledge/hamsters.md", "shard 1/"):
            assert text.replace(" ", "&#160;") in shot or text in shot, text


NARROW = (80, 24)


def test_snapshot_narrow_results(tui_vault: Path, embedder, tmp_path: Path, snap) -> None:
    """80x24: results (two lines each) stacked over the context pane, no tree."""

    async def run_before(pilot: Any) -> None:
        await with_results(pilot)
        # At this height the pane's scroll to the cursor can land a frame late: settle it.
        await pilot.pause(0.3)
        pilot.app.main_screen.query_one("#context")._scroll_to_cursor()
        await settle(pilot.app, pilot)

    assert snap(snap_app(tui_vault, embedder, tmp_path), terminal_size=NARROW, run_before=run_before)


def test_snapshot_narrow_why_ranked(tui_vault: Path, embedder, tmp_path: Path, snap) -> None:
    """80x24: the why-ranked pane under the results, its table at full width."""

    async def run_before(pilot: Any) -> None:
        await with_results(pilot)
        await pilot.press("f6")
        await settle(pilot.app, pilot)

    assert snap(snap_app(tui_vault, embedder, tmp_path), terminal_size=NARROW, run_before=run_before)


EMBEDS = {
    "Lang/日本語の勉強.md": (
        "---\ntitle: 日本語の勉強\naliases: [Japanese study, にほんご]\ntags: [learning]\n"
        "resources:\n  - name: Genki\n    kind: textbook\nscore: 7.5\n---\n"
        "# 日本語の勉強\n\n毎日の練習 — daily kanji practice.\n\n## 漢字\n\n漢字は難しい。Kanji review every morning. ^kanji\n"
    ),
    "Projects/🚀 Launch plan.md": (
        "---\ntags: [project]\nchecklist: [design, build, ship]\nowner: {name: Ana, team: web}\n---\n"
        "# 🚀 Launch plan\n\nFamily 👨‍👩‍👧 launch party ❤️ with hamster cake.\n\n![[日本語の勉強#漢字]]\n\n"
        "![[Nowhere note]]\n\n## Timeline\n\nWeek 1 design, week 2 build.\n"
    ),
}


def test_snapshot_note_properties_and_embeds(tui_vault: Path, embedder, tmp_path: Path, snap) -> None:
    """Note view: frontmatter as a properties table, an embedded section boxed with its node_id, an unresolved embed marked."""
    from conftest import write_notes

    write_notes(tui_vault, EMBEDS)

    async def run_before(pilot: Any) -> None:
        await ready(pilot)
        pilot.app.post_message(OpenNote("Projects/🚀 Launch plan.md"))
        await settle(pilot.app, pilot)

    assert snap(snap_app(tui_vault, embedder, tmp_path), terminal_size=SIZE, run_before=run_before)


def test_snapshot_narrow_note_view(tui_vault: Path, embedder, tmp_path: Path, snap) -> None:
    """80x24 note view with wide characters, properties and an embed."""
    from conftest import write_notes

    write_notes(tui_vault, EMBEDS)

    async def run_before(pilot: Any) -> None:
        await ready(pilot)
        pilot.app.post_message(OpenNote("Projects/🚀 Launch plan.md"))
        await settle(pilot.app, pilot)

    assert snap(snap_app(tui_vault, embedder, tmp_path), terminal_size=NARROW, run_before=run_before)
