"""The link-suggestion benchmark hides links as it says: words kept (A) or removed (B), the cursor where the link stood."""

from __future__ import annotations

import sys
from pathlib import Path

# benchmarks/ is a top-level folder of the repository, not part of the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.link_suggest import cases, hide_links
from conftest import write_notes
from explorer.index.local.vault_index import VaultIndex
from explorer.vault.parse import parse_note

TEXT = "Fed the [[Sourdough starter|levain]] today, see [[Bread]] and [crumb notes](Crumb%20notes.md).\n"


def test_hide_links_keeps_or_removes_the_words_and_marks_where_each_link_stood() -> None:
    note = parse_note("Daily/today.md", TEXT)
    kept, ends = hide_links(TEXT, note.links, keep_words=True)
    assert kept == "Fed the levain today, see Bread and crumb notes.\n"
    assert [kept[:e] for e in ends] == [
        "Fed the levain",
        "Fed the levain today, see Bread",
        "Fed the levain today, see Bread and crumb notes",
    ]
    removed, ends = hide_links(TEXT, note.links, keep_words=False)
    assert removed == "Fed the today, see and.\n"
    assert "[[" not in removed and "](" not in removed


def test_cases_count_each_linked_note_once_and_skip_missing_notes_and_embeds(tmp_path: Path) -> None:
    vault = write_notes(
        tmp_path / "v",
        {
            "Daily/today.md": TEXT
            + "\nSecond paragraph: [[Bread]] again, [[Bread]] twice, ![[Bread]] embedded, [[Nowhere]].\n",
            "Sourdough starter.md": "Flour and water.",
            "Bread.md": "Loaves.",
            "Crumb notes.md": "Open crumb.",
        },
    )
    index = VaultIndex(vault)
    index.settings = index.settings.with_overrides({"index.embeddings": False})
    index.open()
    try:
        found = [(c["note"], c["paragraph"], c["target"]) for c in cases(index)]
    finally:
        index.close()
    assert found == [
        ("Daily/today.md", 0, "Sourdough starter.md"),
        ("Daily/today.md", 0, "Bread.md"),
        ("Daily/today.md", 0, "Crumb notes.md"),
        ("Daily/today.md", 1, "Bread.md"),
    ]


def test_generated_text_links_vault_names_each_note_among_its_own_words() -> None:
    """links="text": every note's own words hold a word of its name (people write about a thing in
    the words that name it), so the sentences about a linked note can name it."""
    import random

    from benchmarks import obsidian_vault

    notes = obsidian_vault.generate(7, links="text")
    assert len(notes) > 300
    plans = [
        (n.path.split("/")[0], n.name, n.aliases, ["alpha", "beta", "gamma", "delta", "omega", "kappa"])
        for n in notes
    ]
    own = obsidian_vault._own_words(random.Random(1), plans)  # noqa: SLF001 - the rule under test
    for _folder, name, _aliases, _words in plans:
        named = obsidian_vault._name_words(name)  # noqa: SLF001
        if named:
            assert own[name][0] in named
    assert obsidian_vault._name_words("Book - Thinking, Fast and Slow") == ["thinking", "fast", "slow"]  # noqa: SLF001


def test_priors_fuse_into_the_related_part_and_leave_named_notes_first() -> None:
    from benchmarks.link_suggest_priors import evaluate, top

    case = {
        "items": [("Named.md", "mention"), ("R1.md", "related"), ("R2.md", "related"), ("R3.md", "related")]
        + [(f"R{i}.md", "related") for i in range(4, 9)],
        "l1": ["Far.md"],
        "b1": [],
        "hop": {},
        "nv": ["Far.md"],
        **{name: [] for name in ("nvp", "nvs", "tf", "bm_rare", "bm_sent")},
    }
    row = {"note": "Own.md", "target": "Far.md", "A": case, "B": case}
    # No weight: the writer's list as it is.
    assert top(row, "B", {}) == ["Named.md", "R1.md", "R2.md", "R3.md", "R4.md"]
    # A ranking fused at a high weight brings its first note up, below the named note.
    fused = top(row, "B", {"nv": 2.0})
    assert fused[0] == "Named.md" and fused[1] == "Far.md"
    # The local graph: a note linked from the rest of the note (2 points) ranks first in it.
    assert top(row, "B", {"graph": 2.0})[1] == "Far.md"
    res = evaluate({"one": [row], "two": [row]})
    assert res["vaults"]["one"]["writer"] == {"A": 0.0, "B": 0.0}
    assert res["vaults"]["one"]["left_out_by_links"]["B"] == 1.0  # chosen on "two", where it helps
