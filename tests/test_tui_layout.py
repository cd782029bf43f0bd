"""The app's layout and polish: narrow terminals, explanations that fit, wide characters, properties, embeds, palette, filters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.cells import cell_len
from textual.widgets import TabbedContent

from conftest import make_app, quiet_settings, search, settle, sync, wait_for, write_notes
from explorer.tui.app import palette_help
from explorer.tui.messages import OpenNote
from explorer.tui.safe import screen_text
from explorer.tui.screens.main import MainScreen
from explorer.tui.screens.note import NoteScreen
from explorer.tui.widgets.context_pane import ContextPane
from explorer.tui.widgets.fit_table import FitTable
from explorer.tui.widgets.results import ResultsList, ResultsSummary, badges
from explorer.tui.widgets.search_box import SearchBox
from explorer.tui.widgets.vault_tree import VaultTree

EXTRA = {
    "Lang/日本語の勉強.md": (
        "---\ntitle: 日本語の勉強\naliases: [Japanese study, にほんご]\ntags: [learning]\n"
        "resources:\n  - name: Genki\n    kind: textbook\n  - name: WaniKani\n    kind: app\nscore: 7.5\n---\n"
        "# 日本語の勉強\n\n毎日の練習 — daily kanji practice.\n\n## 漢字\n\n漢字は難しい。Kanji review every morning. ^kanji\n\n"
        "## 文法\n\nGrammar notes.\n"
    ),
    "Projects/🚀 Launch ⚠️ plan.md": (
        "---\ntags: [project]\nchecklist: [design, build, ship]\n---\n# 🚀 Launch plan\n\n"
        "Family 👨‍👩‍👧 launch party ❤️ with hamster cake.\n\n![[日本語の勉強#漢字]]\n\n![[Nowhere note]]\n\nThe end.\n"
    ),
}


def lines_of(widget: Any) -> list[str]:
    """The text of each line the widget draws."""
    region = widget.region
    return ["".join(seg.text for seg in strip) for strip in widget.render_lines(region.reset_offset)]


async def ready(app: Any, pilot: Any) -> None:
    await wait_for(pilot, lambda: app.status.index == "ready" and app.status.model == "ready", timeout=60)
    await settle(app, pilot)


async def open_note(app: Any, pilot: Any, path: str) -> NoteScreen:
    """Open `path` in the note view and return the note screen once it has settled."""
    app.post_message(OpenNote(path))
    await settle(app, pilot)
    screen = app.screen
    assert isinstance(screen, NoteScreen)
    return screen


# -- narrow and wide layouts -----------------------------------------------------------------------
@sync
async def test_80x24_stacks_results_over_the_panes_and_hides_the_tree(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """At 80x24 results (two lines each) sit above the context pane, both full width; F2 docks the
    tree at the left; at full size the side-by-side layout comes back."""
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        await search(app, pilot, "hamster cage")
        screen = app.main_screen
        results, detail, tree = (
            screen.query_one(ResultsList),
            screen.query_one("#detail"),
            screen.query_one(VaultTree),
        )
        assert not tree.display
        assert (
            results.region.bottom <= detail.region.y
            and results.region.width >= 78
            and detail.region.width >= 78
        )
        assert (
            results.two_line
            and results.region.height >= 8
            and screen.query_one(ContextPane).region.height >= 6
        )
        first = lines_of(results)[1:4]  # under the border
        assert "Hamsters" in first[0] or "hamster" in first[0].lower()
        assert ".md" in first[1] and "bm25 #" in first[1] + first[2]
        assert screen.query_one(ContextPane).window.text.strip()
        # The status line and the footer fit: nothing is cut at the right edge.
        status = screen.query_one("#status-right")
        assert cell_len(str(status.content)) <= status.region.width - 2 and "ms" in str(status.content)
        footer = screen.query_one("Footer")
        assert footer.compact and all(key.region.right <= 80 for key in footer.query("FooterKey"))
        await pilot.press("f2")
        await settle(app, pilot)
        assert tree.display and tree.region.x == 0 and results.region.x >= tree.region.right
        assert results.region.width >= 40
        await pilot.resize_terminal(160, 40)
        await settle(app, pilot)
        assert not results.two_line
        assert results.region.right <= detail.region.x and results.region.y == detail.region.y
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await ready(app, pilot)
        assert app.main_screen.query_one(VaultTree).display


@sync
async def test_narrow_result_rows_never_cut_or_strand_their_badges(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """Two-line rows (80 and 90 columns): a result's badges follow its path when they all fit
    there, else they take the next line, broken only between two badges; every line fits the list
    (none is cut or wrapped again), and the list draws each row's lines in full. A wider list
    (90 columns) places them again: badges that did not fit at 80 follow the path."""
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        results = await search(app, pilot, "hamster cage")
        rl = app.main_screen.query_one(ResultsList)
        own_line: dict[int, list[bool]] = {}
        for columns in (80, 90):
            if columns != 80:
                await pilot.resize_terminal(columns, 24)
                await settle(app, pilot)
            layout = rl.row_layout()
            assert rl.two_line and layout.width > 0
            for i, res in enumerate(results.results):
                prompt = rl.get_option(f"r{i + 1}").prompt
                lines = str(prompt).split("\n")
                assert prompt.get_height(layout.rules, layout.width) == len(lines), lines
                assert all(cell_len(line) <= layout.width for line in lines), lines
                assert not any(line.lstrip().startswith("·") for line in lines), lines
                texts = [screen_text(text) for text, _ in badges(res)]
                assert all(any(text in line for line in lines[1:]) for text in texts), (texts, lines)
                together = " · ".join(texts)
                assert (together in lines[1]) == (len(lines) == 2)
                if len(lines) > 2:  # on a line of their own only when they do not fit beside the path
                    assert cell_len(lines[1]) + 2 + cell_len(together) > layout.width, lines
                own_line.setdefault(i, []).append(len(lines) > 2)
            # Drawn: the first rows' lines, each whole, under the top border.
            drawn = lines_of(rl)[1:-1]
            expected = [line for i in range(3) for line in str(rl.get_option(f"r{i + 1}").prompt).split("\n")]
            for row, line in zip(drawn, expected, strict=False):
                assert line in row, (line, row)
        assert any(at_80 and not at_90 for at_80, at_90 in own_line.values()), own_line


@sync
async def test_why_ranked_is_never_cut_at_80_or_160_columns(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """Every contribution's term, retriever, rank and score is on screen: tabulated where the pane
    is wide enough for the term column to wrap between words (80 columns stack the panes full
    width), listed in blocks where it is not (110 columns side by side, 160 with the tree open: a
    table there squeezed the terms); no drawn line is wider than the pane."""
    for size in ((80, 24), (110, 30), (160, 40)):
        app = make_app(tui_vault, embedder, tmp_path)
        async with app.run_test(size=size) as pilot:
            await ready(app, pilot)
            results = await search(app, pilot, "hamster cage")
            app.main_screen.query_one(ResultsList).focus()
            await pilot.press("f6")
            await settle(app, pilot)
            table = app.main_screen.query_one("#why-contrib", FitTable)
            contributions = results.results[0].explanation.contributions
            assert table.row_count == len(contributions)
            drawn = lines_of(table)
            text = "\n".join(drawn)
            assert all(cell_len(line) <= table.region.width for line in drawn)
            tabulated = table.tabulated
            assert tabulated == (size[0] == 80)
            assert ("retriever" in drawn[0]) == tabulated, "a header row only when tabulated"
            for c in contributions:
                for value in (f"#{c.rank}", f"{c.contribution:.5f}", f"{c.raw_score:.4f}"):
                    assert value in text, (size, value)
                for word in c.term.split():
                    assert word in text


# -- wide characters -------------------------------------------------------------------------------
def test_screen_text_drops_only_characters_of_uncertain_width() -> None:
    """Variation selectors, joiners and skin tones go (terminals disagree on their width); the
    emoji, CJK and controls-made-visible stay."""
    assert screen_text("⚠️ warn") == "⚠ warn"
    assert screen_text("👨‍👩‍👧") == "👨👩👧" and cell_len(screen_text("👨‍👩‍👧")) == 6
    assert screen_text("👍🏽") == "👍"
    assert screen_text("漢字 café \x1b[2J") == "漢字 café ^[[2J"
    assert screen_text("plain") == "plain"


@sync
async def test_wide_characters_keep_borders_straight(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """A result titled with emoji, joiners and CJK draws lines exactly as wide as the list, with no
    character whose width terminals disagree on."""
    write_notes(tui_vault, EXTRA)
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await search(app, pilot, "launch party hamster cake")
        results = app.main_screen.query_one(ResultsList)
        assert any("Launch" in r.title for r in results.results)
        drawn = lines_of(results)
        assert any("👨👩👧" in line for line in drawn)
        for line in drawn:
            assert cell_len(line) == results.region.width
            assert not {"\ufe0f", "\u200d"} & set(line)


# -- note view: properties and embeds -----------------------------------------------------------
@sync
async def test_note_view_shows_properties_and_embeds(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """Frontmatter is a key/value table (lists joined, nested values compact); an embed shows the
    embedded section in a box headed by its node_id; a missing one is a marked unresolved link."""
    write_notes(tui_vault, EXTRA)
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        screen = await open_note(app, pilot, "Lang/日本語の勉強.md")
        props = dict(screen.query_one("#note-props", FitTable).rows)
        assert props["aliases"] == "Japanese study, にほんご"
        assert props["resources"] == "{name: Genki; kind: textbook}, {name: WaniKani; kind: app}"
        assert props["score"] == "7.5"
        assert "```yaml" not in screen._source.text and "aliases:" not in screen._source.text
        app.post_message(OpenNote("Projects/🚀 Launch ⚠️ plan.md"))
        await settle(app, pilot)
        source = screen._source.text
        assert "embedded from Lang/日本語の勉強.md#" in source
        assert "> 漢字は難しい。Kanji review every morning." in source
        assert "unresolved embed Nowhere note" in source
        assert screen.query_one("#note-props", FitTable).rows == [
            ("tags", "project"),
            ("checklist", "design, build, ship"),
        ]
        md = str(screen.query_one("#note-md").source)
        assert "embedded from" in md
        # Raw lines past the embed box map below it.
        note = app.index.note("Projects/🚀 Launch ⚠️ plan.md")
        raw = note.text.count("\n", 0, note.text.index("The end."))
        assert source.split("\n")[screen._source.line(raw)] == "The end."


@sync
async def test_context_pane_shows_embedded_text_from_its_node_id(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """The context pane boxes an embed's text below its line, marked with the source node_id."""
    write_notes(tui_vault, EXTRA)
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await search(app, pilot, "launch party hamster cake")
        results = app.main_screen.query_one(ResultsList)
        i = next(i for i, r in enumerate(results.results) if "Launch" in r.title)
        results.highlighted = results._option_index(i)
        await settle(app, pilot)
        pane = app.main_screen.query_one(ContextPane)
        body = str(pane.query_one("#ctx-body").content)
        assert "┌ ↪ embedded from Lang/日本語の勉強.md#" in body
        assert "│ 漢字は難しい。Kanji review every morning." in body
        assert "↪ ✗ unresolved embed Nowhere note" in body


# -- truthful mode, filters, palette ------------------------------------------------------------------
@sync
async def test_search_box_states_the_mode_truthfully(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """With embeddings off the search box says lexical, never hybrid; with the model ready, hybrid."""
    app = make_app(
        tui_vault, None, tmp_path, settings=quiet_settings(**{"index.embeddings": False}), load_model=False
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.status.index == "ready")
        await settle(app, pilot)
        box = app.main_screen.query_one(SearchBox)
        assert box.border_title == "Search · lexical (embeddings off)"
        await pilot.press("ctrl+t")
        assert box.border_title == "Search · phrase"
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        assert app.main_screen.query_one(SearchBox).border_title == "Search · hybrid"


@sync
async def test_filter_only_queries_list_notes_in_every_mode(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """`path:Pets` typed key by key lists the Pets notes; in a classic mode too, where filters narrow
    the tool's hits instead of being searched as words."""
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        screen = app.main_screen
        results = await search(app, pilot, "path:Pets", typing=True)
        assert results.mode.browse and results.results
        assert all(r.document_path.startswith("Pets/") for r in results.results)
        assert "filters only" in str(screen.query_one(ResultsSummary).content)
        box = screen.query_one(SearchBox)
        box.focus()
        await pilot.press("ctrl+t")  # phrase mode
        await settle(app, pilot)
        assert screen.results is not None and screen.results.results
        assert all(r.document_path.startswith("Pets/") for r in screen.results.results)
        box.value = "/and hamster path:Pets"
        await pilot.pause(0.3)
        await settle(app, pilot)
        found = screen.results.results
        assert found and all(r.document_path.startswith("Pets/") and r.source == "classic" for r in found)


@sync
async def test_palette_descriptions_are_one_line(tui_vault: Path, embedder, tmp_path: Path) -> None:
    """Every palette command says what it does in one short line (the binding's own description)."""
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        commands = list(app.get_system_commands(app.screen))
        ours = [c for c in commands if c.title.split(" (")[0] in {b.description for b in MainScreen.BINDINGS}]
        # One command an action: an action's browser twin (alt+letter) is the same command.
        assert len(ours) >= len({b.action for b in MainScreen.BINDINGS if b.description})
        for command in commands:
            assert "\n" not in command.help and len(command.help) <= 100, command
        why_not = next(c for c in ours if c.title == "Why not?")
        assert why_not.help == "f7 · Ask why a note you expected is missing"
        for binding in MainScreen.BINDINGS:
            assert binding.tooltip and palette_help(app.main_screen, binding) == binding.tooltip
        app.main_screen.query_one(TabbedContent)  # the screen is intact


def test_cells_pad_and_shorten_by_terminal_cells() -> None:
    """fit/clip count cells, not characters: a CJK character takes two."""
    from explorer.text.cells import clip, fit

    assert fit("漢字テスト", 7) == "漢字テ…" and cell_len(fit("漢字テスト", 7)) == 7
    assert fit("ab", 5) == "ab   " and fit("漢字テ", 5) == "漢字…"
    assert cell_len(clip("漢字 は 難しい ですが 毎日", 9)) <= 9 and clip("short", 9) == "short"


def test_cli_explain_table_aligns_wide_terms(tmp_path: Path) -> None:
    """`explorer search --explain`: a CJK term takes its 28 cells like any other, so columns line up."""
    import os
    import subprocess
    import sys

    vault = write_notes(
        tmp_path / "vault",
        {
            "漢字.md": "# 漢字の練習\n\n漢字の練習 kanji practice every morning with cards.\n",
            "Other.md": "# Other\n\nkanji cards and other things.\n",
        },
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "explorer",
            "search",
            "--vault",
            str(vault),
            "--no-embeddings",
            "--local",
            "--explain",
            "漢字の練習 kanji",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rows = [
        line
        for line in out.stdout.splitlines()
        if line.startswith("    ") and (" bm25 " in line or "retriever" in line)
    ]
    assert any(not line.isascii() for line in rows), rows
    columns = {cell_len(line[: line.index(" bm25 " if " bm25 " in line else " retriever")]) for line in rows}
    assert columns == {32}, rows


@sync
async def test_keys_typed_while_the_note_view_closes_all_reach_the_query(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """A burst of keys in the note view (a busy machine delivers them before the view is gone)
    becomes the whole query, not only its last letter."""
    from textual import events

    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        note_screen = await open_note(app, pilot, "Pets/hamster-cages-and-bedding.md")
        for ch in "hamster":
            note_screen.post_message(events.Key(ch, ch))
        await settle(app, pilot)
        assert app.screen is app.main_screen
        assert app.main_screen.query_one(SearchBox).value == "hamster"


@sync
async def test_steady_updates_keep_sizes_right() -> None:
    """`steady_update` skips the screen layout only when the size cannot change: a summary that
    grows to two lines still grows and pushes the list down, one of the same height shows its new
    text, and a shrinking one gives the rows back."""
    from textual.app import App, ComposeResult
    from textual.content import Content
    from textual.widgets import Static

    from explorer.tui.widgets.steady import steady_update

    class Two(App):
        CSS = "#a { height: auto; } #b { height: 1fr; } #w { width: auto; height: 1; }"

        def compose(self) -> ComposeResult:
            yield Static(Content("one line"), id="a")
            yield Static(Content("auto width"), id="w")
            yield Static("below", id="b")

    app = Two()
    async with app.run_test(size=(40, 10)) as pilot:
        a, w, b = app.query_one("#a", Static), app.query_one("#w", Static), app.query_one("#b", Static)
        await pilot.pause()
        assert (a.size.height, b.region.y) == (1, 2)
        steady_update(a, Content("first line\nsecond line"))
        await pilot.pause()
        assert (a.size.height, b.region.y) == (2, 3)
        steady_update(a, Content("other\nlines"))
        await pilot.pause()
        assert a.size.height == 2 and lines_of(a) == ["other" + " " * 35, "lines" + " " * 35]
        steady_update(a, Content("short"))
        steady_update(w, Content("a much wider text"))
        await pilot.pause()
        assert (a.size.height, b.region.y) == (1, 2) and w.size.width == len("a much wider text")


@sync
async def test_wide_summary_keeps_two_lines_so_the_list_stays_put(
    tui_vault: Path, embedder, tmp_path: Path
) -> None:
    """At 120 columns a summary that wraps to two lines (a long “no good match” advice) does not
    move the results list; at 80 columns, where rows are scarce, a one-line summary takes one row."""
    app = make_app(tui_vault, embedder, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        screen = app.main_screen
        summary, results = screen.query_one(ResultsSummary), screen.query_one(ResultsList)
        summary.message("short")
        await pilot.pause()
        top = results.region.y
        summary.message("long advice " * 15)
        await pilot.pause()
        assert summary.size.height == 2 and results.region.y == top
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        summary.message("short")
        await settle(app, pilot)
        assert summary.size.height == 1
