"""A team reader with no vault on disk (`explorer search --team URI`) on a real `milvus-lite server` process:
two vaults write into one collection, the reader answers as a writer's `vault:*` search does, and
writes nothing anywhere."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import SAMPLE_VAULT, seed_vectors

pytest.importorskip("pymilvus", reason="the milvus extra is not installed")

from explorer.cli.entry import main
from explorer.cli.team import team_query
from explorer.config import Settings
from explorer.engine import make_pipeline, new_index
from explorer.index.milvus import MilvusIndex
from explorer.index.milvus.reader import TeamReader, read_statistics, split_target, table_statistics
from test_milvus import MILVUS_LITE, LiteServer, free_port, milvus_settings
from test_milvus_team_calls import ROUND_TRIPS, _counting

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
"""Queries whose answers lie in both vaults (the sample vault's folders, dealt alternately to alice and bob)."""


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, sample_index):
    """A `milvus-lite server` holding two vaults (the sample vault split in two) written by two writers."""
    if not MILVUS_LITE.exists():
        pytest.skip("milvus-lite server is not installed")
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    tmp = tmp_path_factory.mktemp("team")
    server = LiteServer(tmp / "engine")
    server.start()
    a, b = tmp / "alice", tmp / "bob"
    folders = sorted(p for p in SAMPLE_VAULT.iterdir() if p.is_dir())
    for i, folder in enumerate(folders):
        shutil.copytree(folder, (a if i % 2 == 0 else b) / folder.name)
    shutil.copy(SAMPLE_VAULT / "Welcome.md", a / "Welcome.md")
    writers: list[MilvusIndex] = []
    try:
        for vault, name in ((a, "alice"), (b, "bob")):
            seed_vectors(vault, sample_index)  # nothing to embed: the shared sample index's vectors
            index = new_index(
                vault,
                milvus_settings(server.uri, vault / ".explorer", vault_name=name),
                embedder=sample_index.embedder(),
            )
            assert isinstance(index, MilvusIndex)
            index.open()
            index.embed_pending()
            assert index.stats().pending == 0
            writers.append(index)
        yield server, writers
    finally:
        for w in writers:
            w.close()
        server.stop()


def _reader(uri: str, embedder=None) -> TeamReader:
    return TeamReader(uri, Settings().index.collection, Settings(), embedder=embedder).open()


def _as_team(path: str, own: str) -> str:
    return path if path.startswith("vault:") else f"vault:{own}/{path}"


def test_a_reader_answers_as_a_writers_team_search(team, sample_index, monkeypatch) -> None:
    """The reader's top 10 are the writer's `vault:*` top 10: both score BM25 with the collection's
    statistics (the writer through the statistics table the writers keep, the reader from the rows).
    Tolerance: 9.5 of 10 on average, 8 at worst - the writer's name table and dense
    feedback read its own vault's vectors and notes only."""
    server, (alice, _bob) = team
    reader = _reader(server.uri, sample_index.embedder())
    stats = read_statistics(reader.engine)
    assert stats.n == alice.stats().shards + _bob.stats().shards and stats.vaults == {"alice", "bob"}
    writer, ours = make_pipeline(alice, alice.settings), make_pipeline(reader, reader.settings)
    overlaps = []
    asked: list[int] = []
    trips: list[str] = []  # every round trip of the reader's pymilvus client that searches or reads
    client = reader.engine.client()
    for name in ROUND_TRIPS:
        monkeypatch.setattr(client, name, _counting(getattr(client, name), name, trips))
    try:
        for q in QUERIES:
            w = [_as_team(r.document_path, "alice") for r in writer.search(f"{q} vault:*", k=10).results]
            trips.clear()
            r = [x.document_path for x in ours.search(team_query(q), k=10).results]
            asked.append(len(trips))
            assert r and all(p.startswith(("vault:alice/", "vault:bob/")) for p in r)
            overlaps.append(10 * len(set(w) & set(r)) / max(len(set(w) | set(r)), 1))
    finally:
        reader.close()
    assert min(overlaps) >= 8 and sum(overlaps) / len(overlaps) >= 9.5, overlaps
    # Each search asks the engine at most twice: one request carrying its BM25 and dense queries (the
    # feedback vector and the second pass rank the rows it returned, with their vectors), then one read
    # of the text collection (the shards by key, the notes the name ranking opens whole).
    assert max(asked) <= 2, asked


def test_a_reader_reads_the_statistics_table_the_writers_keep(team, monkeypatch) -> None:
    """The reader's BM25 statistics come from the `<collection>_stats` table (a few small queries, no scan of
    the rows) and equal a scan's; its lexical `vault:*` top 10 hold a writer's documents. Of the notes its
    rankings return, it reads whole only those a search shows (the others' shards by key)."""
    from explorer.index.milvus import team as team_module

    server, (alice, bob) = team
    whole: list[str] = []
    returned: set[tuple[str, str]] = set()
    read_notes, read_rows, read_both = team_module.read_notes, team_module.read_rows, team_module.read_both

    def counted(engine, wanted):
        for item in read_notes(engine, wanted):
            whole.append(item[1])
            yield item

    def by_key(engine, wanted):
        rows = read_rows(engine, wanted)
        returned.update((r["vault"], r["path"]) for r in rows)
        return rows

    def both(engine, keys, wanted):
        rows = read_both(engine, keys, wanted)
        returned.update((r["vault"], r["path"]) for r in rows)
        whole.extend(p for _v, p in wanted)
        return rows

    monkeypatch.setattr(team_module, "read_notes", counted)  # the reads of the reader's ForeignRows
    monkeypatch.setattr(team_module, "read_rows", by_key)
    monkeypatch.setattr(team_module, "read_both", both)
    reader = _reader(server.uri)
    assert reader.engine.calls.get("stats") == 1  # opened on the table, not on a scan of the rows
    try:
        table, scan = table_statistics(reader.engine), read_statistics(reader.engine)
        assert table is not None and table == scan
        assert table.n == alice.stats().shards + bob.stats().shards and table.vaults == {"alice", "bob"}
        assert reader.statistics() == table
        writer, ours = make_pipeline(alice, alice.settings), make_pipeline(reader, reader.settings)
        exact: list[bool] = []
        read: list[tuple[int, int]] = []
        for q in QUERIES:
            w = [
                _as_team(r.document_path, "alice") for r in writer.search(f"{q} vault:*", dense=False).results
            ]
            whole.clear()
            returned.clear()
            r = [x.document_path for x in ours.search(team_query(q), dense=False).results]
            assert set(r[:10]) == set(w[:10]), q
            assert len(whole) <= len(returned), q
            read.append((len(whole), len(returned)))
            exact.append(r[:10] == w[:10])
    finally:
        reader.close()
    # The same documents in every top 10; the same order for most queries (the writer's name table and
    # knowledge shards are its own vault's: a title or fact of alice's can move up in her search).
    # (5 of these 8 in the same order when written; BM25's floor of a negative idf also differs: the
    # writer's at its query words' mean, the reader's at the vocabulary's).
    assert sum(exact) >= len(QUERIES) // 2, exact
    assert sum(w for w, _ in read) < sum(n for _, n in read), read


def test_a_reader_writes_nothing_and_filters_every_vault(team, tmp_path: Path, monkeypatch) -> None:
    server, (alice, bob) = team
    monkeypatch.chdir(tmp_path)
    reader = _reader(server.uri)
    engine = reader.engine
    before = [
        engine.call("read", lambda c, n=n: c.query(n, filter="", output_fields=["count(*)"])[0]["count(*)"])
        for n in (engine.collection, engine.text_collection)
    ]
    pipe = make_pipeline(reader, reader.settings)
    try:

        def paths(q: str) -> list[str]:
            return [r.document_path for r in pipe.search(team_query(q), dense=False).results]

        assert {p.split("/")[0] for p in paths("hamster diet")} == {"vault:alice", "vault:bob"}
        assert all(p.startswith("vault:bob/") for p in paths("hamster vault:bob"))
        assert paths("hamster path:Pets") and all("/Pets/" in p for p in paths("hamster path:Pets"))
        assert not any(p.endswith("hamster-diet.md") for p in paths("hamster -diet"))
        res = pipe.search(team_query("hamster diet"), dense=False)
        top = res.results[0]
        assert top.title and top.context_shards and top.context_shards[0].text  # from the text collection
        nobody = pipe.search("hamster vault:nobody", dense=False)
        assert not nobody.results and any("no vault 'nobody'" in w for w in nobody.warnings)
        after = [
            engine.call(
                "read", lambda c, n=n: c.query(n, filter="", output_fields=["count(*)"])[0]["count(*)"]
            )
            for n in (engine.collection, engine.text_collection)
        ]
        assert after == before == [alice.stats().shards + bob.stats().shards] * 2
    finally:
        reader.close()
    assert list(tmp_path.iterdir()) == []  # no vault folder, no index, no cache
    assert not reader.root.exists()


def test_cli_team_search_needs_no_vault(team, tmp_path: Path, monkeypatch, capsys) -> None:
    server, _ = team
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EXPLORER_VAULT", raising=False)
    assert main(["search", "--team", server.uri, "--lexical", "--json", "-k", "5", "hamster", "diet"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["results"] and {r["document_path"].split("/")[0] for r in data["results"]} >= {"vault:bob"}
    assert main(["search", "--team", f"{server.uri}/explorer_shards", "--lexical", "moon vault:alice"]) == 0
    out = capsys.readouterr().out
    assert "vault:alice/" in out and "vault:bob/" not in out
    assert list(tmp_path.iterdir()) == []


def test_cli_team_faults_are_one_line_and_create_nothing(team, tmp_path: Path, monkeypatch, capsys) -> None:
    server, _ = team
    monkeypatch.chdir(tmp_path)
    down = f"http://127.0.0.1:{free_port()}"
    assert main(["search", "--team", down, "--lexical", "moon"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and down in err and "unreachable" in err
    assert main(["search", "--team", f"{server.uri}/nobody_here", "--lexical", "moon"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'nobody_here' does not exist" in err and server.uri in err
    reader = _reader(server.uri)
    try:
        assert not reader.engine.call("read", lambda c: c.has_collection("nobody_here"))
    finally:
        reader.close()
    missing = tmp_path / "none.db"
    assert main(["search", "--team", str(missing), "--lexical", "moon"]) == 2
    assert "no such Milvus Lite file" in capsys.readouterr().err and not missing.exists()
    assert main(["search", "--team", server.uri, "--vault", str(tmp_path), "moon"]) == 2
    assert "leave out the vault" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_split_target() -> None:
    assert split_target("http://h:19530", "c") == ("http://h:19530", "c")
    assert split_target("http://h:19530/team", "c") == ("http://h:19530", "team")
    assert split_target("https://u:p@h/team/", "c") == ("https://u:p@h", "team")
    assert split_target("/x/team.db", "c") == ("/x/team.db", "c")
    assert split_target("/x/team.db/mem", "c") == ("/x/team.db", "mem")


def test_mcp_team_service_reads_the_collection(team) -> None:
    """What `explorer mcp --team` serves: search and get_context over every vault, stats; no vault tools."""
    from dataclasses import replace

    from explorer.cli.mcp import ToolInputError
    from explorer.cli.team import TeamService

    server, _ = team
    s = Settings()
    service = TeamService(server.uri, replace(s, index=replace(s.index, embeddings=False)))
    try:
        found = service.search("hamster diet", k=5, mode="lexical")
        paths = [r["document_path"] for r in found["results"]]
        assert paths and all(p.startswith("vault:") for p in paths), found
        window = service.get_context(paths[0], window=200)
        assert window["text"] and window["path"] == paths[0]
        assert service.stats()["vaults"] == ["alice", "bob"] and service.stats()["read_only"]
        with pytest.raises(ToolInputError, match="vault on disk"):
            service.why_not("hamster", "x")
    finally:
        service.close()
