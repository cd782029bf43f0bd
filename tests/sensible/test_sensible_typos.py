"""Sensible answers: typo correction as a person judges it.

A word of the language is no typo because one vault lacks it (`proof` stays `proof`); a misspelt
vault word is searched as the word meant, long words with two slips too; the app says what it
searched instead and searches the words as typed on request (ctrl+r or a click), and the CLI has
`--no-correct`. Each case is a small vault written here, one action, what a person expects.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import make_app, quiet_settings, search, settle, sync, wait_for, write_notes
from explorer.cli import main as cli_main

#: A baking and house notes vault: words near `proof` (roof), `wafer` (water), `pastry` (pantry),
#: `curtain` (certain), `pillow` (willow) are in it; those words themselves are not.
KITCHEN = {
    "Baking/Sourdough starter.md": "# Sourdough starter\n\nFeed the sourdough starter with flour and water. "
    "It is certain to rise in a warm pantry; you need patience.\n",
    "Baking/Rye bread.md": "# Rye bread\n\nA dense loaf. The fermentation takes a whole night.\n",
    "House/Roof repair.md": "# Roof repair\n\nThe roof leaked over the willow tree side. Call the layer of tiles man.\n",
    "Pets/Hamster cage.md": "# Hamster cage\n\nClean the hamster cage every week with warm water.\n",
    "Admin/Attachments folder.md": "# Attachments folder\n\nEvery attachment of a note goes in the "
    "attachments folder, one folder per year.\n",
}

#: A German vault: German function words tell its language; `Brot` is not in it, `Boot` is.
GERMAN = {
    "Rezepte/Sauerteig.md": "# Sauerteig\n\nDer Sauerteig ist nicht schwer, wenn man ihn jeden Tag "
    "mit Mehl und Wasser füttert. Er wird auch im Winter aktiv, wenn die Küche warm ist.\n",
    "Reisen/Boot.md": "# Boot\n\nMit dem Boot auf dem See: eine Fahrt, die sich auch bei Regen lohnt, "
    "oder wenn die Sonne scheint. Ich nehme für den Tag eine Jacke mit.\n",
}

LEXICAL = {"index.embeddings": False}


def _run(vault: Path, *argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli_main(["search", "--vault", str(vault), "--local", "--lexical", "-k", "3", *argv])
    return code, capsys.readouterr().out


def _corrections(vault: Path, query: str, capsys: pytest.CaptureFixture[str], *flags: str) -> list[dict]:
    code, out = _run(vault, query, "--json", *flags, capsys=capsys)
    assert code == 0
    return json.loads(out)["corrections"]


def _lexical_vault(root: Path, notes: dict[str, str]) -> Path:
    """The notes written under `root`, with embeddings off in its config (the cases are about words)."""
    vault = write_notes(root, notes)
    (vault / ".explorer").mkdir()
    (vault / ".explorer" / "config.toml").write_text("[index]\nembeddings = false\n", encoding="utf-8")
    return vault


@pytest.fixture()
def kitchen(tmp_path: Path) -> Path:
    return _lexical_vault(tmp_path / "kitchen", KITCHEN)


def test_proof_is_a_word_not_a_typo_of_roof(kitchen: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`how long to proof sourdough`: no note says `proof`, one says `roof`; the search must not
    turn the baker's question into a roofing one."""
    code, out = _run(kitchen, "how long to proof sourdough", capsys=capsys)
    assert code == 0
    assert "typo:" not in out and "searched as roof" not in out, out
    assert "Sourdough starter" in out.split("\n\n")[1], out
    assert _corrections(kitchen, "how long to proof sourdough", capsys) == []


@pytest.mark.parametrize("word", ["wafer", "pastry", "curtain", "pillow", "lawyer", "proofing"])
def test_real_words_absent_from_the_vault_are_kept(
    kitchen: Path, word: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each is one edit from a vault word (water, pantry, certain, willow, layer, roof) and
    still an English word: searched as typed."""
    assert _corrections(kitchen, word, capsys) == []


def test_a_swapped_letter_is_corrected(kitchen: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`hamsetr cage`: two letters swapped is the commonest slip; the hamster note comes first."""
    code, out = _run(kitchen, "hamsetr cage", capsys=capsys)
    assert code == 0
    assert "typo: hamsetr not in the vault, searched as hamster" in out
    assert "Hamster cage" in out.split("\n\n")[1]


def test_two_slips_in_long_words_are_both_corrected(
    kitchen: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`attachmnet foldr`: the README promises two edits from 8 letters; both words are fixed, and
    the note about the attachments folder comes first."""
    found = {c["word"]: c for c in _corrections(kitchen, "attachmnet foldr", capsys)}
    assert set(found) == {"attachmnet", "foldr"}
    assert found["attachmnet"]["shown"][0] == "attachment"
    assert found["foldr"]["shown"][0] == "folder"
    code, out = _run(kitchen, "attachmnet foldr", capsys=capsys)
    assert code == 0 and "Attachments folder" in out.split("\n\n")[1], out


def test_the_cli_searches_as_typed_on_request(kitchen: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The correction line says how to search the word as typed, and `--no-correct` does it."""
    code, out = _run(kitchen, "hamsetr", capsys=capsys)
    assert code == 0 and "typo: hamsetr" in out and "--no-correct" in out
    code, out = _run(kitchen, "hamsetr", "--no-correct", capsys=capsys)
    assert code == 0 and "typo:" not in out
    assert _corrections(kitchen, "hamsetr", capsys, "--no-correct") == []


def test_a_german_vault_keeps_german_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """In a German vault `brot` is a word (not `boot` misspelt), while a German vault word
    misspelt is still corrected."""
    vault = _lexical_vault(tmp_path / "de", GERMAN)
    assert _corrections(vault, "brot backen", capsys) == []
    fixed = _corrections(vault, "sauerteih", capsys)
    assert [c["searched"] for c in fixed] == [["sauerteig"]]


# -- the app --------------------------------------------------------------------------------------
def _line_words(widget: Any) -> list[list[str]]:
    """The words of each line the correction line draws."""
    return [widget.render_line(y).text.split() for y in range(widget.size.height)]


@sync
async def test_the_app_says_what_it_searched_instead(kitchen: Path, tmp_path: Path) -> None:
    """At 80x24, above the results: `Showing results for hamster — search instead for hamsetr`,
    every word whole on screen; a real word shows no such line."""
    app = make_app(kitchen, None, tmp_path, settings=quiet_settings(**LEXICAL), load_model=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.status.index == "ready")
        await settle(app, pilot)
        results = await search(app, pilot, "hamsetr cage")
        line = app.main_screen.query_one("#correction")
        assert line.display and line.region.width > 0 and line.region.height >= 1
        text = str(line.content)
        assert "Showing results for hamster" in text and "search instead for hamsetr" in text
        drawn = [w for words in _line_words(line) for w in words]
        for word in "Showing results for hamster — search instead for hamsetr (ctrl+r)".split():
            assert word in drawn, (word, drawn)
        assert results.results[0].document_path == "Pets/Hamster cage.md"
        await search(app, pilot, "how long to proof sourdough")
        assert not line.display


@sync
async def test_the_app_searches_as_typed_by_key_and_by_click(kitchen: Path, tmp_path: Path) -> None:
    """ctrl+r searches the words as typed (the line then says so), ctrl+r again corrects them;
    a click on the typed word in the line does the same as the key."""
    app = make_app(kitchen, None, tmp_path, settings=quiet_settings(**LEXICAL), load_model=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.status.index == "ready")
        await settle(app, pilot)
        screen = app.main_screen
        first = await search(app, pilot, "hamsetr")
        assert first.corrections and first.results
        line = screen.query_one("#correction")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: screen.results is not None and not screen.results.corrections)
        await settle(app, pilot)
        assert screen.results is not None and not screen.results.results  # no note says `hamsetr`
        assert "Searched as typed" in str(line.content)
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: screen.results is not None and bool(screen.results.corrections))
        await settle(app, pilot)
        assert "search instead for hamsetr" in str(line.content)
        # The click: on the typed word, after "Showing results for hamster — search instead for ".
        prefix = len("Showing results for hamster — search instead for ")
        await pilot.click("#correction", offset=(1 + prefix + 2, 0))
        await wait_for(pilot, lambda: screen.results is not None and not screen.results.corrections)
        await settle(app, pilot)
        assert "Searched as typed" in str(line.content)
