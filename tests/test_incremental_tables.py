"""The tables a search keeps per index version follow the notes that changed and answer as if rebuilt.

A pipeline that has searched every version since the vault was opened (idf, typo word list, name
table, note owners, knowledge shards updated from the changed notes) must answer exactly as a new
pipeline that builds them from the whole index; and the BM25 idf updated document by document
must equal the idf of an index built from scratch.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from conftest import write_notes
from explorer.config import load_settings
from explorer.index.local.lexical import BM25Index
from explorer.index.local.vault_index import VaultIndex
from explorer.search.core.pipeline import SearchPipeline

NOTES = {
    "Knowledge/hamsters.md": "# Hamsters\n\nHamsters store seeds in their cheek pouches and sleep by day.\n",
    "Knowledge/greyhounds.md": "# Greyhounds\n\nGreyhounds are calm dogs that sprint fast and nap often.\n",
    "Users/Ana/turns/turn_000001/context.md": "---\nspeaker: Ana\n---\nAna: I adopted a greyhound from the shelter.\n",
    "Users/Ben/turns/turn_000002/context.md": "---\nspeaker: Ben\n---\nBen: I am training for the Lisbon marathon.\n",
    "Projects/garden.md": "---\naliases: [Allotment]\n---\n# Garden\n\nTomatoes, basil and a budget for seeds.\n",
    "Projects/pottery.md": "# Pottery\n\nThe pottery course ends in spring; glaze the bowls first.\n",
}

#: Edits applied one batch at a time: (path, new text or None to delete).
EDITS = [
    ("Knowledge/marathons.md", "# Marathons\n\nA marathon is 42 km; Lisbon hosts one in spring.\n"),
    ("Projects/garden.md", "---\naliases: [Allotment, Vegetable plot]\n---\n# Garden\n\nCourgettes now.\n"),
    ("Users/Cleo/turns/turn_000003/context.md", "---\nspeaker: Cleo\n---\nCleo: my greyhound naps.\n"),
    ("Knowledge/hamsters.md", None),
    ("Users/Ben/turns/turn_000002/context.md", "---\nspeaker: Benedict\n---\nBen: the marathon went well.\n"),
    ("Projects/quinoa.md", "# Quinoa\n\nQuinoa salad with courgettes and basil.\n"),
]

QUERIES = [
    "greyhound",
    "Ana greyhound",
    "Cleo greyhound naps",
    "Benedict marathon",
    "marathon Lisbon spring",
    "Vegetable plot",
    "Allotment budget",
    "hamsters cheek pouches",
    "quinoq salad",
    "courgetes basil",
    "pottery glaze",
]


def _edit(index: VaultIndex, rel: str, text: str | None) -> None:
    """Write (or, for None, delete) one note of the index's vault and refresh the index for it."""
    file = Path(index.root) / rel
    if text is None:
        file.unlink()
    else:
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text, encoding="utf-8")
    index.refresh(paths=[rel])


def _answer(pipeline: SearchPipeline, query: str) -> list[tuple[str, float, str]]:
    out = pipeline.search(query, k=8)
    return [(r.document_path, round(r.score, 9), r.source) for r in out.results]


@pytest.fixture()
def index(tmp_path: Path):
    vault = write_notes(tmp_path / "v", NOTES)
    ix = VaultIndex(vault, load_settings(vault, {"index.embeddings": False}))
    ix.open()
    yield ix
    ix.close()


def test_a_pipeline_that_followed_every_version_answers_as_a_new_one(index: VaultIndex) -> None:
    kept = SearchPipeline(index, index.settings)  # searches every version
    skipping = SearchPipeline(index, index.settings)  # searches every other version
    for query in QUERIES:
        kept.search(query, k=8)  # every table built at the first version
        skipping.search(query, k=8)
    for step, (rel, text) in enumerate(EDITS):
        _edit(index, rel, text)
        fresh = SearchPipeline(index, index.settings)
        for query in QUERIES:
            expected = _answer(fresh, query)
            assert _answer(kept, query) == expected, (step, rel, query)
            if step % 2:
                assert _answer(skipping, query) == expected, (step, rel, query)


def test_owner_and_typo_tables_see_the_edits(index: VaultIndex) -> None:
    pipeline = SearchPipeline(index, index.settings)
    assert all(r.document_path != "Projects/quinoa.md" for r in pipeline.search("quinoq", k=3).results)
    root = Path(index.root)
    (root / "Projects/quinoa.md").write_text("# Quinoa\n\nQuinoa salad with basil.\n", encoding="utf-8")
    index.refresh(paths=["Projects/quinoa.md"])
    # A word new to the vault is a correction candidate at once (the typo word list followed it).
    typo = pipeline.search("quinoq", k=3)
    assert typo.results and typo.results[0].document_path == "Projects/quinoa.md"
    (root / "Projects/quinoa.md").unlink()
    index.refresh(paths=["Projects/quinoa.md"])
    # ... and is no candidate once the only note with it is gone.
    gone = pipeline.search("quinoq", k=3)
    assert all(r.document_path != "Projects/quinoa.md" for r in gone.results)


def test_idf_updated_document_by_document_equals_the_idf_of_a_new_index() -> None:
    rng = random.Random(3)
    words = [f"w{i}" for i in range(800)]

    def doc() -> list[str]:
        body = [rng.choice(words[:50]) if rng.random() < 0.5 else rng.choice(words) for _ in range(30)]
        return body + (["the"] if rng.random() < 0.9 else [])  # "the": a negative idf, floored

    docs = {f"d{i}": doc() for i in range(300)}
    built = BM25Index()
    for key, tokens in docs.items():
        built.add(key, tokens)
    keys = built.keys()
    vocab, arrays = built.export(keys)
    for ix in (built, BM25Index()):
        if ix is not built:
            ix.load_base(keys, vocab, arrays)  # the segment an open loads
        live = dict(docs)
        first = ix.idf()
        assert dict(first) == dict(_new_index(live).idf())
        for step in range(120):
            if rng.random() < 0.4 and live:
                key = rng.choice(sorted(live))
                ix.remove(key)
                del live[key]
            else:
                key = f"n{step}"
                live[key] = [*doc(), f"new{step}"]
                ix.add(key, live[key])
            if step % 5:
                continue
            table, reference = ix.idf(), _new_index(live).idf()
            assert len(table) == len(reference) and set(table) == set(reference)
            for term, value in reference.items():
                assert math.isclose(table[term], value, rel_tol=1e-12, abs_tol=1e-12), term
            assert table.get("absent") is None and "absent" not in table


def _new_index(docs: dict[str, list[str]]) -> BM25Index:
    ix = BM25Index()
    for key, tokens in docs.items():
        ix.add(key, tokens)
    return ix


def test_a_speller_reading_the_term_list_corrects_as_one_reading_the_whole_table(index: VaultIndex) -> None:
    # A speller first used at a later version reads the index's term list (which keeps terms since
    # removed) rather than computing every idf of the table: the same corrections either way.
    from explorer.search.core.typos import Speller

    for rel, text in EDITS:
        _edit(index, rel, text)
        table = index.bm25.idf()
        typos = "quinoq courgetes greyhund marathn potery hamstres budgte allotmnt"
        from_list = Speller().corrections(typos, table, lambda t: 1)
        assert from_list == Speller().corrections(typos, dict(table), lambda t: 1), rel
        assert from_list, rel


def test_the_index_logs_the_notes_each_version_changed(index: VaultIndex) -> None:
    # What a search's tables follow instead of comparing every note with the last version's.
    with index.snapshot() as first:
        start, notes = first.version, dict(first.notes)
        assert first.notes_changed(start) == frozenset()
        assert first.notes_changed(0) is None  # the stored index loaded: every note may have changed
    for rel, text in EDITS:
        _edit(index, rel, text)
        with index.snapshot() as snap:
            moved = {p for p in {*notes, *snap.notes} if notes.get(p) is not snap.notes.get(p)}
            assert snap.notes_changed(start) == moved, rel
            assert snap.notes_changed(snap.version - 1) == {rel}
    index.refresh(paths=["Projects/pottery.md"])  # unchanged: a version that changed no note
    with index.snapshot() as snap:
        assert snap.notes_changed(snap.version - 1) == frozenset()
        assert snap.notes_changed(snap.version + 1) is None
