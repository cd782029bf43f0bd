"""Queries derived from a vault's own structure (benchmarks.vault_queries) on a small vault written here."""

from __future__ import annotations

from pathlib import Path

from benchmarks.vault_queries import counts, queries_for


def test_queries_come_from_links_headings_names_and_aliases(tmp_path: Path) -> None:
    (tmp_path / "garden").mkdir()
    (tmp_path / "garden" / "Tomato growing.md").write_text(
        "---\naliases: [Love apples]\n---\n# Tomato growing\n\nStake them early.\n\n"
        "## Watering schedule\n\nDeep and rare.\n\nSee [[Compost heap|my black gold]].\n",
        encoding="utf-8",
    )
    (tmp_path / "Compost heap.md").write_text(
        "Turn it weekly. Feeds the [tomatoes](garden/Tomato%20growing.md#watering-schedule).\n"
        "A link to itself by name: [[Compost heap|Compost heap]]; to nowhere: [x y z](Missing.md).\n",
        encoding="utf-8",
    )
    (tmp_path / ".obsidian").mkdir()
    (tmp_path / ".obsidian" / "Hidden note.md").write_text("## Not a note\n", encoding="utf-8")

    got = {(q["kind"], q["query"]): q["expected"] for q in queries_for(tmp_path)}

    assert got[("anchor", "my black gold")] == ["Compost heap.md"]
    assert got[("anchor", "tomatoes")] == ["garden/Tomato growing.md"]
    assert got[("section", "Tomato growing Watering schedule")] == ["garden/Tomato growing.md"]
    assert got[("alias", "Love apples")] == ["garden/Tomato growing.md"]
    typos = [q for k, q in got if k == "typo"]
    assert len(typos) == 2 and "Compost heap" not in typos and "Tomato growing" not in typos
    # A lone H1 is the note itself, an anchor that is the target's name says nothing new,
    # a link to no note has no answer, and a hidden folder holds no notes.
    assert ("section", "Tomato growing Tomato growing") not in got
    assert ("anchor", "Compost heap") not in got and ("anchor", "x y z") not in got
    assert not any("Not a note" in q for _, q in got)
    assert counts(queries_for(tmp_path)) == {"anchor": 2, "section": 1, "typo": 2, "alias": 1}
