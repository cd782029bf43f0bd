"""The app's F7 at 80x24: the “Why not?” box comes into view, and so does the proof when it arrives."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Input

from conftest import make_app, search, settle, sync, wait_for
from explorer.tui.widgets.why_pane import WhyPane


def _inside(inner, outer) -> bool:
    return outer.y <= inner.y and inner.y + inner.height <= outer.y + outer.height


@sync
async def test_f7_box_and_proof_come_into_view_on_a_small_terminal(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        await search(app, pilot, "hamster cage")
        await pilot.press("f7")
        why = app.main_screen.query_one(WhyPane)
        box = why.query_one("#why-not", Input)
        # Scrolling into view takes a few frames: wait for it (bounded) rather than a fixed pause.
        await wait_for(pilot, lambda: box.has_focus and _inside(box.region, why.region), timeout=30.0)
        box.value = "Finance/index-funds.md"
        await pilot.press("enter")
        await settle(app, pilot)
        await wait_for(pilot, lambda: why.proof is not None, timeout=60.0)
        assert why.proof is not None and why.proof.path == "Finance/index-funds.md"
        proof = why.query_one("#why-not-proof")
        await wait_for(
            pilot,
            lambda: (
                proof.region.height > 1 and why.region.y <= proof.region.y < why.region.y + why.region.height
            ),
            timeout=30.0,
        )
