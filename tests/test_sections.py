"""Section queries: a query that names a note and a part of it ("the section on Diet in Hamsters") gets that part first."""

from __future__ import annotations

import pytest

from conftest import write_notes
from explorer.index.local.vault_index import VaultIndex
from explorer.search.core.pipeline import SearchPipeline

WORDS = "Hamsters are small rodents kept as pets; they sleep by day and run at night on a wheel."
NOTES = {
    "Pets/Hamsters.md": (
        "---\naliases: [hamster care]\ntags: [pets]\n---\n"
        f"{WORDS} {WORDS}\n\n"
        "## Diet\n\nSeeds, fresh vegetables and a little protein. No citrus fruit.\n\n"
        "## Housing\n\nA large cage with deep bedding and a solid wheel.\n\n"
        "## Health\n\nWatch the teeth and the weight every week.\n"
    ),
    "Knowledge/rodent-nutrition.md": "Diet of rodents: seeds, grains and vegetables; a varied diet keeps pets healthy.\n",
    "Tech/Docker.md": "Containers package an app with its libraries.\n\n## Setup\n\nInstall the engine, add your user to the group.\n",
    "Tech/Docker setup.md": "Step by step: install, configure the daemon, run hello-world.\n",
}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, embedder):
    idx = VaultIndex(write_notes(tmp_path_factory.mktemp("sections") / "v", NOTES), embedder=embedder)
    idx.open()
    idx.embed_pending()
    yield idx
    idx.close()


def _first(index: VaultIndex, query: str):
    res = SearchPipeline(index).search(query, k=5, record=False)
    return next(r for r in res.results if r.source == "search")


@pytest.mark.parametrize(
    "query, node_id",
    [
        ("Hamsters Diet", "Pets/Hamsters.md#Diet"),
        ("the section on housing in hamsters", "Pets/Hamsters.md#Housing"),
        ("what does Hamsters say about health", "Pets/Hamsters.md#Health"),
    ],
)
def test_the_named_part_of_the_named_note_comes_first(index: VaultIndex, query: str, node_id: str) -> None:
    """The note is first and its best passage is the section named."""
    assert _first(index, query).node_id == node_id


def test_the_name_is_credited_to_the_section_the_query_names(index: VaultIndex) -> None:
    top = _first(index, "Hamsters Diet")
    assert [c.rank for c in top.explanation.contributions if c.retriever == "name"] == [1]


def test_a_name_alone_still_credits_the_note_top(index: VaultIndex) -> None:
    top = _first(index, "Hamsters")
    assert top.node_id == "Pets/Hamsters.md"


def test_a_name_made_of_the_query_outranks_a_shorter_name_with_that_heading(index: VaultIndex) -> None:
    """Heading words count less than name words: "Docker setup" is the note of that name, not Docker's section."""
    res = SearchPipeline(index).search("Docker setup", k=5, record=False)
    assert res.results[0].document_path == "Tech/Docker setup.md"
    named = [
        r.document_path
        for r in res.results
        if any(c.retriever == "name" for c in (r.explanation.contributions if r.explanation else ()))
    ]
    assert named == ["Tech/Docker setup.md"]


def test_section_benchmark_queries_come_from_every_heading(tmp_path) -> None:
    """benchmarks.section_query: every template for each heading that names one part of one note;
    a note's only H1, headings repeated in a note and headings inside code fences are left out."""
    from benchmarks.section_query import TEMPLATES, queries_for

    write_notes(
        tmp_path,
        {
            "a/Hamsters.md": "---\ntags: [x]\n---\n# Hamsters\n\nIntro.\n\n## Diet\n\nSeeds.\n\n```\n## Not a heading\n```\n\n"
            "## Notes\n\nOne.\n\n## Notes\n\nTwo.\n",
            "b/Docker.md": "## Setup\n\nInstall.\n\n## Diet\n\nNone.\n",
        },
    )
    qs = queries_for(tmp_path)
    by_note = {(q["note"], q["heading"]) for q in qs}
    assert by_note == {("a/Hamsters.md", "Diet"), ("b/Docker.md", "Setup"), ("b/Docker.md", "Diet")}
    kinds = {q["kind"] for q in qs if q["heading"] == "Setup"}
    assert kinds == {k for k, _ in TEMPLATES}, (
        "a heading unique in the vault also gets the heading-alone query"
    )
    assert {q["kind"] for q in qs if q["heading"] == "Diet"} == {k for k, _ in TEMPLATES} - {"heading alone"}
    text = (tmp_path / "a/Hamsters.md").read_text()
    diet = next(q for q in qs if q["note"] == "a/Hamsters.md")
    assert text[diet["offset"] :].startswith("## Diet")
    assert {q["query"] for q in qs if q["heading"] == "Setup"} == {
        "Docker Setup",
        "the section on Setup in Docker",
        "what does Docker say about Setup",
        "Setup",
    }
