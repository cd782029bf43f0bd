"""The lexical segment: the BM25 postings saved as one file of arrays, so an open skips rebuilding them.

An array file is a JSON header (each array's dtype, shape, offset and CRC-32) followed by raw
little-endian arrays, read back as views of a memory map; strings are stored as one UTF-8 array
and an offset array. The catalogue names the current segment file (`meta` key `segment`); a file
checked whole once is not checked again while its stamp (size, times, inode) stays the same.
"""

from __future__ import annotations

import itertools
import mmap
import os
import threading
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from explorer.index.local.store.db import Folder, faults, generation, one_line, transaction

_MAGIC = b"EXPLARR1"
_DTYPES = {"<i4", "<i8", "<f8", "<f4", "|u1"}


def write_arrays(path: Path, arrays: dict[str, np.ndarray], strings: dict[str, list[str]]) -> None:
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
    # A name of this writer's own: two processes saving a segment at once must not write into one file.
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(_MAGIC + len(head).to_bytes(8, "little") + head)
        fh.write(b"\0" * (start - fh.tell()))
        for _name, arr in parts:
            fh.write(arr.tobytes())
            fh.write(b"\0" * ((arr.nbytes + 7) // 8 * 8 - arr.nbytes))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_arrays(path: Path, verify: bool = True) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """Arrays of a file written by `write_arrays`, as read-only views of a memory map.

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


def check_segment(arrays: dict[str, np.ndarray], strings: dict[str, list[str]]) -> None:
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


def save_segment(
    folder: Folder,
    notes: list[tuple[str, str]],
    note_ptr: np.ndarray,
    keys: list[str],
    vocab: list[str],
    arrays: dict[str, np.ndarray],
) -> None:
    """Save the BM25 index as one segment file: it lets the next open skip rebuilding postings.

    Args:
        folder: The store's folder.
        notes: (path, content hash) of each note the segment covers, in document order.
        note_ptr: Documents of note i are `note_ptr[i]:note_ptr[i+1]`.
        keys: Document keys (shard node_ids).
        vocab: Terms.
        arrays: `BM25Index.export` arrays.
    """
    if folder.memory:
        return
    folder.refuse()
    conn = folder.conn
    with folder.lock, faults():
        old = conn.execute("SELECT value FROM meta WHERE key='segment'").fetchone()
        gen = generation(old[0]) + 1 if old else 1
        # Past every segment file in the folder: another process may be saving one of the next generation.
        gen = max([gen, *(generation(p.name) + 1 for p in folder.directory.glob("bm25-*.seg"))])
        name = f"bm25-{gen}.seg"
        write_arrays(
            folder.directory / name,
            dict(arrays, note_ptr=np.asarray(note_ptr, dtype=np.int64)),
            {
                "note_path": [p for p, _h in notes],
                "note_hash": [h for _p, h in notes],
                "keys": keys,
                "vocab": vocab,
            },
        )
        with transaction(conn):
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('segment', ?)", (name,))
            if old:
                conn.execute("DELETE FROM meta WHERE key=?", (f"checked:{old[0]}",))
        if old and old[0] != name:
            (folder.directory / old[0]).unlink(missing_ok=True)


def load_segment(folder: Folder) -> tuple[dict[str, np.ndarray], dict[str, list[str]]] | None:
    """(arrays, strings) of the saved segment, or None when there is none or it does not check out."""
    if folder.memory:
        return None
    with folder.lock, faults():
        row = folder.conn.execute("SELECT value FROM meta WHERE key='segment'").fetchone()
    if row is None:
        return None
    stamp = folder.file_stamp(row[0])
    with folder.lock, faults():
        checked = stamp is not None and folder.checked(row[0]) == stamp
    try:
        arrays, strings = read_arrays(folder.directory / row[0], verify=not checked)
        check_segment(arrays, strings)
    except (OSError, ValueError, KeyError) as exc:
        folder.messages.append(f"the saved lexical segment is unusable ({one_line(exc, 80)}): rebuilding it")
        return None
    if not checked and stamp is not None:
        with folder.lock:
            folder.mark_checked(row[0], stamp)
    return arrays, strings
