"""The record codec: a note, its shards and their term counts as msgpack documents of plain values.

Nothing decoded here can execute code: documents hold strings, numbers, lists and maps, and ISO
strings for dates, times and sets (msgpack extension types). A note is stored twice: its whole
record (text, parts, shards, term counts), read when its text is first needed, and a small head
(everything an open needs, shards without their text), decoded into lazy records
(`explorer.index.local.lazy`) when the index opens.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgpack

from explorer.index.backend import FileState
from explorer.index.local.lazy import Loader, Pending, lazy_note, lazy_shard
from explorer.text.tokenize import tokenize
from explorer.vault.model import Block, Heading, Link, Note, Shard, Tag

#: Version of one note head inside `notes.head`.
_HEAD_VERSION = 1

#: Version of one note record inside `notes.data`.
_RECORD_VERSION = 2


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


def encode_counts(counts: tuple[dict[str, int], ...] | None) -> bytes | None:
    """The BM25 term counts of a note's shards as stored beside its record (None when not known)."""
    return msgpack.packb([dict(c) for c in counts], use_bin_type=True) if counts is not None else None


def decode_counts(blob: bytes | None) -> tuple[dict[str, int], ...] | None:
    """The inverse of `encode_counts`; None when there are none or they do not decode as term counts."""
    if blob is None:
        return None
    try:
        counts = msgpack.unpackb(blob, raw=False, use_list=True)
    except Exception:  # noqa: BLE001 - recomputed from the shard text instead
        return None
    if isinstance(counts, list) and all(isinstance(c, dict) for c in counts):
        return tuple(counts)
    return None
