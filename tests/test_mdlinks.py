"""Markdown links count as links (backlinks, navigation, dangling) and their URLs are not indexed as words."""

from __future__ import annotations

from pathlib import Path

from conftest import write_notes
from explorer.index.local.vault_index import VaultIndex
from explorer.index.targets import resolve_target
from explorer.vault.parse import parse_note

NOTES = {
    "Pets/Hamster care.md": "# Hamster care\n\n## Diet\n\nSeeds and vegetables.\n",
    "Journal/2024/day.md": (
        "Read [the diet part](../../Pets/Hamster%20care.md#Diet) again, "
        "then [the guide](<Pets/Hamster care.md>) from the vault root, "
        "and [by name](Hamster%20care.md). Also [a site](https://zebrafish.example.org/quokka).\n"
        "`[not a link](Pets/Hamster care.md)`\n"
    ),
    "Other.md": "Nothing links here. [gone](Missing%20note.md)\n",
}


def test_markdown_links_are_parsed_url_decoded_with_anchors() -> None:
    note = parse_note("Journal/2024/day.md", NOTES["Journal/2024/day.md"])
    got = [(link.target, link.heading, link.alias, link.markdown) for link in note.links]
    assert got == [
        ("../../Pets/Hamster care.md", "Diet", "the diet part", True),
        ("Pets/Hamster care.md", "", "the guide", True),
        ("Hamster care.md", "", "by name", True),
    ]


def test_markdown_links_resolve_and_count_as_backlinks(tmp_path: Path) -> None:
    index = VaultIndex(write_notes(tmp_path / "v", NOTES))
    index.settings = index.settings.with_overrides({"index.embeddings": False})
    index.open()
    graph = index.links()
    targets = [t for _, t in graph.outgoing("Journal/2024/day.md")]
    assert targets == ["Pets/Hamster care.md"] * 3
    assert [b.source for b in graph.backlinks("Pets/Hamster care.md")] == ["Journal/2024/day.md"] * 3
    assert [(src, link.target) for src, link in graph.dangling()] == [("Other.md", "Missing note.md")]
    # The link text is indexed, the URL and the link target are not.
    toks = {t for node_id in index.shards_by_path["Journal/2024/day.md"] for t in index.tokens(node_id)}
    assert {"diet", "guid", "site"} <= toks
    assert not {"zebrafish", "quokka", "20note", "20care"} & toks
    index.close()


def test_old_and_new_node_id_forms_resolve(tmp_path: Path) -> None:
    index = VaultIndex(
        write_notes(tmp_path / "v", {"a.md": "# A\n\n## Care\n\n### Diet\n\nseeds\n\n## Care\n\nagain\n"})
    )
    index.settings = index.settings.with_overrides({"index.embeddings": False})
    index.open()
    # Bare headings (A, the first Care) join the section after them; no suffix is needed then.
    assert sorted(index.shards) == ["a.md#Care", "a.md#Care#Diet"]
    assert index.shards["a.md#Care#Diet"].text.startswith("# A")
    text = index.notes["a.md"].text
    for form in ("a.md#Care#Diet", "a.md#Care > Diet", "a#A#Care#Diet", "a#Diet"):
        assert resolve_target(index, form).cursor == text.index("### Diet")
    index.close()


def test_ignore_rules_default_and_configured_and_reported_by_stats(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    vault = write_notes(
        tmp_path / "v",
        {
            "note.md": "a kite",
            "Drawings/plan.excalidraw.md": "excalidraw json kite",
            ".trash/old.md": "kite",
            ".obsidian/workspace.md": "kite",
            "drafts/wip.md": "kite",
            "drafts/keep.md": "kite",
        },
    )
    (vault / ".explorer").mkdir()
    (vault / ".explorer" / "config.toml").write_text(
        '[vault]\nignore = ["drafts/*", "!drafts/keep.md"]\n', encoding="utf-8"
    )
    env = {**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    out = subprocess.run(
        [sys.executable, "-m", "explorer", "stats", "--json", "--no-embeddings", "--vault", str(vault)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    data = json.loads(out.stdout)
    assert data["notes"] == 2
    assert data["ignored"] == {
        ".obsidian/": ".obsidian/ is not part of the notes",
        ".trash/": ".trash/ is not part of the notes",
        "Drawings/plan.excalidraw.md": "ignore rule '*.excalidraw.md'",
        "drafts/wip.md": "ignore rule 'drafts/*'",
    }


def test_node_ids_are_link_targets_even_when_headings_hold_link_syntax(tmp_path: Path) -> None:
    long_para = " ".join(f"Sentence {i} about pipes and tips." for i in range(120))
    text = (
        "# Lang\n\n## C# tips\n\nuse spans\n\n## Pipes | and [[Links]]\n\nbar\n\n"
        "## C tips\n\nsame link form\n\n## x^2\n\n" + long_para + "\n"
    )
    index = VaultIndex(write_notes(tmp_path / "v", {"a.md": text}))
    index.settings = index.settings.with_overrides({"index.embeddings": False})
    index.open()
    ids = list(index.shards_by_path["a.md"])
    assert ids[:5] == ["a.md#C tips", "a.md#Pipes and Links", "a.md#C tips (2)", "a.md#x 2", "a.md#x 2@2"]
    for node_id in ids:
        # A wikilink to the node_id, read by the vault parser, names this note and the whole fragment.
        [link] = parse_note("b.md", f"see [[{node_id}]]").links
        assert (link.target, link.alias, link.block) == ("a.md", "", "")
        assert f"{link.target}#{link.heading}" == node_id
    # New forms, the older raw-heading forms and their suffixes all resolve to their sections.
    at = {h: text.index(h) for h in ("## C# tips", "## Pipes", "## C tips", "## x^2")}
    cases = {
        "a.md#C tips": at["## C# tips"],
        "a.md#C# tips": at["## C# tips"],
        "a.md#Lang > C# tips": at["## C# tips"],
        "a.md#Pipes | and [[Links]]": at["## Pipes"],
        "a#pipes and links": at["## Pipes"],
        "a.md#C tips (2)": at["## C tips"],
        "a.md#Lang > C# tips (2)": at["## C tips"],
        "a.md#x^2": at["## x^2"],
        "a.md#x 2@2": index.shards["a.md#x 2@2"].start,
        "a.md#Lang > x^2@2": index.shards["a.md#x 2@2"].start,
    }
    for form, cursor in cases.items():
        assert resolve_target(index, form).cursor == cursor, form
    index.close()
