"""Relevance marks: F8 / F9 in the app write `.explorer/judgments.jsonl`; `explorer eval` replays them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import SIZE, make_app, search, settle, sync, write_notes
from explorer.cli import main
from explorer.tui.widgets.results import ResultsList
from explorer.vault.judgments import append_judgment, load_judgments, make_judgment

NOTES = {
    "Pets/hamster.md": "# Hamster\n\nA Syrian hamster needs a 30 cm wheel and deep bedding.\n",
    "Pets/cage.md": "# Cage\n\nA hamster cage needs 100 x 50 cm of floor.\n",
    "Coffee/espresso.md": "# Espresso\n\nA fine grind slows the espresso shot.\n",
}


@sync
async def test_marks_from_the_app_and_why_not_offers_them(tmp_path: Path, embedder) -> None:
    from textual.widgets import Input

    vault = write_notes(tmp_path / "v", NOTES)
    app = make_app(vault, embedder, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        results = await search(app, pilot, "hamster wheel")
        screen = app.main_screen
        screen.query_one(ResultsList).focus()
        await pilot.pause()
        first = screen.selected
        assert first is not None
        await pilot.press("f8")
        await pilot.press("down")
        await pilot.pause()
        second = screen.selected
        await pilot.press("f9")
        await pilot.pause()
        marks, bad = load_judgments(vault / ".explorer")
        assert bad == 0 and [m.mark for m in marks] == ["relevant", "not_relevant"]
        assert marks[0].query == "hamster wheel" and marks[0].path == first.document_path
        assert marks[0].node_id == first.node_id and marks[1].path == second.document_path
        assert marks[0].generation == app.index.version and marks[0].time.endswith("+00:00")

        # A note marked relevant earlier that this search lacks is offered to “Why not?”.
        append_judgment(
            vault / ".explorer",
            make_judgment(
                "hamster wheel", "Coffee/espresso.md", "Coffee/espresso.md", "relevant", app.index.version
            ),
        )
        assert "Coffee/espresso.md" not in {r.document_path for r in results.results}
        await pilot.press("f7")
        await pilot.pause()
        assert screen.query_one("#why-not", Input).value == "Coffee/espresso.md"


def test_eval_replays_marks_and_fails_on_a_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vault = write_notes(tmp_path / "v", NOTES)
    cache = vault / ".explorer"
    base = ["eval", str(vault), "--no-embeddings", "--json"]
    assert main(base) == 0  # no marks yet: nothing to replay
    assert "no relevance marks" in capsys.readouterr().err
    append_judgment(cache, make_judgment("syrian wheel", "Pets/hamster.md", "Pets/hamster.md", "relevant", 1))
    append_judgment(
        cache, make_judgment("espresso grind", "Coffee/espresso.md", "Coffee/espresso.md", "relevant", 1)
    )
    append_judgment(cache, make_judgment("espresso grind", "Pets/cage.md", "Pets/cage.md", "not_relevant", 1))
    with (cache / "judgments.jsonl").open("a", encoding="utf-8") as fh:
        fh.write("{not json\n")

    assert main(base) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["scored_queries"] == 2 and first["ndcg@10"] == 1.0 and first["mrr@10"] == 1.0
    assert first["malformed_lines"] == 1 and first["baseline_written"] is True
    assert (cache / "eval-baseline.json").is_file()

    # (Words of the text, not of the note's name "hamster", which would still find it by name.)
    # The note that answered "syrian wheel" loses its words: it drops out, and eval says so and fails.
    (vault / "Pets/hamster.md").write_text("# Notes\n\nSee the care sheet.\n", encoding="utf-8")
    assert main(base) == 1
    second = json.loads(capsys.readouterr().out)
    assert second["queries"]["syrian wheel"]["dropped"] == ["Pets/hamster.md"]
    assert second["regressions"] and "ndcg@10" in second["regressions"][0]
    assert main([*base, "--threshold", "0.9"]) == 0  # a looser threshold tolerates it
    capsys.readouterr()
    (vault / "Pets/hamster.md").unlink()
    assert main(base[:-1]) == 1
    text = capsys.readouterr().out
    assert "gone from the vault: Pets/hamster.md" in text and "REGRESSION" in text
    assert main([*base, "--update-baseline"]) == 0  # accept the new state
    capsys.readouterr()
    assert main(base) == 0
