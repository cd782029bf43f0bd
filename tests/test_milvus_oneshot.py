"""What a one-shot command asks of a `milvus-lite server` (a behaviour, not a timing): no warm-up beside its one
search, no index description at an open that has checked before, only its own words' statistics; and a search
waits for a warm-up under way for as long as it runs."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import write_notes

pymilvus = pytest.importorskip("pymilvus", reason="the milvus extra is not installed")

from explorer.cli import main  # noqa: E402
from explorer.engine import make_pipeline, new_index  # noqa: E402
from explorer.index.milvus import MilvusIndex  # noqa: E402
from explorer.index.milvus.stats import STATS_SUFFIX  # noqa: E402
from test_milvus import MILVUS_LITE, LiteServer, milvus_settings  # noqa: E402

ALICE = {
    "sea/light.md": "# Lighthouse\n\nThe lighthouse keeper logs the storm and the ships.\n",
    "sea/tide.md": "# Tides\n\nThe tide tables for the harbour, spring and neap.\n",
    "home/bread.md": "# Bread\n\nA sourdough loaf needs a long cold proof.\n",
}
BOB = {
    "log/storm.md": "# Storm night\n\nThe storm took the pier; the lighthouse kept its lamp lit.\n",
    "log/garden.md": "# Garden\n\nTomatoes in raised beds, watered at dawn.\n",
    "log/ships.md": "# Ships\n\nThree ships rode out the storm behind the breakwater.\n",
}
QUERY = "lighthouse storm vault:*"
METHODS = ("search", "hybrid_search", "query", "describe_index")
"""The pymilvus client's methods counted: plain searches (the warm-up's), the team search, reads, index descriptions."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiteServer]:
    """One server for the module; each test writes its own collection (`_cli`'s `collection`)."""
    if not MILVUS_LITE.exists():
        pytest.skip("milvus-lite server is not installed")
    lite = LiteServer(tmp_path_factory.mktemp("oneshot") / "engine")
    lite.start()
    try:
        yield lite
    finally:
        if lite.proc is not None:
            os.kill(lite.proc.pid, signal.SIGCONT)  # a test stopped half-way may leave it paused
        lite.stop()


@pytest.fixture()
def counted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, int]]:
    """Every call of `METHODS` on any pymilvus client of this process: (method, collection and filter, rows
    returned). A team search with no vectors is a plain `search` (its BM25 queries in one request)."""
    from pymilvus import MilvusClient

    calls: list[tuple[str, str, int]] = []
    for name in METHODS:
        method = getattr(MilvusClient, name)

        def wrapped(self: Any, *args: Any, _method: Any = method, _name: str = name, **kwargs: Any) -> Any:
            out = _method(self, *args, **kwargs)
            rows = len(out) if _name == "query" else 0
            name = str(args[0] if args else kwargs.get("collection_name", ""))
            calls.append((_name, f"{name} {kwargs.get('filter', '')}", rows))
            return out

        monkeypatch.setattr(MilvusClient, name, wrapped)
    return calls


def _cli(args: list[str], uri: str, vault: Path, name: str, capfd: pytest.CaptureFixture[str]) -> str:
    settings = [
        *("--set", "index.backend=milvus", "--set", f"index.milvus_uri={uri}"),
        *("--set", f"index.collection={vault.parent.name}"),
        *(
            "--set",
            f"index.cache_dir={vault.parent / (name + '-cache')}",
            "--set",
            f"index.vault_name={name}",
        ),
    ]
    code = main([*args, *settings, "--no-embeddings"])
    out = capfd.readouterr()
    assert code == 0, out.err
    return out.out


def _team(tmp_path: Path, server: LiteServer, capfd: pytest.CaptureFixture[str]) -> tuple[Path, Path]:
    """Alice's and Bob's vaults written into the server's collection by `explorer index` (Alice's makes it)."""
    alice = write_notes(tmp_path / "alice", ALICE)
    bob = write_notes(tmp_path / "bob", BOB)
    for vault, name in ((alice, "alice"), (bob, "bob")):
        _cli(["index", str(vault)], server.uri, vault, name, capfd)
    return alice, bob


def _search(vault: Path, name: str, uri: str, capfd: pytest.CaptureFixture[str]) -> list[tuple[str, float]]:
    out = _cli(["search", QUERY, "--vault", str(vault), "--json", "--local"], uri, vault, name, capfd)
    return [(r["document_path"], round(r["score"], 6)) for r in json.loads(out)["results"]]


def _statistics_read(calls: list[tuple[str, str, int]]) -> int:
    """Rows a search read from the statistics table (not the writer's read of its own vault's rows at open)."""
    return sum(r for name, c, r in calls if name == "query" and f"{STATS_SUFFIX} bucket" in c)


def test_a_one_shot_search_sends_no_warm_up_and_reads_only_its_words_statistics(
    tmp_path: Path, server: LiteServer, counted: list[tuple[str, str, int]], capfd: pytest.CaptureFixture[str]
) -> None:
    """`explorer search ... vault:*` searches once: a warm-up beside it (a BM25 and a vector search, which
    Milvus Lite answers by walking every key: 2.5-3 s each at 300k shards) doubled the engine's work. Its
    team search reads the statistics of the query's words only, not the whole table a process that
    searches again keeps, and ranks as that process does."""
    alice, _bob = _team(tmp_path, server, capfd)
    counted.clear()
    got = _search(alice, "alice", server.uri, capfd)
    searches = [c for name, c, _r in counted if name in ("search", "hybrid_search")]
    # No warm-up (searches of the whole collection, unfiltered): the team search is the engine's only one.
    assert len(searches) == 1 and "vault" in searches[0], counted
    assert {p for p, _s in got} >= {"sea/light.md", "vault:bob/log/storm.md"}
    stats_rows = _statistics_read(counted)

    # A process that searches again (watch, mcp, the app) reads the whole table once and keeps it: the
    # same statistics, so the same scores.
    index = new_index(
        alice,
        milvus_settings(server.uri, tmp_path / "alice-cache", embeddings=False, collection=tmp_path.name),
    )
    assert isinstance(index, MilvusIndex) and not index.one_shot
    try:
        index.open()
        counted.clear()
        res = make_pipeline(index, index.settings).search(QUERY, dense=False, record=False)
        whole = _statistics_read(counted)
    finally:
        index.close()
    assert [(r.document_path, round(r.score, 6)) for r in res.results] == got
    # Each vault's header row and the buckets of the two words, against every row of both vaults.
    assert stats_rows <= 2 * (1 + 2 * 2) < whole


def test_the_vector_index_is_described_once_per_vault(
    tmp_path: Path,
    server: LiteServer,
    counted: list[tuple[str, str, int]],
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Milvus Lite answers `describe_index` by counting every row (3 s at 300k shards): a writer asks at its
    vault's first open of the collection (no row digest of its own in the statistics table) and not at the
    next ones; a collection given a `FLAT` vector index is given the current one at a vault's first open."""
    alice, bob = _team(tmp_path, server, capfd)
    described = [c for name, c, _r in counted if name == "describe_index"]
    assert len(described) == 1  # Bob's first open (Alice's made the collection with the current index)
    counted.clear()
    _search(alice, "alice", server.uri, capfd)
    _search(bob, "bob", server.uri, capfd)
    assert not [c for name, c, _r in counted if name == "describe_index"]

    from pymilvus import MilvusClient

    client, shards = MilvusClient(uri=server.uri), tmp_path.name  # the test's collection (`_cli`)
    try:
        client.release_collection(shards)
        client.drop_index(shards, "vector")
        flat = client.prepare_index_params()
        flat.add_index(field_name="vector", index_type="FLAT", metric_type="COSINE")
        client.create_index(shards, flat)
        client.load_collection(shards)
        carol = write_notes(tmp_path / "carol", {"c.md": "# Carol\n\nA lighthouse in the storm.\n"})
        counted.clear()
        got = _search(carol, "carol", server.uri, capfd)
        assert len([c for name, c, _r in counted if name == "describe_index"]) == 1
        assert client.describe_index(shards, "vector")["index_type"] == "IVF_FLAT"
        assert "c.md" in {p for p, _s in got}
    finally:
        client.close()


def test_a_search_waits_for_a_warm_up_under_way_as_long_as_it_runs(
    tmp_path: Path, server: LiteServer, capfd: pytest.CaptureFixture[str]
) -> None:
    """A search asked while the warm-up's first BM25 search is in the engine is not sent beside it (Milvus Lite
    would build the same BM25 index twice at once: minutes at 300k shards), however long the warm-up takes:
    here an engine that does not answer (its process paused) until the test lets it."""
    alice, _bob = _team(tmp_path, server, capfd)
    index = new_index(
        alice,
        milvus_settings(server.uri, tmp_path / "alice-cache", embeddings=False, collection=tmp_path.name),
        one_shot=True,
    )
    assert isinstance(index, MilvusIndex)
    order: list[str] = []
    real = index.engine.call

    def call(what: str, fn: Any) -> Any:
        order.append(what)
        return real(what, fn)

    index.engine.call = call  # type: ignore[method-assign]
    assert server.proc is not None
    try:
        index.open()  # connected and synced, no warm-up (one-shot): it is started below
        pipe = make_pipeline(index, index.settings)
        order.clear()
        os.kill(server.proc.pid, signal.SIGSTOP)
        index.engine.warm_later()
        found: list[Any] = []
        asker = threading.Thread(
            target=lambda: found.append(pipe.search(QUERY, dense=False, record=False)), daemon=True
        )
        asker.start()
        deadline = time.monotonic() + 30
        while "warm" not in order and time.monotonic() < deadline:
            time.sleep(0.05)
        assert order == ["warm"]  # the warm-up's BM25 search is in the paused engine
        asker.join(
            3.0
        )  # longer than the scaled-down fixed bound the search once waited before sending its own
        assert asker.is_alive() and order == ["warm"], order
        os.kill(server.proc.pid, signal.SIGCONT)
        asker.join(60)
        assert not asker.is_alive()
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
        index.close()
    assert order[:2] == ["warm", "warm"] and "search" in order[2:], order
    assert {r.document_path for r in found[0].results} >= {"sea/light.md", "vault:bob/log/storm.md"}
