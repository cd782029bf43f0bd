"""The persistent store: warm restarts re-embed nothing, kills mid-write leave a usable store, damage is rebuilt."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import numpy as np

from conftest import CountingEmbedder
from explorer.config import Settings
from explorer.index.local import store as store_mod
from explorer.index.local.store import Store
from explorer.index.local.vault_index import VaultIndex
from explorer.text.tokenize import tokenize

LEXICAL = Settings().with_overrides({"index.embeddings": False})


def _vault(tmp_path: Path, n: int = 5) -> Path:
    root = tmp_path / "v"
    root.mkdir()
    for i in range(n):
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nbody about topic{i} and kites\n", encoding="utf-8")
    return root


def test_warm_restart_reparses_and_reembeds_nothing(tmp_path: Path, embedder) -> None:
    root = _vault(tmp_path)
    first = CountingEmbedder(embedder)
    index = VaultIndex(root, embedder=first)
    index.open()
    assert index.embed_pending() == 5
    index.close()

    second = CountingEmbedder(embedder)
    index = VaultIndex(root, embedder=second)
    report = index.open()
    assert report.added == [] and report.changed == []
    assert index.stats().pending == 0
    assert index.embed_pending() == 0
    assert second.texts == 0

    # One changed note: only its shard is embedded again.
    (root / "n2.md").write_text("# Note 2\n\nnew words about gliders\n", encoding="utf-8")
    report = index.refresh()
    assert report.changed == ["n2.md"]
    assert index.embed_pending() == 1
    assert second.texts == 1
    index.close()


def test_embedding_stops_between_model_batches_and_keeps_what_it_embedded(tmp_path: Path, embedder) -> None:
    """A cancelled embedding run (the app quitting) stops after the model batch under way; the
    vectors it made are stored, so a restart embeds only the rest."""
    root = _vault(tmp_path)
    counting = CountingEmbedder(embedder)
    index = VaultIndex(root, embedder=counting)
    index.open()
    done = index.embed_pending(cancelled=lambda: counting.calls >= 2, batch=2)
    assert done == 4 and counting.texts == 4 and index.stats().pending == 1
    index.close()

    again = CountingEmbedder(embedder)
    index = VaultIndex(root, embedder=again)
    index.open()
    assert index.embed_pending() == 1 and again.texts == 1
    index.close()


def test_touch_without_content_change_does_not_reparse(tmp_path: Path) -> None:
    root = _vault(tmp_path)
    index = VaultIndex(root, LEXICAL)
    index.open()
    p = root / "n1.md"
    os.utime(p, ns=(time.time_ns(), time.time_ns() + 5_000_000_000))
    report = index.refresh()
    assert report.changed == [] and report.unchanged == 5
    index.close()


def test_schema_mismatch_rebuilds_with_message(tmp_path: Path) -> None:
    root = _vault(tmp_path)
    index = VaultIndex(root, LEXICAL)
    index.open()
    index.store.put_vectors("m", {"h": np.ones(4, dtype=np.float32)})
    index.close()
    conn = sqlite3.connect(root / ".explorer" / "index.sqlite")
    conn.execute("UPDATE meta SET value='0' WHERE key='schema'")
    conn.commit()
    conn.close()
    messages: list[str] = []
    index = VaultIndex(root, LEXICAL, on_message=messages.append)
    assert messages and "schema" in messages[0] and "rebuilding" in messages[0]
    index.open()
    assert len(index.notes) == 5
    # The embedding cache survives a schema change (vectors depend only on the text).
    assert index.store.vector_count("m") == 1
    index.close()


def test_garbage_file_is_moved_aside_and_rebuilt(tmp_path: Path) -> None:
    root = _vault(tmp_path)
    cache = root / ".explorer"
    cache.mkdir()
    (cache / "index.sqlite").write_bytes(b"this is not a database at all" * 100)
    messages: list[str] = []
    index = VaultIndex(root, LEXICAL, on_message=messages.append)
    index.open()
    assert len(index.notes) == 5
    assert "unreadable" in messages[0]
    assert any(p.name.startswith("index.sqlite.broken-") for p in cache.iterdir())
    index.close()


def test_damaged_record_is_reread_from_disk(tmp_path: Path) -> None:
    root = _vault(tmp_path)
    index = VaultIndex(root, LEXICAL)
    index.open()
    index.close()
    conn = sqlite3.connect(root / ".explorer" / "index.sqlite")
    conn.execute("UPDATE notes SET head=? WHERE path='n3.md'", (b"garbage",))
    conn.execute("UPDATE records SET data=? WHERE path='n1.md'", (b"garbage",))
    conn.commit()
    conn.close()
    index = VaultIndex(root, LEXICAL)
    report = index.open()
    # A damaged head is seen at the open: the note is read again.
    assert "n3.md" in index.notes and report.added == ["n3.md"]
    # A damaged record is seen when the note's text is first needed: it is parsed from its file.
    assert index.note("n1.md").text == (root / "n1.md").read_text(encoding="utf-8")
    shard = index.shards[index.shard_ids("n1.md")[0]]
    assert (
        shard.text == index.note("n1.md").text[shard.start : shard.end]
        and "topic1 and kites" in shard.search_text
    )
    index.close()


def test_notes_open_lazily_and_read_their_stored_version(tmp_path: Path) -> None:
    """An open reads the notes' heads; the text is read on first use, always the version the note was opened as."""
    root = _vault(tmp_path)
    (root / "n2.md").write_text(
        "---\naliases: [Kite book]\nspeaker: Ana\n---\n# Note 2\n\n## Flying\n\nkites in [[n1]] wind\n",
        encoding="utf-8",
    )
    fresh = VaultIndex(root, LEXICAL)
    fresh.open()
    want = {
        p: (n.text, n.title, n.names, n.frontmatter, n.headings, n.links, n.tags, n.blocks)
        for p, n in fresh.notes.items()
    }
    want_shards = {
        k: (s.text, s.search_text, s.start, s.end, s.heading_path, s.hash) for k, s in fresh.shards.items()
    }
    fresh.close()
    index = VaultIndex(root, LEXICAL)
    index.open()
    lazy = index.note("n2.md")
    assert type(lazy).__name__ == "LazyNote" and lazy.names == ("n2", "Kite book")
    before = index.store.load_record  # the records are not read until the text is needed
    reads: list[str] = []
    index.store.load_record = lambda path, digest: reads.append(path) or before(path, digest)  # type: ignore[method-assign]
    from explorer.index.local.store import name_tokens
    from explorer.search.core.retrievers.names import NameIndex

    names = NameIndex()
    names.refresh(index.notes, index.version, name_tokens)  # the first query's name table reads heads only
    assert reads == [] and names.search(["kite", "book"], lambda _t: 1.0, 5) == [("n2.md", 1.0)]
    got = {
        p: (n.text, n.title, n.names, n.frontmatter, n.headings, n.links, n.tags, n.blocks)
        for p, n in index.notes.items()
    }
    assert got == want and sorted(reads) == sorted(want)
    assert {
        k: (s.text, s.search_text, s.start, s.end, s.heading_path, s.hash) for k, s in index.shards.items()
    } == want_shards
    index.close()
    # A note changed on disk: the lazy one still pending is made whole from the old record before
    # the new one replaces it, so a reader holding it sees one consistent version.
    index = VaultIndex(root, LEXICAL)
    index.open()
    old_note = index.note("n2.md")
    old_shards = [index.shards[i] for i in index.shard_ids("n2.md")]
    (root / "n2.md").write_text("# Other\n\nnew text entirely\n", encoding="utf-8")
    report = index.refresh(["n2.md"])
    assert report.changed == ["n2.md"]
    assert old_note.text == want["n2.md"][0] and [s.text for s in old_shards] == [
        want_shards[s.node_id][0] for s in old_shards
    ]
    assert index.note("n2.md").text == "# Other\n\nnew text entirely\n"
    index.close()
    index = VaultIndex(root, LEXICAL)
    index.open()
    (root / "n3.md").write_text("see [[n1]]\n", encoding="utf-8")
    index.refresh(["n3.md"])
    assert [b.source for b in index.links().backlinks("n1.md")] == ["n3.md"]  # links read every note's record
    index.close()


WRITER = textwrap.dedent(
    """
    import sys, numpy as np
    from explorer.index.local.store import Store
    s = Store(__import__("pathlib").Path(sys.argv[1]))
    print("ready", flush=True)
    i = 0
    while True:
        s.put_vectors("m", {f"h{i}-{j}": np.full(384, i, dtype=np.float32) for j in range(200)})
        i += 1
    """
)


def test_kill_during_write_leaves_a_store_that_opens(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for delay in (0.3, 0.7, 1.1):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(cache)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        store = Store(cache)
        assert store.messages == []
        n = store.vector_count("m")
        assert n % 200 == 0, "a batch is written whole or not at all"
        # Every committed vector reads back whole and right.
        batches = n // 200
        got = store.get_vectors("m", [f"h{i}-{j}" for i in range(batches) for j in range(200)])
        assert len(got) == n and store.messages == []
        assert all(v.shape == (384,) and (v == int(h[1:].split("-")[0])).all() for h, v in got.items())
        store.close()
    assert n > 0


def test_store_schema_version_is_recorded(tmp_path: Path) -> None:
    Store(tmp_path).close()
    with closing(sqlite3.connect(tmp_path / "index.sqlite")) as db:  # the file as another reader sees it
        row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    assert row[0] == str(store_mod.SCHEMA_VERSION)


def test_dense_set_many_equals_set() -> None:
    from explorer.index.local.dense import DenseIndex

    rng = np.random.default_rng(3)
    vecs = rng.normal(size=(300, 8)).astype(np.float32)
    keys = [f"k{i}" for i in range(300)]
    one, many = DenseIndex(dim=8), DenseIndex(dim=8)
    for k, v in zip(keys, vecs):
        one.set(k, v)
    many.set_many(keys[:100], vecs[:100])
    many.set_many(keys[100:], vecs[100:])  # grows past the first 256 rows
    many.set_many(keys[:10], vecs[:10] * 3.0)  # replacing keeps the slot and normalises
    q = rng.normal(size=8).astype(np.float32)
    assert len(many) == 300
    assert [k for k, _ in many.search(q, 20)] == [k for k, _ in one.search(q, 20)]
    for k in ("k0", "k150", "k299"):
        assert np.allclose(many.vector(k), one.vector(k), atol=1e-6)


def test_dense_search_equals_a_brute_force_reference_on_every_path() -> None:
    """All rows live, rows removed (free slots), a small and a large filter, one and several queries."""
    from explorer.index.local.dense import DenseIndex

    rng = np.random.default_rng(5)
    vecs = rng.normal(size=(400, 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    keys = [f"k{i:03d}" for i in range(400)]
    dense = DenseIndex(dim=8)
    dense.set_many(keys, vecs)
    queries = rng.normal(size=(3, 8)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)

    def reference(q: np.ndarray, k: int, threshold: float, live: set[str]) -> list[str]:
        scored = [
            (float(vecs[i] @ q), key)
            for i, key in enumerate(keys)
            if key in live and float(vecs[i] @ q) >= threshold
        ]
        return [key for _, key in sorted(scored, key=lambda p: (-p[0], p[1]))[:k]]

    live = set(keys)
    for removed in ([], keys[::7]):
        for key in removed:
            dense.remove(key)
            live.discard(key)
        for allowed in (None, set(keys[:40]), set(keys[20:380])):
            usable = live if allowed is None else live & allowed
            for k, threshold in ((10, -1.0), (50, 0.3), (1000, 0.0)):
                many = dense.search_many(queries, k, threshold, allowed)
                for j, q in enumerate(queries):
                    want = reference(q, k, threshold, usable)
                    assert [key for key, _ in dense.search(q, k, threshold, allowed)] == want
                    assert [key for key, _ in many[j]] == want


def test_an_interrupted_first_index_resumes_where_it_stopped(tmp_path: Path, monkeypatch) -> None:
    from explorer.index.local import writer

    monkeypatch.setattr(writer, "COMMIT_EVERY", 10)
    root = _vault(tmp_path, n=35)

    def stop_at_25(stage: str, done: int, total: int) -> None:
        if stage == "reading" and done == 25:
            raise KeyboardInterrupt

    index = VaultIndex(root, LEXICAL)
    try:
        index.open(progress=stop_at_25)
    except KeyboardInterrupt:
        pass
    index.close()
    index = VaultIndex(root, LEXICAL)
    report = index.open()
    # The two saved chunks are kept; only the rest is read again.
    assert len(report.added) == 15 and len(index.notes) == 35
    index.close()


def test_schema_8_store_is_upgraded_in_place_with_one_line(tmp_path: Path) -> None:
    """A store of the previous schema keeps its notes, vectors and segment: only the heads are added."""
    root = _vault(tmp_path, 8)
    index = VaultIndex(root, LEXICAL)
    index.open()
    index.store.put_vectors("m", {"h": np.ones(4, dtype=np.float32)})
    want = {p: (n.text, n.names) for p, n in index.notes.items()}
    index.close()
    conn = sqlite3.connect(root / ".explorer" / "index.sqlite")
    conn.executescript("""
        CREATE TABLE old (path TEXT PRIMARY KEY, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL,
                          hash TEXT NOT NULL, data BLOB NOT NULL, counts BLOB);
        INSERT INTO old SELECT n.path, n.mtime_ns, n.size, n.hash, r.data, r.counts FROM notes n JOIN records r USING (path);
        DROP TABLE notes; DROP TABLE records; ALTER TABLE old RENAME TO notes;
        UPDATE notes SET data = X'00' WHERE path = 'n5.md';
        UPDATE meta SET value = '8' WHERE key = 'schema';
    """)
    conn.commit()
    conn.close()
    messages: list[str] = []
    index = VaultIndex(root, LEXICAL, on_message=messages.append)
    report = index.open()
    assert len(messages) == 1 and "upgraded to 9" in messages[0] and "7 notes kept" in messages[0], messages
    assert "1 unreadable" in messages[0]
    assert report.added == ["n5.md"] and report.changed == []  # only the damaged record is parsed again
    assert {p: (n.text, n.names) for p, n in index.notes.items()} == want
    assert index.store.vector_count("m") == 1
    index.close()
    messages.clear()
    VaultIndex(root, LEXICAL, on_message=messages.append).close()
    assert messages == []  # upgraded once


def test_vector_file_checked_whole_once_until_it_changes(tmp_path: Path) -> None:
    """A large read checks every row's CRC once and stamps the file; a changed file is checked again."""
    store = Store(tmp_path / "ix")
    rng = np.random.default_rng(3)
    vecs = {f"h{i}": rng.standard_normal(8).astype(np.float32) for i in range(2500)}
    store.put_vectors("m", vecs)
    hashes = list(vecs)[::-1]
    found, mat = store.get_matrix("m", hashes)  # checks every row, then stamps the file
    assert found == hashes and np.array_equal(mat, np.stack([vecs[h] for h in hashes]))
    file = store.vectors.vector_file("m")[0]
    assert store.checked(file) == store.file_stamp(file)
    again, mat2 = store.get_matrix("m", hashes)  # the stamped file: no CRC pass, same answer
    assert again == found and np.array_equal(mat2, mat)
    with open(tmp_path / "ix" / file, "r+b") as fh:  # damage one row: the file's stamp no longer matches
        fh.seek(7 * 8 * 4)
        fh.write(b"\xff" * 8)
    store.close()
    store = Store(tmp_path / "ix")
    found3, _mat3 = store.get_matrix("m", hashes)
    assert len(found3) == 2499 and "h7" not in found3
    assert any("failed their checksum" in m for m in store.messages)
    store.close()


def test_dense_rows_off_unit_length_by_more_than_a_thousandth_are_normalised() -> None:
    from explorer.index.local.dense import DenseIndex

    rng = np.random.default_rng(5)
    unit = rng.standard_normal((6, 384)).astype(np.float32)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    scale = np.array([1.0012, 0.9988, 1.0005, 0.9995, 3.0, 1.0], dtype=np.float32)[:, None]
    for start_empty in (True, False):
        dense = DenseIndex()
        if not start_empty:
            dense.set("other", unit[0])
        dense.set_many([f"k{i}" for i in range(6)], unit * scale)
        norms = [float(np.linalg.norm(dense.vector(f"k{i}"))) for i in range(6)]
        # Off by more than 1e-3: normalised; within it: kept as given.
        assert abs(norms[0] - 1) < 1e-5 and abs(norms[1] - 1) < 1e-5 and abs(norms[4] - 1) < 1e-5
        assert abs(norms[2] - 1.0005) < 1e-5 and abs(norms[3] - 0.9995) < 1e-5


def test_notes_parsed_under_older_rules_are_read_again_with_their_vectors_kept(
    tmp_path: Path, monkeypatch
) -> None:
    """A parser or sharder change reaches notes whose files did not change; no vector is lost."""
    import explorer.index.local.writer as vi

    root = _vault(tmp_path)
    real = vi.make_shards

    def old_rules(note, *args, **kwargs):
        return [replace(s, search_text="OLDRULE " + s.search_text) for s in real(note, *args, **kwargs)]

    monkeypatch.setattr(vi, "make_shards", old_rules)
    index = VaultIndex(root, LEXICAL)
    index.open()
    index.store.put_vectors("m", {"h": np.ones(4, dtype=np.float32)})
    assert all(s.search_text.startswith("OLDRULE") for s in index.shards.values())
    index.close()
    monkeypatch.setattr(vi, "make_shards", real)

    # Same rules version: unchanged files are not read again, their stored shards stay.
    index = VaultIndex(root, LEXICAL)
    report = index.open()
    assert report.changed == [] and all(s.search_text.startswith("OLDRULE") for s in index.shards.values())
    index.close()

    # Written under earlier rules: every note is parsed again, once, and says so in one line.
    conn = sqlite3.connect(root / ".explorer" / "index.sqlite")
    conn.execute("UPDATE meta SET value='1' WHERE key='rules'")
    conn.commit()
    conn.close()
    messages: list[str] = []
    index = VaultIndex(root, LEXICAL, on_message=messages.append)
    report = index.open()
    assert sorted(report.changed) == [f"n{i}.md" for i in range(5)]
    assert [m for m in messages if "parser" in m and "vectors kept" in m]
    assert not any("OLDRULE" in s.search_text for s in index.shards.values())
    assert index.bm25.doc_freq(tokenize("OLDRULE")[0]) == 0
    assert index.store.vector_count("m") == 1
    index.close()

    index = VaultIndex(root, LEXICAL)
    report = index.open()
    assert report.changed == [] and report.added == []
    assert not any("OLDRULE" in s.search_text for s in index.shards.values())
    index.close()
