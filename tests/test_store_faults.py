"""Store safety and faults: no pickle is ever loaded, old stores are rebuilt, damage, disk full and read-only folders are survived."""

from __future__ import annotations

import os
import pickle
import re
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, CountingEmbedder, fill_disk, run_mount, write_notes
from explorer.config import Settings
from explorer.index.local.vault_index import VaultIndex
from inproc import run_cli

LEXICAL = Settings().with_overrides({"index.embeddings": False})


def _vault(tmp_path: Path, n: int = 6) -> Path:
    return write_notes(
        tmp_path / "v", {f"n{i}.md": f"# Note {i}\n\nbody about topic{i} and kites\n" for i in range(n)}
    )


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`explorer ARGS` as a new process (a run that starts afresh)."""
    full = dict(os.environ, PYTHONPATH=str(REPO), XDG_CACHE_HOME=f"/nonexistent-{uuid.uuid4().hex}")
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "explorer", *args], capture_output=True, text=True, env=full, timeout=300
    )


Cli = Callable[..., subprocess.CompletedProcess]


@pytest.fixture()
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """`explorer ARGS` through its main() in this process (tests/inproc.py), with `_cli`'s environment."""

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        with monkeypatch.context() as m:
            m.setenv("XDG_CACHE_HOME", f"/nonexistent-{uuid.uuid4().hex}")
            for name, value in (env or {}).items():
                m.setenv(name, value)
            code, out, err = run_cli(capsys, *args)
        return subprocess.CompletedProcess(args, code, out, err)

    return run


class _Evil:
    """Unpickling this creates a folder: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def _v4_store(
    cache: Path,
    blob: bytes,
    vectors: dict[str, np.ndarray] | None = None,
    paths=("n0.md",),
    schema: str = "4",
) -> None:
    """A store as schema 4 wrote it: pickled note records, raw float32 vectors."""
    cache.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(cache / "index.sqlite")
    db.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE notes (path TEXT PRIMARY KEY, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL,
                            hash TEXT NOT NULL, data BLOB NOT NULL);
        CREATE TABLE skipped (path TEXT PRIMARY KEY, reason TEXT NOT NULL, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL);
        CREATE TABLE vectors (model TEXT NOT NULL, hash TEXT NOT NULL, vec BLOB NOT NULL, PRIMARY KEY (model, hash)) WITHOUT ROWID;
    """)
    db.execute("INSERT INTO meta VALUES ('schema', ?)", (schema,))
    for p in paths:
        db.execute("INSERT INTO notes VALUES (?, 1, 1, 'x', ?)", (p, blob))
    for h, v in (vectors or {}).items():
        db.execute(
            "INSERT INTO vectors VALUES (?, ?, ?)",
            ("all-MiniLM-L6-v2", h, np.asarray(v, dtype=np.float32).tobytes()),
        )
    db.commit()
    db.close()


def test_no_module_of_explorer_can_deserialise_code() -> None:
    banned = re.compile(
        r"^\s*(import|from)\s+(pickle|cPickle|dill|shelve|marshal|joblib)\b|allow_pickle\s*=\s*True", re.M
    )
    offenders = [
        str(p.relative_to(REPO))
        for p in (REPO / "explorer").rglob("*.py")
        if banned.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_crafted_pickle_in_an_old_store_is_never_executed(tmp_path: Path, cli: Cli) -> None:
    root = _vault(tmp_path)
    marker = tmp_path / "pwned"
    _v4_store(root / ".explorer", pickle.dumps(_Evil(marker)), paths=[f"n{i}.md" for i in range(6)])
    proc = cli("search", "kites", "--vault", str(root), "--json", "--no-embeddings")
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists()
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "older version" in lines[0] and "rebuilding" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert '"results"' in proc.stdout and "n3.md" in proc.stdout


def test_a_version_number_reused_by_another_layout_is_rebuilt_not_misread(tmp_path: Path) -> None:
    from explorer.index.local.store import SCHEMA_VERSION

    root = _vault(tmp_path)
    marker = tmp_path / "pwned"
    _v4_store(
        root / ".explorer",
        pickle.dumps(_Evil(marker)),
        {"a" * 32: np.ones(384, dtype=np.float32)},
        paths=["n0.md"],
        schema=str(SCHEMA_VERSION),
    )
    messages: list[str] = []
    ix = VaultIndex(root, LEXICAL, on_message=messages.append)
    report = ix.open()
    assert not marker.exists() and len(report.added) == 6
    assert len(messages) == 1 and "another layout" in messages[0] and "1 cached vectors kept" in messages[0]
    ix.close()


def test_crafted_pickle_anywhere_in_a_current_store_is_never_executed(tmp_path: Path) -> None:
    root = _vault(tmp_path)
    ix = VaultIndex(root, LEXICAL)
    ix.open()
    ix.close()
    marker = tmp_path / "pwned"
    evil = pickle.dumps(_Evil(marker))
    db = sqlite3.connect(root / ".explorer" / "index.sqlite")
    db.execute("UPDATE notes SET head=? WHERE path IN ('n1.md', 'n4.md')", (evil,))
    db.execute("UPDATE records SET data=?, counts=? WHERE path IN ('n2.md', 'n5.md')", (evil, evil))
    db.execute("INSERT OR REPLACE INTO meta VALUES ('extra', ?)", (evil.hex(),))
    db.commit()
    db.close()
    for name in ("index.pkl", "vectors.pkl", "bm25.pkl", "vectors-all-MiniLM-L6-v2-1.f32"):
        (root / ".explorer" / name).write_bytes(evil)
    messages: list[str] = []
    ix = VaultIndex(root, LEXICAL, on_message=messages.append)
    report = ix.open()
    assert not marker.exists()
    # The two records that were not note records are read again from the vault.
    assert sorted(report.added) == ["n1.md", "n4.md"] and len(ix.notes) == 6
    assert ix.bm25.top(["topic4"], 1)[0][0].startswith("n4.md")
    # The two records that are not note records: their notes are parsed from the files when read.
    assert "topic2" in ix.note("n2.md").text and "topic5" in ix.note("n5.md").text
    assert not marker.exists()
    ix.close()


def test_old_store_vectors_are_reused_where_hashes_match(tmp_path: Path, embedder) -> None:
    root = _vault(tmp_path)
    cache = tmp_path / "fresh"
    ix = VaultIndex(root, Settings().with_overrides({"index.cache_dir": str(cache)}), embedder=embedder)
    ix.open()
    ix.embed_pending()
    vectors = {s.hash: ix.dense.vector(s.node_id) for s in ix.shards.values()}
    ix.close()
    stale = {"0" * 32: np.ones(384, dtype=np.float32)}  # a hash no shard has any more
    _v4_store(root / ".explorer", b"\x80\x04N.", vectors | stale)

    counting = CountingEmbedder(embedder)
    messages: list[str] = []
    ix = VaultIndex(root, embedder=counting, on_message=messages.append)
    ix.open()
    assert len(messages) == 1 and "older version" in messages[0] and "7 cached vectors kept" in messages[0]
    assert ix.stats().pending == 0 and ix.embed_pending() == 0 and counting.texts == 0
    # The vector no shard uses is pruned (by hand here; opening prunes once a quarter is dead).
    assert ix.prune_vectors() == 1
    assert ix.store.vector_count(ix.model_id) == 6
    ix.close()


def test_vector_cache_is_pruned_of_unused_vectors(tmp_path: Path, embedder) -> None:
    root = _vault(tmp_path, n=8)
    ix = VaultIndex(root, embedder=embedder)
    ix.open()
    ix.embed_pending()
    for i in range(4):
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nrewritten about gliders {i}\n", encoding="utf-8")
    ix.refresh()
    ix.embed_pending()
    store = ix.store
    assert store.vector_count(ix.model_id) == 12 and store.vector_rows(ix.model_id) == 12
    files = list((root / ".explorer").glob("vectors-*.f32"))
    size_before = sum(p.stat().st_size for p in files)
    ix.close()
    # Reopening finds a third of the rows unused and compacts the file.
    ix = VaultIndex(root, embedder=embedder)
    ix.open()
    assert ix.store.vector_count(ix.model_id) == 8 and ix.store.vector_rows(ix.model_id) == 8
    files = list((root / ".explorer").glob("vectors-*.f32"))
    assert len(files) == 1 and files[0].stat().st_size == size_before * 8 // 12
    assert ix.stats().pending == 0
    hits = ix.dense.search(embedder.encode(["gliders"])[0], 4)
    assert {k.split("#")[0] for k, _ in hits} <= {f"n{i}.md" for i in range(4)}
    ix.close()


def test_damaged_vector_rows_are_dropped_and_embedded_again(tmp_path: Path, embedder) -> None:
    root = _vault(tmp_path)
    ix = VaultIndex(root, embedder=embedder)
    ix.open()
    ix.embed_pending()
    ix.close()
    vec_file = next((root / ".explorer").glob("vectors-*.f32"))
    data = bytearray(vec_file.read_bytes())
    data[384 * 4 * 2 + 100 : 384 * 4 * 2 + 140] = os.urandom(40)  # inside row 2
    vec_file.write_bytes(bytes(data))
    messages: list[str] = []
    ix = VaultIndex(root, embedder=embedder, on_message=messages.append)
    ix.open()
    assert ix.stats().pending == 1
    assert any("checksum" in m for m in messages)
    assert ix.embed_pending() == 1 and ix.stats().pending == 0
    ix.close()


def test_a_missing_vector_file_is_answered_by_a_rebuild(tmp_path: Path, embedder) -> None:
    root = _vault(tmp_path)
    ix = VaultIndex(root, embedder=embedder)
    ix.open()
    ix.embed_pending()
    ix.close()
    next((root / ".explorer").glob("vectors-*.f32")).unlink()
    messages: list[str] = []
    ix = VaultIndex(root, embedder=embedder, on_message=messages.append)
    report = ix.open()
    assert len(messages) == 1 and "missing" in messages[0] and "rebuilding" in messages[0], messages
    assert len(ix.notes) == 6 and report.added == [] and ix.stats().pending == 6
    assert ix.embed_pending() == 6
    ix.close()


def _damage_middle(db_path: Path, every: int = 2) -> None:
    """Overwrite part of every `every`-th page after the first (the header stays whole)."""
    data = bytearray(db_path.read_bytes())
    page = 4096
    assert len(data) > 6 * page
    for k in range(2, len(data) // page - 1, every):
        data[k * page + 8 : k * page + 600] = b"\xde\xad\xbe\xef" * 148
    db_path.write_bytes(bytes(data))


def test_garbage_in_the_middle_of_the_database_is_rebuilt_with_one_line(tmp_path: Path, cli: Cli) -> None:
    notes = {f"d{i}/n{i}.md": f"# Note {i}\n\n" + f"kites and topic{i} " * 200 + "\n" for i in range(60)}
    root = write_notes(tmp_path / "v", notes)
    assert cli("index", str(root), "--no-embeddings").returncode == 0
    _damage_middle(root / ".explorer" / "index.sqlite")
    proc = cli("search", "topic7", "--vault", str(root), "--json", "--no-embeddings")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and ("damaged" in lines[0] or "unreadable" in lines[0]), proc.stderr
    assert "rebuilding" in lines[0] and "d7/n7.md" in proc.stdout
    assert any(p.name.startswith("index.sqlite.broken-") for p in (root / ".explorer").iterdir())
    # The rebuilt store is whole: the next run says nothing and finds the same.
    again = _cli("search", "topic7", "--vault", str(root), "--json", "--no-embeddings")
    assert again.returncode == 0 and again.stderr.strip() == "" and "d7/n7.md" in again.stdout


def test_damage_met_by_a_running_index_is_rebuilt_from_memory(tmp_path: Path) -> None:
    notes = {f"n{i}.md": f"# Note {i}\n\n" + f"kites and topic{i} " * 200 + "\n" for i in range(60)}
    root = write_notes(tmp_path / "v", notes)
    messages: list[str] = []
    ix = VaultIndex(root, LEXICAL, on_message=messages.append)
    ix.open()
    db = root / ".explorer" / "index.sqlite"
    ix.store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    ix.store.conn.execute("PRAGMA cache_size=0")  # read the damaged pages, not a cached copy
    _damage_middle(db, every=1)
    (root / "n5.md").write_text("# Note 5\n\nnow about gliders\n", encoding="utf-8")
    (root / "n9.md").unlink()
    report = ix.refresh()
    assert report.changed == ["n5.md"] and report.removed == ["n9.md"]
    assert any("damaged" in m and "rebuilding" in m for m in messages), messages
    ix.close()
    # What is on disk now is whole and current.
    after: list[str] = []
    ix = VaultIndex(root, LEXICAL, on_message=after.append)
    report = ix.open()
    assert after == [] and report.added == [] and report.changed == [] and len(ix.notes) == 59
    assert ix.bm25.top(["glider"], 1)[0][0].startswith("n5.md")
    ix.close()


# -- disk full and read-only folders (real mounts; root only) ---------------------------------
@pytest.fixture()
def read_only(tmp_path: Path):
    """A function making a read-only bind mount of a folder; unmounted afterwards."""
    made: list[Path] = []

    def mount(src: Path) -> Path:
        dst = tmp_path / f"ro-{len(made)}"
        dst.mkdir()
        if os.geteuid() != 0 or not run_mount("--bind", str(src), str(dst)):
            pytest.skip("needs root for a read-only bind mount")
        made.append(dst)
        if not run_mount("-o", "remount,bind,ro", str(dst)):
            pytest.skip("cannot remount read-only")
        return dst

    yield mount
    for dst in reversed(made):
        subprocess.run(["umount", "-l", str(dst)], capture_output=True)


def test_disk_full_keeps_the_previous_index_and_searches_on(
    tmp_path: Path, tiny_disk: Path, embedder
) -> None:
    root = _vault(tmp_path)
    settings = Settings().with_overrides({"index.cache_dir": str(tiny_disk / "cache")})
    messages: list[str] = []
    ix = VaultIndex(root, settings, embedder=embedder, on_message=messages.append)
    ix.open()
    ix.embed_pending()
    filler = fill_disk(tiny_disk)
    # Large enough to need new disk space, cheap to embed: 400 sections with one text (one hash).
    big = "# Big\n\n" + ("## Part\n\n" + "zephyr gliders " * 60 + "\n\n") * 400
    (root / "big.md").write_text(big, encoding="utf-8")
    report = ix.refresh()
    ix.embed_pending()
    assert report.added == ["big.md"]
    full = [m for m in messages if "disk full" in m]
    assert len(full) == 1 and "previous" in full[0]
    # Searches use the index in memory, new note included.
    assert ix.bm25.top(["zephyr"], 1)[0][0].startswith("big.md") and ix.stats().pending == 0
    ix.close()
    # The saved index is the previous one, whole: a restart finds the five old notes stored.
    filler.unlink()
    again = VaultIndex(root, settings, embedder=embedder)
    report = again.open()
    assert report.added == ["big.md"] and len(again.notes) == 7
    assert again.stats().pending <= len(again.shards_by_path["big.md"])
    again.close()


def test_disk_full_on_the_command_line_is_one_clear_message(
    tmp_path: Path, tiny_disk: Path, cli: Cli
) -> None:
    root = _vault(tmp_path)
    cache = tiny_disk / "cache"
    assert cli("index", str(root), "--no-embeddings", "--set", f"index.cache_dir={cache}").returncode == 0
    fill_disk(tiny_disk)
    (root / "big.md").write_text(
        "# Big\n\n" + " ".join(f"zephyr{i}" for i in range(40000)) + "\n", encoding="utf-8"
    )
    proc = cli("index", str(root), "--no-embeddings", "--set", f"index.cache_dir={cache}")
    assert "Traceback" not in proc.stderr
    assert (
        proc.returncode == 1 and "disk full" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    ), proc.stderr
    proc = cli(
        "search",
        "zephyr77",
        "--vault",
        str(root),
        "--json",
        "--no-embeddings",
        "--set",
        f"index.cache_dir={cache}",
    )
    assert proc.returncode == 0 and "big.md" in proc.stdout and "Traceback" not in proc.stderr


def test_read_only_vault_searches_with_the_index_in_the_user_cache(
    tmp_path: Path, read_only, cli: Cli
) -> None:
    src = _vault(tmp_path)
    vault = read_only(src)
    cache_home = tmp_path / "xdg"
    proc = cli(
        "search",
        "topic3",
        "--vault",
        str(vault),
        "--json",
        "--no-embeddings",
        env={"XDG_CACHE_HOME": str(cache_home)},
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "read-only" in lines[0] and str(cache_home) in lines[0]
    assert "n3.md" in proc.stdout
    assert list(cache_home.glob("explorer/vaults/*/index.sqlite"))
    # Nothing else writable either: the index lives in memory for the run.
    ro_home = read_only(tmp_path / "xdg")
    proc = cli(
        "search",
        "topic4",
        "--vault",
        str(vault),
        "--json",
        "--no-embeddings",
        env={"XDG_CACHE_HOME": str(ro_home / "sub")},
    )
    assert proc.returncode == 0 and "n4.md" in proc.stdout and "Traceback" not in proc.stderr, proc.stderr
    assert "in memory" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_read_only_index_folder_inside_a_writable_vault(tmp_path: Path, read_only) -> None:
    root = _vault(tmp_path)
    ix = VaultIndex(root, LEXICAL)
    ix.open()
    ix.close()
    ro = read_only(root / ".explorer")
    settings = LEXICAL.with_overrides({"index.cache_dir": str(ro)})
    messages: list[str] = []
    os.environ["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    try:
        ix = VaultIndex(root, settings, on_message=messages.append)
        ix.open()
    finally:
        os.environ.pop("XDG_CACHE_HOME")
    assert len(messages) == 1 and "read-only" in messages[0]
    assert ix.bm25.top(["topic2"], 1)[0][0].startswith("n2.md")
    ix.close()
