"""How often a `vault:*` search asks the engine, on a real Milvus Lite engine (a behaviour, not a timing), and
that asking less changed no ranking: the top 10 of fixed queries against ones recorded from the earlier code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import SAMPLE_VAULT, seed_vectors

pytest.importorskip("pymilvus", reason="the milvus extra is not installed")

from explorer.engine import make_pipeline, new_index
from explorer.index.milvus import MilvusIndex
from test_milvus import milvus_settings

GOLDEN = Path(__file__).parent / "golden" / "milvus_team_top10.json"
"""The top 10 of `QUERIES` (with `vault:*`) from alice, recorded before a team search asked the engine less."""
QUERIES = (
    "hamster diet",
    "how to brew cold brew coffee",
    "rust ownership borrow",
    "compound interest savings",
    "sourdough starter",
    "great wall history",
    "sleep better at night",
    "tomatoes in raised beds",
)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, sample_index):
    """Two vaults (the sample vault's folders dealt alternately to alice and bob) written into one Milvus Lite file."""
    tmp = tmp_path_factory.mktemp("calls")
    a, b = tmp / "alice", tmp / "bob"
    folders = sorted(p for p in SAMPLE_VAULT.iterdir() if p.is_dir())
    for i, folder in enumerate(folders):
        shutil.copytree(folder, (a if i % 2 == 0 else b) / folder.name)
    shutil.copy(SAMPLE_VAULT / "Welcome.md", a / "Welcome.md")
    db = str(tmp / "engine" / "m.db")
    writers: list[MilvusIndex] = []
    try:
        for vault, name in ((a, "alice"), (b, "bob")):
            seed_vectors(vault, sample_index)
            index = new_index(
                vault,
                milvus_settings(db, vault / ".explorer", vault_name=name),
                embedder=sample_index.embedder(),
            )
            assert isinstance(index, MilvusIndex)
            index.open()
            index.embed_pending()
            index.wait_warm()
            writers.append(index)
        yield writers
    finally:
        for w in writers:
            w.close()


def _named(vault: str, path: str) -> str:
    return path.partition("vault:")[2] if path.startswith("vault:") else f"{vault}/{path}"


ROUND_TRIPS = ("search", "hybrid_search", "query", "get", "query_iterator")
"""The pymilvus client's methods that ask the engine for rows."""


def _counting(method, name: str, trips: list[str]):
    def counted(*args, **kwargs):
        trips.append(name)
        return method(*args, **kwargs)

    return counted


def test_a_team_search_asks_the_engine_at_most_twice_and_ranks_as_before(pair, monkeypatch) -> None:
    """A `vault:*` search asks the engine at most twice, counted at the client: one request carrying every
    BM25 and dense query of its first pass (the feedback vector and the second pass rank the rows it
    returned), then one read of the other vaults' candidate shards by key with the notes the name ranking
    opens whole, not every candidate's; its top 10 are those recorded from the code that asked per
    ranking and read every candidate note whole."""
    from explorer.index.milvus import team

    alice, _bob = pair
    pipe = make_pipeline(alice, alice.settings)
    pipe.search("garden vault:*", k=10, record=False)  # the statistics of this version read once
    whole: list[str] = []
    read_notes = team.read_notes

    def counted(engine, wanted):
        for item in read_notes(engine, wanted):
            whole.append(item[1])
            yield item

    monkeypatch.setattr(team, "read_notes", counted)
    trips: list[str] = []  # every round trip of the pymilvus client that searches or reads
    client = alice.engine.client()
    for name in ROUND_TRIPS:
        monkeypatch.setattr(client, name, _counting(getattr(client, name), name, trips))
    tops: dict[str, list[str]] = {}
    calls: dict[str, int] = {}
    passes: dict[str, int] = {}
    kinds: dict[str, dict[str, int]] = {}
    notes_whole: dict[str, int] = {}
    for q in QUERIES:
        was = dict(alice.engine.calls)
        whole.clear()
        trips.clear()
        res = pipe.search(f"{q} vault:*", k=10, record=False)
        calls[q] = len(trips)
        kinds[q] = {k: v - was.get(k, 0) for k, v in alice.engine.calls.items() if v != was.get(k, 0)}
        passes[q] = len(res.passes)
        tops[q] = [_named("alice", r.document_path) for r in res.results]
        notes_whole[q] = len(whole)
    if not GOLDEN.exists():  # recorded once, from the earlier code
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps({"top10": tops, "calls": kinds}, indent=1) + "\n", encoding="utf-8")
        pytest.skip("recorded")
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert tops == golden["top10"]
    # One engine request per search (every term's BM25 query and the dense queries of the first pass
    # together; the feedback vector and the second pass rank the rows it returned), and one read of the
    # text collection (the other vaults' candidate shards by key, with the notes the name ranking opens
    # whole); the statistics from what this version read.
    for q in QUERIES:
        assert kinds[q].get("search", 0) <= 1, kinds
        assert calls[q] <= 2, (calls, kinds)
    assert any(n == 1 for n in passes.values())
    # Bob's 43 notes are all candidates of every query here; the earlier code read each whole.
    assert all(n <= 12 for n in notes_whole.values()), notes_whole
