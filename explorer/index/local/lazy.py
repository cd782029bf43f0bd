"""Notes and shards opened from the store's small per-note heads, their text decoded on first use.

Opening an index builds one record per note and per shard. Most of a stored note is its text and
its parts (headings, links, tags, blocks), and the shards' text: a query reads them only for the
notes it shows. A `LazyNote` is built from the note's head (path, title, frontmatter, source type,
metadata, warnings, the tokens of its names) and a `LazyShard` from its shard's head (node_id,
offsets, heading path, hash, source type); the rest is read from the store and decoded the first
time any of it is asked for (`Pending.load`), for the note and all its shards at once.

They are the same frozen records as `Note` and `Shard` to every reader: the lazy fields are
properties that fill the record's own slots once, after which they read like any other field.
The index makes a pending note whole before the store overwrites or drops its stored record, so
what a record loads is always the version it was opened from; a record that cannot be loaded
from the store (damaged) is parsed again from its file.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from explorer.vault.model import Note, Shard

#: Note fields read from the stored record on first use (the rest come from the head).
NOTE_LAZY = ("text", "headings", "links", "tags", "blocks")
#: Shard fields read from the stored record on first use.
SHARD_LAZY = ("text", "search_text")

#: (note, shards) -> None: fills the pending note and its shards (`Pending.fill`).
Loader = Callable[["Pending"], None]


class Pending:
    """What one lazily opened note still needs: the loader, and the records to fill."""

    __slots__ = ("hash", "loader", "lock", "note", "path", "shards")

    def __init__(self, path: str, digest: str, loader: Loader) -> None:
        self.path = path
        self.hash = digest
        self.loader: Loader | None = loader
        self.note: LazyNote | None = None
        self.shards: tuple[LazyShard, ...] = ()
        self.lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """True once the note and its shards are whole."""
        return self.loader is None

    def load(self) -> None:
        """Read and decode the stored record (once; later calls return at once)."""
        if self.loader is None:
            return
        with self.lock:
            loader = self.loader
            if loader is None:
                return
            loader(self)
            self.loader = None

    def supply(self, note: Note, shards: tuple[Shard, ...] | list[Shard]) -> None:
        """`load` with the record already read (many notes read in one pass): fills unless already loaded."""
        if self.loader is None:
            return
        with self.lock:
            if self.loader is None:
                return
            self.fill(note, shards)
            self.loader = None

    def fill(self, note: Note | None, shards: tuple[Shard, ...] | list[Shard]) -> None:
        """Set the lazy fields from a whole note and its shards (shards matched by node_id).

        With no note (its record and its file both unreadable now) the text is empty.
        """
        target = self.note
        if target is not None:
            for name in NOTE_LAZY:
                _NOTE_SLOTS[name].__set__(
                    target, getattr(note, name) if note is not None else "" if name == "text" else ()
                )
        by_id = {s.node_id: s for s in shards}
        for sh in self.shards:
            src = by_id.get(sh.node_id)
            for name in SHARD_LAZY:
                _SHARD_SLOTS[name].__set__(sh, getattr(src, name) if src is not None else "")


_NOTE_SLOTS = {name: Note.__dict__[name] for name in NOTE_LAZY}
_SHARD_SLOTS = {name: Shard.__dict__[name] for name in SHARD_LAZY}


def _lazy_field(slot: Any) -> property:
    def get(self: Any) -> Any:
        try:
            return slot.__get__(self, None)
        except AttributeError:
            self._pending.load()
            return slot.__get__(self, None)

    def put(self: Any, value: Any) -> None:
        slot.__set__(self, value)

    return property(get, put, doc=slot.__doc__)


class LazyNote(Note):
    """A `Note` whose text and parts are decoded on first use (see the module)."""

    __slots__ = ("_pending", "name_tokens")

    text = _lazy_field(_NOTE_SLOTS["text"])
    headings = _lazy_field(_NOTE_SLOTS["headings"])
    links = _lazy_field(_NOTE_SLOTS["links"])
    tags = _lazy_field(_NOTE_SLOTS["tags"])
    blocks = _lazy_field(_NOTE_SLOTS["blocks"])


class LazyShard(Shard):
    """A `Shard` whose text and search text are decoded on first use (see the module)."""

    __slots__ = ("_pending",)

    text = _lazy_field(_SHARD_SLOTS["text"])
    search_text = _lazy_field(_SHARD_SLOTS["search_text"])


# The slots' own setters: one call per field, no attribute lookup by name (an open builds 10^5 shards).
_N_PATH, _N_TITLE, _N_FRONT, _N_BODY, _N_TYPE, _N_META, _N_WARN = (
    Note.__dict__[f].__set__
    for f in ("path", "title", "frontmatter", "body_start", "source_type", "metadata", "warnings")
)
_S_ID, _S_PATH, _S_ORD, _S_START, _S_END, _S_HEADS, _S_HASH, _S_TYPE = (
    Shard.__dict__[f].__set__
    for f in ("node_id", "path", "ordinal", "start", "end", "heading_path", "hash", "source_type")
)
_LN_PENDING, _LN_NAMES = (LazyNote.__dict__[f].__set__ for f in ("_pending", "name_tokens"))
_LS_PENDING = LazyShard.__dict__["_pending"].__set__
_new = object.__new__


def lazy_note(
    pending: Pending,
    title: str,
    frontmatter: dict[str, Any],
    body_start: int,
    source_type: str,
    metadata: dict[str, Any],
    warnings: tuple[str, ...],
    name_tokens: tuple[frozenset[str], ...],
) -> LazyNote:
    """A pending note from its head (its lazy fields unset until `pending` loads)."""
    note = _new(LazyNote)
    _N_PATH(note, pending.path)
    _N_TITLE(note, title)
    _N_FRONT(note, frontmatter)
    _N_BODY(note, body_start)
    _N_TYPE(note, source_type)
    _N_META(note, metadata)
    _N_WARN(note, warnings)
    _LN_PENDING(note, pending)
    _LN_NAMES(note, name_tokens)
    pending.note = note
    return note


def lazy_shard(
    pending: Pending,
    node_id: str,
    ordinal: int,
    start: int,
    end: int,
    heading_path: tuple[str, ...],
    digest: str,
    source_type: str,
) -> LazyShard:
    """A pending shard from its head."""
    sh = _new(LazyShard)
    _S_ID(sh, node_id)
    _S_PATH(sh, pending.path)
    _S_ORD(sh, ordinal)
    _S_START(sh, start)
    _S_END(sh, end)
    _S_HEADS(sh, heading_path)
    _S_HASH(sh, digest)
    _S_TYPE(sh, source_type)
    _LS_PENDING(sh, pending)
    return sh


def pending_of(note: Any) -> Pending | None:
    """The pending load of a lazily opened note that is not whole yet, else None."""
    pending = getattr(note, "_pending", None) if type(note) is LazyNote else None
    return pending if pending is not None and not pending.loaded else None
