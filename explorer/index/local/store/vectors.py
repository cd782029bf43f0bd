"""The vector file: one float32 file per embedding model, appended to and read through `mmap`.

The catalogue tables `vec_files` (model -> file, dimension, rows written) and `vec_rows` (model,
shard content hash -> row, CRC-32 of the row) say what each file holds. Rows are written past the
committed row count and flushed before their catalogue rows are committed, so a process killed
at any moment leaves every committed vector readable. Every row read is checked against its CRC
(except in a file checked whole before and unchanged since); a damaged row is dropped and its
shard embedded again. Pruning writes a new generation file and switches the catalogue to it in
one transaction, holding the write lock from its read of the rows to the switch.

Several processes may share the folder: appends are serialised by SQLite's write lock (the row
count is read inside the write transaction), a file name is never used twice (a process may
still map a removed file of that name), and a reader whose file was switched away by another
process's prune between its catalogue read and its open follows the catalogue to the new file.
"""

from __future__ import annotations

import glob
import mmap
import os
import re
import sqlite3
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

import numpy as np

from explorer.index.local.store.db import (
    Folder,
    StoreError,
    faults,
    generation,
    rows_for,
    table_exists,
    transaction,
)


class VectorFiles:
    """The cached vectors of a store, by model and shard content hash.

    Args:
        folder: The store's folder (its connection, lock and whether it lives in memory).
    """

    def __init__(self, folder: Folder) -> None:
        self.folder = folder
        self._maps: dict[str, tuple[tuple[int, int], mmap.mmap | None, int]] = {}
        """File name -> ((inode, device), its map, the size mapped)."""
        self._mem_vectors: dict[str, np.ndarray] = {}

    @property
    def _conn(self) -> sqlite3.Connection:
        return self.folder.conn

    def clear(self, memory_too: bool = False) -> None:
        """Forget the maps of the files (the database was closed or replaced); `memory_too`: the in-memory files too."""
        self._maps.clear()
        if memory_too:
            self._mem_vectors.clear()

    def vector_file(self, model: str) -> tuple[str, int, int] | None:
        row = self._conn.execute("SELECT file, dim, rows FROM vec_files WHERE model=?", (model,)).fetchone()
        return (row[0], int(row[1]), int(row[2])) if row else None

    def _map(self, file: str, need: int) -> memoryview:
        """A read-only map of `file` covering at least `need` bytes.

        A map kept from an earlier read is used only while the name still leads to the same file
        (inode): another process may have removed the file and written a new one of that name.
        """
        if self.folder.memory:
            return memoryview(self._mem_vectors[file].data).cast("B")
        path = self.folder.directory / file
        cached = self._maps.get(file)
        if cached is not None and cached[2] >= need:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                raise _Gone(file) from None
            if (st.st_ino, st.st_dev) != cached[0]:
                cached = None
        if cached is None or cached[2] < need:
            try:
                fh = open(path, "rb")  # noqa: SIM115 - closed below
            except FileNotFoundError:
                raise _Gone(file) from None
            with fh:
                st = os.fstat(fh.fileno())
                size = st.st_size
                if size < need:
                    raise StoreError("damaged", f"vector file {file} is shorter than its catalogue says")
                m = _map_populated(fh.fileno(), size) if size else None
            cached = ((st.st_ino, st.st_dev), m, size)
            self._maps[file] = cached
        m = cached[1]
        return memoryview(m) if m is not None else memoryview(b"")

    def _moved(self, model: str, file: str) -> bool:
        """True when the catalogue names another file for `model` than `file` now (a prune in another
        process switched files between this reader's catalogue read and its open of the file)."""
        vf = self.vector_file(model)
        return vf is not None and vf[0] != file

    def get_matrix(self, model: str, hashes: list[str]) -> tuple[list[str], np.ndarray]:
        """(hashes found, in the order asked, and their vectors as the rows of one float32 matrix):
        `get_vectors` without a dict per row.

        A file switched by another process's prune while it was being read is read again from
        the file the catalogue names now.
        """
        return self._following(model, lambda: self._get_matrix(model, hashes))

    def _following(self, model: str, read: Callable[[], _T]) -> _T:
        """`read()`, again from the file the catalogue names now when another process's prune
        switched the one it was reading (a missing file the catalogue still names is damage)."""
        for attempt in range(_SWITCHES):
            try:
                return read()
            except _Gone as gone:
                with self.folder.lock, faults():
                    if attempt + 1 < _SWITCHES and self._moved(model, gone.file):
                        continue
                raise StoreError("damaged", f"vector file {gone.file} is missing") from None
        raise AssertionError("unreachable")

    def _get_matrix(self, model: str, hashes: list[str]) -> tuple[list[str], np.ndarray]:
        """`get_matrix` from the file the catalogue names now.

        Rows are checked against their CRC, except in a vector file this store has checked whole
        before and that has not changed since (`_checked`): an open of a large index reads every
        row, and checking 160k rows took a quarter of a second at 50k notes.
        """
        with self.folder.lock, faults():
            # One read transaction: the file and its rows from the same commit (another process's
            # prune may switch files between two statements, and these rows are not checked).
            self._conn.execute("BEGIN")
            try:
                vf = self.vector_file(model)
                if vf is None or not hashes:
                    return [], np.zeros((0, 0), dtype=np.float32)
                file, dim, _n = vf
                stamp = self.folder.file_stamp(file)
                fast = len(hashes) > 2000 and stamp is not None and self.folder.checked(file) == stamp
                where = (
                    dict(self._conn.execute("SELECT hash, row FROM vec_rows WHERE model=?", (model,)))
                    if fast
                    else {}
                )
            finally:
                self._conn.execute("COMMIT")
            if fast:
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
        with self.folder.lock:
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
                    self.folder.mark_checked(file, stamp)  # every catalogued row of the file checked out
        return found, mat if mat is not None and len(found) else np.zeros((0, 0), dtype=np.float32)

    def _lookup(
        self, model: str, wanted: list[str], everything: bool = False
    ) -> tuple[list[tuple[str, int, int]], tuple[str, int, int] | None]:
        """Catalogue rows (hash, row, crc) of the wanted hashes (`everything`: all of the model's), and the model's (file, dim, rows)."""
        with self.folder.lock, faults():
            self._conn.execute("BEGIN")
            try:
                vf = self.vector_file(model)
                if vf is None or not wanted:
                    return [], vf
                if everything:
                    return self._conn.execute(
                        "SELECT hash, row, crc FROM vec_rows WHERE model=?", (model,)
                    ).fetchall(), vf
                return rows_for(
                    self._conn, "SELECT hash, row, crc FROM vec_rows", "hash", wanted, "model=?", (model,)
                ), vf
            finally:
                self._conn.execute("COMMIT")

    def get_vectors(self, model: str, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """Cached vectors of these shard hashes for `model` (copies; rows failing their CRC are left out)."""
        wanted = list(hashes)
        return self._following(model, lambda: self._get_vectors(model, wanted))

    def _get_vectors(self, model: str, hashes: list[str]) -> dict[str, np.ndarray]:
        with self.folder.lock, faults():
            rows, vf = self._lookup(model, hashes)
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
            self.folder.refuse()
            with self.folder.lock, faults(), transaction(self._conn):
                self._conn.executemany(
                    "DELETE FROM vec_rows WHERE model=? AND hash=?", [(model, h) for h in hashes]
                )
        except StoreError:
            pass
        self.folder.messages.append(
            f"{len(hashes)} cached vectors failed their checksum and will be computed again"
        )

    def put_vectors(self, model: str, vectors: dict[str, np.ndarray]) -> None:
        """Cache vectors (float32) by shard hash; hashes already cached are left as they are.

        Raises:
            StoreError: nothing of this call was committed.
        """
        if not vectors:
            return
        self.folder.refuse()
        with self.folder.lock, faults(), transaction(self._conn):
            vf = self.vector_file(model)
            dim = vf[1] if vf else int(np.asarray(next(iter(vectors.values()))).reshape(-1).shape[0])
            items = [(h, np.asarray(v, dtype="<f4").reshape(-1)) for h, v in vectors.items()]
            items = [(h, v) for h, v in items if v.shape[0] == dim]
            have = {
                h
                for (h,) in rows_for(
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
            file = vf[0] if vf else self._fresh_name(model, 1)
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
        if self.folder.memory:
            old = self._mem_vectors.get(file, np.zeros((0, block.shape[1]), dtype="<f4"))
            self._mem_vectors[file] = np.concatenate([old[:start], block])
            return
        path = self.folder.directory / file
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
        with self.folder.lock, faults():
            return self._conn.execute("SELECT COUNT(*) FROM vec_rows WHERE model=?", (model,)).fetchone()[0]

    def vector_rows(self, model: str) -> int:
        """Rows in `model`'s vector file (cached vectors plus the space of dropped ones)."""
        with self.folder.lock, faults():
            vf = self.vector_file(model)
            return vf[2] if vf else 0

    def prune_vectors(self, model: str, keep: set[str]) -> int:
        """Drop cached vectors of `model` whose hash is not in `keep` and compact its file; returns how many.

        The kept rows are copied into a new file, which the catalogue switches to in one
        transaction; the old file is removed after the commit (or on the next open, after a crash).
        """
        if self.folder.frozen:
            return 0
        # One write transaction from the read of the rows to the switch: another process's
        # vectors committed meanwhile would be dropped by the switch, and two prunes at once
        # would both write the same next generation.
        with self.folder.lock, faults(), transaction(self._conn):
            vf = self.vector_file(model)
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
            try:
                buf = self._map(file, (max((r[1] for r in kept), default=-1) + 1) * dim * 4)
            except _Gone:
                raise StoreError("damaged", f"vector file {file} is missing") from None
            good, _bad = _check_rows(buf, dim, kept)
            order = sorted(good)
            new_file = self._fresh_name(model, generation(file) + 1)
            block = (
                np.stack([good[h] for h in order]).astype("<f4") if order else np.zeros((0, dim), dtype="<f4")
            )
            if self.folder.memory:
                self._mem_vectors[new_file] = block
            elif len(block):
                self._write_rows(new_file, 0, block)
            else:
                (self.folder.directory / new_file).touch()
            crcs = [zlib.crc32(row.tobytes()) for row in block]
            self._conn.execute("DELETE FROM vec_rows WHERE model=?", (model,))
            self._conn.executemany(
                "INSERT INTO vec_rows VALUES (?, ?, ?, ?)",
                [(model, h, i, crcs[i]) for i, h in enumerate(order)],
            )
            self._conn.execute(
                "UPDATE vec_files SET file=?, rows=? WHERE model=?", (new_file, len(order), model)
            )
            self._conn.execute("DELETE FROM meta WHERE key=?", (f"checked:{file}",))
        # Committed: the old file is no one's any more (a reader that read the catalogue before
        # the switch finds it gone and reads the catalogue again).
        with self.folder.lock:
            self._maps.pop(file, None)
            if self.folder.memory:
                self._mem_vectors.pop(file, None)
            else:
                (self.folder.directory / file).unlink(missing_ok=True)
        return len(rows) - len(order)

    def _fresh_name(self, model: str, gen: int) -> str:
        """A vector file name for `model` of generation `gen` or later that no file in the folder has.

        A name is never used twice: a process still mapping a removed file of that name (or
        writing past its end) must not find its rows in another file.
        """
        if self.folder.memory:
            while _vector_file_name(model, gen) in self._mem_vectors:
                gen += 1
            return _vector_file_name(model, gen)
        prefix = _vector_file_name(model, 0)[: -len("0.f32")]
        for p in self.folder.directory.glob(f"{glob.escape(prefix)}*.f32"):
            if p.name.startswith(prefix) and p.name[len(prefix) : -4].isdigit():
                gen = max(gen, generation(p.name) + 1)
        return _vector_file_name(model, gen)

    def salvage(self) -> dict[str, dict[str, np.ndarray]]:
        """Vectors readable from the current database: this format's files, or an older format's table."""
        out: dict[str, dict[str, np.ndarray]] = {}
        if not self.folder.path.exists():
            return out
        try:
            old = sqlite3.connect(f"file:{self.folder.path}?mode=ro", uri=True)
        except sqlite3.Error:
            return out
        try:
            if table_exists(old, "vec_files"):
                for model, file, dim in old.execute("SELECT model, file, dim FROM vec_files").fetchall():
                    try:
                        rows = old.execute(
                            "SELECT hash, row, crc FROM vec_rows WHERE model=?", (model,)
                        ).fetchall()
                        out[model] = _read_rows(self.folder.directory / file, int(dim), rows)
                    except (sqlite3.Error, OSError, ValueError):
                        continue
            elif table_exists(old, "vectors"):
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


#: Times a read follows the catalogue to another vector file (each switch is another process's prune).
_SWITCHES = 4
_T = TypeVar("_T")


class _Gone(Exception):
    """The vector file the catalogue named is not there (removed by a prune since, or lost)."""

    def __init__(self, file: str) -> None:
        super().__init__(file)
        self.file = file


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


def _vector_file_name(model: str, gen: int) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model)[:60] or "model"
    return f"vectors-{slug}-{gen}.f32"


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
