"""The app on a PDF and a canvas: the context pane shows the page or the card, the note view the text."""

from __future__ import annotations

import json
from pathlib import Path

from textual.widgets import Markdown, OptionList

from conftest import SIZE, make_app, open_note, search, settle, sync, wait_for
from explorer.tui.messages import OpenNote
from explorer.tui.screens.note import Place
from explorer.tui.widgets.context_pane import ContextPane
from explorer.tui.widgets.long_text import LongText
from pdfs import text_pdf


@sync
async def test_pdf_and_canvas_in_the_context_pane_and_the_note_view(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    (tui_vault / "Papers").mkdir()
    (tui_vault / "Papers/quokka.pdf").write_bytes(
        text_pdf(["Quokkas live on Rottnest Island.", "A quokka census counts \x1b[2J them yearly."])
    )
    (tui_vault / "zoo.canvas").write_text(
        json.dumps(
            {
                "nodes": [
                    {"id": "c1", "type": "text", "text": "Wombat enclosure plan", "x": 0, "y": 0},
                    {"id": "c2", "type": "file", "file": "Papers/quokka.pdf", "x": 0, "y": 200},
                ],
                "edges": [{"id": "e", "fromNode": "c1", "toNode": "c2", "label": "see"}],
            }
        ),
        encoding="utf-8",
    )
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.refresh_index(["Papers/quokka.pdf", "zoo.canvas"])
        await settle(app, pilot)
        results = await search(app, pilot, "quokka census")
        assert results.results[0].node_id == "Papers/quokka.pdf#page=2"
        await settle(app, pilot)
        pane = app.main_screen.query_one(ContextPane)
        shown = "\n".join(str(w.content) for w in pane.query("Static"))
        assert "Papers/quokka.pdf#page=2" in shown and "census" in shown and "\x1b" not in shown

        await open_note(app, pilot, "Papers/quokka.pdf")
        screen = app.screen
        assert screen.view == "plain" and "text of the PDF" in str(screen.query_one("#note-title").content)
        plain = screen.query_one("#note-plain", LongText)
        assert plain.line(0) == "── page 1 ──" and "Rottnest" in plain.text
        await settle(app, pilot)
        backlinks = screen.query_one("#note-backlinks", OptionList)
        assert any(
            "zoo.canvas" in str(backlinks.get_option_at_index(i).prompt)
            for i in range(backlinks.option_count)
        )

        # A `[[quokka.pdf#page=2]]` link opens the PDF at that page.
        await screen.go(Place("Papers/quokka.pdf", None, "page=2"))
        await settle(app, pilot)
        assert plain.mark is not None and plain.line(plain.mark).startswith("A quokka census")

        app.post_message(OpenNote("zoo.canvas"))
        await wait_for(
            pilot, lambda: app.screen.place.path == "zoo.canvas" and app.screen.first_screen_s is not None
        )
        await settle(app, pilot)
        assert app.screen.view == "markdown"
        assert "Wombat enclosure plan" in app.screen.query_one("#note-md", Markdown).source
