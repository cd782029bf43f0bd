"""Persistent index state in SQLite: parsed notes and shards, skipped files, an embedding cache by content hash."""

from __future__ import annotations

import pickle
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from explorer.vault.model import Note, Shard

#: Bump when the stored layout or the meaning of stored data changes (parser, sharder, tokenizer).
SCHEMA_VERSION = 6

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS notes (
    path TEXT PRIMARY KEY, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL,
    hash TEXT NOT NULL, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS skipped (
    path TEXT PRIMARY KEY, reason TEXT NOT NULL, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS vectors (
    model TEXT NOT NULL, hash TEXT NOT NULL, vec BLOB NOT NULL, PRIMARY KEY (model, hash)) WITHOUT ROWID;
"""


@dataclass(frozen=True, slots=True)
class FileState:
    """What the store knows of a file on disk."""

    mtime_ns: int
    """Modification time when last read."""
    size: int
    """Size when last read."""
    hash: str
    """Content hash ('' for a skipped file)."""


@dataclass(frozen=True, slots=True)
class NoteRecord:
    """A note as stored: its file state, parse and shards."""

    path: str
    """Vault-relative path."""
    state: FileState
    """File state when parsed."""
    note: Note
    """The parsed note."""
    shards: tuple[Shard, ...]
    """Its shards."""
    counts: tuple[dict[str, int], ...] | None = None
    """BM25 term counts of each shard (stored so a restart does not tokenize again)."""


class Store:
    """The `<cache>/index.sqlite` database.

    Every write is one SQLite transaction (WAL journal), so a process killed at any point leaves
    the previous or the next state. A file that is not a database, or one written with another
    schema version, is moved aside and rebuilt; `messages` says so.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / "index.sqlite"
        self.messages: list[str] = []
        self._lock = threading.RLock()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._conn = self._open()

    # -- opening ---------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _open(self) -> sqlite3.Connection:
        try:
            conn = self._connect()
            conn.executescript(_SCHEMA)
            row = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is None:
                empty = conn.execute("SELECT COUNT(*) FROM notes").fetchone()[0] == 0
                if not empty:
                    raise _Rebuild("index has no schema version")
                conn.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif row[0] != str(SCHEMA_VERSION):
                raise _Rebuild(f"index schema {row[0]} differs from {SCHEMA_VERSION}")
            return conn
        except _Rebuild as why:
            conn.close()
            return self._rebuild(str(why), keep_vectors=True)
        except sqlite3.DatabaseError as exc:
            return self._rebuild(f"index file unreadable ({exc})", keep_vectors=False)

    def _rebuild(self, why: str, keep_vectors: bool) -> sqlite3.Connection:
        vectors: list[tuple[str, str, bytes]] = []
        if keep_vectors:
            try:
                old = sqlite3.connect(self.path)
                vectors = old.execute("SELECT model, hash, vec FROM vectors").fetchall()
                old.close()
            except sqlite3.DatabaseError:
                vectors = []
        aside = self.path.with_name(f"index.sqlite.broken-{int(time.time())}")
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(self.path) + suffix)
            if src.exists():
                if suffix == "" and not keep_vectors:
                    src.replace(aside)
                else:
                    src.unlink()
        self.messages.append(f"{why}: rebuilding the index" + (f" (old file kept as {aside.name})" if not keep_vectors else ""))
        conn = self._connect()
        conn.executescript(_SCHEMA)
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        if vectors:
            with _transaction(conn):
                conn.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", vectors)
        return conn

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._conn.close()

    # -- notes -----------------------------------------------------------------------------
    def file_states(self) -> dict[str, FileState]:
        """Path -> state of every stored note and skipped file."""
        with self._lock:
            out = {p: FileState(m, s, h) for p, m, s, h in self._conn.execute("SELECT path, mtime_ns, size, hash FROM notes")}
            for p, m, s in self._conn.execute("SELECT path, mtime_ns, size FROM skipped"):
                out[p] = FileState(m, s, "")
            return out

    def load_notes(self) -> Iterator[NoteRecord]:
        """Every stored note; unreadable records are dropped (they will be re-read from disk)."""
        with self._lock:
            rows = self._conn.execute("SELECT path, mtime_ns, size, hash, data FROM notes").fetchall()
        bad = []
        for path, mtime, size, h, data in rows:
            try:
                note, shards, counts = pickle.loads(data)
            except Exception:  # noqa: BLE001 - a damaged record is re-read from the vault
                bad.append(path)
                continue
            yield NoteRecord(path, FileState(mtime, size, h), note, tuple(shards), tuple(counts) if counts else None)
        if bad:
            self.apply(removed=bad)

    def skipped(self) -> dict[str, str]:
        """Path -> reason of files left out."""
        with self._lock:
            return dict(self._conn.execute("SELECT path, reason FROM skipped ORDER BY path"))

    def apply(
        self,
        notes: Iterable[NoteRecord] = (),
        removed: Iterable[str] = (),
        skipped: Iterable[tuple[str, str, int, int]] = (),
        touched: Iterable[tuple[str, int, int]] = (),
    ) -> None:
        """Write one batch of changes in one transaction.

        Args:
            notes: Notes (re)parsed.
            removed: Paths no longer in the vault (notes and skipped entries).
            skipped: (path, reason, mtime_ns, size) of files left out.
            touched: (path, mtime_ns, size) of notes whose content did not change.
        """
        with self._lock, _transaction(self._conn):
            for path in removed:
                self._conn.execute("DELETE FROM notes WHERE path=?", (path,))
                self._conn.execute("DELETE FROM skipped WHERE path=?", (path,))
            for rec in notes:
                self._conn.execute("DELETE FROM skipped WHERE path=?", (rec.path,))
                # Plain dicts: a pickled Counter is rebuilt through Counter.update, many times slower.
                counts = [dict(c) for c in rec.counts] if rec.counts is not None else None
                blob = pickle.dumps((rec.note, list(rec.shards), counts), protocol=pickle.HIGHEST_PROTOCOL)
                self._conn.execute(
                    "INSERT OR REPLACE INTO notes VALUES (?, ?, ?, ?, ?)",
                    (rec.path, rec.state.mtime_ns, rec.state.size, rec.state.hash, blob),
                )
            for path, reason, mtime, size in skipped:
                self._conn.execute("DELETE FROM notes WHERE path=?", (path,))
                self._conn.execute("INSERT OR REPLACE INTO skipped VALUES (?, ?, ?, ?)", (path, reason, mtime, size))
            for path, mtime, size in touched:
                self._conn.execute("UPDATE notes SET mtime_ns=?, size=? WHERE path=?", (mtime, size, path))

    # -- vectors ---------------------------------------------------------------------------
    def get_vectors(self, model: str, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """Cached vectors of these shard hashes for `model`."""
        wanted = list(hashes)
        out: dict[str, np.ndarray] = {}
        with self._lock:
            if len(wanted) > 2000:
                # Many at once (opening an index): one scan of the model's rows beats many IN lists.
                keep = set(wanted)
                for h, vec in self._conn.execute("SELECT hash, vec FROM vectors WHERE model=?", (model,)):
                    if h in keep:
                        out[h] = np.frombuffer(vec, dtype=np.float32)
                return out
            for i in range(0, len(wanted), 900):
                chunk = wanted[i:i + 900]
                marks = ",".join("?" * len(chunk))
                for h, vec in self._conn.execute(
                    f"SELECT hash, vec FROM vectors WHERE model=? AND hash IN ({marks})", (model, *chunk)
                ):
                    out[h] = np.frombuffer(vec, dtype=np.float32)
        return out

    def put_vectors(self, model: str, vectors: dict[str, np.ndarray]) -> None:
        """Cache vectors (float32) by shard hash."""
        rows = [(model, h, np.asarray(v, dtype=np.float32).tobytes()) for h, v in vectors.items()]
        with self._lock, _transaction(self._conn):
            self._conn.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", rows)

    def vector_count(self, model: str) -> int:
        """Vectors cached for `model`."""
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM vectors WHERE model=?", (model,)).fetchone()[0]

    def prune_vectors(self, model: str, keep: set[str]) -> int:
        """Drop cached vectors of `model` whose hash is not in `keep`; returns how many."""
        with self._lock:
            hashes = [h for (h,) in self._conn.execute("SELECT hash FROM vectors WHERE model=?", (model,))]
            drop = [h for h in hashes if h not in keep]
            with _transaction(self._conn):
                self._conn.executemany("DELETE FROM vectors WHERE model=? AND hash=?", [(model, h) for h in drop])
            return len(drop)


class _Rebuild(Exception):
    pass


class _transaction:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.conn.execute("COMMIT")
        else:
            self.conn.execute("ROLLBACK")
