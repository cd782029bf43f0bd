"""Obsidian names in search: a note's name or alias as the query brings it first; typos are corrected."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import write_notes
from explorer.index.local.vault_index import VaultIndex
from explorer.search.core.pipeline import SearchPipeline

LONG = " ".join(
    ["Kimchi ferments best when the kimchi jar stays cool; kimchi brine should cover the cabbage."] * 6
)
NOTES = {
    "Cooking/Kimchi.md": "Napa cabbage, salt, gochugaru. Two weeks in the fridge. "
    + " ".join(
        [
            "Salt the leaves overnight, rinse twice, squeeze dry, then mix the paste of garlic, ginger and pepper."
        ]
        * 5
    ),
    "Cooking/Kimchi troubleshooting.md": f"# Troubles\n\n{LONG}",
    "Cooking/Fermentation log.md": f"Fermentation notes. {LONG}",
    "People/Anna Schmidt.md": "---\naliases: [Anna]\ndescription: Runs the pottery studio downtown\n---\nMet at the market; she makes bowls.",
    "Garden/beds.md": "# Beds\n\n## Tomatoes\n\nTomatoes need sun every day.\n\n## Pests\n\nSlugs eat the lettuce.\n",
    "Garden/greenhouse.md": "# Greenhouse\n\nTomatoes ripen early under glass.\n",
    "Books/quotes.md": "# Quotes\n\nOn Tuesday she read *nothing is ever impossible* aloud to the class.\n",
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
    assert res.corrections == [
        {"word": "trubleshooting", "searched": ["troubleshoot"], "shown": ["troubleshooting"], "edits": 1}
    ]
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


def test_a_quoted_phrase_is_evidence_not_a_wall(vault) -> None:
    pipe = SearchPipeline(vault)
    res = pipe.search('When did she read "nothing is impossible"?', k=5, record=False)
    assert res.results and res.results[0].document_path == "Books/quotes.md"
    assert any("no exact match" in w and "ranked by its words" in w for w in res.warnings)
    exact = pipe.search('"ripen early" tomatoes', k=5, record=False)
    assert exact.results[0].document_path == "Garden/greenhouse.md"
    assert not any("no exact match" in w for w in exact.warnings)
    assert any(c.retriever == "phrase" for c in exact.results[0].explanation.contributions)


def test_most_recent_turn_rule_fires_on_references_not_pronouns() -> None:
    from explorer.search.core.terms import offline_terms

    for query in ("When did she read the book?", "What did her brother give them?", "is it in that note"):
        assert not offline_terms(query).include_n_minus_1, query
    for query in (
        "What did you say last time about ramen?",
        "as I said, the blue one",
        "remind me of the plan",
    ):
        assert offline_terms(query).include_n_minus_1, query


def test_the_top_10_do_not_depend_on_how_many_results_were_asked(sample_pipeline) -> None:
    for query in (
        "hamster cage size",
        "how do I fix a rusty bike chain",
        "what did alice ask about the bonus",
    ):
        tops = [
            [
                r.document_path
                for r in sample_pipeline.search(query, k=k, record=False).results
                if r.source == "search"
            ][:10]
            for k in (10, 15, 30)
        ]
        assert tops[0] == tops[1] == tops[2], query


def test_a_note_without_text_is_found_by_its_name(tmp_path: Path) -> None:
    index = VaultIndex(
        write_notes(
            tmp_path / "v",
            {
                "Projects/someday-maybe.md": "---\ntitle: Someday / maybe\n---\n",
                "Projects/ideas.md": "Ideas for someday, maybe a boat.",
            },
        )
    )
    index.settings = index.settings.with_overrides({"index.embeddings": False})
    index.open()
    res = SearchPipeline(index).search("someday maybe", k=5, record=False)
    assert res.results[0].document_path == "Projects/someday-maybe.md"
    index.close()


def test_an_identifier_name_leaves_the_shard_text_to_the_title_heading(tmp_path: Path) -> None:
    notes = {
        "Papers/10009203.md": "# Dendritic arbor geometry\n\nNeurons adjust their dendrites to synaptic input.\n",
        "Papers/10009204.md": "# Axon guidance\n\nGrowth cones follow gradients.\n",
        "Daily/2024-01-01.md": "# 2024-01-01\n\nWent running.\n",
        "Docker setup.md": "# Installing Docker\n\nUse the package manager.\n",
    }
    index = VaultIndex(write_notes(tmp_path / "v", notes))
    index.settings = index.settings.with_overrides({"index.embeddings": False})
    index.open()
    text = {path: index.shards[ids[0]].search_text for path, ids in index.shards_by_path.items()}
    # A document id or timestamp is not words: the title heading heads the text alone.
    assert text["Papers/10009203.md"].startswith("Dendritic arbor geometry\n# Dendritic")
    assert "10009203" not in text["Papers/10009203.md"]
    # Names with words, and a date that the heading repeats, head their shards as before.
    assert text["Docker setup.md"].startswith("Docker setup > Installing Docker\n")
    assert text["Daily/2024-01-01.md"].startswith("2024-01-01\n# 2024-01-01")
    # The name ranking still finds the note by its id.
    res = SearchPipeline(index).search("10009203", k=3, record=False)
    assert res.results[0].document_path == "Papers/10009203.md"
    assert any(c.retriever == "name" for c in res.results[0].explanation.contributions)
    index.close()
