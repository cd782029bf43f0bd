"""Persistent index state: notes, shards and skipped files as SQLite rows; vectors in a memory-mapped float32 file.

Nothing read back is deserialised by code that can execute: note records are msgpack documents
of plain values (strings, numbers, lists, maps, and ISO dates for YAML dates), decoded into the
frozen records of `explorer.vault.model`; vectors are raw little-endian float32 rows. An open
reads only the heads (`load_heads`); a note's record is read when its text is first needed
(`explorer.index.lazy`).

Layout of the index folder:

- `index.sqlite` (WAL journal): `meta`, `notes` (file state + a small msgpack head per note:
  title, frontmatter, source type, the tokens of its names, and its shards without their text),
  `records` (the whole note and its shards as one msgpack record, and their BM25 term counts),
  `skipped`, and the vector catalogue: `vec_files` (model -> vector file, dimension, rows
  written) and `vec_rows` (model, shard content hash -> row, CRC-32 of the row).
- `vectors-<model>-<generation>.f32`: one contiguous float32 array of `rows x dim`, appended
  to, read through `mmap`.

SQLite is the only commit point. Vectors are written past the committed row count, flushed to
disk, then their catalogue rows are committed in one transaction, so a process killed at any
moment leaves every committed vector readable and at most an uncommitted tail that the next
writer overwrites. Pruning writes a new generation file and switches the catalogue to it in one
transaction; files no catalogue row names are removed on open. Every row read is checked
against its CRC; a damaged row is dropped (its shard is embedded again) and a damaged database
is moved aside and rebuilt from the vault.
"""

from __future__ import annotations

import datetime as _dt
import errno
import itertools
import mmap
import os
import re
import sqlite3
import threading
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from explorer.index.lazy import Loader, Pending, lazy_note, lazy_shard
from explorer.text.tokenize import tokenize
from explorer.vault.model import Block, Heading, Link, Note, Shard, Tag

#: Bump when the stored layout or the meaning of stored data changes (parser, sharder, tokenizer).
SCHEMA_VERSION = 9

#: Bump when the parser or the sharder makes other notes or shards from the same file: stores
#: written under other rules (no `rules` row: rules 1) keep their vectors, but every stored
#: note is read again from the vault on the next open (explorer.index.vault_index).
#: 2: a name with no letters no longer heads the shard text.
PARSE_RULES = 2

#: The schema 9 upgrades in place (its note records are kept; their heads are computed from them).
_UPGRADABLE = "8"

#: Version of one note head inside `notes.head`.
_HEAD_VERSION = 1

#: Version of one note record inside `notes.data`.
_RECORD_VERSION = 2

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

# SQLite primary result codes (sqlite3.Error.sqlite_errorcode & 0xff).
_SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_CORRUPT, _SQLITE_FULL, _SQLITE_CANTOPEN, _SQLITE_NOTADB = (
    8,
    10,
    11,
    13,
    14,
    26,
)
_SQLITE_PERM = 3


def user_cache_dir(vault: Path) -> Path:
    """Where a vault's index goes when its own folder is read-only: `$XDG_CACHE_HOME/explorer/vaults/<name>-<id>`."""
    import hashlib

    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "explorer" / "vaults"
    key = hashlib.blake2b(str(Path(vault).resolve()).encode(), digest_size=6).hexdigest()
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(vault).resolve().name)[:40] or "vault"
    return base / f"{name}-{key}"


def one_line(text: object, limit: int = 160) -> str:
    """`text` on one line, at most `limit` characters (error details can be long and multi-line)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class StoreError(Exception):
    """The store could not be read or written; `kind` says why: 'damaged', 'full' or 'readonly'."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = one_line(detail)


def classify(exc: BaseException) -> str | None:
    """'damaged', 'full', 'readonly' or None (not a store fault) for an error met on the store."""
    if isinstance(exc, StoreError):
        return exc.kind
    if isinstance(exc, sqlite3.Error):
        code = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF
        msg = str(exc).lower()
        if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB) or "malformed" in msg or "not a database" in msg:
            return "damaged"
        if code == _SQLITE_FULL or "disk is full" in msg:
            return "full"
        if (
            code in (_SQLITE_READONLY, _SQLITE_PERM, _SQLITE_CANTOPEN)
            or "readonly" in msg
            or "unable to open" in msg
        ):
            return "readonly"
        if code == _SQLITE_IOERR:
            return "full" if "full" in msg else "readonly"
        return None
    if isinstance(exc, OSError):
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return "full"
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return "readonly"
    return None


def describe(kind: str, detail: str) -> str:
    """One line for a store fault."""
    if kind == "full":
        return f"disk full: the index could not be saved ({detail}); the saved index is the previous one, searches use the index in memory"
    if kind == "readonly":
        return f"the index folder is read-only ({detail})"
    return f"index damaged ({detail})"


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
        self.memory = memory or directory is None
        self.directory = Path(directory) if directory is not None else Path(":memory:")
        self.path = self.directory / "index.sqlite"
        self.messages: list[str] = []
        #: '' normally; 'full' or 'readonly' for a store opened as it is on disk, taking no writes.
        self.frozen = frozen
        self._lock = threading.RLock()
        self._maps: dict[str, tuple[str, mmap.mmap | None, int]] = {}
        self._mem_vectors: dict[str, np.ndarray] = {}
        if frozen:
            self._conn = self._open_frozen()
            self.rules_stale = self._stale_rules()
            return
        if not self.memory:
            self.directory.mkdir(parents=True, exist_ok=True)
            # access(2) also reports a read-only mount (EROFS) to root, who ignores permission bits.
            for p in (self.directory, self.path):
                if p.exists() and not os.access(p, os.W_OK):
                    raise StoreError("readonly", f"{p} is not writable")
        try:
            self._conn = self._open()
            #: True when the stored notes were parsed under other rules than PARSE_RULES.
            self.rules_stale = self._stale_rules()
        except StoreError as exc:
            raise StoreError(_refine(exc.kind, self.directory), exc.detail) from exc
        except sqlite3.Error as exc:
            raise StoreError(classify(exc) or "damaged", str(exc)) from exc

    def _stale_rules(self) -> bool:
        row = self._conn.execute("SELECT value FROM meta WHERE key='rules'").fetchone()
        if row is not None and row[0] == str(PARSE_RULES):
            return False
        if self._conn.execute("SELECT 1 FROM notes LIMIT 1").fetchone() is None:
            if not self.frozen:  # nothing stored yet: what comes is parsed under these rules
                self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('rules', ?)", (str(PARSE_RULES),))
            return False
        return True

    def mark_rules_current(self) -> None:
        """Record that every stored note has been parsed under PARSE_RULES."""
        if self.frozen:
            return
        with self._lock, _faults():
            self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('rules', ?)", (str(PARSE_RULES),))
        self.rules_stale = False

    def _open_frozen(self) -> sqlite3.Connection:
        """The saved database as it is (no journal, no locks, no writes), when it is of this version and whole."""
        conn = sqlite3.connect(
            f"file:{self.path}?immutable=1", uri=True, check_same_thread=False, isolation_level=None
        )
        try:
            row = (
                conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
                if _table_exists(conn, "meta")
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

    def _refuse(self) -> None:
        if self.frozen:
            raise StoreError(
                self.frozen,
                "the index folder takes no writes"
                if self.frozen == "readonly"
                else "no space left on device",
            )

    # -- opening ---------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        target = ":memory:" if self.memory else str(self.path)
        conn = sqlite3.connect(target, check_same_thread=False, isolation_level=None, timeout=30)
        if not self.memory:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _open(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = None
        try:
            conn = self._connect()
            # The version is read before anything is created, so an older file is left as it was.
            row = (
                conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
                if _table_exists(conn, "meta")
                else None
            )
            if row is None:
                if _table_exists(conn, "vectors") or _table_exists(conn, "notes"):
                    _check_integrity(conn)  # a lost version row may be damage, not age
                    raise _Rebuild("older", "index written by an older version (no schema version)")
                conn.executescript(_SCHEMA)
                conn.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif row[0] == _UPGRADABLE and _upgradable_layout(conn):
                self._upgrade(conn)
            elif row[0] != str(SCHEMA_VERSION):
                if not row[0].isdigit():
                    _check_integrity(conn)
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
            return self._rebuild(f"index file unreadable ({one_line(exc)})", "damaged")

    def _upgrade(self, conn: sqlite3.Connection) -> None:
        """Schema 8 -> 9 in one transaction: move the records to `records` and store each note's head.

        Nothing is parsed again and the vectors and the lexical segment stay as they are; a record
        that does not decode is dropped (its note is read again from the vault). One line says so.
        """
        t0 = time.perf_counter()
        with _transaction(conn):
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
        carried = self._salvage_vectors() if not self.memory else {}
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
        self._conn = conn
        for model, vecs in carried.items():
            self.put_vectors(model, vecs)
        self._check_vector_files(conn)
        return conn

    def _salvage_vectors(self) -> dict[str, dict[str, np.ndarray]]:
        """Vectors readable from the current database: this format's files, or an older format's table."""
        out: dict[str, dict[str, np.ndarray]] = {}
        if not self.path.exists():
            return out
        try:
            old = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        except sqlite3.Error:
            return out
        try:
            if _table_exists(old, "vec_files"):
                for model, file, dim in old.execute("SELECT model, file, dim FROM vec_files").fetchall():
                    try:
                        rows = old.execute(
                            "SELECT hash, row, crc FROM vec_rows WHERE model=?", (model,)
                        ).fetchall()
                        out[model] = _read_rows(self.directory / file, int(dim), rows)
                    except (sqlite3.Error, OSError, ValueError):
                        continue
            elif _table_exists(old, "vectors"):
                # Schema 4 and earlier: raw float32 blobs, never pickles.
                for model, h, vec in old.execute("SELECT model, hash, vec FROM vectors"):
                    if isinstance(vec, bytes) and len(vec) % 4 == 0 and vec:
                        out.setdefault(model, {})[h] = np.frombuffer(vec, dtype="<f4")
        except sqlite3.Error:
            pass
        finally:
            old.close()
        for model in list(out):
            dims = {v.shape[0] for v in out[model].values()}
            if len(dims) != 1:
                common = max(dims, key=lambda d: sum(1 for v in out[model].values() if v.shape[0] == d))
                out[model] = {h: v for h, v in out[model].items() if v.shape[0] == common}
            if not out[model]:
                del out[model]
        return out

    def reset(self, why: str) -> None:
        """Move a damaged database aside and start a new one (vectors that still check out are kept)."""
        with self._lock:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
            self._maps.clear()
            if self.memory:
                self._mem_vectors.clear()
            self._conn = self._rebuild(why, "damaged")

    def close(self) -> None:
        """Close the database and the vector maps."""
        with self._lock:
            self._conn.close()
            self._maps.clear()

    # -- notes -----------------------------------------------------------------------------
    def file_states(self) -> dict[str, FileState]:
        """Path -> state of every stored note and skipped file."""
        with self._lock, _faults():
            out = {
                p: FileState(m, s, h)
                for p, m, s, h in self._conn.execute("SELECT path, mtime_ns, size, hash FROM notes")
            }
            for p, m, s in self._conn.execute("SELECT path, mtime_ns, size FROM skipped"):
                out[p] = FileState(m, s, "")
            return out

    def skipped_states(self) -> dict[str, FileState]:
        """Path -> state of every skipped file."""
        with self._lock, _faults():
            return {
                p: FileState(m, s, "")
                for p, m, s in self._conn.execute("SELECT path, mtime_ns, size FROM skipped")
            }

    def load_records(self, wanted: dict[str, str]) -> dict[str, tuple[Note, tuple[Shard, ...]]]:
        """`load_record` of many notes at once ({path: content hash}), in one pass over the records."""
        with self._lock, _faults():
            rows = _rows_for(
                self._conn,
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
        """Every stored note from its head, as lazy records (`explorer.index.lazy`) that `loader` completes.

        Unreadable heads are dropped (their notes are read again from the vault).
        """
        with self._lock, _faults():
            rows = self._conn.execute("SELECT path, mtime_ns, size, hash, head FROM notes").fetchall()
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
        with self._lock, _faults():
            row = self._conn.execute(
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
        with self._lock, _faults():
            if paths is None:
                rows = self._conn.execute("SELECT path, counts FROM records").fetchall()
            else:
                rows = _rows_for(self._conn, "SELECT path, counts FROM records", "path", list(paths))
        out: dict[str, tuple[dict[str, int], ...]] = {}
        for path, blob in rows:
            if blob is None:
                continue
            try:
                counts = msgpack.unpackb(blob, raw=False, use_list=True)
            except Exception:  # noqa: BLE001 - recomputed from the shard text instead
                continue
            if isinstance(counts, list) and all(isinstance(c, dict) for c in counts):
                out[path] = tuple(counts)
        return out

    # -- the lexical segment -----------------------------------------------------------------
    def save_segment(
        self,
        notes: list[tuple[str, str]],
        note_ptr: np.ndarray,
        keys: list[str],
        vocab: list[str],
        arrays: dict[str, np.ndarray],
    ) -> None:
        """Save the BM25 index as one segment file: it lets the next open skip rebuilding postings.

        Args:
            notes: (path, content hash) of each note the segment covers, in document order.
            note_ptr: Documents of note i are `note_ptr[i]:note_ptr[i+1]`.
            keys: Document keys (shard node_ids).
            vocab: Terms.
            arrays: `BM25Index.export` arrays.
        """
        if self.memory:
            return
        self._refuse()
        with self._lock, _faults():
            old = self._conn.execute("SELECT value FROM meta WHERE key='segment'").fetchone()
            gen = _generation(old[0]) + 1 if old else 1
            name = f"bm25-{gen}.seg"
            _write_arrays(
                self.directory / name,
                dict(arrays, note_ptr=np.asarray(note_ptr, dtype=np.int64)),
                {
                    "note_path": [p for p, _h in notes],
                    "note_hash": [h for _p, h in notes],
                    "keys": keys,
                    "vocab": vocab,
                },
            )
            with _transaction(self._conn):
                self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('segment', ?)", (name,))
                if old:
                    self._conn.execute("DELETE FROM meta WHERE key=?", (f"checked:{old[0]}",))
            if old and old[0] != name:
                (self.directory / old[0]).unlink(missing_ok=True)

    def load_segment(self) -> tuple[dict[str, np.ndarray], dict[str, list[str]]] | None:
        """(arrays, strings) of the saved segment, or None when there is none or it does not check out."""
        if self.memory:
            return None
        with self._lock, _faults():
            row = self._conn.execute("SELECT value FROM meta WHERE key='segment'").fetchone()
        if row is None:
            return None
        stamp = self._file_stamp(row[0])
        with self._lock, _faults():
            checked = stamp is not None and self._checked(row[0]) == stamp
        try:
            arrays, strings = _read_arrays(self.directory / row[0], verify=not checked)
            _check_segment(arrays, strings)
        except (OSError, ValueError, KeyError) as exc:
            self.messages.append(
                f"the saved lexical segment is unusable ({one_line(exc, 80)}): rebuilding it"
            )
            return None
        if not checked and stamp is not None:
            with self._lock:
                self._mark_checked(row[0], stamp)
        return arrays, strings

    def skipped(self) -> dict[str, str]:
        """Path -> reason of files left out."""
        with self._lock, _faults():
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

        Raises:
            StoreError: the batch was not written (nothing of it is; the previous state stays).
        """
        self._refuse()
        rows = [
            (
                rec.path,
                rec.state.mtime_ns,
                rec.state.size,
                rec.state.hash,
                encode_head(rec.note, rec.shards),
                encode_record(rec),
                msgpack.packb([dict(c) for c in rec.counts], use_bin_type=True)
                if rec.counts is not None
                else None,
            )
            for rec in notes
        ]
        with self._lock, _faults(), _transaction(self._conn):
            for path in removed:
                self._conn.execute("DELETE FROM notes WHERE path=?", (path,))
                self._conn.execute("DELETE FROM records WHERE path=?", (path,))
                self._conn.execute("DELETE FROM skipped WHERE path=?", (path,))
            for row in rows:
                self._conn.execute("DELETE FROM skipped WHERE path=?", (row[0],))
                self._conn.execute("INSERT OR REPLACE INTO notes VALUES (?, ?, ?, ?, ?)", row[:5])
                self._conn.execute("INSERT OR REPLACE INTO records VALUES (?, ?, ?)", (row[0], *row[5:]))
            for path, reason, mtime, size in skipped:
                self._conn.execute("DELETE FROM notes WHERE path=?", (path,))
                self._conn.execute("DELETE FROM records WHERE path=?", (path,))
                self._conn.execute(
                    "INSERT OR REPLACE INTO skipped VALUES (?, ?, ?, ?)", (path, reason, mtime, size)
                )
            for path, mtime, size in touched:
                self._conn.execute("UPDATE notes SET mtime_ns=?, size=? WHERE path=?", (mtime, size, path))

    # -- vectors ---------------------------------------------------------------------------
    def _vector_file(self, model: str) -> tuple[str, int, int] | None:
        row = self._conn.execute("SELECT file, dim, rows FROM vec_files WHERE model=?", (model,)).fetchone()
        return (row[0], int(row[1]), int(row[2])) if row else None

    def _map(self, file: str, need: int) -> memoryview:
        """A read-only map of `file` covering at least `need` bytes."""
        if self.memory:
            return memoryview(self._mem_vectors[file].data).cast("B")
        cached = self._maps.get(file)
        if cached is None or cached[2] < need:
            if not (self.directory / file).is_file():
                raise StoreError("damaged", f"vector file {file} is missing")
            with open(self.directory / file, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < need:
                    raise StoreError("damaged", f"vector file {file} is shorter than its catalogue says")
                m = _map_populated(fh.fileno(), size) if size else None
            self._maps[file] = (file, m, size)
            cached = self._maps[file]
        m = cached[1]
        return memoryview(m) if m is not None else memoryview(b"")

    def get_matrix(self, model: str, hashes: list[str]) -> tuple[list[str], np.ndarray]:
        """(hashes found, in the order asked, and their vectors as the rows of one float32 matrix):
        `get_vectors` without a dict per row.

        Rows are checked against their CRC, except in a vector file this store has checked whole
        before and that has not changed since (`_checked`): an open of a large index reads every
        row, and checking 160k rows took a quarter of a second at 50k notes.
        """
        with self._lock, _faults():
            vf = self._vector_file(model)
            if vf is None or not hashes:
                return [], np.zeros((0, 0), dtype=np.float32)
            file, dim, _n = vf
            stamp = self._file_stamp(file)
            if len(hashes) > 2000 and stamp is not None and self._checked(file) == stamp:
                where = dict(self._conn.execute("SELECT hash, row FROM vec_rows WHERE model=?", (model,)))
                found = [h for h in hashes if h in where]
                if not found:
                    return [], np.zeros((0, 0), dtype=np.float32)
                picked = np.fromiter((where[h] for h in found), dtype=np.int64, count=len(found))
                if picked.min() >= 0:
                    top = int(picked.max()) + 1
                    buf = self._map(file, top * dim * 4)
                    whole = np.frombuffer(buf, dtype="<f4", count=top * dim).reshape(top, dim)
                    return found, whole[picked].astype(np.float32, copy=False)
        found = []
        mat = None
        with self._lock:
            everything = len(hashes) > 2000
            rows, vf = self._lookup(model, hashes, everything=everything)
            if rows and vf is not None:
                file, dim, _n = vf
                top = max(r for _h, r, _c in rows) + 1
                buf = self._map(file, top * dim * 4)
                width = dim * 4
                good: set[str] = set()
                bad = []
                for h, row, crc in rows:
                    if row >= 0 and zlib.crc32(buf[row * width : (row + 1) * width]) == crc:
                        good.add(h)
                    else:
                        bad.append(h)
                where = {h: row for h, row, _crc in rows}
                found = [h for h in hashes if h in good]
                whole = np.frombuffer(buf, dtype="<f4", count=top * dim).reshape(top, dim)
                mat = whole[np.fromiter((where[h] for h in found), dtype=np.int64, count=len(found))].astype(
                    np.float32, copy=False
                )
                if bad:
                    self._drop_rows(model, bad)
                elif everything and stamp is not None:
                    self._mark_checked(file, stamp)  # every catalogued row of the file checked out
        return found, mat if mat is not None and len(found) else np.zeros((0, 0), dtype=np.float32)

    # -- files checked whole: (size, mtime, ctime, inode) when their every row or array checked out --
    def _file_stamp(self, file: str) -> str | None:
        """The identity of a file in the index folder as it is now (None in memory or when missing)."""
        if self.memory:
            return None
        try:
            st = os.stat(self.directory / file)
        except OSError:
            return None
        return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}:{st.st_dev}"

    def _checked(self, file: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key=?", (f"checked:{file}",)).fetchone()
        return row[0] if row else None

    def _mark_checked(self, file: str, stamp: str) -> None:
        """Record that `file`, as `stamp` describes it, checked out whole (skipped when the store takes no writes)."""
        if self.frozen:
            return
        try:
            with _faults(), _transaction(self._conn):
                self._conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (f"checked:{file}", stamp))
        except (StoreError, sqlite3.Error):
            pass

    def _lookup(
        self, model: str, wanted: list[str], everything: bool = False
    ) -> tuple[list[tuple[str, int, int]], tuple[str, int, int] | None]:
        """Catalogue rows (hash, row, crc) of the wanted hashes (`everything`: all of the model's), and the model's (file, dim, rows)."""
        with self._lock, _faults():
            self._conn.execute("BEGIN")
            try:
                vf = self._vector_file(model)
                if vf is None or not wanted:
                    return [], vf
                if everything:
                    return self._conn.execute(
                        "SELECT hash, row, crc FROM vec_rows WHERE model=?", (model,)
                    ).fetchall(), vf
                return _rows_for(
                    self._conn, "SELECT hash, row, crc FROM vec_rows", "hash", wanted, "model=?", (model,)
                ), vf
            finally:
                self._conn.execute("COMMIT")

    def get_vectors(self, model: str, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """Cached vectors of these shard hashes for `model` (copies; rows failing their CRC are left out)."""
        with self._lock, _faults():
            rows, vf = self._lookup(model, list(hashes))
            if not rows or vf is None:
                return {}
            file, dim, _n = vf
            top = max(r for _h, r, _c in rows) + 1
            buf = self._map(file, top * dim * 4)
            out, bad = _check_rows(buf, dim, rows)
        if bad:
            self._drop_rows(model, bad)
        return out

    def _drop_rows(self, model: str, hashes: list[str]) -> None:
        try:
            self._refuse()
            with self._lock, _faults(), _transaction(self._conn):
                self._conn.executemany(
                    "DELETE FROM vec_rows WHERE model=? AND hash=?", [(model, h) for h in hashes]
                )
        except StoreError:
            pass
        self.messages.append(f"{len(hashes)} cached vectors failed their checksum and will be computed again")

    def put_vectors(self, model: str, vectors: dict[str, np.ndarray]) -> None:
        """Cache vectors (float32) by shard hash; hashes already cached are left as they are.

        Raises:
            StoreError: nothing of this call was committed.
        """
        if not vectors:
            return
        self._refuse()
        with self._lock, _faults(), _transaction(self._conn):
            vf = self._vector_file(model)
            dim = vf[1] if vf else int(np.asarray(next(iter(vectors.values()))).reshape(-1).shape[0])
            items = [(h, np.asarray(v, dtype="<f4").reshape(-1)) for h, v in vectors.items()]
            items = [(h, v) for h, v in items if v.shape[0] == dim]
            have = {
                h
                for (h,) in _rows_for(
                    self._conn,
                    "SELECT hash FROM vec_rows",
                    "hash",
                    [h for h, _v in items],
                    "model=?",
                    (model,),
                )
            }
            items = [(h, v) for h, v in items if h not in have]
            if not items:
                return
            file = vf[0] if vf else _vector_file_name(model, 1)
            start = vf[2] if vf else 0
            block = np.ascontiguousarray(np.stack([v for _h, v in items]), dtype="<f4")
            self._write_rows(file, start, block)
            crcs = [zlib.crc32(row.tobytes()) for row in block]
            self._conn.executemany(
                "INSERT OR REPLACE INTO vec_rows VALUES (?, ?, ?, ?)",
                [(model, h, start + i, crcs[i]) for i, (h, _v) in enumerate(items)],
            )
            self._conn.execute(
                "INSERT OR REPLACE INTO vec_files VALUES (?, ?, ?, ?)", (model, file, dim, start + len(items))
            )

    def _write_rows(self, file: str, start: int, block: np.ndarray) -> None:
        """Write rows at row `start` of `file` and flush them to disk (before their catalogue commit)."""
        if self.memory:
            old = self._mem_vectors.get(file, np.zeros((0, block.shape[1]), dtype="<f4"))
            self._mem_vectors[file] = np.concatenate([old[:start], block])
            return
        path = self.directory / file
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            data = block.tobytes()
            offset = start * block.shape[1] * 4
            view = memoryview(data)
            while view:
                n = os.pwrite(fd, view, offset)
                view, offset = view[n:], offset + n
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def vector_count(self, model: str) -> int:
        """Vectors cached for `model`."""
        with self._lock, _faults():
            return self._conn.execute("SELECT COUNT(*) FROM vec_rows WHERE model=?", (model,)).fetchone()[0]

    def vector_rows(self, model: str) -> int:
        """Rows in `model`'s vector file (cached vectors plus the space of dropped ones)."""
        with self._lock, _faults():
            vf = self._vector_file(model)
            return vf[2] if vf else 0

    def prune_vectors(self, model: str, keep: set[str]) -> int:
        """Drop cached vectors of `model` whose hash is not in `keep` and compact its file; returns how many.

        The kept rows are copied into a new file, which the catalogue switches to in one
        transaction; the old file is removed after the commit (or on the next open, after a crash).
        """
        if self.frozen:
            return 0
        with self._lock, _faults():
            vf = self._vector_file(model)
            if vf is None:
                return 0
            file, dim, n = vf
            rows = self._conn.execute(
                "SELECT hash, row, crc FROM vec_rows WHERE model=?", (model,)
            ).fetchall()
            kept = [r for r in rows if r[0] in keep]
            dropped = len(rows) - len(kept)
            if dropped == 0 and n == len(rows):
                return 0
            buf = self._map(file, (max((r[1] for r in kept), default=-1) + 1) * dim * 4)
            good, _bad = _check_rows(buf, dim, kept)
            order = sorted(good)
            gen = _generation(file) + 1
            new_file = _vector_file_name(model, gen)
            block = (
                np.stack([good[h] for h in order]).astype("<f4") if order else np.zeros((0, dim), dtype="<f4")
            )
            if self.memory:
                self._mem_vectors[new_file] = block
            else:
                (self.directory / new_file).unlink(missing_ok=True)
                if len(block):
                    self._write_rows(new_file, 0, block)
                else:
                    (self.directory / new_file).touch()
            crcs = [zlib.crc32(row.tobytes()) for row in block]
            with _transaction(self._conn):
                self._conn.execute("DELETE FROM vec_rows WHERE model=?", (model,))
                self._conn.executemany(
                    "INSERT INTO vec_rows VALUES (?, ?, ?, ?)",
                    [(model, h, i, crcs[i]) for i, h in enumerate(order)],
                )
                self._conn.execute(
                    "UPDATE vec_files SET file=?, rows=? WHERE model=?", (new_file, len(order), model)
                )
                self._conn.execute("DELETE FROM meta WHERE key=?", (f"checked:{file}",))
            self._maps.pop(file, None)
            if self.memory:
                self._mem_vectors.pop(file, None)
            else:
                (self.directory / file).unlink(missing_ok=True)
            return len(rows) - len(order)


def _rows_for(
    conn: sqlite3.Connection, select: str, column: str, keys: list[str], where: str = "", params: tuple = ()
) -> list[tuple]:
    """The rows of `select` (its first column is `column`; `where` with its `params` narrows it)
    whose `column` is one of `keys`.

    Many keys: one scan filtered here (cheaper than thousands of lookups); few: IN lists of 900,
    under SQLite's cap on the parameters of one statement.
    """
    if len(keys) > 2000:
        keep = set(keys)
        scan = f"{select} WHERE {where}" if where else select
        return [r for r in conn.execute(scan, params) if r[0] in keep]
    narrow = f"{where} AND " if where else ""
    rows: list[tuple] = []
    for i in range(0, len(keys), 900):
        chunk = keys[i : i + 900]
        rows.extend(
            conn.execute(
                f"{select} WHERE {narrow}{column} IN ({','.join('?' * len(chunk))})", (*params, *chunk)
            )
        )
    return rows


def _map_populated(fd: int, size: int) -> mmap.mmap:
    """A read-only map of the whole file, its pages mapped in at once where the system can.

    An open reads every row of the vector file; faulting its pages in one by one cost about as much
    as copying them (`MAP_POPULATE` maps them in one call; the file is in the page cache after a
    first read).
    """
    populate = getattr(mmap, "MAP_POPULATE", 0)
    if populate:
        try:
            return mmap.mmap(fd, size, flags=mmap.MAP_SHARED | populate, prot=mmap.PROT_READ)
        except (OSError, ValueError):
            pass
    return mmap.mmap(fd, size, access=mmap.ACCESS_READ)


class _Rebuild(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


class _transaction:  # noqa: N801 - read as a function: `with _transaction(conn):`
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.conn.execute("COMMIT")
        else:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass


class _faults:  # noqa: N801 - read as a function: `with _faults():`
    """Turn SQLite and OS errors that mean a store fault into `StoreError`."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is None or isinstance(exc, StoreError):
            return
        kind = classify(exc)
        if kind is None:
            return
        raise StoreError(kind, str(exc)) from exc


def _refine(kind: str, directory: Path) -> str:
    """A failed open reported as read-only may be a full disk (no room for the journal)."""
    if kind != "readonly":
        return kind
    try:
        if os.access(directory, os.W_OK):
            st = os.statvfs(directory)
            if st.f_bavail * st.f_frsize < 256 * 1024:
                return "full"
    except OSError:
        pass
    return kind


def _check_integrity(conn: sqlite3.Connection) -> None:
    """Raise sqlite3.DatabaseError when SQLite's own check finds damage."""
    rows = conn.execute("PRAGMA quick_check").fetchall()
    if rows != [("ok",)]:
        raise sqlite3.DatabaseError("database disk image is malformed (integrity check failed)")


def _current_layout(conn: sqlite3.Connection) -> bool:
    """True when the tables are this version's (a fresh file has none yet, which is fine)."""
    if not _table_exists(conn, "notes"):
        return True
    columns = {r[1] for r in conn.execute("PRAGMA table_info(notes)")}
    records = {r[1] for r in conn.execute("PRAGMA table_info(records)")}
    return (
        "head" in columns
        and {"data", "counts"} <= records
        and _table_exists(conn, "vec_files")
        and not _table_exists(conn, "vectors")
    )


def _upgradable_layout(conn: sqlite3.Connection) -> bool:
    """True for schema 8's tables: whole records in `notes`, no heads."""
    columns = {r[1] for r in conn.execute("PRAGMA table_info(notes)")}
    return (
        {"data", "counts"} <= columns
        and "head" not in columns
        and _table_exists(conn, "vec_files")
        and not _table_exists(conn, "records")
    )


def _table_exists(conn: sqlite3.Connection, name: str) -> bool:
    return (
        conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone()
        is not None
    )


def _vector_file_name(model: str, gen: int) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model)[:60] or "model"
    return f"vectors-{slug}-{gen}.f32"


def _generation(file: str) -> int:
    m = re.search(r"-(\d+)\.(f32|seg)$", file)
    return int(m.group(1)) if m else 0


def _check_rows(
    buf: memoryview, dim: int, rows: list[tuple[str, int, int]]
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Rows of the map as float32 copies, and the hashes whose bytes fail their CRC."""
    width = dim * 4
    out: dict[str, np.ndarray] = {}
    bad: list[str] = []
    size = len(buf)
    for h, row, crc in rows:
        lo = row * width
        if row < 0 or lo + width > size:
            bad.append(h)
            continue
        raw = buf[lo : lo + width]
        if zlib.crc32(raw) != crc:
            bad.append(h)
            continue
        out[h] = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    return out, bad


def _read_rows(path: Path, dim: int, rows: list[tuple[str, int, int]]) -> dict[str, np.ndarray]:
    with open(path, "rb") as fh:
        data = fh.read()
    good, _bad = _check_rows(memoryview(data), dim, rows)
    return good


# -- array files: a JSON header and raw little-endian arrays ----------------------------------
_MAGIC = b"EXPLARR1"
_DTYPES = {"<i4", "<i8", "<f8", "<f4", "|u1"}


def _write_arrays(path: Path, arrays: dict[str, np.ndarray], strings: dict[str, list[str]]) -> None:
    """Write arrays and string lists to `path` (via a temporary file, flushed, then renamed)."""
    import json

    parts: list[tuple[str, np.ndarray]] = []
    for name, arr in arrays.items():
        parts.append(
            (name, np.ascontiguousarray(arr).astype(np.asarray(arr).dtype.newbyteorder("<"), copy=False))
        )
    for name, items in strings.items():
        joined = "".join(items)
        offsets = np.zeros(len(items) + 1, dtype="<i8")
        np.cumsum([len(x) for x in items], out=offsets[1:])
        parts.append((f"{name}.text", np.frombuffer(joined.encode("utf-8"), dtype="|u1")))
        parts.append((f"{name}.off", offsets))
    header: dict[str, Any] = {"arrays": {}, "strings": sorted(strings)}
    offset = 0
    for name, arr in parts:
        header["arrays"][name] = [
            arr.dtype.str,
            list(arr.shape),
            offset,
            zlib.crc32(arr.data.cast("B")),
        ]
        offset += (arr.nbytes + 7) // 8 * 8
    head = json.dumps(header).encode()
    start = (len(_MAGIC) + 8 + len(head) + 7) // 8 * 8
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(_MAGIC + len(head).to_bytes(8, "little") + head)
        fh.write(b"\0" * (start - fh.tell()))
        for _name, arr in parts:
            fh.write(arr.tobytes())
            fh.write(b"\0" * ((arr.nbytes + 7) // 8 * 8 - arr.nbytes))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _read_arrays(path: Path, verify: bool = True) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """Arrays of a file written by `_write_arrays`, as read-only views of a memory map.

    `verify` False skips the arrays' checksums (a file checked whole before and unchanged since);
    their descriptions and bounds are checked either way.
    """
    import json

    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size < len(_MAGIC) + 8:
            raise ValueError("file too short")
        m = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ)
    if m[: len(_MAGIC)] != _MAGIC:
        raise ValueError("not an array file")
    n = int.from_bytes(m[len(_MAGIC) : len(_MAGIC) + 8], "little")
    if n > size:
        raise ValueError("header runs past the end")
    header = json.loads(m[len(_MAGIC) + 8 : len(_MAGIC) + 8 + n].decode("utf-8"))
    start = (len(_MAGIC) + 8 + n + 7) // 8 * 8
    arrays: dict[str, np.ndarray] = {}
    for name, (dtype, shape, offset, crc) in header["arrays"].items():
        if dtype not in _DTYPES or not all(isinstance(x, int) and x >= 0 for x in [*shape, offset]):
            raise ValueError(f"array {name}: bad description")
        count = int(np.prod(shape)) if shape else 1
        nbytes = count * np.dtype(dtype).itemsize
        if start + offset + nbytes > size:
            raise ValueError(f"array {name} runs past the end")
        arr = np.frombuffer(m, dtype=dtype, count=count, offset=start + offset).reshape(shape)
        if verify and zlib.crc32(arr.data.cast("B")) != crc:
            raise ValueError(f"array {name} fails its checksum")
        arrays[name] = arr
    strings: dict[str, list[str]] = {}
    for name in header["strings"]:
        text = arrays.pop(f"{name}.text").tobytes().decode("utf-8")
        off = arrays.pop(f"{name}.off").tolist()
        if off and (off[0] != 0 or off[-1] != len(text)):
            raise ValueError(f"strings {name}: offsets do not match the text")
        strings[name] = [text[a:b] for a, b in itertools.pairwise(off)]
    return arrays, strings


def _check_segment(arrays: dict[str, np.ndarray], strings: dict[str, list[str]]) -> None:
    """Raise ValueError unless the segment's arrays are consistent (sizes, monotone pointers, ids in range)."""
    d, v, n = len(strings["keys"]), len(strings["vocab"]), len(strings["note_path"])
    p = len(arrays["post_doc"])
    checks = [
        len(arrays["doc_len"]) == d,
        len(arrays["post_ptr"]) == v + 1,
        len(arrays["doc_ptr"]) == d + 1,
        len(arrays["note_ptr"]) == n + 1,
        len(strings["note_hash"]) == n,
        len(arrays["post_tf"]) == p == len(arrays["fwd_term"]) == len(arrays["fwd_tf"]),
    ]
    if not all(checks):
        raise ValueError("segment sizes disagree")
    for name, end in (("post_ptr", p), ("doc_ptr", p), ("note_ptr", d)):
        ptr = arrays[name]
        if ptr[0] != 0 or ptr[-1] != end or (np.diff(ptr) < 0).any():
            raise ValueError(f"segment {name} is not a pointer array")
    if p and (
        arrays["post_doc"].min() < 0
        or arrays["post_doc"].max() >= d
        or arrays["fwd_term"].min() < 0
        or arrays["fwd_term"].max() >= v
        or arrays["post_tf"].min() < 1
    ):
        raise ValueError("segment ids out of range")


# -- note records: msgpack of plain values ----------------------------------------------------
_EXT_DATE, _EXT_DATETIME, _EXT_SET, _EXT_TIME = 1, 2, 3, 4


def _encode_ext(obj: Any) -> Any:
    if isinstance(obj, _dt.datetime):
        return msgpack.ExtType(_EXT_DATETIME, obj.isoformat().encode())
    if isinstance(obj, _dt.date):
        return msgpack.ExtType(_EXT_DATE, obj.isoformat().encode())
    if isinstance(obj, _dt.time):
        return msgpack.ExtType(_EXT_TIME, obj.isoformat().encode())
    if isinstance(obj, (set, frozenset)):
        return msgpack.ExtType(
            _EXT_SET, msgpack.packb(sorted(obj, key=repr), default=_encode_ext, use_bin_type=True)
        )
    if isinstance(obj, tuple):
        return list(obj)
    return str(obj)


def _decode_ext(code: int, data: bytes) -> Any:
    if code == _EXT_DATETIME:
        return _dt.datetime.fromisoformat(data.decode())
    if code == _EXT_DATE:
        return _dt.date.fromisoformat(data.decode())
    if code == _EXT_TIME:
        return _dt.time.fromisoformat(data.decode())
    if code == _EXT_SET:
        return set(msgpack.unpackb(data, ext_hook=_decode_ext, raw=False, strict_map_key=False))
    raise ValueError(f"unknown record extension {code}")


def encode_record(rec: NoteRecord) -> bytes:
    """One note, its shards and their term counts as a msgpack document of plain values."""
    n = rec.note
    shards = []
    for s in rec.shards:
        same_text = n.text[s.start : s.end] == s.text
        shards.append(
            [
                s.node_id,
                s.ordinal,
                s.start,
                s.end,
                list(s.heading_path),
                None if same_text else s.text,
                s.search_text,
                s.hash,
                s.source_type,
            ]
        )
    doc = [
        _RECORD_VERSION,
        n.path,
        n.text,
        n.title,
        n.frontmatter,
        n.body_start,
        [[h.level, h.text, h.start, h.end] for h in n.headings],
        [[x.target, x.heading, x.block, x.alias, x.embed, x.start, x.end, x.markdown] for x in n.links],
        [[t.name, t.start, t.end] for t in n.tags],
        [[b.id, b.start, b.end] for b in n.blocks],
        n.source_type,
        n.metadata,
        list(n.warnings),
        shards,
        None,
    ]
    return msgpack.packb(doc, default=_encode_ext, use_bin_type=True)


def name_tokens(note: Note) -> tuple[frozenset[str], ...]:
    """The distinct non-empty token sets of a note's names (what the name retriever matches).

    A note opened from the store carries them already (stored with its head, same tokenizer).
    """
    stored = getattr(note, "name_tokens", None)
    if stored is not None:
        return stored
    return tuple(n for n in dict.fromkeys(frozenset(tokenize(x)) for x in note.names) if n)


def encode_head(note: Note, shards: Iterable[Shard]) -> bytes:
    """The small part of a note an open reads: everything but the text and its parts, and the shards without text."""
    names = name_tokens(note)
    doc = [
        _HEAD_VERSION,
        note.title,
        note.frontmatter,
        note.body_start,
        note.source_type,
        note.metadata,
        list(note.warnings),
        [sorted(n) for n in names],
        [[s.node_id, s.ordinal, s.start, s.end, list(s.heading_path), s.hash, s.source_type] for s in shards],
    ]
    return msgpack.packb(doc, default=_encode_ext, use_bin_type=True)


def decode_head(path: str, digest: str, data: bytes, loader: Loader) -> tuple[Note, tuple[Shard, ...]]:
    """A lazy note and its lazy shards from a head (`encode_head`); raises ValueError on anything malformed."""
    doc = msgpack.unpackb(data, ext_hook=_decode_ext, raw=False, strict_map_key=False, use_list=True)
    if not isinstance(doc, list) or len(doc) != 9 or doc[0] != _HEAD_VERSION:
        raise ValueError("not a note head of this version")
    _v, title, front, body_start, source_type, metadata, warnings, names, shards = doc
    if not (
        isinstance(title, str)
        and isinstance(front, dict)
        and isinstance(metadata, dict)
        and type(body_start) is int
        and isinstance(source_type, str)
        and isinstance(warnings, list)
        and isinstance(names, list)
    ):
        raise ValueError("malformed note head")
    pending = Pending(path, digest, loader)
    note = lazy_note(
        pending,
        title,
        front,
        body_start,
        source_type,
        metadata,
        tuple(warnings),
        tuple(frozenset(n) for n in names),
    )
    out = tuple(
        [
            lazy_shard(pending, node_id, ordinal, start, end, tuple(hpath), h, st)
            for node_id, ordinal, start, end, hpath, h, st in shards
        ]
    )
    for sh in out:
        if not (
            type(sh.start) is int and type(sh.end) is int and type(sh.node_id) is str and type(sh.hash) is str
        ):
            raise ValueError("malformed shard head")
    pending.shards = out
    return note, out


def _new(cls: type, values: tuple) -> Any:
    obj: Any = object.__new__(cls)
    obj.__setstate__(values)  # the fast field-order setter of explorer.vault.model
    return obj


def decode_record(data: bytes) -> tuple[Note, tuple[Shard, ...], tuple[dict[str, int], ...] | None]:
    """The inverse of `encode_record`; raises ValueError (or a msgpack error) on anything malformed."""
    doc = msgpack.unpackb(data, ext_hook=_decode_ext, raw=False, strict_map_key=False, use_list=True)
    if not isinstance(doc, list) or len(doc) != 15 or doc[0] != _RECORD_VERSION:
        raise ValueError("not a note record of this version")
    (
        _v,
        path,
        text,
        title,
        front,
        body_start,
        heads,
        links,
        tags,
        blocks,
        source_type,
        metadata,
        warnings,
        shards,
        counts,
    ) = doc
    if (
        not isinstance(text, str)
        or not isinstance(path, str)
        or not isinstance(front, dict)
        or not isinstance(metadata, dict)
    ):
        raise ValueError("malformed note record")
    note = _new(
        Note,
        (
            path,
            text,
            title,
            front,
            body_start,
            tuple(_new(Heading, tuple(h)) for h in heads),
            tuple(_new(Link, tuple(x)) for x in links),
            tuple(_new(Tag, tuple(t)) for t in tags),
            tuple(_new(Block, tuple(b)) for b in blocks),
            source_type,
            metadata,
            tuple(warnings),
        ),
    )
    out = []
    for node_id, ordinal, start, end, hpath, stext, search_text, h, st in shards:
        if not (type(start) is int and type(end) is int and type(search_text) is str and type(h) is str):
            raise ValueError("malformed shard record")
        out.append(
            _new(
                Shard,
                (
                    node_id,
                    path,
                    ordinal,
                    start,
                    end,
                    tuple(hpath),
                    text[start:end] if stext is None else stext,
                    search_text,
                    h,
                    st,
                ),
            )
        )
    if counts is not None and (not isinstance(counts, list) or len(counts) != len(out)):
        raise ValueError("term counts do not match the shards")
    return note, tuple(out), tuple(counts) if counts is not None else None
