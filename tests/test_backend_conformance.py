"""The backend face's contract (explorer.index.backend), run on every backend: what a third backend must pass.

Each backend (the local one, and Milvus on a Milvus Lite engine in process) opens the same small vault
through the registry (`explorer.engine.new_index`) and is read only through `IndexBackend` and
`Snapshot`: open, search reads (BM25 and vector rankings, restrictions), the reads the front ends
make (note, shard at an offset, stats, link targets, embeds), versions, a change batch, vectors by
content hash, close. The tests that only read share one opened index of each backend; each test that
opens, embeds, changes or closes an index has its own, so every test passes alone and in any order.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import CountingEmbedder, write_notes
from explorer.config import Settings
from explorer.engine import new_index
from explorer.engine.build import BACKENDS
from explorer.index.backend import IndexBackend, ModelState, Snapshot
from explorer.index.targets import context_for, resolve_target
from explorer.index.transclusion import embeds_in
from explorer.text.tokenize import tokenize

NOTES = {
    "Pets/hamsters.md": "# Hamsters\n\n## Diet\n\nHamsters eat seeds, grains and fresh vegetables.\n\n"
    "## Cage\n\nA hamster cage needs deep bedding and a wheel. ^wheel\n",
    "Pets/gerbils.md": "# Gerbils\n\nGerbils dig tunnels; like [[hamsters]] they eat seeds.\n\n![[hamsters#Diet]]\n",
    "Garden/tomatoes.md": "---\naliases: [love apple]\n---\n# Tomatoes\n\nTomatoes need sun, water and a stake.\n",
    "Garden/compost.md": "# Compost\n\nVegetable scraps and dry leaves make compost for the tomatoes.\n",
    "Copies/seeds.md": "Hamsters eat seeds, grains and fresh vegetables.\n",
}
"""A small vault: headings, a block id, a wikilink, an embed of a section, an alias, a text two notes share."""


def _settings(name: str, tmp: Path) -> Settings:
    s = Settings()
    if name == "milvus":
        pytest.importorskip("pymilvus", reason="the milvus extra is not installed")
        (tmp / "engine").mkdir()
        index = replace(
            s.index,
            backend="milvus",
            milvus_uri=str(tmp / "engine" / "milvus.db"),
            cache_dir=str(tmp / "cache"),
        )
        return replace(s, index=index)
    return replace(s, index=replace(s.index, cache_dir=str(tmp / "cache")))


@pytest.fixture(scope="module", params=sorted(BACKENDS))
def backend_name(request: pytest.FixtureRequest) -> str:
    """One backend of the registry."""
    return request.param


@contextmanager
def _index(
    name: str, tmp: Path, embedder: Any
) -> Iterator[tuple[IndexBackend, CountingEmbedder, Path, dict]]:
    """(a new, unopened index of NOTES on backend `name`, its counting embedder, the vault, a state whose
    "closed" a test that closes the index sets) in `tmp`; closed after unless the test closed it."""
    vault = write_notes(tmp / "vault", NOTES)
    counting = CountingEmbedder(embedder)
    index = new_index(vault, _settings(name, tmp), on_message=lambda _m: None, embedder=counting)
    assert index.backend_name == name
    state = {"closed": False}
    try:
        yield index, counting, vault, state
    finally:
        if not state["closed"]:
            index.close()


@pytest.fixture()
def fresh(backend_name: str, tmp_path: Path, remembering_embedder):
    """(a new index of its own, not opened yet, its counting embedder, the vault), for a test that writes.
    Texts embedded by an earlier test are answered from memory (the counting embedder still sees them)."""
    with _index(backend_name, tmp_path, remembering_embedder) as made:
        yield made


@pytest.fixture(scope="module")
def opened(backend_name: str, tmp_path_factory: pytest.TempPathFactory, remembering_embedder):
    """One opened index with every shard embedded, shared by the tests that only read it (do not change it)."""
    tmp = tmp_path_factory.mktemp(f"conformance-{backend_name}")
    with _index(backend_name, tmp, remembering_embedder) as (index, _, _, _):
        index.open()
        index.embed_pending()
        yield index


def test_open_reports_the_vault_and_raises_the_version(fresh) -> None:
    index, _, _, _ = fresh
    assert index.version == 0
    report = index.open()
    assert sorted(report.added) == sorted(NOTES)
    assert not report.changed and not report.removed
    assert index.version > 0
    stats = index.stats()
    assert (stats.notes, stats.version) == (len(NOTES), index.version)
    assert stats.shards >= len(NOTES)
    assert index.note_count() == len(NOTES)
    assert index.note_titles()["Pets/hamsters.md"] == "hamsters"


def test_vectors_by_content_hash(fresh) -> None:
    """Every shard gets a vector; a text two shards share is embedded once."""
    index, counting, _, _ = fresh
    index.open()
    assert index.model_state.usable
    pending = index.pending()
    assert pending
    hashes = {s.hash for s in pending}
    before = index.version
    index.embed_pending()
    assert not index.pending()
    assert index.model_state is ModelState.READY
    assert counting.texts <= len(hashes)  # each distinct text at most once
    assert index.version > before
    assert index.stats().pending == 0
    with index.snapshot() as snap:
        assert snap.has_vectors()
        assert snap.counts().pending == 0
        a = snap.vector(snap.shard_ids("Copies/seeds.md")[0])
        assert a is not None and abs(float(np.linalg.norm(a)) - 1.0) < 1e-4


def test_snapshot_reads_notes_and_shards(opened) -> None:
    index = opened
    with index.snapshot() as snap:
        assert snap.version == index.version
        assert set(snap.notes) == set(NOTES)
        ids = snap.shard_ids("Pets/hamsters.md")
        assert ids and all(snap.shards[i].path == "Pets/hamsters.md" for i in ids)
        assert list(ids) == sorted(ids, key=lambda i: snap.shards[i].start)
        assert not snap.shard_ids("no/such.md")
        note = snap.note("Pets/hamsters.md")
        assert note is not None and note.text == NOTES["Pets/hamsters.md"]
        assert snap.note("no/such.md") is None
        cage = note.text.index("deep bedding")
        shard = snap.shard_at("Pets/hamsters.md", cage)
        assert shard is not None and shard.start <= cage < shard.end and "Cage" in shard.heading_path
        assert snap.modified("Pets/hamsters.md") is not None
        counts = snap.counts()
        assert (counts.notes, counts.shards, counts.version) == (len(NOTES), len(snap.shards), snap.version)
        graph = snap.links()
        assert "Pets/gerbils.md" in {b.source for b in graph.backlinks("Pets/hamsters.md")}
    # the index's own reads agree with its snapshot's
    assert index.note("Pets/hamsters.md") == note
    assert index.shard_at("Pets/hamsters.md", cage) == shard
    assert index.shard(shard.node_id) == shard
    assert index.resolve_note("love apple") == "Garden/tomatoes.md"
    assert index.skipped_files() == {}


def test_lexical_statistics_and_bm25_rankings(opened) -> None:
    index = opened
    with index.snapshot() as snap:
        lex = snap.lexical
        assert lex.n_docs() == len(snap.shards)
        seeds = tokenize("seeds")[0]
        having = [i for i in snap.shards if seeds in lex.tokens(i)]
        assert lex.doc_freq(seeds) == len(having) >= 3
        assert seeds in lex.idf() and lex.avgdl() > 0
        query = tokenize("hamster seeds")
        top = snap.bm25_top(query, 10)
        scores = lex.scores(query, list(snap.shards))
        expected = sorted(((n, s) for n, s in scores.items() if s > 0), key=lambda h: (-h[1], h[0]))[:10]
        assert [n for n, _ in top] == [n for n, _ in expected]
        assert [s for _, s in top] == pytest.approx([s for _, s in expected], rel=1e-5)
        assert snap.bm25_top_many([query, tokenize("compost")], 10)[0] == top
        allowed = snap.restrict(frozenset(snap.shard_ids("Pets/gerbils.md")))
        limited = snap.bm25_top(query, 10, allowed)
        assert limited and {n for n, _ in limited} <= set(allowed.node_ids)


def test_vector_rankings(opened) -> None:
    index = opened
    emb = index.embedder()
    assert emb is not None
    q = index.encode_query("what do hamsters eat")
    assert q is not None
    with index.snapshot() as snap:
        hits = snap.vector_top(np.atleast_2d(q), 5, 0.2)[0]
        assert hits and all(s >= 0.2 for _, s in hits)
        assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
        exact = {n: float(np.dot(snap.vector(n), q)) for n, _ in hits}
        assert [s for _, s in hits] == pytest.approx([exact[n] for n, _ in hits], abs=1e-4)
        allowed = snap.restrict(frozenset(snap.shard_ids("Garden/tomatoes.md")))
        assert {n for n, _ in snap.vector_top(np.atleast_2d(q), 5, -1.0, allowed)[0]} <= set(allowed.node_ids)


def test_link_targets_and_embeds(opened) -> None:
    index = opened
    assert resolve_target(index, "Pets/hamsters.md#^wheel").kind == "block"
    found = resolve_target(index, "hamsters#Diet")
    assert found.path == "Pets/hamsters.md" and found.kind in ("shard", "heading")
    window = context_for(index, "Pets/hamsters.md#Cage", chars_before=0, chars_after=40)
    assert "bedding" in window.text
    embeds = embeds_in(index, "Pets/gerbils.md")
    assert [e.status for e in embeds] == ["embedded"]
    assert "seeds, grains" in embeds[0].text and embeds[0].path == "Pets/hamsters.md"


def test_a_change_batch_is_a_new_version_and_a_held_snapshot_keeps_its_own(fresh) -> None:
    index, _, vault, _ = fresh
    index.open()
    index.embed_pending()
    old = index.snapshot()
    try:
        before = index.version
        write_notes(vault, {"Garden/basil.md": "# Basil\n\nBasil grows beside the tomatoes in the sun.\n"})
        (vault / "Copies" / "seeds.md").unlink()
        report = index.refresh(paths=["Garden/basil.md", "Copies/seeds.md"])
        assert report.added == ["Garden/basil.md"] and report.removed == ["Copies/seeds.md"]
        assert index.version > before
        assert "Garden/basil.md" not in old.notes and "Copies/seeds.md" in old.notes
        assert old.version == before
        index.embed_pending()
        with index.snapshot() as snap:
            assert "Garden/basil.md" in snap.notes and "Copies/seeds.md" not in snap.notes
            assert snap.bm25_top(tokenize("basil"), 5)[0][0].startswith("Garden/basil.md")
            q = index.encode_query("basil herb")
            assert q is not None
            assert any(
                n.startswith("Garden/basil.md") for n, _ in snap.vector_top(np.atleast_2d(q), 5, 0.0)[0]
            )
    finally:
        old.release()


def test_close(fresh) -> None:
    index, _, _, state = fresh
    index.open()
    snap: Snapshot = index.snapshot()
    snap.release()
    snap.release()  # idempotent
    idx: IndexBackend = index
    idx.close()
    state["closed"] = True
