"""Team search at scale on a real Milvus Lite engine: one meaning of a `vault:*` score, few engine calls."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from conftest import write_notes

pytest.importorskip("pymilvus", reason="the milvus extra is not installed")

from explorer.config import Settings
from explorer.engine import make_pipeline, new_index
from explorer.index.milvus import MilvusIndex
from explorer.text.tokenize import tokenize


def _lexical(db: str, cache: Path, name: str) -> Settings:
    s = Settings()
    return replace(
        s,
        index=replace(
            s.index, backend="milvus", milvus_uri=db, cache_dir=str(cache), vault_name=name, embeddings=False
        ),
    )


def _open(vault: Path, settings: Settings) -> MilvusIndex:
    index = new_index(vault, settings)
    assert isinstance(index, MilvusIndex)
    index.open()
    return index


def _named(vault: str, path: str) -> str:
    """A result path as the collection names it, whichever vault asked."""
    return path.partition("vault:")[2] if path.startswith("vault:") else f"{vault}/{path}"


def _fillers(word: str, n: int) -> dict[str, str]:
    return {
        f"misc/{word}-{i}.md": f"# Note {i}\n\nA {word} seen from the garden, number {i}.\n" for i in range(n)
    }


def test_a_team_score_does_not_depend_on_the_vault_that_asks(tmp_path: Path) -> None:
    """`vault:*` scores every row with the collection's statistics: alice (where `lunar` is common) and bob
    (where `eclipse` is) get the same ranking, the same scores, for the same query."""
    a = write_notes(
        tmp_path / "a",
        {"sky/night.md": "# Night\n\nThe lunar lunar surface at night.\n", **_fillers("lunar", 8)},
    )
    b = write_notes(
        tmp_path / "b",
        {"sky/day.md": "# Day\n\nThe eclipse eclipse at noon darkens the sky.\n", **_fillers("eclipse", 2)},
    )
    db = str(tmp_path / "engine" / "m.db")
    alice = _open(a, _lexical(db, tmp_path / "ca", "alice"))
    bob = _open(b, _lexical(db, tmp_path / "cb", "bob"))
    try:
        got = {}
        for ix in (alice, bob):
            res = make_pipeline(ix, ix.settings).search("lunar eclipse vault:*", record=False)
            got[ix.vault_name] = [
                (_named(ix.vault_name, r.document_path), round(r.score, 6)) for r in res.results
            ]
        assert got["alice"] == got["bob"]
        assert {"alice/sky/night.md", "bob/sky/day.md"} <= {p for p, _ in got["alice"]}
        # the statistics are the collection's: both vaults' documents counted
        words = tokenize("lunar eclipse")
        stats = alice.team_stats.collection(words)
        assert stats.docs == len(alice.shards) + len(bob.shards) and stats.vaults == 2
        assert stats.df == dict(zip(words, (9, 3), strict=True))
    finally:
        alice.close()
        bob.close()


def test_a_team_search_reads_other_vaults_notes_in_one_query(tmp_path: Path) -> None:
    """The rows of every other vault a `vault:*` ranking returns are read in one query per pass (not one per
    vault), the notes it shows in one more, and their rows' words decode as the writer encoded them."""
    from collections import Counter

    from explorer.index.milvus.engine import decode_terms, engine_terms

    assert decode_terms(engine_terms(["moon", "東京", "moon", "x1"])) == Counter(
        {"moon": 2, "東京": 1, "x1": 1}
    )
    db = str(tmp_path / "engine" / "m.db")
    vaults = {}
    for name in ("alice", "bob", "carol", "dave"):
        root = write_notes(
            tmp_path / name,
            {f"{name}/tide.md": f"# Tide\n\nThe harbour tide table of {name}, spring tide.\n"},
        )
        vaults[name] = _open(root, _lexical(db, tmp_path / f"c{name}", name))
    try:
        alice = vaults["alice"]
        before = dict(alice.engine.calls)
        res = make_pipeline(alice, alice.settings).search("harbour tide vault:*", record=False)
        reads = alice.engine.calls.get("read", 0) - before.get("read", 0)
        found = {r.document_path for r in res.results}
        assert {"vault:bob/bob/tide.md", "vault:carol/carol/tide.md", "vault:dave/dave/tide.md"} <= found
        # per pass, one read of the candidate rows by key and one of the shown notes: not one per vault
        assert reads <= 2 * len(res.passes)
    finally:
        for ix in vaults.values():
            ix.close()
