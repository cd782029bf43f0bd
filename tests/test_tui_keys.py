"""The key model: no binding is a printable key or a text widget's own key; typed words never reach a command or a file."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest
from textual import events
from textual.binding import Binding
from textual.widgets import Input, OptionList, TextArea

from conftest import SIZE, make_app, search, settle, sync, wait_for
from explorer.tui import keys
from explorer.tui.messages import EditNote, OpenNote
from explorer.tui.screens.main import MainScreen
from explorer.tui.screens.note import NoteScreen
from explorer.tui.screens.writer import WriterScreen
from explorer.tui.widgets.results import ResultsList
from explorer.tui.widgets.search_box import SearchBox
from explorer.tui.widgets.vault_tree import VaultTree

NOT_PRINTABLE = {
    "escape",
    "enter",
    "tab",
    "backspace",
    "delete",
    "insert",
    "up",
    "down",
    "left",
    "right",
    "home",
    "end",
    "pageup",
    "pagedown",
}

#: Every key map with the text widget that shares its screen.
KEY_MAPS = {
    "APP": (keys.APP, None),
    "MAIN": (keys.MAIN, Input),
    "SEARCH_BOX": (keys.SEARCH_BOX, None),
    "VAULT_TREE": (keys.VAULT_TREE, Input),
    "NOTE": (keys.NOTE, None),
    "WRITER": (keys.WRITER, TextArea),
    "HELP": (keys.HELP, None),
}

#: A sentence using every letter, digit and symbol a command key used to be bound to.
WORDS = "we can't open why-not? notes [2] + a yellow bee; find: /fuzzy N W e o"


def key_list(bindings: list[Binding]) -> list[str]:
    return [k.strip() for b in bindings for k in b.key.split(",")]


def printable(key: str) -> bool:
    *mods, name = key.split("+") if key != "plus" else ["plus"]
    if {"ctrl", "alt", "super", "meta"} & set(mods):
        return False
    return name not in NOT_PRINTABLE and not (name[:1] == "f" and name[1:].isdigit())


def vault_digest(vault: Path) -> dict[str, str]:
    """Every file of the vault (not the index folder) by content hash."""
    out = {}
    for p in sorted(vault.rglob("*")):
        if p.is_file() and ".explorer" not in p.relative_to(vault).parts:
            out[str(p.relative_to(vault))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.mark.parametrize("name", sorted(KEY_MAPS))
def test_no_command_is_a_printable_key_or_a_text_widget_key(name: str) -> None:
    """Rule 1 and 2 of explorer.tui.keys, for each key map."""
    bindings, text_widget = KEY_MAPS[name]
    names = key_list(bindings)
    assert not [k for k in names if printable(k)], f"{name} binds printable keys"
    if text_widget is not None:
        own = set(key_list([b if isinstance(b, Binding) else Binding(*b) for b in text_widget.BINDINGS]))
        assert not own & set(names), f"{name} shadows {text_widget.__name__} keys {own & set(names)}"


def test_screens_take_their_keys_from_the_key_map() -> None:
    """One place: the screens' and widgets' BINDINGS are the lists of explorer.tui.keys."""
    from explorer.tui.app import ExplorerApp
    from explorer.tui.screens.help import HelpScreen

    assert ExplorerApp.BINDINGS is keys.APP and MainScreen.BINDINGS is keys.MAIN
    assert NoteScreen.BINDINGS is keys.NOTE and WriterScreen.BINDINGS is keys.WRITER
    assert SearchBox.BINDINGS is keys.SEARCH_BOX and VaultTree.BINDINGS is keys.VAULT_TREE
    assert HelpScreen.BINDINGS is keys.HELP


@sync
async def test_escape_then_typing_changes_no_file(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """Leaving the note view with Escape and typing a sentence only ever types into the search box."""
    before = vault_digest(tui_vault)
    app = make_app(tui_vault, embedder, tmp_path)
    pushed: list[str] = []
    async with app.run_test(size=SIZE) as pilot:
        app.screen_stack  # noqa: B018 - the app is up
        await settle(app, pilot)
        results = await search(app, pilot, "hamster cage")
        assert results.results
        screen = app.main_screen
        screen.query_one(ResultsList).focus()
        await pilot.press("enter")
        await settle(app, pilot)
        assert isinstance(app.screen, NoteScreen)
        await pilot.press("escape")
        await pilot.press(*WORDS)
        await settle(app, pilot)
        pushed.extend(type(s).__name__ for s in app.screen_stack)
        box = screen.query_one(SearchBox)
        assert app.screen is screen and box.has_focus
        assert box.value == WORDS, "the old query was selected: the sentence replaced it"
        # The replaced query is one key away.
        box.cursor_position = 0
        await pilot.press("up")
        assert box.value == "hamster cage"
    assert pushed == ["MainScreen"]
    assert vault_digest(tui_vault) == before


@sync
async def test_keys_typed_on_the_results_or_in_the_note_view_go_to_the_search_box(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """On the results list letters extend the query (a burst too); in the note view they start a new one; in the tree they filter."""
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await search(app, pilot, "hamster")
        screen = app.main_screen
        box = screen.query_one(SearchBox)
        screen.query_one(ResultsList).focus()
        await pilot.press("space", *"cage")
        assert box.value == "hamster cage" and box.has_focus
        await wait_for(pilot, lambda: screen.results is not None and screen.results.query == "hamster cage")
        # A burst: keys already sent to the list when the first one moves focus are typed too, in order.
        screen.query_one(ResultsList).focus()
        await pilot.pause()
        for key, ch in (("space", " "), ("s", "s"), ("i", "i"), ("z", "z"), ("e", "e")):
            app.post_message(events.Key(key, ch))
        await settle(app, pilot)
        assert box.value == "hamster cage size" and box.has_focus
        app.post_message(OpenNote("Garden/composting.md"))
        await settle(app, pilot)
        assert isinstance(app.screen, NoteScreen)
        await pilot.press(*"ewe")
        await settle(app, pilot)
        assert app.screen is screen and box.value == "ewe" and box.has_focus
        # The tree: letters filter it; space still toggles folders.
        await pilot.press("f2")
        tree = screen.query_one(VaultTree)
        await pilot.pause()
        assert tree.query_one("#vault-tree").has_focus
        await pilot.press(*"compost")
        assert tree.filter_box.value == "compost" and box.value == "ewe"


async def _writer_related_list_key_changes_no_text(app, pilot, tui_vault: Path) -> None:
    """ctrl+l moves between editor and related list without selecting anything; keys typed in the list land in the editor."""
    path = "Garden/composting.md"
    before = (tui_vault / path).read_bytes()
    app.post_message(EditNote(path))
    await settle(app, pilot)
    writer = app.screen
    assert isinstance(writer, WriterScreen)
    editor = writer.query_one(TextArea)
    text = editor.text
    await pilot.press("ctrl+l")
    assert writer.query_one("#related", OptionList).has_focus
    assert editor.selection.is_empty and editor.text == text
    await pilot.press("ctrl+l")
    assert editor.has_focus and editor.text == text and editor.selection.is_empty
    # A key typed while the list has focus is inserted (not a replacement of a selection).
    await pilot.press("ctrl+l", "x")
    assert editor.has_focus and len(editor.text) == len(text) + 1 and writer.dirty
    # Leaving discards only after a warning; nothing was written.
    await pilot.press("escape", "escape")
    await settle(app, pilot)
    assert isinstance(app.screen, MainScreen)
    assert app.main_screen.query_one(SearchBox).has_focus
    assert (tui_vault / path).read_bytes() == before


async def _writer_opens_below_frontmatter_moves_to_ends_and_keeps_mode_of_a_deleted_note(
    app, pilot, tui_vault: Path
) -> None:
    """The cursor starts on the body; ctrl+home/end jump; a save to a deleted path keeps the old permission bits."""
    path = "Notes/with-frontmatter.md"
    file = tui_vault / path
    file.parent.mkdir(exist_ok=True)
    file.write_text("---\ntags: [a, b]\naliases: [x]\n---\n# Title\n\nBody text.\n", encoding="utf-8")
    os.chmod(file, 0o640)
    app.refresh_index([path])
    await settle(app, pilot)
    app.post_message(EditNote(path))
    await settle(app, pilot)
    writer = app.screen
    assert isinstance(writer, WriterScreen)
    editor = writer.query_one(TextArea)
    assert editor.cursor_location == (4, 0)
    await pilot.press("ctrl+end")
    assert editor.cursor_location == editor.document.end
    await pilot.press("ctrl+home")
    assert editor.cursor_location == (0, 0)
    file.unlink()
    await pilot.press("ctrl+end", *"more")
    await pilot.press("ctrl+s")
    await wait_for(pilot, lambda: writer.save_count == 1)
    assert stat.S_IMODE(file.stat().st_mode) == 0o640
    assert file.read_text(encoding="utf-8").endswith("Body text.\nmore")
    await wait_for(pilot, lambda: not writer.dirty)
    await pilot.press("escape")
    await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))


async def _writer_never_saves_over_a_note_it_could_not_read(app, pilot, tui_vault: Path) -> None:
    """A note that fails to load opens read-only and ctrl+s leaves it alone."""
    path = "Garden/composting.md"
    (tui_vault / path).write_bytes(b"\xff\xfe not utf-8 \x80")
    app.post_message(EditNote(path))
    await settle(app, pilot)
    writer = app.screen
    assert isinstance(writer, WriterScreen) and writer.load_error
    await pilot.press(*"abc", "ctrl+s")
    await settle(app, pilot)
    assert writer.save_count == 0
    assert (tui_vault / path).read_bytes() == b"\xff\xfe not utf-8 \x80"


@sync
async def test_writer_keys_cursor_saves_and_an_unreadable_note(
    tui_vault: Path, remembering_embedder, tmp_path: Path
) -> None:
    """Writing mode in one app (its set-up, fitting the vault's link scorer, is paid once), one note after
    another: the related list's key changes no text; a note opens below its frontmatter, ctrl+home/end
    jump, a save to a deleted path keeps its permission bits; a note that could not be read is never
    saved over."""
    app = make_app(tui_vault, remembering_embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await _writer_related_list_key_changes_no_text(app, pilot, tui_vault)
        await _writer_opens_below_frontmatter_moves_to_ends_and_keeps_mode_of_a_deleted_note(
            app, pilot, tui_vault
        )
        await _writer_never_saves_over_a_note_it_could_not_read(app, pilot, tui_vault)
    assert (tui_vault / "Garden/composting.md").read_bytes() == b"\xff\xfe not utf-8 \x80"


@sync
async def test_enter_on_a_first_query_moves_to_its_results_when_they_come(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """Enter right after typing (no results listed yet) still lands on the results, so a second Enter opens one."""
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        screen = app.main_screen
        screen.query_one(SearchBox).focus()
        await pilot.press(*"hamster", "enter")
        await wait_for(pilot, lambda: screen.query_one(ResultsList).has_focus)
        await settle(app, pilot)
        await pilot.press("enter")
        await settle(app, pilot)
        assert isinstance(app.screen, NoteScreen)


@sync
async def test_footer_greys_result_keys_in_place(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """Result-bound keys (Open, Write) are greyed while no result is selected and ungreyed when one
    is, on the same footer keys: the footer is not rebuilt for each search (that was a 20-30 ms frame)."""
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.status.index == "ready")
        await settle(app, pilot)
        screen = app.main_screen
        footer_keys = {key.action: key for key in screen.query("FooterKey")}
        write, tree = footer_keys["edit"], footer_keys["toggle_tree"]
        assert write.has_class("-disabled") and not tree.has_class("-disabled")
        await search(app, pilot, "hamster cage")
        assert screen.selected is not None
        assert not write.has_class("-disabled") and not footer_keys["open_at_cursor"].has_class("-disabled")
        screen.query_one(SearchBox).value = ""
        await wait_for(pilot, lambda: screen.selected is None)
        await settle(app, pilot)
        assert write.has_class("-disabled")
        assert {key.action: key for key in screen.query("FooterKey")} == footer_keys  # the same widgets
