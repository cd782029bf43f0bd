"""Sensible answers on a small screen: at 80x24 and 120x30 every pane shows whole words, the status
line fits, the context pane shows the match, the first index tells the time left; `find` prints the
lines around a hit, not the whole note; the writer's header shows a paragraph once."""

from __future__ import annotations

import io
import itertools
import re
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import Console

from conftest import make_app, open_note, search, settle, sync, wait_for, write_notes
from explorer.cli.entry import main as cli_main
from explorer.tui.messages import EditNote
from explorer.tui.screens.writer import WriterScreen
from explorer.tui.widgets.context_pane import ContextPane
from explorer.tui.widgets.long_text import LongText
from explorer.tui.widgets.results import ResultsList, ResultsSummary
from explorer.tui.widgets.status_bar import StatusBar
from explorer.tui.widgets.why_pane import WhyPane
from pdfs import text_pdf

SIZES = ((80, 24), (120, 30))

_WORD = re.compile(r"[A-Za-z0-9]+")

STARTER = (
    "---\ntags: [baking]\n---\n# Sourdough starter\n\n"
    "A starter is flour and water that wild yeasts and lactobacilli have colonised. Mine lives in a "
    "tall jar on the windowsill and gets fed every morning before breakfast, unless I am travelling.\n\n"
    "## Recovering a neglected starter\n\n"
    "After three weeks of neglect the surface carried a grey layer of hooch, the smell was sharp and "
    "unpleasant, and the bubbles had disappeared completely. Nothing about it looked recoverable, and "
    "the internet disagreed with itself about whether throwing everything away was the responsible "
    "choice. Experienced bakers generally recommend patience: discard most of it, keep a spoonful, "
    "and feed that spoonful generously with wholemeal flour and lukewarm water. Over the following "
    "days the activity returned gradually, first a few bubbles, then a reliable doubling. The "
    "characteristic acetone smell means the culture is starving, not dead.\n\n"
    "## Feeding schedule\n\nEvery morning: discard half, feed equal weights of flour and water.\n"
)

NOTES = {
    "Baking/Sourdough starter.md": STARTER,
    "Baking/Bread flour.md": (
        "# Bread flour\n\nStrong flour has more protein; wholemeal flour feeds a starter faster "
        "because of the bran. Responsible storage keeps weevils away: airtight containers.\n"
    ),
    "Garden/Composting.md": (
        "# Composting\n\nKitchen scraps, coffee grounds and shredded cardboard make a balanced heap. "
        "Turn it weekly; a sharp smell means too much nitrogen, add browns.\n"
    ),
    "Garden/Tomatoes.md": (
        "# Tomatoes\n\nPinch out the side shoots, water at the base in the morning, and feed weekly "
        "once the first truss has set. Blight arrives with warm wet weather.\n"
    ),
    "Projects/Kitchen renovation.md": (
        "# Kitchen renovation\n\nThe countertop supplier recommended quartz over laminate. The "
        "electrician rewired the circuits before the cabinets went in; recoverable costs were listed "
        "separately for the insurance.\n"
    ),
    "Daily/2024-03-02.md": (
        "# 2024-03-02\n\nFed the starter twice. Bought wholemeal flour. The renovation quote arrived.\n"
    ),
}

QUERY = "recovering a neglected sourdough starter"


# -- reading the screen ------------------------------------------------------------------------------
def screen_lines(app: Any) -> list[str]:
    """The rows of the terminal as the app draws them now (plain text)."""
    width, height = app.size
    console = Console(
        width=width, height=height, file=io.StringIO(), record=True, legacy_windows=False, color_system=None
    )
    # As App.export_screenshot draws the screen, as text.
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)  # noqa: SLF001
    console.print(update)
    return console.export_text().split("\n")[:height]


def cells(line: str, x: int, width: int) -> str:
    """The part of `line` in cells x .. x + width (wide characters counted as two)."""
    out, pos = [], 0
    for ch in line:
        w = cell_len(ch)
        if pos >= x and pos + w <= x + width:
            out.append(ch)
        pos += w
    return "".join(out)


def region_lines(app: Any, widget: Any) -> list[str]:
    """The rows of the screen inside `widget`'s region."""
    r = widget.region
    return [cells(line, r.x, r.width) for line in screen_lines(app)[r.y : r.y + r.height]]


def source_words(texts: Iterable[str]) -> set[str]:
    """Every word (letters and digits) of `texts`, lower-cased."""
    return {w.lower() for text in texts for w in _WORD.findall(text)}


def _tokens(line: str) -> list[tuple[int, int, str]]:
    """(first cell, end cell, word) of each word of `line`."""
    out, pos, start, word = [], 0, 0, ""
    for ch in line + " ":
        if ch.isascii() and ch.isalnum():
            if not word:
                start = pos
            word += ch
        elif word:
            out.append((start, pos, word))
            word = ""
        pos += cell_len(ch)
    return out


def broken_words(lines: Sequence[str], words: set[str]) -> list[str]:
    """Words of `words` drawn split across a line end: a piece that is no word of the text, whose
    continuation on the next row (at the row's start, or below it in the same column of a table)
    makes a word of the text with it. Returned as `head|tail`."""
    found = []
    for above, below in itertools.pairwise(lines):
        a, b = _tokens(above), _tokens(below)
        if not a or not b:
            continue
        pairs = [(a[-1][2], b[0][2])] if below[: b[0][0]].strip(" │▏▕┃|") == "" else []
        starts = {s: w for s, _, w in b}
        pairs += [(w, starts[s]) for s, _, w in a if s in starts]
        for head, tail in pairs:
            joined = (head + tail).lower()
            if joined in words and head.lower() not in words:
                found.append(f"{head}|{tail}")
    return sorted(set(found))


def test_the_broken_word_finder_finds_folds_and_passes_wraps() -> None:
    """The helper itself: a word folded at a line end or inside a table column is found; words
    wrapped whole are not."""
    words = source_words(["recover a unit of the experiment", "sourdough starter"])
    assert broken_words(["the unit must recove", "r a stable state"], words) == ["recove|r"]
    assert broken_words(["recove   bm25   #2", "r a", ""], words) == ["recove|r"]
    assert broken_words(["x  sourd   bm25", "   ough   name"], words) == ["sourd|ough"]
    assert broken_words(["we recover", "a unit of the", "experiment"], words) == []


def status_row(app: Any) -> str:
    """The status bar's row on screen."""
    bar = app.screen.query_one(StatusBar)
    return screen_lines(app)[bar.region.y]


def assert_status_fits(app: Any) -> None:
    """The whole status line is on screen: both of its texts drawn in full on its row."""
    bar = app.screen.query_one(StatusBar)
    row = status_row(app)
    for part in ("#status-left", "#status-right"):
        text = str(bar.query_one(part).content).strip()
        assert text and text in row, (app.size, text, row)
    assert cell_len(row.rstrip()) <= app.size[0]


# -- the cases ---------------------------------------------------------------------------------------
@pytest.fixture()
def vault(tmp_path: Path) -> Path:
    return write_notes(tmp_path / "vault", NOTES)


@pytest.mark.parametrize("size", (*SIZES, (130, 30)))
@sync
async def test_why_ranked_shows_every_term_as_whole_words(
    vault: Path, embedder, tmp_path: Path, size
) -> None:
    """A person opens "Why ranked": the terms and the rest of the explanation are whole words (a
    table where it fits, blocks where it does not), never `recoveri` / `ng a` (at 130 columns the
    pane beside the results is just wide enough for a table whose term column had 8 cells)."""
    app = make_app(vault, embedder, tmp_path)
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.status.model == "ready")
        results = await search(app, pilot, QUERY)
        app.main_screen.query_one(ResultsList).focus()
        await pilot.press("f6")
        await settle(app, pilot)
        app.clear_notifications()
        await pilot.pause()
        why = app.main_screen.query_one(WhyPane)
        terms = [
            c.term for r in results.results for c in (r.explanation.contributions if r.explanation else ())
        ]
        words = source_words([*NOTES.values(), QUERY, *terms, *results.search_terms_used])
        shown = region_lines(app, why)
        assert any("neglected" in line for line in shown)
        assert broken_words(shown, words) == [], (size, shown)


@pytest.mark.parametrize("size", SIZES)
@sync
async def test_the_status_line_fits_while_the_first_index_embeds_and_says_the_time_left(
    tmp_path: Path, embedder, size
) -> None:
    """The first index of a vault embeds for a while: the status line says how long is left (the
    embedding loop's own estimate, the one `explorer index` prints), and it fits the terminal."""
    vault = write_notes(
        tmp_path / "big",
        {
            f"Notes/note {i:03d}.md": f"# Note {i}\n\nPlain sentence number {i} about gardens and bread.\n"
            for i in range(200)
        },
    )
    gate = threading.Event()

    class Held:
        """The real model, held after its first chunk of texts until the test has looked."""

        def __init__(self, inner: Any) -> None:
            self.inner, self.model_id, self.dim, self.runtime = (
                inner,
                inner.model_id,
                inner.dim,
                inner.runtime,
            )
            self.max_seq_length = getattr(inner, "max_seq_length", 256)
            self.texts = 0

        def encode(self, texts: Sequence[str], batch_size: int = 32) -> Any:
            if self.texts >= 128:
                gate.wait(60)
            self.texts += len(texts)
            return self.inner.encode(texts, batch_size)

    app = make_app(vault, Held(embedder), tmp_path)
    try:
        async with app.run_test(size=size) as pilot:
            await wait_for(pilot, lambda: app.status.stage == "embedding" and app.status.done >= 128)
            await pilot.pause(0.1)
            eta = app.session.index.model.eta()
            assert eta is not None and eta > 0
            row = status_row(app)
            assert re.search(r"embedding .*\d+(s|m\d\ds) left", row), row
            assert_status_fits(app)
            gate.set()
            await wait_for(pilot, lambda: app.status.model == "ready")
            await settle(app, pilot)
            assert "left" not in status_row(app)
            assert_status_fits(app)
    finally:
        gate.set()


@sync
async def test_the_context_pane_shows_the_match_and_every_pane_whole_words(
    vault: Path, embedder, tmp_path: Path
) -> None:
    """At 80x24 the context pane gives the note's text at least six rows, and the first
    highlighted match of the selected result is among the rows shown (not lines below them); the
    summary, the results and the context break no word across lines and the status line is drawn
    whole. The same after the terminal grows to 120x30, and for a search run while the other tab
    was open."""
    app = make_app(vault, embedder, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.status.model == "ready")
        results = await search(app, pilot, "acetone")
        assert results.results[0].document_path == "Baking/Sourdough starter.md"
        screen = app.main_screen
        words = source_words([*NOTES.values(), *(r.title for r in results.results)])
        for size in SIZES:
            await pilot.resize_terminal(*size)
            await settle(app, pilot)
            app.clear_notifications()
            await pilot.pause()
            scroll = screen.query_one(ContextPane).query_one("#ctx-scroll")
            assert scroll.region.height >= 6, (size, scroll.region)
            shown = region_lines(app, scroll)
            assert any("acetone" in line for line in shown), (size, shown)
            for widget in (
                screen.query_one(ResultsSummary),
                screen.query_one(ResultsList),
                screen.query_one(ContextPane),
            ):
                drawn = region_lines(app, widget)
                assert broken_words(drawn, words) == [], (size, type(widget).__name__, drawn)
            assert_status_fits(app)
        # A search run while "Why ranked" is open: back on the context tab, its match is in view.
        await pilot.resize_terminal(80, 24)
        await pilot.press("f6")
        await search(app, pilot, "lukewarm")
        await pilot.press("f5")
        await settle(app, pilot)
        shown = region_lines(app, screen.query_one(ContextPane).query_one("#ctx-scroll"))
        assert any("lukewarm" in line for line in shown), shown


@pytest.mark.parametrize("size", SIZES)
@sync
async def test_a_pdf_in_the_note_view_wraps_between_words(
    vault: Path, embedder, tmp_path: Path, size
) -> None:
    """A PDF opens in the plain view: its long lines wrap between words, no word is cut in two."""
    page = (
        "Quarterly maintenance report for the community bakery: the proofing cabinet thermostat "
        "was recalibrated, the sourdough starter was refreshed with wholemeal flour, and the "
        "extraction ventilation above the deck ovens was professionally cleaned by contractors."
    )
    (vault / "Papers").mkdir()
    (vault / "Papers/report.pdf").write_bytes(text_pdf([page, "Second page: nothing to report."]))
    app = make_app(vault, embedder, tmp_path)
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot)
        await open_note(app, pilot, "Papers/report.pdf")
        await settle(app, pilot)
        app.clear_notifications()
        await pilot.pause()
        view = app.screen.query_one("#note-plain", LongText)
        shown = region_lines(app, view)
        assert any("Quarterly" in line for line in shown)
        assert broken_words(shown, source_words([page])) == [], shown


def test_find_phrase_prints_the_lines_around_the_hit_not_the_whole_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`explorer find --mode phrase … -n 1` on a 45-line note prints the hit with a few lines around
    it (and says how to see more), not the whole note; `--context-chars` still prints what it asks."""
    lines = [f"Line {i}: an ordinary remark about the allotment and its paths." for i in range(45)]
    lines[22] = "Line 22: the rhubarb crowns were divided in early spring this year."
    vault = write_notes(tmp_path / "vault", {"Garden/Allotment log.md": "\n".join(lines) + "\n"})
    args = ["find", "--vault", str(vault), "--no-embeddings", "--mode", "phrase", "rhubarb crowns", "-n", "1"]
    assert cli_main(args) == 0
    out = capsys.readouterr().out
    snippet = [line for line in out.splitlines() if line.startswith("    | ")]
    assert any("rhubarb crowns" in line for line in snippet)
    assert 3 <= len(snippet) <= 8, out
    assert "Line 0:" not in out and "Line 44:" not in out
    assert "--context-chars" in out
    assert cli_main([*args, "--context-chars", "4000"]) == 0
    wide = capsys.readouterr().out
    assert "Line 0:" in wide and "Line 44:" in wide


@pytest.mark.parametrize("size", SIZES)
@sync
async def test_the_writers_header_shows_a_one_sentence_paragraph_once(
    vault: Path, embedder, tmp_path: Path, size
) -> None:
    """Writing a one-sentence paragraph, the side list's header quotes it once, and the list shows
    titles and paths in whole words."""
    sentence = "Wholemeal flour revived the neglected starter"
    (vault / "Baking/Notes.md").write_text(f"# Notes\n\n{sentence}\n", encoding="utf-8")
    log = "Baking/Sourdough-starter-maintenance-log.md"  # a path with no space to wrap at
    (vault / log).write_text(
        "# Starter log\n\nNeglected starter revived with wholemeal flour.\n", encoding="utf-8"
    )
    app = make_app(vault, embedder, tmp_path)
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.status.model == "ready")
        app.refresh_index(["Baking/Notes.md", log])
        await settle(app, pilot)
        app.main_screen.post_message(EditNote("Baking/Notes.md", len("# Notes\n\n") + 5))
        await wait_for(pilot, lambda: isinstance(app.screen, WriterScreen))
        screen = app.screen
        await wait_for(pilot, lambda: "Links (" in str(screen.query_one("#related-head").content))
        await settle(app, pilot)
        app.clear_notifications()
        await pilot.pause()
        head = screen.query_one("#related-head")
        shown = " ".join(line.strip() for line in region_lines(app, head))
        assert shown.count("Wholemeal") == 1, shown
        words = source_words([sentence, "Links hybrid BM25 searching"])
        assert broken_words(region_lines(app, head), words) == []
        # The related list: titles and paths in whole words (a long path loses folders, not letters).
        related = screen.query_one("#related")
        assert any(log == s.path for s in screen.suggestions)
        drawn = region_lines(app, related)
        assert broken_words(drawn, source_words([*NOTES, log, *NOTES.values()])) == [], drawn
