"""Queries derived from a vault's own structure (benchmarks.vault_queries) on a small vault written here."""

from __future__ import annotations

from pathlib import Path

from benchmarks.vault_queries import WRITTEN_KINDS, counts, queries_for, written_for
from benchmarks.vaults import manifest, slice_vault


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
    assert counts(queries_for(tmp_path)) == {
        "anchor": 2,
        "section": 1,
        "typo": 2,
        "alias": 1,
        "question": 0,
        "concept": 0,
    }


def test_section_queries_carry_their_heading_line(tmp_path: Path) -> None:
    text = "---\ntags: [x]\n---\n# Pond\n\nFrogs.\n\n## Water lilies\n\nFloat.\n"
    (tmp_path / "Pond.md").write_text(text, encoding="utf-8")

    (q,) = [q for q in queries_for(tmp_path) if q["kind"] == "section"]

    assert q["query"] == "Pond Water lilies" and q["heading"] == "Water lilies"
    assert text[q["offset"] :].startswith("## Water lilies")


def test_written_queries_name_a_vault_of_the_collection_and_a_note() -> None:
    names = {v["name"] for v in manifest()}
    rows = [q for name in names for q in written_for(name)]
    assert rows and all(q["kind"] in WRITTEN_KINDS and q["note"] == q["expected"][0] for q in rows)
    for name in names:
        got = counts(written_for(name))
        # Each vault has both kinds people type, about a dozen or more in all.
        assert got["question"] >= 5 and got["concept"] >= 5 and got["question"] + got["concept"] >= 12


def test_a_slice_keeps_the_answers_and_stays_under_its_budget(tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    (src / "sub").mkdir(parents=True)
    for i in range(20):
        (src / "sub" / f"n{i}.md").write_text("x" * 100, encoding="utf-8")
    (src / "big.md").write_text("y" * 1000, encoding="utf-8")

    n = slice_vault(src, out, max_bytes=500, keep=["big.md"])

    kept = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.md"))
    assert "big.md" in kept and n == len(kept) == 1  # the kept note alone is over the budget
    n = slice_vault(src, out, max_bytes=1500, keep=["big.md"])
    assert n == 6 and sum(p.stat().st_size for p in out.rglob("*.md")) <= 1500


def test_thresholds_keep_high_and_lower_medium_until_low_means_mostly_wrong() -> None:
    from benchmarks.vaults_loo import TARGET_LOW, calib, choose
    from explorer.search.quality import HIGH

    def rec(score: float, right: bool) -> dict[str, object]:
        # One result: its lead is its relevance, 0, so the level score is the score.
        return {"score": score, "right": right, "relevances": [0.0], "factors": {}}

    recs = [rec(0.9, True)] * 9 + [rec(0.9, False)]  # high: right 90 %
    recs += [rec(0.6, True)] * 6 + [rec(0.6, False)] * 4  # right 60 %: should not be low
    recs += [rec(0.3, True)] * 2 + [rec(0.3, False)] * 8  # right 20 %: low
    high, medium = choose(recs)
    assert high == HIGH
    assert 0.3 < medium <= 0.6
    got = calib(recs, high, medium)
    assert got["low_right"] is not None and got["low_right"] <= TARGET_LOW
    assert got["high_right"] == 0.9 and got["medium_right"] == 0.6
