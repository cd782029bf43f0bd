"""The catalogue: `index.sqlite` (notes, their heads and records, skipped files), and the `Store` that joins it
to the vector file and the lexical segment.

Opening checks the schema version: a file of this version is used, one of schema 8 is upgraded
in place, and any other (older, newer, not a database, damaged) is moved aside or replaced and
rebuilt from the vault, keeping the vectors that still check out; `messages` says so in one line.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from explorer.index.local.lazy import Loader
from explorer.index.local.store.codec import (
    FileState,
    NoteRecord,
    decode_counts,
    decode_head,
    decode_record,
    encode_counts,
    encode_head,
    encode_record,
)
from explorer.index.local.store.db import (
    Folder,
    StoreError,
    busy,
    check_integrity,
    classify,
    faults,
    one_line,
    refine,
    rows_for,
    table_exists,
    transaction,
)
from explorer.index.local.store.owner import EmbedOwner
from explorer.index.local.store.segment import load_segment, save_segment
from explorer.index.local.store.vectors import VectorFiles
from explorer.vault.model import Note, Shard

#: Bump when the stored layout or the meaning of stored data changes (parser, sharder, tokenizer).
SCHEMA_VERSION = 9

#: Bump when the parser or the sharder makes other notes or shards from the same file: stores
#: written under other rules (no `rules` row: rules 1) keep their vectors, but every stored
#: note is read again from the vault on the next open (explorer.index.local.vault_index).
#: 2: a name with no letters no longer heads the shard text.
PARSE_RULES = 2

#: The schema 9 upgrades in place (its note records are kept; their heads are computed from them).
_UPGRADABLE = "8"
#: Tries at switching a database to WAL while another process creates it: SQLite answers that switch
#: "database is locked" at once, without waiting out the busy timeout (about 20 s in all).
_WAL_TRIES = 28

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS notes (
    path TEXT PRIMARY KEY, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL,
    hash TEXT NOT NULL, head BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS records (path TEXT PRIMARY KEY, data BLOB NOT NULL, counts BLOB);
CREATE TABLE IF NOT EXISTS skipped (
    path TEXT PRIMARY KEY, reason TEXT NOT NULL, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS vec_files (
    model TEXT PRIMARY KEY, file TEXT NOT NULL, dim INTEGER NOT NULL, rows INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS vec_rows (
    model TEXT NOT NULL, hash TEXT NOT NULL, row INTEGER NOT NULL, crc INTEGER NOT NULL,
    PRIMARY KEY (model, hash)) WITHOUT ROWID;
"""


def user_cache_dir(vault: Path) -> Path:
    """Where a vault's index goes when its own folder is read-only: `$XDG_CACHE_HOME/explorer/vaults/<name>-<id>`."""
    import hashlib

    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "explorer" / "vaults"
    key = hashlib.blake2b(str(Path(vault).resolve()).encode(), digest_size=6).hexdigest()
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(vault).resolve().name)[:40] or "vault"
    return base / f"{name}-{key}"


class Store(Folder):
    """The index folder: `index.sqlite` plus one vector file per embedding model.

    Args:
        directory: The index folder (created when missing).
        memory: Keep everything in memory (a read-only vault with no writable cache folder).

    Every write is one SQLite transaction (WAL journal), so a process killed at any point leaves
    the previous or the next state. A file that is not a database, a damaged one, or one written
    by another schema version is moved aside or replaced and rebuilt; `messages` says so in one
    line. Errors met later come out as `StoreError` with kind 'damaged', 'full' or 'readonly'.
    """

    def __init__(self, directory: Path | None, memory: bool = False, frozen: str = "") -> None:
        super().__init__(directory, memory, frozen)
        self.vectors = VectorFiles(self)
        """The vector files and their catalogue rows."""
        self.owner = EmbedOwner(self.directory) if not (self.memory or frozen) else None
        """The embedding lock of the folder (None for a store in memory or one taking no writes)."""
        if frozen:
            self.conn = self._open_frozen()
            self.rules_stale = self._stale_rules()
            return
        if not self.memory:
            self.directory.mkdir(parents=True, exist_ok=True)
            # access(2) also reports a read-only mount (EROFS) to root, who ignores permission bits.
            for p in (self.directory, self.path):
                if p.exists() and not os.access(p, os.W_OK):
                    raise StoreError("readonly", f"{p} is not writable")
        try:
            self.conn = self._open()
            #: True when the stored notes were parsed under other rules than PARSE_RULES.
            self.rules_stale = self._stale_rules()
        except StoreError as exc:
            raise StoreError(refine(exc.kind, self.directory), exc.detail) from exc
        except sqlite3.Error as exc:
            raise StoreError(classify(exc) or "damaged", str(exc)) from exc

    def _stale_rules(self) -> bool:
        row = self.conn.execute("SELECT value FROM meta WHERE key='rules'").fetchone()
        if row is not None and row[0] == str(PARSE_RULES):
            return False
        if self.conn.execute("SELECT 1 FROM notes LIMIT 1").fetchone() is None:
            if not self.frozen:  # nothing stored yet: what comes is parsed under these rules
                self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('rules', ?)", (str(PARSE_RULES),))
            return False
        return True

    def mark_rules_current(self) -> None:
        """Record that every stored note has been parsed under PARSE_RULES."""
        if self.frozen:
            return
        with self.lock, faults():
            self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('rules', ?)", (str(PARSE_RULES),))
        self.rules_stale = False

    def _open_frozen(self) -> sqlite3.Connection:
        """The saved database as it is (no journal, no locks, no writes), when it is of this version and whole."""
        conn = sqlite3.connect(
            f"file:{self.path}?immutable=1", uri=True, check_same_thread=False, isolation_level=None
        )
        try:
            row = (
                conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
                if table_exists(conn, "meta")
                else None
            )
            if row is None or row[0] != str(SCHEMA_VERSION):
                raise StoreError("damaged", "the saved index is of another version")
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError("damaged", str(exc)) from exc
        except StoreError:
            conn.close()
            raise
        return conn

    # -- opening ---------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        target = ":memory:" if self.memory else str(self.path)
        conn = sqlite3.connect(target, check_same_thread=False, isolation_level=None, timeout=30)
        if not self.memory:
            for attempt in range(_WAL_TRIES):
                try:
                    conn.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError as exc:
                    if not busy(exc) or attempt + 1 == _WAL_TRIES:
                        conn.close()
                        raise
                    time.sleep(0.05 * (attempt + 1))
            conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _open(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = None
        try:
            conn = self._connect()
            # The version is read before anything is created, so an older file is left as it was.
            row = (
                conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
                if table_exists(conn, "meta")
                else None
            )
            if row is None:
                row = self._create(conn)  # None: created here
            if row is not None and row[0] == _UPGRADABLE and _upgradable_layout(conn):
                self._upgrade(conn)
            elif row is not None and row[0] != str(SCHEMA_VERSION):
                if not row[0].isdigit():
                    check_integrity(conn)
                newer = row[0].isdigit() and int(row[0]) > SCHEMA_VERSION
                raise _Rebuild(
                    "newer" if newer else "older",
                    f"index written by {'a newer' if newer else 'an older'} version (schema {row[0]}, this one reads {SCHEMA_VERSION})",
                )
            if not _current_layout(conn):
                # A version number some other build also used, for another layout.
                schema = row[0] if row is not None else SCHEMA_VERSION
                raise _Rebuild("older", f"index schema {schema} has another layout than this version's")
            conn.executescript(_SCHEMA)
            self._check_vector_files(conn)
            return conn
        except _Rebuild as why:
            if conn is not None:
                conn.close()
            return self._rebuild(why.detail, why.kind)
        except sqlite3.DatabaseError as exc:
            if conn is not None:
                conn.close()
            kind = classify(exc)
            if kind in ("full", "readonly"):
                raise StoreError(kind, str(exc)) from exc
            if busy(exc):
                # Another process holds the database longer than the busy timeout: it is in
                # use, not damaged (moving it aside would split the index between two files).
                raise StoreError("busy", f"the index is in use by another process ({one_line(exc)})") from exc
            return self._rebuild(f"index file unreadable ({one_line(exc)})", "damaged")

    def _create(self, conn: sqlite3.Connection) -> tuple[str] | None:
        """Create the tables of a new database, or find the schema row another process wrote meanwhile.

        In one write transaction: two processes opening a new index folder at once must not both
        create it (the second's insert would fail, and a failed open is taken for damage).
        Returns the schema row when the database was someone else's after all (None: created here).
        """
        with transaction(conn):
            row = (
                conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
                if table_exists(conn, "meta")
                else None
            )
            if row is not None:
                return row
            if table_exists(conn, "vectors") or table_exists(conn, "notes"):
                check_integrity(conn)  # a lost version row may be damage, not age
                raise _Rebuild("older", "index written by an older version (no schema version)")
            for statement in _SCHEMA.split(";"):  # executescript would commit the transaction
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        return None

    def _upgrade(self, conn: sqlite3.Connection) -> None:
        """Schema 8 -> 9 in one transaction: move the records to `records` and store each note's head.

        Nothing is parsed again and the vectors and the lexical segment stay as they are; a record
        that does not decode is dropped (its note is read again from the vault). One line says so.
        """
        t0 = time.perf_counter()
        with transaction(conn):
            row = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is None or row[0] != _UPGRADABLE:
                return  # another process opening the same folder upgraded it meanwhile
            conn.execute("ALTER TABLE notes RENAME TO notes_v8")
            for statement in _SCHEMA.split(";"):  # executescript would commit the transaction
                if statement.strip():
                    conn.execute(statement)
            kept = dropped = 0
            for path, mtime, size, h, data, counts in conn.execute(
                "SELECT path, mtime_ns, size, hash, data, counts FROM notes_v8"
            ).fetchall():
                try:
                    note, shards, _c = decode_record(data)
                    if note.path != path:
                        raise ValueError("record names another path")
                    head = encode_head(note, shards)
                except Exception:  # noqa: BLE001 - read again from the vault
                    dropped += 1
                    continue
                conn.execute("INSERT INTO notes VALUES (?, ?, ?, ?, ?)", (path, mtime, size, h, head))
                conn.execute("INSERT INTO records VALUES (?, ?, ?)", (path, data, counts))
                kept += 1
            conn.execute("DROP TABLE notes_v8")
            conn.execute("UPDATE meta SET value=? WHERE key='schema'", (str(SCHEMA_VERSION),))
        line = (
            f"index of schema {_UPGRADABLE} upgraded to {SCHEMA_VERSION} (note heads stored for faster opening): "
            f"{kept} notes kept, vectors kept"
        )
        if dropped:
            line += f", {dropped} unreadable records to read again from the vault"
        self.messages.append(f"{line} ({time.perf_counter() - t0:.1f} s)")

    def _check_vector_files(self, conn: sqlite3.Connection) -> None:
        """Remove vector and segment files no catalogue row names (left by a process killed mid-write).

        Only files untouched for ten minutes: a younger one may be another process's write that
        is about to be committed.
        """
        if self.memory:
            return
        named = {f for (f,) in conn.execute("SELECT file FROM vec_files")}
        named.update(v for (v,) in conn.execute("SELECT value FROM meta WHERE key='segment'"))
        now = time.time()
        for p in [
            *self.directory.glob("vectors-*.f32"),
            *self.directory.glob("bm25-*.seg"),
            *self.directory.glob("bm25-*.tmp"),
        ]:
            if p.name not in named:
                try:
                    if now - p.stat().st_mtime > 600:
                        p.unlink()
                except OSError:
                    pass

    def _rebuild(self, why: str, kind: str) -> sqlite3.Connection:
        """Start a new database, carrying over the vector catalogue when it can be read.

        `kind`: 'older' (an earlier format: replaced), 'newer' (a later format: kept aside) or
        'damaged' (kept aside). Vectors whose rows still check out are kept in every case.
        """
        carried = self.vectors.salvage() if not self.memory else {}
        aside = ""
        if kind in ("newer", "damaged"):
            aside_path = self.path.with_name(
                f"index.sqlite.{'newer' if kind == 'newer' else 'broken'}-{int(time.time())}"
            )
            if self.path.exists():
                self.path.replace(aside_path)
                aside = aside_path.name
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(self.path) + suffix)
            if src.exists():
                src.unlink()
        kept = sum(len(v) for v in carried.values())
        line = f"{why}: rebuilding the index from the vault"
        if aside:
            line += f" (old file kept as {aside})"
        if kept:
            line += f"; {kept} cached vectors kept"
        self.messages.append(one_line(line, 400))
        conn = self._connect()
        conn.executescript(_SCHEMA)
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('rules', ?)", (str(PARSE_RULES),))
        self.rules_stale = False
        self.conn = conn
        for model, vecs in carried.items():
            self.vectors.put_vectors(model, vecs)
        self._check_vector_files(conn)
        return conn

    def reset(self, why: str) -> None:
        """Move a damaged database aside and start a new one (vectors that still check out are kept)."""
        with self.lock:
            try:
                self.conn.close()
            except sqlite3.Error:
                pass
            self.vectors.clear(memory_too=self.memory)
            self.conn = self._rebuild(why, "damaged")

    def close(self) -> None:
        """Close the database and the vector maps."""
        with self.lock:
            self.conn.close()
            self.vectors.clear()

    # -- notes -----------------------------------------------------------------------------
    def file_states(self) -> dict[str, FileState]:
        """Path -> state of every stored note and skipped file."""
        with self.lock, faults():
            out = {
                p: FileState(m, s, h)
                for p, m, s, h in self.conn.execute("SELECT path, mtime_ns, size, hash FROM notes")
            }
            for p, m, s in self.conn.execute("SELECT path, mtime_ns, size FROM skipped"):
                out[p] = FileState(m, s, "")
            return out

    def skipped_states(self) -> dict[str, FileState]:
        """Path -> state of every skipped file."""
        with self.lock, faults():
            return {
                p: FileState(m, s, "")
                for p, m, s in self.conn.execute("SELECT path, mtime_ns, size FROM skipped")
            }

    def load_records(self, wanted: dict[str, str]) -> dict[str, tuple[Note, tuple[Shard, ...]]]:
        """`load_record` of many notes at once ({path: content hash}), in one pass over the records."""
        with self.lock, faults():
            rows = rows_for(
                self.conn,
                "SELECT n.path, n.hash, r.data FROM notes n JOIN records r ON r.path = n.path",
                "n.path",
                list(wanted),
            )
        out = {}
        for path, h, data in rows:
            if wanted.get(path) != h:
                continue
            try:
                note, shards, _counts = decode_record(data)
            except Exception:  # noqa: BLE001 - damaged: the caller parses the file again
                continue
            if note.path == path:
                out[path] = (note, shards)
        return out

    def load_heads(self, loader: Loader) -> list[NoteRecord]:
        """Every stored note from its head, as lazy records (`explorer.index.local.lazy`) that `loader` completes.

        Unreadable heads are dropped (their notes are read again from the vault).
        """
        with self.lock, faults():
            rows = self.conn.execute("SELECT path, mtime_ns, size, hash, head FROM notes").fetchall()
        out: list[NoteRecord] = []
        bad = []
        for path, mtime, size, h, head in rows:
            try:
                note, shards = decode_head(path, h, head, loader)
            except Exception:  # noqa: BLE001 - a damaged head is re-read from the vault
                bad.append(path)
                continue
            out.append(NoteRecord(path, FileState(mtime, size, h), note, shards))
        if bad:
            try:
                self.apply(removed=bad)
            except StoreError:
                pass
        return out

    def load_record(self, path: str, digest: str) -> tuple[Note, tuple[Shard, ...]] | None:
        """The whole stored note at `path` and its shards, when its stored content hash is `digest`; else None.

        None too when the record does not decode (damage); the caller reads the file instead.
        """
        with self.lock, faults():
            row = self.conn.execute(
                "SELECT n.hash, r.data FROM notes n JOIN records r ON r.path = n.path WHERE n.path=?", (path,)
            ).fetchone()
        if row is None or row[0] != digest:
            return None
        try:
            note, shards, _counts = decode_record(row[1])
        except Exception:  # noqa: BLE001 - damaged: the caller parses the file again
            return None
        return (note, shards) if note.path == path else None

    def load_counts(self, paths: Iterable[str] | None = None) -> dict[str, tuple[dict[str, int], ...]]:
        """Stored BM25 term counts of each shard of these notes (all when None); unreadable ones are left out."""
        with self.lock, faults():
            if paths is None:
                rows = self.conn.execute("SELECT path, counts FROM records").fetchall()
            else:
                rows = rows_for(self.conn, "SELECT path, counts FROM records", "path", list(paths))
        out: dict[str, tuple[dict[str, int], ...]] = {}
        for path, blob in rows:
            counts = decode_counts(blob)  # None: recomputed from the shard text instead
            if counts is not None:
                out[path] = counts
        return out

    # -- the lexical segment (explorer.index.local.store.segment) ---------------------------------
    def save_segment(
        self,
        notes: list[tuple[str, str]],
        note_ptr: np.ndarray,
        keys: list[str],
        vocab: list[str],
        arrays: dict[str, np.ndarray],
    ) -> None:
        """Save the BM25 index as one segment file (`segment.save_segment`)."""
        save_segment(self, notes, note_ptr, keys, vocab, arrays)

    def load_segment(self) -> tuple[dict[str, np.ndarray], dict[str, list[str]]] | None:
        """(arrays, strings) of the saved segment, or None when there is none or it does not check out."""
        return load_segment(self)

    def skipped(self) -> dict[str, str]:
        """Path -> reason of files left out."""
        with self.lock, faults():
            return dict(self.conn.execute("SELECT path, reason FROM skipped ORDER BY path"))

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

        Raises:
            StoreError: the batch was not written (nothing of it is; the previous state stays).
        """
        self.refuse()
        rows = [
            (
                rec.path,
                rec.state.mtime_ns,
                rec.state.size,
                rec.state.hash,
                encode_head(rec.note, rec.shards),
                encode_record(rec),
                encode_counts(rec.counts),
            )
            for rec in notes
        ]
        with self.lock, faults(), transaction(self.conn):
            for path in removed:
                self.conn.execute("DELETE FROM notes WHERE path=?", (path,))
                self.conn.execute("DELETE FROM records WHERE path=?", (path,))
                self.conn.execute("DELETE FROM skipped WHERE path=?", (path,))
            for row in rows:
                self.conn.execute("DELETE FROM skipped WHERE path=?", (row[0],))
                self.conn.execute("INSERT OR REPLACE INTO notes VALUES (?, ?, ?, ?, ?)", row[:5])
                self.conn.execute("INSERT OR REPLACE INTO records VALUES (?, ?, ?)", (row[0], *row[5:]))
            for path, reason, mtime, size in skipped:
                self.conn.execute("DELETE FROM notes WHERE path=?", (path,))
                self.conn.execute("DELETE FROM records WHERE path=?", (path,))
                self.conn.execute(
                    "INSERT OR REPLACE INTO skipped VALUES (?, ?, ?, ?)", (path, reason, mtime, size)
                )
            for path, mtime, size in touched:
                self.conn.execute("UPDATE notes SET mtime_ns=?, size=? WHERE path=?", (mtime, size, path))

    # -- vectors (explorer.index.local.store.vectors) ----------------------------------------------
    def get_matrix(self, model: str, hashes: list[str]) -> tuple[list[str], np.ndarray]:
        """(hashes found, in the order asked, and their vectors as the rows of one float32 matrix)."""
        return self.vectors.get_matrix(model, hashes)

    def get_vectors(self, model: str, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """Cached vectors of these shard hashes for `model` (copies; rows failing their CRC are left out)."""
        return self.vectors.get_vectors(model, hashes)

    def put_vectors(self, model: str, vectors: dict[str, np.ndarray]) -> None:
        """Cache vectors (float32) by shard hash; hashes already cached are left as they are."""
        self.vectors.put_vectors(model, vectors)

    def prune_vectors(self, model: str, keep: set[str]) -> int:
        """Drop cached vectors of `model` whose hash is not in `keep` and compact its file; returns how many."""
        return self.vectors.prune_vectors(model, keep)

    def vector_count(self, model: str) -> int:
        """Vectors cached for `model`."""
        return self.vectors.vector_count(model)

    def vector_rows(self, model: str) -> int:
        """Rows in `model`'s vector file (cached vectors plus the space of dropped ones)."""
        return self.vectors.vector_rows(model)


class _Rebuild(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def _current_layout(conn: sqlite3.Connection) -> bool:
    """True when the tables are this version's (a fresh file has none yet, which is fine)."""
    if not table_exists(conn, "notes"):
        return True
    columns = {r[1] for r in conn.execute("PRAGMA table_info(notes)")}
    records = {r[1] for r in conn.execute("PRAGMA table_info(records)")}
    return (
        "head" in columns
        and {"data", "counts"} <= records
        and table_exists(conn, "vec_files")
        and not table_exists(conn, "vectors")
    )


def _upgradable_layout(conn: sqlite3.Connection) -> bool:
    """True for schema 8's tables: whole records in `notes`, no heads."""
    columns = {r[1] for r in conn.execute("PRAGMA table_info(notes)")}
    return (
        {"data", "counts"} <= columns
        and "head" not in columns
        and table_exists(conn, "vec_files")
        and not table_exists(conn, "records")
    )
