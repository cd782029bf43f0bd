"""The Milvus backend on a real Milvus Lite engine (in process, and as a server process stopped and restarted)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import REPO, CountingEmbedder, write_notes

pymilvus = pytest.importorskip("pymilvus", reason="the milvus extra is not installed")

from explorer.config import Settings  # noqa: E402
from explorer.engine import make_pipeline, new_index  # noqa: E402
from explorer.index.milvus import BackendError, MilvusIndex, engine_terms, wait_until  # noqa: E402
from explorer.text.tokenize import tokenize  # noqa: E402

MILVUS_LITE = Path(sys.executable).with_name("milvus-lite")


def milvus_settings(uri: str, cache: Path, **index: object) -> Settings:
    s = Settings()
    return replace(s, index=replace(s.index, backend="milvus", milvus_uri=uri, cache_dir=str(cache), **index))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiteServer:
    """A `milvus-lite server` process on 127.0.0.1 (stopped by the test that starts it)."""

    def __init__(self, data: Path) -> None:
        self.data, self.port, self.proc = data, free_port(), None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                str(MILVUS_LITE),
                "server",
                "--data-dir",
                str(self.data),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        end = time.monotonic() + 30
        while time.monotonic() < end:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        raise RuntimeError("milvus-lite server did not start")

    def stop(self) -> None:
        """Stop the server as its operator does (Ctrl-C: it finishes its requests and closes its files).

        Not SIGTERM: that ends milvus-lite at once, also halfway through writing a segment's index file,
        which it writes in place; the file cut short leaves the collection unreadable when the server
        starts again (seen with two test processes sharing the cores)."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
            self.proc = None


NOTES = {
    "astro/holes.md": "# Black holes\n\nA black hole bends light near the event horizon.\n",
    "astro/moon.md": "# The Moon\n\nCraters and maria on the lunar surface, seen at the terminator.\n",
    "cook/bread.md": "# Sourdough\n\nFeed the starter twice a day; a loaf needs a long cold proof.\n#baking\n",
    "zh/city.md": "# 城市\n\n东京都的天气很好。长城很长。\n",
}


@pytest.fixture()
def lite_db(tmp_path: Path) -> str:
    (tmp_path / "engine").mkdir()
    return str(tmp_path / "engine" / "milvus.db")


def _open(vault: Path, settings: Settings, embedder) -> MilvusIndex:
    index = new_index(vault, settings, embedder=embedder)
    assert isinstance(index, MilvusIndex)
    index.open()
    index.embed_pending()
    return index


def test_analyzer_keeps_explorer_tokens_whole(lite_db: str, tmp_path: Path) -> None:
    """Measured on the engine: each encoded token matches exactly the rows holding it (CJK bigrams too),
    while the `standard` tokenizer keeps a raw CJK run as one word (so 天气 never finds 东京都的天气)."""
    from pymilvus import DataType, Function, FunctionType, MilvusClient

    texts = ["东京都的天气", "长城 长", "e-mail foo_bar", "v2 node.js 3.5kB", "Café résumé naïve", "東 京"]
    docs = [tokenize(t) for t in texts]
    c = MilvusClient(lite_db)
    name = "probe"
    schema = MilvusClient.create_schema(auto_id=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field(
        "terms",
        DataType.VARCHAR,
        max_length=4096,
        enable_analyzer=True,
        analyzer_params={"tokenizer": "standard"},
    )
    schema.add_field(
        "raw",
        DataType.VARCHAR,
        max_length=4096,
        enable_analyzer=True,
        analyzer_params={"tokenizer": "standard"},
    )
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    schema.add_field("sparse_raw", DataType.SPARSE_FLOAT_VECTOR)
    schema.add_function(
        Function(
            name="f",
            function_type=FunctionType.BM25,
            input_field_names=["terms"],
            output_field_names=["sparse"],
        )
    )
    schema.add_function(
        Function(
            name="g",
            function_type=FunctionType.BM25,
            input_field_names=["raw"],
            output_field_names=["sparse_raw"],
        )
    )
    idx = c.prepare_index_params()
    idx.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    idx.add_index(field_name="sparse_raw", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    c.create_collection(name, schema=schema, index_params=idx)
    c.insert(
        name, [{"id": i, "terms": engine_terms(d), "raw": t} for i, (t, d) in enumerate(zip(texts, docs))]
    )
    c.flush(name)
    tokens = sorted({t for d in docs for t in d})
    assert "天气" in tokens and "长城" in tokens and "京" in tokens
    for token in tokens:
        want = {i for i, d in enumerate(docs) if token in d}
        got = c.search(
            name,
            data=[engine_terms([token])],
            anns_field="sparse",
            limit=10,
            search_params={"metric_type": "BM25"},
        )[0]
        assert {r["id"] for r in got} == want, token
    raw = c.search(
        name, data=["天气"], anns_field="sparse_raw", limit=10, search_params={"metric_type": "BM25"}
    )[0]
    assert 0 not in {r["id"] for r in raw}
    c.close()


def test_milvus_rankings_match_local(tmp_path: Path, lite_db: str, embedder) -> None:
    """The same vault answers the same on both backends (the sample vault, real model)."""
    from explorer.index.local.vault_index import VaultIndex

    vault = write_notes(tmp_path / "vault", NOTES)
    local = VaultIndex(
        vault,
        replace(Settings(), index=replace(Settings().index, cache_dir=str(tmp_path / "c1"))),
        embedder=embedder,
    )
    local.open()
    local.embed_pending()
    remote = _open(vault, milvus_settings(lite_db, tmp_path / "c2"), embedder)
    try:
        for query in ("black hole light", "sourdough starter", "长城", "lunar craters", "tag:baking proof"):
            a = make_pipeline(local, local.settings).search(query)
            b = make_pipeline(remote, remote.settings).search(query)
            assert [r.node_id for r in a.results] == [r.node_id for r in b.results], query
            for x, y in zip(a.results, b.results):
                assert x.score == pytest.approx(y.score, abs=1e-4)
        with remote.snapshot() as snap:
            assert snap.bm25_top(["长城"], 5)[0][0].startswith("zh/city.md")
            assert snap.bm25_top(["black"], 5, snap.restrict(set())) == []
            vec = remote.encode_query("event horizon")
            hits = snap.vector_top(vec[None, :], 3, 0.0)[0]
            assert hits[0][0].startswith("astro/holes.md") and -1.0 <= hits[0][1] <= 1.0
    finally:
        local.close()
        remote.close()


def test_smaller_first_fetches_keep_the_rankings(tmp_path: Path, lite_db: str, embedder) -> None:
    """Vector and BM25 searches ask the engine for fewer rows first and again for all when those do not
    settle the ranking (no cosine floor here, notes of many sections, words in every note): the answers
    stay the local ones."""
    from explorer.index.local.vault_index import VaultIndex

    topics = ["river", "mountain", "bread", "engine", "violin", "garden", "comet", "harbour"]
    notes = {
        f"one/{i:02d}.md": f"# Note {i}\n\nA short note on the {topics[i % 8]} number {i}.\n"
        for i in range(40)
    }
    for t in topics:
        notes[f"many/{t}.md"] = f"# {t.title()}\n\n" + "".join(
            f"## Part {j}\n\nThe {t} seen from side {j}, with more about the {t}.\n\n" for j in range(5)
        )
    vault = write_notes(tmp_path / "vault", notes)

    def settings(base: Settings) -> Settings:
        return replace(base, experimental=replace(base.experimental, candidates=30, dense_threshold=-1.0))

    local = VaultIndex(
        vault,
        settings(replace(Settings(), index=replace(Settings().index, cache_dir=str(tmp_path / "c1")))),
        embedder=embedder,
    )
    local.open()
    local.embed_pending()
    remote = _open(vault, settings(milvus_settings(lite_db, tmp_path / "c2")), embedder)
    try:
        before = remote.engine.calls.get("search", 0)
        for query in ("the river number", "violin seen from a side", "comet harbour garden"):
            remote.dense_share = 0.0  # the smallest first fetch: 32 rows of the ~100 asked for
            remote.bm25_share = 0.0  # and 48 BM25 rows
            a = make_pipeline(local, local.settings).search(query, record=False, two_pass=False)
            b = make_pipeline(remote, remote.settings).search(query, record=False, two_pass=False)
            assert [r.node_id for r in a.results] == [r.node_id for r in b.results], query
            for x, y in zip(a.results, b.results):
                assert x.score == pytest.approx(y.score, abs=1e-4)
        # More than the BM25, vector and feedback searches of each query: some first fetches were asked again.
        assert remote.engine.calls.get("search", 0) > before + 9
    finally:
        local.close()
        remote.close()


def test_read_your_writes_and_deletes(tmp_path: Path, lite_db: str, embedder) -> None:
    vault = write_notes(tmp_path / "vault", NOTES)
    index = _open(vault, milvus_settings(lite_db, tmp_path / "cache"), embedder)
    try:
        pipe = make_pipeline(index, index.settings)
        assert not pipe.search("zorblax").results  # the engine's empty answer is kept for the session...
        write_notes(
            vault, {"astro/comet.md": "# Comets\n\nA zorblax tail of ice points away from the sun.\n"}
        )
        index.refresh(["astro/comet.md"])
        assert (
            pipe.search("zorblax").results[0].document_path == "astro/comet.md"
        )  # ...until this writer's own change reaches the engine; no embedding yet: BM25 alone
        (vault / "astro/comet.md").unlink()
        index.refresh(["astro/comet.md"])
        assert not pipe.search("zorblax").results
        rows = index.engine.call(
            "q",
            lambda c: c.query(
                index.engine.collection, filter='path == "astro/comet.md"', output_fields=["node_id"]
            ),
        )
        assert rows == []
    finally:
        index.close()


def test_an_app_index_answers_from_its_own_index_until_the_engine_is_current(
    tmp_path: Path, embedder
) -> None:
    """An app's (interactive) index opens without waiting for the engine: while the engine is not yet
    connected, warm and synced, this vault's searches are answered from the vault's own index (the
    same results as the local backend, no engine search); a fault then is met by the search, naming
    the URI; once a real engine serves at that URI, the collection catches up and searches go to it."""
    if not MILVUS_LITE.exists():
        pytest.skip("milvus-lite server is not installed")
    from explorer.index.local.vault_index import VaultIndex

    vault = write_notes(tmp_path / "vault", NOTES)
    local_settings = replace(Settings(), index=replace(Settings().index, cache_dir=str(tmp_path / "c1")))
    local = VaultIndex(vault, local_settings, embedder=embedder)
    local.open()
    local.embed_pending()
    local.close()
    shutil.copytree(tmp_path / "c1", tmp_path / "c2")  # the vectors are in both caches: nothing to embed
    local = VaultIndex(vault, local_settings, embedder=embedder)
    local.open()
    server = LiteServer(tmp_path / "engine")
    stalled = socket.socket()  # an engine that accepts the connection and never answers
    stalled.bind(("127.0.0.1", server.port))
    stalled.listen()
    index = new_index(
        vault, milvus_settings(server.uri, tmp_path / "c2"), embedder=embedder, interactive=True
    )
    assert isinstance(index, MilvusIndex)
    said: list[str] = []
    index.on_message = said.append
    index.retry_seconds = 0.3
    queries = ("black hole light", "sourdough starter", "长城", "tag:baking proof")
    try:
        index.open()  # returns with the vault's own index: the engine is still connecting
        assert not index.pending() and index.answers_locally()
        for query in queries:
            a = make_pipeline(local, local.settings).search(query)
            b = make_pipeline(index, index.settings).search(query)
            assert [r.node_id for r in a.results] == [r.node_id for r in b.results], query
        assert index.engine.calls.get("search", 0) == 0
        assert wait_until(lambda: bool(index.engine_fault), 60)  # the stalled engine timed out
        assert index.answers_locally() and any(server.uri in m for m in said)
        down = make_pipeline(index, index.settings).search("lunar craters")  # still the vault's own index
        assert down.results[0].document_path == "astro/moon.md"
        assert server.uri in down.warnings[0] and "this vault's own index" in down.warnings[0]
        stalled.close()
        server.start()
        assert wait_until(lambda: index.engine_current and not index.engine_fault, 120), index.engine_fault
        for query in queries:
            a = make_pipeline(local, local.settings).search(query)
            b = make_pipeline(index, index.settings).search(query)
            assert [r.node_id for r in a.results] == [r.node_id for r in b.results], query
            for x, y in zip(a.results, b.results):
                assert x.score == pytest.approx(y.score, abs=1e-4)
        assert index.engine.calls.get("search", 0) > 0
    finally:
        stalled.close()
        index.close()
        local.close()
        server.stop()


def test_an_app_index_starts_its_engine_after_its_first_search(
    tmp_path: Path, lite_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An app's index leaves the engine alone until its first search (answered from the vault's own
    index) is over: the engine's start would share the interpreter with that search. Then the engine
    connects, warms up, takes this vault's rows, and the next searches go to it."""
    import explorer.index.milvus.index as milvus_index

    monkeypatch.setattr(milvus_index, "ENGINE_START_DELAY_S", 600.0)  # only the search starts it here
    vault = write_notes(tmp_path / "vault", NOTES)
    index = new_index(vault, milvus_settings(lite_db, tmp_path / "cache", embeddings=False), interactive=True)
    assert isinstance(index, MilvusIndex)
    try:
        index.open()
        pipe = make_pipeline(index, index.settings)
        assert index.engine.calls == {}  # not even connected
        assert pipe.search("sourdough starter").results[0].document_path == "cook/bread.md"
        assert wait_until(lambda: index.engine_current, 120)
        assert index.engine.calls.get("warm") == 2 and "search" not in index.engine.calls
        assert pipe.search("lunar craters").results[0].document_path == "astro/moon.md"
        assert index.engine.calls.get("search", 0) > 0  # through the engine now, which holds the vault
        rows = index.engine.call(
            "q", lambda c: c.query(index.engine.collection, filter="", output_fields=["node_id"], limit=100)
        )
        assert sorted(r["node_id"] for r in rows) == sorted(index.shards)
    finally:
        index.close()


def make_other_collection(db: str) -> None:
    """A Milvus Lite file holding an `explorer_shards` collection of 8-d vectors, written here and closed
    (its engine stopped), so that another process opens the file next."""
    from milvus_lite.server_manager import server_manager_instance
    from pymilvus import DataType, MilvusClient

    c = MilvusClient(db)
    s = MilvusClient.create_schema(auto_id=False)
    s.add_field("pk", DataType.VARCHAR, is_primary=True, max_length=64)
    s.add_field("vector", DataType.FLOAT_VECTOR, dim=8)
    c.create_collection("explorer_shards", schema=s)
    c.close()
    server_manager_instance.release_server(db)


def test_faults_are_one_line_naming_the_uri(tmp_path: Path) -> None:
    """Unreachable engine, a collection of another dimension: one line, non-zero exit, vault untouched."""
    vault = write_notes(tmp_path / "vault", NOTES)
    before = sorted((p.relative_to(vault), p.read_bytes()) for p in vault.rglob("*") if p.is_file())
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "EXPLORER_INDEX_BACKEND": "milvus",
        "EXPLORER_INDEX_CACHE_DIR": str(tmp_path / "cache"),
        "EXPLORER_INDEX_EMBEDDINGS": "false",
        "EXPLORER_MILVUS_TOKEN": "s3cret-token",
    }
    port = free_port()
    env["EXPLORER_INDEX_MILVUS_URI"] = f"http://127.0.0.1:{port}"
    out = subprocess.run(
        [sys.executable, "-m", "explorer", "search", "--vault", str(vault), "black"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"http://127.0.0.1:{port}" in lines[0] and "unreachable" in lines[0]
    assert "s3cret" not in out.stderr + out.stdout

    db = str(tmp_path / "other.db")
    make_other_collection(db)
    env["EXPLORER_INDEX_MILVUS_URI"] = db
    out = subprocess.run(
        [sys.executable, "-m", "explorer", "stats", str(vault)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "dimension 8, not 384" in out.stderr and db in out.stderr
    after = sorted((p.relative_to(vault), p.read_bytes()) for p in vault.rglob("*") if p.is_file())
    assert after == before


def test_stats_names_backend_without_secrets(
    tmp_path: Path, lite_db: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from explorer.cli import main

    vault = write_notes(tmp_path / "vault", NOTES)
    for name, value in {
        "EXPLORER_INDEX_BACKEND": "milvus",
        "EXPLORER_INDEX_MILVUS_URI": lite_db,
        "EXPLORER_INDEX_CACHE_DIR": str(tmp_path / "cache"),
        "EXPLORER_INDEX_EMBEDDINGS": "false",
        "EXPLORER_MILVUS_TOKEN": "s3cret-token",
    }.items():
        monkeypatch.setenv(name, value)
    code = main(["stats", str(vault), "--json"])
    out = capfd.readouterr()
    assert code == 0, out.err
    data = json.loads(out.out)
    assert data["backend"] == "milvus" and data["backend_uri"] == lite_db and data["shards"] > 0
    assert "s3cret" not in out.out


def test_changes_while_the_engine_is_down_are_applied_when_it_is_back(tmp_path: Path, embedder) -> None:
    """A real `milvus-lite server` process is stopped, notes change, it starts again: nothing is lost."""
    if not MILVUS_LITE.exists():
        pytest.skip("milvus-lite server is not installed")
    server = LiteServer(tmp_path / "engine")
    server.start()
    vault = write_notes(tmp_path / "vault", NOTES)
    index = None
    try:
        index = _open(vault, milvus_settings(server.uri, tmp_path / "cache"), embedder)
        index.retry_seconds = 0.3
        said: list[str] = []
        index.on_message = said.append
        server.stop()
        write_notes(vault, {"astro/comet.md": "# Comets\n\nA quuxtail of ice points away from the sun.\n"})
        (vault / "cook/bread.md").unlink()
        index.refresh(
            ["astro/comet.md", "cook/bread.md"]
        )  # the watcher's batch, applied while the engine is down
        assert index.behind > 0 and server.uri in index.engine_fault
        assert len(said) == 1 and server.uri in said[0]
        down = make_pipeline(index, index.settings).search(
            "quuxtail"
        )  # read-your-writes, from the vault's own index
        assert down.results[0].document_path == "astro/comet.md" and server.uri in down.warnings[0]
        with pytest.raises(BackendError, match=r"127.0.0.1"):  # other vaults' notes are the engine's alone
            make_pipeline(index, index.settings).search("quuxtail vault:*")
        server.start()
        assert wait_until(lambda: index.behind == 0 and not index.engine_fault, 120), (
            index.behind,
            index.engine_fault,
        )
        pipe = make_pipeline(index, index.settings)
        assert pipe.search("quuxtail").results[0].document_path == "astro/comet.md"
        assert all(r.document_path != "cook/bread.md" for r in pipe.search("sourdough starter loaf").results)
    finally:
        if index is not None:
            index.close()
        server.stop()


def test_a_text_embedded_by_one_vault_is_not_embedded_again_by_another(
    tmp_path: Path, lite_db: str, embedder
) -> None:
    a = write_notes(tmp_path / "a" / "notes", NOTES)
    b = write_notes(
        tmp_path / "b" / "notes",
        {"astro/holes.md": NOTES["astro/holes.md"], "own.md": "# Own\n\nOnly here.\n"},
    )
    first = _open(a, milvus_settings(lite_db, tmp_path / "ca", vault_name="alice"), embedder)
    counting = CountingEmbedder(embedder)
    second = _open(b, milvus_settings(lite_db, tmp_path / "cb", vault_name="bob"), counting)
    try:
        assert second.borrowed >= 1  # the shared note's vector came from alice's rows
        assert counting.texts == second.stats().shards - second.borrowed
        assert second.stats().pending == 0
        with second.snapshot() as snap:  # bob's searches stay in bob's vault
            hits = snap.bm25_top(["black"], 10) + snap.bm25_top(["sourdough"], 10)
            assert hits and all(nid in snap.shards for nid, _ in hits)
            assert not snap.bm25_top(["sourdough"], 10)
    finally:
        first.close()
        second.close()


def test_two_watchers_and_an_mcp_writer_share_one_collection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two real `explorer watch` processes and an `explorer mcp --allow-write` (served in this process
    to the MCP SDK client) write three vaults into one Milvus Lite server process at once: nothing
    lost, no shard twice; the MCP writer's next search sees what `remember` wrote (read-your-writes:
    the rows are flushed before `remember` returns and searches read at consistency level Strong),
    and its `vault:*` search sees the watchers' notes."""
    if not MILVUS_LITE.exists():
        pytest.skip("milvus-lite server is not installed")
    import asyncio
    import threading

    from pymilvus import MilvusClient

    from explorer.index.local.vault_index import VaultIndex
    from inproc import mcp_client

    server = LiteServer(tmp_path / "engine")
    server.start()
    procs: list[subprocess.Popen] = []
    vaults = {
        name: write_notes(tmp_path / name, {"start.md": f"# Start\n\n{name} begins.\n"})
        for name in ("ann", "ben", "cat")
    }

    def env_for(name: str) -> dict[str, str]:
        return {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "EXPLORER_INDEX_BACKEND": "milvus",
            "EXPLORER_INDEX_MILVUS_URI": server.uri,
            "EXPLORER_INDEX_CACHE_DIR": str(tmp_path / f"cache-{name}"),
            "EXPLORER_INDEX_EMBEDDINGS": "false",
            "EXPLORER_EXPERIMENTAL_WATCH_DEBOUNCE_MS": "50",
        }

    def watchers_write() -> None:  # both watched vaults change at once: new notes, an edit, a delete
        for i in range(12):
            for name in ("ann", "ben"):
                write_notes(
                    vaults[name],
                    {f"n{i}.md": f"# Note {i}\n\n{name} writes item {i}.\n\n## More\n\nSection {i}.\n"},
                )
            time.sleep(0.02)
        for name in ("ann", "ben"):
            write_notes(vaults[name], {"n3.md": f"# Note 3\n\n{name} changed item 3.\n"})
            (vaults[name] / "n5.md").unlink()

    async def agent() -> list[str]:
        for name, value in env_for("cat").items():  # the settings `explorer mcp` would read
            if name.startswith("EXPLORER_"):
                monkeypatch.setenv(name, value)
        written = []
        async with mcp_client(vaults["cat"], "--allow-write", "--user", "cat") as client:
            writer = threading.Thread(target=watchers_write)
            writer.start()
            for i in range(6):
                word = f"zebra{i}quill"
                got = await client.call_tool(
                    "remember", {"text": f"Cat noted {word} today.", "title": f"M{i}"}
                )
                assert not got.is_error, got.content
                written.append(json.loads(got.content[0].text)["path"])
                found = json.loads(
                    (await client.call_tool("search", {"query": word, "mode": "lexical", "k": 3}))
                    .content[0]
                    .text
                )
                assert (
                    found["results"] and found["results"][0]["document_path"] == written[-1]
                )  # read-your-writes
            writer.join()
            end = time.monotonic() + 40
            while True:  # the watchers' notes, through the team search
                team = json.loads(
                    (await client.call_tool("search", {"query": "changed item 3 vault:*", "mode": "lexical"}))
                    .content[0]
                    .text
                )
                paths = {r["document_path"] for r in team["results"]}
                if {"vault:ann/n3.md", "vault:ben/n3.md"} <= paths:
                    break
                assert time.monotonic() < end, paths
                await asyncio.sleep(0.5)
        return written

    try:
        for name in ("ann", "ben"):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "explorer", "watch", str(vaults[name])],
                    env=env_for(name),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        for p in procs:  # wait until each one watches
            line = ""
            end = time.monotonic() + 60
            while "watching" not in line and time.monotonic() < end:
                line = p.stdout.readline()
                assert line, "watch exited"
        written = asyncio.run(asyncio.wait_for(agent(), timeout=240))
        assert len(set(written)) == 6
        client = MilvusClient(server.uri)

        def rows(vault_name: str) -> list[str]:
            return [
                r["node_id"]
                for r in client.query(
                    "explorer_shards",
                    filter=f'vault == "{vault_name}"',
                    output_fields=["node_id"],
                    limit=1000,
                )
            ]

        want = {}
        for name, vault in vaults.items():
            local = VaultIndex(
                vault,
                replace(
                    Settings(),
                    index=replace(
                        Settings().index, embeddings=False, cache_dir=str(tmp_path / f"check-{name}")
                    ),
                ),
            )
            local.open()
            want[name] = sorted(local.shards)
            local.close()
        assert all(any(n.startswith(w) for n in want["cat"]) for w in written)
        assert wait_until(lambda: all(sorted(rows(n)) == want[n] for n in vaults), 120), {
            n: rows(n) for n in vaults
        }
        for name in vaults:
            got = rows(name)
            assert len(got) == len(set(got))
        texts = client.query(
            "explorer_shards_text", filter='path == "n3.md"', output_fields=["vault", "text"], limit=10
        )
        assert sorted((r["vault"], f"{r['vault']} changed item 3" in r["text"]) for r in texts) == [
            ("ann", True),
            ("ben", True),
        ]
        client.close()
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            assert p.wait(timeout=30) == 0
            p.stdout.close()
        server.stop()


def test_the_app_answers_from_the_vault_when_the_engine_goes_away(tmp_path: Path, embedder) -> None:
    """The app on a Milvus-backed memory: the engine process stops, the next search is answered from the
    vault's own index and says so, naming the URI."""
    if not MILVUS_LITE.exists():
        pytest.skip("milvus-lite server is not installed")
    import asyncio

    from conftest import SIZE, make_app, quiet_settings, search, settle, wait_for
    from explorer.tui.widgets.results import ResultsSummary

    server = LiteServer(tmp_path / "engine")
    server.start()
    vault = write_notes(tmp_path / "vault", NOTES)
    settings = quiet_settings(
        **{
            "index.backend": "milvus",
            "index.milvus_uri": server.uri,
            "index.cache_dir": str(tmp_path / "cache"),
        }
    )

    async def run() -> None:
        app = make_app(vault, embedder, tmp_path, settings=settings)
        async with app.run_test(size=SIZE) as pilot:
            await settle(app, pilot)
            # Until the engine is warm and holds the vault, the app answers from the vault's own index.
            await wait_for(pilot, lambda: app.index.engine_current, timeout=60)
            shown = await search(app, pilot, "black hole")
            assert shown.results and shown.results[0].document_path == "astro/holes.md"
            server.stop()
            app.main_screen.query_one("SearchBox").value = "lunar craters"
            summary = app.main_screen.query_one(ResultsSummary)
            await wait_for(pilot, lambda: server.uri in str(summary.content), timeout=30)
            assert "this vault's own index" in str(summary.content)
            shown = app.main_screen.results
            assert shown is not None and shown.query == "lunar craters"
            assert shown.results[0].document_path == "astro/moon.md"
            assert app.is_running

    try:
        asyncio.run(run())
    finally:
        server.stop()


def test_team_search_covers_other_vaults_on_request(tmp_path: Path, lite_db: str, embedder) -> None:
    """`vault:name` / `vault:*` reach other vaults of the collection; their notes work in results,
    context windows, the note view and `get_context`; the filters apply to their rows too."""
    from explorer.index.targets import context_for

    a = write_notes(tmp_path / "a", NOTES)
    b = write_notes(
        tmp_path / "b",
        {
            "sky/eclipse.md": "---\ndate: 2024-04-08\nstatus: done\n---\n# Eclipse\n\nThe moon hides the sun.\n\n"
            "## Corona\n\nDuring totality the corona glows around the black disc.\n#space/sun\n",
            "sky/comet.md": "---\ndate: 2021-06-01\nstatus: draft\n---\n# Comet\n\nA comet tail points away from the sun.\n",
            "garden/beans.md": "# Beans\n\nRunner beans climb the poles.\n",
        },
    )
    alice = _open(a, milvus_settings(lite_db, tmp_path / "ca", vault_name="alice"), embedder)
    bob = _open(b, milvus_settings(lite_db, tmp_path / "cb", vault_name="bob"), embedder)
    try:
        pipe = make_pipeline(alice, alice.settings)

        def paths(query: str) -> list[str]:
            return [r.document_path for r in pipe.search(query, record=False).results]

        assert not any(
            p.startswith("vault:") for p in paths("corona during totality")
        )  # own vault by default
        team = pipe.search("corona during totality vault:*", record=False)
        top = team.results[0]
        assert (
            top.document_path == "vault:bob/sky/eclipse.md"
            and top.node_id == "vault:bob/sky/eclipse.md#Corona"
        )
        assert "corona" in top.context_shards[0].text.lower()
        assert set(paths("black hole vault:*")) >= {"astro/holes.md"}
        assert all(p.startswith("vault:bob/") for p in paths("moon vault:bob"))
        assert paths("moon vault:bob")[0] == "vault:bob/sky/eclipse.md"
        nobody = pipe.search("moon vault:nobody", record=False)
        assert not nobody.results and any("no vault 'nobody'" in w for w in nobody.warnings)
        # filters on the other vault's rows: a parent tag covers its children, -word leaves a note out
        assert paths("moon vault:bob tag:space") == ["vault:bob/sky/eclipse.md"]
        assert "vault:bob/sky/eclipse.md" not in paths("moon vault:bob -corona")
        assert "vault:bob/garden/beans.md" not in paths("beans moon vault:* path:sky")
        assert paths("beans vault:bob path:garden") == ["vault:bob/garden/beans.md"]
        assert (
            paths("beans vault:bob path:bob") == []
        )  # path: reads the path in its vault, not the vault's name
        # dates and properties filter other vaults' notes as they do this vault's (no warning any more)
        sun = set(paths("sun vault:bob"))
        assert {"vault:bob/sky/eclipse.md", "vault:bob/sky/comet.md"} <= sun
        assert set(paths("sun vault:bob after:2023")) == {"vault:bob/sky/eclipse.md"}
        assert set(paths("sun vault:bob before:2022")) == {"vault:bob/sky/comet.md"}
        assert set(paths("sun vault:bob on:2024-04-08")) == {"vault:bob/sky/eclipse.md"}
        assert set(paths("sun vault:bob [status:draft]")) == {"vault:bob/sky/comet.md"}
        dated = pipe.search("sun vault:* -[status:draft] after:2020", record=False)
        assert "vault:bob/sky/comet.md" not in {r.document_path for r in dated.results}
        assert "vault:bob/sky/eclipse.md" in {r.document_path for r in dated.results}
        assert not any("this vault's notes only" in w for w in dated.warnings)
        assert alice.note("vault:bob/sky/comet.md").frontmatter.get("status") == "draft"  # type: ignore[union-attr]
        # the note view and get_context read the other vault's note from the collection
        note = alice.note("vault:bob/sky/eclipse.md")
        assert note is not None and note.title == "eclipse" and "glows around the black disc" in note.text
        window = context_for(alice, "vault:bob/sky/eclipse.md#Corona", None, 0, 40)
        assert window.text.startswith("During totality") or "totality" in window.text
        assert alice.note("vault:bob/nothing.md") is None
        # bob's change reaches alice's next team search (bob's sync flushes; searches read Strong), and a
        # question alice asked before it once her kept answer is older than its bound (answers.ttl)
        alice.answers.ttl = 0.5
        assert paths("runner poles vault:bob") == ["vault:bob/garden/beans.md"]
        write_notes(b, {"garden/beans.md": "# Beans\n\nRunner beans climb the hazel poles by June.\n"})
        bob.refresh(paths=["garden/beans.md"], reread=True)
        assert paths("hazel poles vault:bob")[0] == "vault:bob/garden/beans.md"
        time.sleep(0.6)
        assert paths("runner poles vault:bob") == ["vault:bob/garden/beans.md"]
        found = pipe.search("runner poles vault:bob", record=False).results[0]
        assert "hazel" in found.context_shards[0].text
    finally:
        alice.close()
        bob.close()


def test_a_collection_of_the_earlier_layout_is_migrated_at_open(
    tmp_path: Path, lite_db: str, embedder
) -> None:
    """A collection of the earlier one-collection layout (every field in one, without `day` and `props`)
    is moved at the next open into the search and text collections: another vault's rows too, with
    their vectors, and its notes are found, read and dated (their file day) as before."""
    from pymilvus import DataType, Function, FunctionType, MilvusClient

    b = write_notes(tmp_path / "b", {"two.md": "# Two\n\nA storm over the harbour at night.\n"})
    bob = _open(b, milvus_settings(lite_db, tmp_path / "cb", vault_name="bob"), embedder)
    client = bob.engine.client()
    rows = client.query(bob.engine.collection, filter='vault == "bob"', output_fields=["*"], limit=100)
    texts = {
        r["pk"]: r
        for r in client.query(
            bob.engine.text_collection, filter='vault == "bob"', output_fields=["*"], limit=100
        )
    }
    vectors = {r["pk"]: list(r["vector"]) for r in rows}
    bob.close()
    old = MilvusClient(lite_db)
    for name in old.list_collections():
        old.drop_collection(name)
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    for name in (
        "pk",
        "node_id",
        "vault",
        "path",
        "owner",
        "source_type",
        "heading_path",
        "text",
        "content_hash",
        "model",
    ):
        schema.add_field(name, DataType.VARCHAR, max_length=4096, is_primary=name == "pk")
    schema.add_field("tags", DataType.ARRAY, element_type=DataType.VARCHAR, max_capacity=256, max_length=256)
    for name in ("mtime", "ordinal", "start", "end"):
        schema.add_field(name, DataType.INT64)
    schema.add_field("terms", DataType.VARCHAR, max_length=65535, enable_analyzer=True)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=384)
    schema.add_field("has_vector", DataType.BOOL)
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    schema.add_function(
        Function(
            name="bm25",
            function_type=FunctionType.BM25,
            input_field_names=["terms"],
            output_field_names=["sparse"],
        )
    )
    idx = old.prepare_index_params()
    idx.add_index(field_name="vector", index_type="FLAT", metric_type="COSINE")
    idx.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    old.create_collection("explorer_shards", schema=schema, index_params=idx)
    old.insert(
        "explorer_shards",
        [
            {
                **{
                    k: r[k]
                    for k in (
                        "pk",
                        "node_id",
                        "vault",
                        "path",
                        "content_hash",
                        "model",
                        "tags",
                        "terms",
                        "has_vector",
                    )
                },
                **{
                    k: texts[r["pk"]][k]
                    for k in (
                        "owner",
                        "source_type",
                        "heading_path",
                        "text",
                        "mtime",
                        "ordinal",
                        "start",
                        "end",
                    )
                },
                "vector": vectors[r["pk"]],
            }
            for r in rows
        ],
    )
    old.flush("explorer_shards")
    old.close()

    a = write_notes(tmp_path / "a", {"one.md": "# One\n\nThe lighthouse keeper logs the storm.\n"})
    said: list[str] = []
    alice = new_index(
        a,
        milvus_settings(lite_db, tmp_path / "ca", vault_name="alice"),
        embedder=embedder,
        on_message=said.append,
    )
    try:
        alice.open()
        alice.embed_pending()
        assert any("moved to the search and text collections" in m for m in said), said
        c = alice.engine.client()
        assert "explorer_shards_earlier" not in c.list_collections()
        moved = c.query("explorer_shards", filter='vault == "bob"', output_fields=["vector", "day"], limit=10)
        assert len(moved) == len(rows) and moved[0]["day"] > 0
        assert sorted(list(r["vector"]) for r in moved) == sorted(vectors.values())
        pipe = make_pipeline(alice, alice.settings)
        found = pipe.search("storm harbour vault:bob after:2020", record=False)
        assert [r.document_path for r in found.results] == ["vault:bob/two.md"]
        note = alice.note("vault:bob/two.md")
        assert note is not None and "storm over the harbour" in note.text
    finally:
        alice.close()


def test_a_refused_token_is_one_line_naming_the_uri(tmp_path: Path) -> None:
    """A gRPC server on 127.0.0.1 that refuses every call as UNAUTHENTICATED, as Milvus does a wrong
    token (Milvus Lite has no authentication): one line naming the URI, exit non-zero, no secret."""
    from concurrent import futures

    import grpc

    class Refuse(grpc.GenericRpcHandler):
        def service(self, details):
            def deny(request, context):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "auth check failure, please check token")

            return grpc.unary_unary_rpc_method_handler(deny)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((Refuse(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    vault = write_notes(tmp_path / "vault", NOTES)
    try:
        for command in (["search", "--vault", str(vault), "black"], ["stats", str(vault)]):
            out = subprocess.run(
                [sys.executable, "-m", "explorer", *command],
                env={
                    **os.environ,
                    "PYTHONPATH": str(REPO),
                    "EXPLORER_INDEX_BACKEND": "milvus",
                    "EXPLORER_INDEX_MILVUS_URI": f"http://127.0.0.1:{port}",
                    "EXPLORER_INDEX_CACHE_DIR": str(tmp_path / "cache"),
                    "EXPLORER_INDEX_EMBEDDINGS": "false",
                    "EXPLORER_MILVUS_TOKEN": "root:wr0ng-s3cret",
                },
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert out.returncode != 0
            lines = [line for line in out.stderr.splitlines() if line.strip()]
            assert len(lines) == 1, out.stderr
            assert f"http://127.0.0.1:{port}" in lines[0] and "the token was refused" in lines[0]
            assert "wr0ng" not in out.stderr + out.stdout
    finally:
        server.stop(0)
