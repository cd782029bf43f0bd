"""Persistent index state: notes, shards and skipped files as SQLite rows; vectors in a memory-mapped float32 file.

Nothing read back is deserialised by code that can execute: note records are msgpack documents
of plain values (strings, numbers, lists, maps, and ISO dates for YAML dates), decoded into the
frozen records of `explorer.vault.model`; vectors are raw little-endian float32 rows. An open
reads only the heads (`load_heads`); a note's record is read when its text is first needed
(`explorer.index.local.lazy`).

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
is moved aside and rebuilt from the vault (a busy one is not damaged: a new database is created
in one write transaction, so processes opening a new folder together share it).

`embed.lock` (`owner`): the process embedding into the folder holds it (see `EmbedOwner`).

The parts, one module each: `catalogue` (the SQLite database: opening, upgrading and rebuilding
it, notes, heads, records and skipped files; `Store` joins the parts), `vectors` (the vector
files and their catalogue rows), `segment` (the BM25 postings as one array file), `owner` (the
embedding lock), `codec` (note records, heads and term counts as msgpack) and `db` (the folder,
connection and lock the parts share, and the store faults).
"""

from __future__ import annotations

from explorer.index.local.store.catalogue import PARSE_RULES, SCHEMA_VERSION, Store, user_cache_dir
from explorer.index.local.store.codec import (
    FileState,
    NoteRecord,
    decode_head,
    decode_record,
    encode_head,
    encode_record,
    name_tokens,
)
from explorer.index.local.store.db import StoreError, classify, describe, one_line

__all__ = [
    "PARSE_RULES",
    "SCHEMA_VERSION",
    "FileState",
    "NoteRecord",
    "Store",
    "StoreError",
    "classify",
    "decode_head",
    "decode_record",
    "describe",
    "encode_head",
    "encode_record",
    "name_tokens",
    "one_line",
    "user_cache_dir",
]
