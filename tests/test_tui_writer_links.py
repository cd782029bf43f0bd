"""Writing mode's link suggestions: a named note comes first, ctrl+g links it in the buffer, ctrl+z undoes it,
and the file on disk is never touched by either."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import OptionList, TextArea

from conftest import SIZE, make_app, settle, sync, wait_for
from explorer.tui.messages import EditNote
from explorer.tui.screens.writer import WriterScreen

PATH = "Garden/composting.md"


async def _writer(app, pilot) -> WriterScreen:
    await settle(app, pilot)
    app.post_message(EditNote(PATH))
    await settle(app, pilot)
    writer = app.screen
    assert isinstance(writer, WriterScreen)
    return writer


async def _sentences_embedded_ahead(app, pilot, writer: WriterScreen) -> None:
    """Opening a note in writing mode embeds its sentences in the background, so the first word typed in
    any of its paragraphs embeds only its own sentence: nothing is left to embed after."""
    await app.workers.wait_for_complete()
    await settle(app, pilot)
    suggester = writer._link_suggester()
    assert suggester is not None
    text = writer.query_one(TextArea).text
    assert text.count("\n\n") >= 2  # several paragraphs, not only the one at the cursor
    assert suggester.prepare(text) == 0


async def _ctrl_g_links_the_named_note_over_its_words(tui_vault: Path, pilot, writer: WriterScreen) -> None:
    """A note named in the text comes first; ctrl+g links it over its words, ctrl+z undoes it; the file
    on disk is not touched."""
    before = (tui_vault / PATH).read_bytes()
    editor = writer.query_one(TextArea)
    editor.move_cursor(editor.document.end)
    editor.insert("\n\nThe grounds from my cold brew go on the heap with the peelings")
    typed = editor.text
    await wait_for(pilot, lambda: writer.suggestions and writer.suggestions[0].kind == "mention")
    first = writer.suggestions[0]
    assert first.path == "Coffee/cold-brew.md" and first.link == "[[cold-brew|cold brew]]"
    assert "named here" in str(writer.query_one("#related", OptionList).get_option_at_index(0).prompt)
    await pilot.press("ctrl+g")
    linked = typed.replace("my cold brew go", "my [[cold-brew|cold brew]] go")
    assert editor.text == linked
    # The cursor stands after the link, so typing goes on from there.
    assert editor.document.get_index_from_location(editor.cursor_location) == linked.index(
        "cold brew]]"
    ) + len("cold brew]]")
    # Linked now: the note is marked, not offered again.
    await wait_for(
        pilot,
        lambda: (
            any(s.path == first.path and s.kind == "linked" for s in writer.suggestions)
            or first.path not in writer.related_paths
        ),
    )
    assert not any(s.path == first.path and s.kind == "mention" for s in writer.suggestions)
    await pilot.press("ctrl+z")
    assert editor.text == typed
    assert (tui_vault / PATH).read_bytes() == before


async def _ctrl_g_on_a_related_note_inserts_at_the_cursor(
    tui_vault: Path, app, pilot, writer: WriterScreen
) -> None:
    """A note found by the search (not named in the text) is linked where the cursor is; ctrl+z takes it out."""
    before = (tui_vault / PATH).read_bytes()
    editor = writer.query_one(TextArea)
    editor.focus()
    editor.move_cursor(editor.document.end)
    editor.insert("\n\nMy hamster hoards sunflower seeds in her bedding; see ")
    typed = editor.text
    await wait_for(pilot, lambda: bool(writer.suggestions) and writer.paragraph.startswith("My hamster"))
    await settle(app, pilot)
    idx = next(i for i, s in enumerate(writer.suggestions) if s.kind == "related")
    await pilot.press("ctrl+l", "home", *["down"] * idx)
    assert writer.query_one("#related", OptionList).highlighted == idx
    pick = writer.suggestions[idx]
    await pilot.press("ctrl+g")
    assert editor.text == typed + pick.link and editor.has_focus
    await pilot.press("ctrl+z")
    assert editor.text == typed
    assert (tui_vault / PATH).read_bytes() == before


async def _a_finished_word_asks_sooner_than_a_word_being_typed(
    pilot, writer: WriterScreen, monkeypatch
) -> None:
    """After a space the list is asked for after WORD_END_DELAY; inside a word after RELATED_DELAY.
    Each delay is made ten minutes in turn, so only the other one can bring the list."""
    from explorer.tui.screens import writer as writer_module

    editor = writer.query_one(TextArea)
    editor.focus()
    editor.move_cursor(editor.document.end)
    monkeypatch.setattr(writer_module, "RELATED_DELAY", 600.0)
    monkeypatch.setattr(writer_module, "WORD_END_DELAY", 0.05)
    for ch in "\n\nMy hamster hoards sunflower seeds ":
        await pilot.press(ch if ch not in " \n" else {"\n": "enter", " ": "space"}[ch])
    await wait_for(pilot, lambda: writer.paragraph.endswith("sunflower seeds"))
    monkeypatch.setattr(writer_module, "RELATED_DELAY", 0.05)
    monkeypatch.setattr(writer_module, "WORD_END_DELAY", 600.0)
    for ch in "bedd":
        await pilot.press(ch)
    await wait_for(pilot, lambda: writer.paragraph.endswith("seeds bedd"))


@sync
async def test_writer_embeds_ahead_links_with_ctrl_g_undoes_with_ctrl_z_and_asks_sooner_after_a_word(
    tui_vault: Path, remembering_embedder, tmp_path: Path, monkeypatch
) -> None:
    """One writer on a note (its set-up, fitting the vault's link scorer, is paid once): its sentences are
    embedded ahead; ctrl+g links a named note over its words and ctrl+z undoes it; ctrl+g links a
    related note at the cursor and ctrl+z takes it out; a finished word asks for the list sooner than a
    word being typed; the file on disk is never touched."""
    before = (tui_vault / PATH).read_bytes()
    app = make_app(tui_vault, remembering_embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        writer = await _writer(app, pilot)
        await _sentences_embedded_ahead(app, pilot, writer)
        await _ctrl_g_links_the_named_note_over_its_words(tui_vault, pilot, writer)
        await _ctrl_g_on_a_related_note_inserts_at_the_cursor(tui_vault, app, pilot, writer)
        await _a_finished_word_asks_sooner_than_a_word_being_typed(pilot, writer, monkeypatch)
        await pilot.press("escape", "escape")
        await settle(app, pilot)
    assert (tui_vault / PATH).read_bytes() == before
