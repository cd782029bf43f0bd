"""Obsidian names in search: a note's name or alias as the query brings it first; typos are corrected."""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.index.vault_index import VaultIndex
from explorer.search.pipeline import SearchPipeline

from conftest import write_notes

LONG = " ".join(["Kimchi ferments best when the kimchi jar stays cool; kimchi brine should cover the cabbage."] * 6)
NOTES = {
    "Cooking/Kimchi.md": "Napa cabbage, salt, gochugaru. Two weeks in the fridge. " + " ".join(
        ["Salt the leaves overnight, rinse twice, squeeze dry, then mix the paste of garlic, ginger and pepper."] * 5),
    "Cooking/Kimchi troubleshooting.md": f"# Troubles\n\n{LONG}",
    "Cooking/Fermentation log.md": f"Fermentation notes. {LONG}",
    "People/Anna Schmidt.md": "---\naliases: [Anna]\ndescription: Runs the pottery studio downtown\n---\nMet at the market; she makes bowls.",
    "Garden/beds.md": "# Beds\n\n## Tomatoes\n\nTomatoes need sun every day.\n\n## Pests\n\nSlugs eat the lettuce.\n",
    "Garden/greenhouse.md": "# Greenhouse\n\nTomatoes ripen early under glass.\n",
    "Projects/phoenix.md": "---\ntitle: Project Phoenix\naliases:\n  - Phoenix rebuild\n---\n# Plan\n\nRewrite the billing service.",
}


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory, embedder):
    index = VaultIndex(write_notes(tmp_path_factory.mktemp("names") / "v", NOTES), embedder=embedder)
    index.open()
    index.embed_pending()
    yield index
    index.close()


def _top(index: VaultIndex, query: str, **overrides) -> list[str]:
    settings = index.settings.with_overrides(overrides) if overrides else index.settings
    res = SearchPipeline(index, settings).search(query, k=5, record=False)
    return [r.document_path for r in res.results if r.source == "search"]


def test_the_note_named_by_the_query_comes_first(vault) -> None:
    res = SearchPipeline(vault).search("kimchi", k=5, record=False)
    assert res.results[0].document_path == "Cooking/Kimchi.md"
    named = [c for c in res.results[0].explanation.contributions if c.retriever == "name"]
    assert named and named[0].rank == 1
    # Only the best-named notes are listed: "Kimchi troubleshooting" gets no name contribution.
    second = next(r for r in res.results if r.document_path == "Cooking/Kimchi troubleshooting.md")
    assert all(c.retriever != "name" for c in second.explanation.contributions)


def test_aliases_and_frontmatter_title_name_the_note(vault) -> None:
    assert _top(vault, "Anna")[0] == "People/Anna Schmidt.md"
    assert _top(vault, "Phoenix rebuild")[0] == "Projects/phoenix.md"
    assert _top(vault, "project phoenix")[0] == "Projects/phoenix.md"
    assert vault.notes["Projects/phoenix.md"].title == "Project Phoenix"
    assert vault.notes["Projects/phoenix.md"].headings[0].text == "Plan"


def test_description_is_searchable(vault) -> None:
    assert _top(vault, "pottery studio")[0] == "People/Anna Schmidt.md"


def test_a_misspelt_word_searches_the_closest_vault_word(vault) -> None:
    res = SearchPipeline(vault).search("kimchi trubleshooting", k=5, record=False)
    assert res.corrections == [{"word": "trubleshooting", "searched": ["troubleshoot"], "edits": 1}]
    assert res.results[0].document_path == "Cooking/Kimchi troubleshooting.md"
    assert res.to_dict()["corrections"] == res.corrections
    # Words the vault has are never corrected, nor are short ones.
    assert SearchPipeline(vault).search("salt jar", k=5, record=False).corrections == []
    off = SearchPipeline(vault, vault.settings.with_overrides({"search.typo_tolerance": False}))
    assert off.search("kimchi trubleshooting", k=5, record=False).corrections == []


def test_excluded_word_excludes_the_whole_note(vault) -> None:
    assert "Garden/beds.md" in _top(vault, "tomatoes")
    # The Tomatoes section does not mention slugs, but its note does: Obsidian leaves the note out.
    assert _top(vault, "tomatoes -slugs") == ["Garden/greenhouse.md"]
