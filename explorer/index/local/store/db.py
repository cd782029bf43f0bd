"""What the parts of a store share: its folder, its SQLite connection and lock, and the store faults.

A store fault is an error met on the index folder that means it is damaged, full or read-only;
`classify` names it, `faults` turns it into `StoreError`, `describe` says it in one line.
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any

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
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6


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


def busy(exc: BaseException) -> bool:
    """True for SQLite's "database is locked": another connection holds the database, nothing is wrong with it."""
    code = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF
    return isinstance(exc, sqlite3.OperationalError) and (
        code in (_SQLITE_BUSY, _SQLITE_LOCKED) or "database is locked" in str(exc).lower()
    )


def describe(kind: str, detail: str) -> str:
    """One line for a store fault."""
    if kind == "full":
        return f"disk full: the index could not be saved ({detail}); the saved index is the previous one, searches use the index in memory"
    if kind == "readonly":
        return f"the index folder is read-only ({detail})"
    return f"index damaged ({detail})"


def refine(kind: str, directory: Path) -> str:
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


class faults:  # noqa: N801 - read as a function: `with faults():`
    """Turn SQLite and OS errors that mean a store fault into `StoreError`."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None or isinstance(exc, StoreError):
            return
        kind = classify(exc)
        if kind is None:
            return
        raise StoreError(kind, str(exc)) from exc


class transaction:  # noqa: N801 - read as a function: `with transaction(conn):`
    """One write transaction (`BEGIN IMMEDIATE`), committed on success and rolled back on an error."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc_type is None:
            self.conn.execute("COMMIT")
        else:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass


def rows_for(
    conn: sqlite3.Connection,
    select: str,
    column: str,
    keys: list[str],
    where: str = "",
    params: tuple[Any, ...] = (),
) -> list[tuple[Any, ...]]:
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
    rows: list[tuple[Any, ...]] = []
    for i in range(0, len(keys), 900):
        chunk = keys[i : i + 900]
        rows.extend(
            conn.execute(
                f"{select} WHERE {narrow}{column} IN ({','.join('?' * len(chunk))})", (*params, *chunk)
            )
        )
    return rows


def table_exists(conn: sqlite3.Connection, name: str) -> bool:
    """True when the database has a table of that name."""
    return (
        conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone()
        is not None
    )


def check_integrity(conn: sqlite3.Connection) -> None:
    """Raise sqlite3.DatabaseError when SQLite's own check finds damage."""
    rows = conn.execute("PRAGMA quick_check").fetchall()
    if rows != [("ok",)]:
        raise sqlite3.DatabaseError("database disk image is malformed (integrity check failed)")


def generation(file: str) -> int:
    """The generation number in a vector or segment file's name (`vectors-m-3.f32` -> 3; 0 when none)."""
    m = re.search(r"-(\d+)\.(f32|seg)$", file)
    return int(m.group(1)) if m else 0


class Folder:
    """The index folder as the parts of a store see it: where it is, the database and its lock.

    Args:
        directory: The index folder (None: everything in memory).
        memory: Keep everything in memory.
        frozen: '' normally; 'full' or 'readonly' for a store opened as it is on disk, taking no writes.

    `conn` is set by the store once the database is open (and replaced when it is rebuilt); every
    part reads it from here, so all of them always use the current one.
    """

    conn: sqlite3.Connection

    def __init__(self, directory: Path | None, memory: bool = False, frozen: str = "") -> None:
        self.memory = memory or directory is None
        self.directory = Path(directory) if directory is not None else Path(":memory:")
        self.path = self.directory / "index.sqlite"
        self.messages: list[str] = []
        """One line per thing an open or a read had to repair, for the caller to show."""
        self.frozen = frozen
        """'' normally; 'full' or 'readonly' for a store opened as it is on disk, taking no writes."""
        self.lock = threading.RLock()

    def refuse(self) -> None:
        """Raise StoreError when the store takes no writes."""
        if self.frozen:
            raise StoreError(
                self.frozen,
                "the index folder takes no writes"
                if self.frozen == "readonly"
                else "no space left on device",
            )

    # -- files checked whole: (size, mtime, ctime, inode) when their every row or array checked out --
    def file_stamp(self, file: str) -> str | None:
        """The identity of a file in the index folder as it is now (None in memory or when missing)."""
        if self.memory:
            return None
        try:
            st = os.stat(self.directory / file)
        except OSError:
            return None
        return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}:{st.st_dev}"

    def checked(self, file: str) -> str | None:
        """The stamp `file` had when it last checked out whole, if it ever did."""
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (f"checked:{file}",)).fetchone()
        return row[0] if row else None

    def mark_checked(self, file: str, stamp: str) -> None:
        """Record that `file`, as `stamp` describes it, checked out whole (skipped when the store takes no writes)."""
        if self.frozen:
            return
        try:
            with faults(), transaction(self.conn):
                self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (f"checked:{file}", stamp))
        except (StoreError, sqlite3.Error):
            pass
