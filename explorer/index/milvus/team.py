"""Team search: `TeamSnapshot`, a view of several vaults of one collection holding this vault's view, and how
another vault's rows become notes.

Another vault's notes and shards are named `vault:NAME/PATH` (`foreign_key`); `foreign_note`
rebuilds such a note from its rows (its text from its shards' texts at their offsets).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from functools import partial
from operator import methodcaller
from typing import Any

import numpy as np

from explorer.index.backend import (
    ALL_VAULTS,
    Hit,
    LexicalStats,
    Restriction,
    Scope,
    Snapshot,
    SnapshotCounts,
    Spread,
)
from explorer.index.milvus.engine import (
    BM25_PARAMS,
    COSINE_PARAMS,
    MAX_LIMIT,
    ROW_FIELDS,
    BackendError,
    Engine,
    decode_terms,
    engine_terms,
    quote,
    shard_pk,
)
from explorer.index.milvus.snapshot import MilvusSnapshot, allowed_expr
from explorer.index.milvus.stats import collection_scores
from explorer.text.tokenize import tokenize
from explorer.vault.links import LinkGraph
from explorer.vault.model import _TURN_PATH, Note, Shard, Tag, display_title, title_of
from explorer.vault.shard import shard_at_cursor

FOREIGN = "vault:"
"""Another vault's notes are known in a team search as `vault:NAME/PATH` (node_ids alike)."""


def foreign_key(vault: str, key: str) -> str:
    """How a path or node_id of another vault is named in a team search."""
    return f"{FOREIGN}{vault}/{key}"


def foreign_note(
    vault: str, path: str, rows: list[dict[str, Any]]
) -> tuple[Note, list[Shard], dict[str, Counter[str]]]:
    """Another vault's note from its rows: (the note, its shards in order, their tokens), named `vault:NAME/...`
    (`foreign_parts` with the tokens decoded)."""
    note, shards, words = foreign_parts(vault, path, rows)
    return note, shards, {nid: decode_terms(w) for nid, w in words.items()}


def foreign_parts(
    vault: str, path: str, rows: list[dict[str, Any]]
) -> tuple[Note, list[Shard], dict[str, str]]:
    """Another vault's note from its rows: (the note, its shards in order, their encoded words), named
    `vault:NAME/...`.

    The note's text is its shards' texts at their offsets (what no shard holds, such as
    frontmatter, is left out); its title is the one its own vault gives it (`title_of`: the frontmatter
    `title`, else the file name), its tags the rows'.
    """
    rows = sorted(rows, key=lambda r: (int(r["ordinal"]), int(r["start"])))
    key = foreign_key(vault, path)
    text = ""
    shards: list[Shard] = []
    tokens: dict[str, str] = {}
    for r in rows:
        start, piece = int(r["start"]), str(r["text"])
        if start >= len(text):
            text += "\n" * (start - len(text)) + piece
        elif start + len(piece) > len(text):
            text = text[:start] + piece
        nid = foreign_key(vault, str(r["node_id"]))
        shards.append(
            Shard(
                node_id=nid,
                path=key,
                ordinal=int(r["ordinal"]),
                start=start,
                end=int(r["end"]),
                heading_path=tuple(h for h in str(r["heading_path"]).split(" > ") if h),
                text=piece,
                search_text=piece,
                hash=str(r["content_hash"]),
                source_type=str(r["source_type"]) or "note",
            )
        )
        tokens[nid] = str(r.get("words") or "")
    first = shards[0]
    props = _props(rows[0].get("props"))
    note = Note(
        path=key,
        text=text,
        title=title_of(path, props),
        frontmatter=props,
        body_start=0,
        headings=(),
        links=(),
        tags=tuple(Tag(t, 0, 0) for t in rows[0].get("tags") or ()),
        blocks=(),
        source_type=first.source_type,
        metadata={
            "vault": vault,
            "mtime": int(rows[0].get("mtime") or 0),
            "day": int(rows[0].get("day") or 0),
        },
    )
    return note, shards, tokens


def _props(text: Any) -> dict[str, Any]:
    """A row's frontmatter JSON as a dict ({} when absent or not an object)."""
    if not isinstance(text, str) or not text:
        return {}
    try:
        found = json.loads(text)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


READ_ROWS = MAX_LIMIT
"""Rows one read of other vaults' notes asks for (notes past it are read by the next query)."""


def read_notes(
    engine: Engine, wanted: Iterable[tuple[str, str]]
) -> Iterator[tuple[str, str, list[dict[str, Any]]]]:
    """(vault, path, rows) of the notes `wanted` names, read from the text collection in as few queries as
    the engine's row limit allows: one expression naming every vault's paths (a search of 300k shards
    returns notes of 30 vaults; one query each cost 30 round trips)."""
    by_vault: dict[str, list[str]] = {}
    for vault, path in wanted:
        by_vault.setdefault(vault, []).append(path)
    if not by_vault:
        return
    expr = " or ".join(
        f"(vault == {quote(v)} and path in [{', '.join(quote(p) for p in sorted(paths))}])"
        for v, paths in sorted(by_vault.items())
    )
    rows = engine.text_call(
        "read",
        methodcaller("query", engine.text_collection, filter=expr, output_fields=ROW_FIELDS, limit=READ_ROWS),
    )
    notes: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        notes.setdefault((r["vault"], r["path"]), []).append(r)
    for (vault, path), parts in notes.items():
        yield vault, path, parts
    if len(rows) >= READ_ROWS:  # cut at the engine's limit: the notes it did not reach, asked again
        left = {(v, p) for v, paths in by_vault.items() for p in paths} - set(notes)
        if left and len(left) < sum(len(p) for p in by_vault.values()):
            yield from read_notes(engine, left)


READ_KEYS = 2_000
"""Shards one read of other vaults' rows by key names (a longer list is read in several queries)."""


def read_rows(engine: Engine, wanted: Iterable[tuple[str, str]]) -> list[dict[str, Any]]:
    """The text collection's rows of the shards `wanted` names ((vault, node_id) pairs), by primary key: a
    lookup, whatever the collection's size (a note's other shards are not read; `read_notes` reads notes whole)."""
    keys = sorted({shard_pk(vault, nid) for vault, nid in wanted})
    out: list[dict[str, Any]] = []
    for i in range(0, len(keys), READ_KEYS):
        part = keys[i : i + READ_KEYS]
        expr = f"pk in [{', '.join(quote(k) for k in part)}]"
        out.extend(
            dict(r)
            for r in engine.text_call(
                "read",
                methodcaller(
                    "query", engine.text_collection, filter=expr, output_fields=ROW_FIELDS, limit=len(part)
                ),
            )
        )
    return out


def read_both(
    engine: Engine, keys: set[tuple[str, str]], whole: set[tuple[str, str]]
) -> list[dict[str, Any]]:
    """The text collection's rows of the shards `keys` names ((vault, node_id), by primary key) and of every
    shard of the notes `whole` names ((vault, path)), in one query."""
    by_vault: dict[str, list[str]] = {}
    for vault, path in whole:
        by_vault.setdefault(vault, []).append(path)
    parts = [f"pk in [{', '.join(quote(k) for k in sorted({shard_pk(v, n) for v, n in keys}))}]"]
    parts.extend(
        f"(vault == {quote(v)} and path in [{', '.join(quote(p) for p in sorted(paths))}])"
        for v, paths in sorted(by_vault.items())
    )
    return [
        dict(r)
        for r in engine.text_call(
            "read",
            methodcaller(
                "query",
                engine.text_collection,
                filter=" or ".join(parts),
                output_fields=ROW_FIELDS,
                limit=READ_ROWS,
            ),
        )
    ]


class ForeignRows:
    """The text collection's rows read so far of other vaults' notes, by (vault, path): the version
    of a shard read first is kept, and a note read whole is not added to by key reads (one version
    of it per search). The caller builds its notes from `rows` of the keys each read returns."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        """(vault, path) -> node_id -> the row of each of its shards read so far."""
        self.whole: set[tuple[str, str]] = set()
        """Notes read whole."""

    def read_whole(self, engine: Engine, wanted: set[tuple[str, str]]) -> set[tuple[str, str]]:
        """Read whole, in one query, the notes of `wanted` not read whole yet; the notes found."""
        todo = wanted - self.whole
        if not todo:
            return set()
        for vault, path, parts in read_notes(engine, todo):
            kept = self.rows.setdefault((vault, path), {})
            for r in parts:
                kept.setdefault(str(r["node_id"]), r)
        self.whole |= todo
        return {key for key in todo if key in self.rows}

    def read(
        self, engine: Engine, keys: set[tuple[str, str]], whole: set[tuple[str, str]]
    ) -> set[tuple[str, str]]:
        """Read in one query the shards `keys` names ((vault, node_id)) and the notes of `whole` not read
        whole yet ((vault, path)): the notes touched (`read_keys` and `read_whole` in one round trip)."""
        whole = whole - self.whole
        if not whole:
            return self.read_keys(engine, keys)
        if not keys:
            return self.read_whole(engine, whole)
        rows = read_both(engine, keys, whole)
        touched: set[tuple[str, str]] = set()
        for r in rows:
            key = (str(r["vault"]), str(r["path"]))
            if key in self.whole:
                continue
            self.rows.setdefault(key, {}).setdefault(str(r["node_id"]), r)
            touched.add(key)
        if len(rows) < READ_ROWS:
            self.whole |= whole
        return touched

    def read_keys(self, engine: Engine, wanted: set[tuple[str, str]]) -> set[tuple[str, str]]:
        """Read by key, in one query, the shards `wanted` names ((vault, node_id)); the notes they
        belong to that were not read whole."""
        if not wanted:
            return set()
        touched: set[tuple[str, str]] = set()
        for r in read_rows(engine, wanted):
            key = (str(r["vault"]), str(r["path"]))
            if key in self.whole:
                continue
            self.rows.setdefault(key, {}).setdefault(str(r["node_id"]), r)
            touched.add(key)
        return touched


def named_files(
    words: AbstractSet[str], rows: Iterable[Mapping[str, Any]], whole: AbstractSet[tuple[str, str]]
) -> set[tuple[str, str]]:
    """(vault, path) of the rows' notes not read whole (`whole`) whose file names hold one of `words`: the
    notes a name ranking opens, read whole with the rows' shards (one read of the text collection per
    search; a note named only by its frontmatter title or aliases keeps the shards the rankings returned),
    and the conversation turns, whose shown title is made of their first words (`display_title`)."""
    out: set[tuple[str, str]] = set()
    if not words:
        return out
    for r in rows:
        key = (str(r["vault"]), str(r["path"]))
        if key in out or key in whole:
            continue
        stem = key[1].rsplit("/", 1)[-1].rsplit(".", 1)[0]
        if not words.isdisjoint(tokenize(stem)) or _TURN_PATH.search(key[1]):
            out.add(key)
    return out


def _split(key: str) -> tuple[str, str]:
    """(vault, path in it) of a `vault:NAME/PATH` name (the inverse of `foreign_key`)."""
    vault, _, path = key[len(FOREIGN) :].partition("/")
    return vault, path


class _Words(Mapping[str, Counter[str]]):
    """Other vaults' shards' tokens, decoded on first use: a team search reads whole notes, and only the
    shards among its candidates are scored (decoding every shard of ~600 notes cost ~0.4 s a pass at 12k)."""

    __slots__ = ("_coded", "_decoded")

    def __init__(self) -> None:
        self._coded: dict[str, str] = {}
        self._decoded: dict[str, Counter[str]] = {}

    def add(self, words: Mapping[str, str]) -> None:
        for nid, coded in words.items():
            if self._coded.get(nid) != coded:
                self._coded[nid] = coded
                self._decoded.pop(nid, None)

    def __getitem__(self, key: str) -> Counter[str]:
        found = self._decoded.get(key)
        if found is None:
            found = self._decoded[key] = decode_terms(self._coded[key])
        return found

    def __contains__(self, key: object) -> bool:
        return key in self._coded

    def __iter__(self) -> Iterator[str]:
        return iter(self._coded)

    def __len__(self) -> int:
        return len(self._coded)


class _Overlay(Mapping[str, Any]):
    """This vault's table with other vaults' entries (fetched during one team search) after it."""

    __slots__ = ("_base", "_more")

    def __init__(self, base: Mapping[str, Any], more: dict[str, Any]) -> None:
        self._base, self._more = base, more

    def __getitem__(self, key: str) -> Any:
        try:
            return self._base[key]
        except KeyError:
            return self._more[key]

    def get(self, key: str, default: Any = None) -> Any:
        value = self._base.get(key)
        return self._more.get(key, default) if value is None else value

    def __contains__(self, key: object) -> bool:
        return key in self._base or key in self._more

    def __iter__(self) -> Iterator[str]:
        yield from self._base
        yield from self._more

    def __len__(self) -> int:
        return len(self._base) + len(self._more)


class _TeamLexical:
    """This vault's BM25 statistics, with the tokens of other vaults' shards read during a team search.

    Other vaults' shards have no score here (`scores` leaves them out); the team view scores its
    candidates itself (`TeamSnapshot.scores_of`).
    """

    __slots__ = ("_base", "_more")

    def __init__(self, base: LexicalStats, more: Mapping[str, Counter[str]]) -> None:
        self._base, self._more = base, more

    def n_docs(self) -> int:
        return self._base.n_docs()

    def idf(self) -> Mapping[str, float]:
        return self._base.idf()

    def doc_freq(self, token: str) -> int:
        return self._base.doc_freq(token)

    def avgdl(self) -> float:
        return self._base.avgdl()

    def tokens(self, node_id: str) -> Collection[str]:
        more = self._more.get(node_id)
        return more.keys() if more is not None else self._base.tokens(node_id)

    def term_counts(self, node_id: str) -> Mapping[str, int]:
        more = self._more.get(node_id)
        return more if more is not None else self._base.term_counts(node_id)

    def scores(self, tokens: Sequence[str], node_ids: Sequence[str]) -> dict[str, float]:
        return self._base.scores(tokens, [n for n in node_ids if n not in self._more])

    def spread(self, triples: Sequence[tuple[str, str, float]]) -> Spread:
        return self._base.spread(triples)


class TeamSnapshot:
    """A view over several vaults of the collection (`vault:name`, `vault:*`), made of this vault's view.

    It holds this vault's `MilvusSnapshot` (`base`) and delegates to it what is this vault's alone:
    its notes and shards, their vectors, texts and dates, the name table, restrictions. Another vault's
    rows come from the collection: the shards a ranking returns are read by key (their texts, headings,
    source types, frontmatter and words; once per search) and join `notes` and `shards` as
    `vault:NAME/PATH`; in the same read, the notes the name ranking opens (their file names hold a
    word of the search) and conversation turns are read whole (every shard); another note is read
    whole only when something opens it (`note`; `shard_ids` gives the shards known, so a search asks
    the engine at most twice); later rows of another content hash are left out (one version per search).

    A search asks the engine for its rankings once (`expect_vectors`, then `_ask`): one request
    (`request`: a `hybrid_search` of one request per query) carrying every term's BM25 query and
    every dense query, the filters as engine expressions, the rows' vectors returned. Every ranking
    of the search is made from the rows it returned (`_Pool`): BM25 of every vault alike with the
    collection's statistics (`scores_of`), cosines with the rows' vectors (the first pass's are the
    engine's rankings: exact, the vector index is probed whole); the feedback vector and the second
    pass, known only after the first rankings, rank the same rows. `tag:` and
    `after:`/`before:`/`on:` (the note's `day`) are engine expressions on the other vaults' rows;
    `path:`, `file:`, `section:`, `-word` and `[property:value]` (on the note's frontmatter, stored
    as JSON) are checked on the rows returned. The view never answers from this vault's local index:
    other vaults' rows are the engine's alone.
    """

    FIELDS = ("node_id", "content_hash", "vault", "path")
    """What each row of a team request brings back (with `has_vector` and `vector`: the cosines are made here)."""

    def __init__(self, base: MilvusSnapshot, scope: Scope) -> None:
        self._base = base
        """This vault's view (it holds the version's pin and releases it)."""
        self._owner = base.index
        self.local = base.local
        self._scope = scope
        self.version = base.version
        self.neighbours = base.neighbours
        self._more_notes: dict[str, Note] = {}
        self._more_shards: dict[str, Shard] = {}
        self._more_paths: dict[str, list[str]] = {}
        self._more_tokens = _Words()
        self._fetched = ForeignRows()
        self._whole = self._fetched.whole
        self._asked: set[str] = set()
        self._hinted: set[tuple[str, str]] = set()
        """Notes of other vaults a `prefetch` named (read whole with the first such note something opens)."""
        """The BM25 words the rankings of this view asked the engine for."""
        """Notes of other vaults read whole (the others hold only the shards rankings returned)."""
        self.notes: Mapping[str, Note] = _Overlay(base.notes, self._more_notes)
        self.shards: Mapping[str, Shard] = _Overlay(base.shards, self._more_shards)
        self.lexical: LexicalStats = _TeamLexical(base.lexical, self._more_tokens)
        self._engine_expr = self._scope_expr()
        self._expected: tuple[np.ndarray, int, Restriction | None] | None = None
        self._pools: list[tuple[Restriction | None, _Pool]] = []
        """The rows of this search's engine requests, by the filter they were asked with."""

    # -- lifecycle ----------------------------------------------------------------------------
    def release(self) -> None:
        """Nothing to release: the base view holds the version's pin."""

    def __enter__(self) -> TeamSnapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def freshness(self) -> tuple[Hashable, str]:
        """The engine's kept answers' generation and period (`Answers.stamp`): a team view is the engine's."""
        return ("engine", *self._owner.answers.stamp()), ""

    def widen(self, scope: Scope) -> tuple[Snapshot, str, bool]:
        return self._base.widen(scope)

    # -- this vault's, delegated --------------------------------------------------------------
    def prefetch(self, paths: Iterable[str]) -> None:
        """This vault's notes as its view reads them. Other vaults' notes known only by some shards are
        read whole (every shard) when something reads their shards or opens them (`shard_ids`, `note`),
        all of those named here in one query: a search's results need only the shards it ranked, and
        reading a note by its path costs a scan of the text collection (seconds at 50k shards). A
        note whose shown title is made of its text (a conversation turn's first words) is read now."""
        own: list[str] = []
        shown: set[tuple[str, str]] = set()
        for p in paths:
            note = self._more_notes.get(p)
            if note is None:
                own.append(p)
                continue
            key = _split(p)
            if key not in self._whole:
                self._hinted.add(key)
                if display_title(note) != note.title:
                    shown.add(key)
        if shown:
            self._load(shown | self._hinted - self._whole)
        self._base.prefetch(own)

    def notes_changed(self, since: int) -> frozenset[str] | None:
        return self._base.notes_changed(since)

    def name_tokens(self, note: Note) -> tuple[frozenset[str], ...]:
        return self._base.name_tokens(note)

    def note(self, path: str) -> Note | None:
        self._whole_note(path)
        return self.notes.get(path)

    def _whole_note(self, path: str) -> None:
        """Read another vault's note whole when only some of its shards are known (its text, every shard).

        With it, in the same query, every other such note whose names (title, file name, aliases) hold
        one of the words the rankings asked for: the name ranking reads the shards and headings of the
        notes a query names, one after the other."""
        if path in self._more_notes:
            key = _split(path)
            if key not in self._whole:
                self._load({key} | self._named() | self._hinted)

    def _named(self) -> set[tuple[str, str]]:
        """Notes of other vaults known only by some shards whose names hold a word the rankings asked for."""
        words = self._asked
        if not words:
            return set()
        out = set()
        for name, note in self._more_notes.items():
            key = _split(name)
            if key not in self._whole and any(not words.isdisjoint(n) for n in self.name_tokens(note)):
                out.add(key)
        return out

    def has_vectors(self, context: bool = False) -> bool:
        return self._base.has_vectors(context)

    def vector(self, node_id: str) -> np.ndarray | None:
        return None if node_id in self._more_shards else self._base.vector(node_id)

    def restrict(self, node_ids: AbstractSet[str]) -> Restriction:
        return self._base.restrict(node_ids)

    # -- filters ------------------------------------------------------------------------------
    def _scope_expr(self) -> tuple[str, str]:
        """(this vault's part, the other vaults' part) of the engine filter ("" when not covered)."""
        sc, own = self._scope, self._owner.vault_name
        mine = f"vault == {quote(own)}" if sc.everything or own in sc.vaults else ""
        others = [v for v in sc.vaults if v not in (own, ALL_VAULTS)]
        if sc.everything:
            theirs = f"vault != {quote(own)}"
        elif others:
            theirs = f"vault in [{', '.join(quote(v) for v in others)}]"
        else:
            theirs = ""
        if theirs:
            theirs = " and ".join(
                [theirs, *(f"array_contains(tags, {quote(t)})" for t in sc.tags), *self._days_expr()]
            )
        return mine, theirs

    def _days_expr(self) -> list[str]:
        """after:/before:/on: on other vaults' rows: their notes' dates as day numbers."""
        if self._scope.days is None:
            return []
        lo, hi = self._scope.days
        return [f"day >= {max(lo, 1)}", f"day < {hi}"]

    def _filter(self, allowed: Restriction | None, extra: str = "") -> str:
        mine, theirs = self._engine_expr
        if mine and allowed is not None:
            mine = f"{mine} and {allowed_expr(self._owner.vault_name, allowed)}"
        scope = " or ".join(f"({p})" for p in (mine, theirs) if p)
        return f"({scope}) and {extra}" if extra else scope

    def _passes(self, shard: Shard, note: Note | None) -> bool:
        """Another vault's shard under the query's path:, file:, section:, -word and [property] filters."""
        sc = self._scope
        low = shard.path.partition("/")[2].lower()  # its path in its vault, as path: reads this vault's
        if sc.paths and not all(p.lower() in low for p in sc.paths):
            return False
        if sc.files and not all(f.lower() in low.rsplit("/", 1)[-1] for f in sc.files):
            return False
        if sc.sections and not all(
            any(x.lower() in h.lower() for h in shard.heading_path) for x in sc.sections
        ):
            return False
        if sc.note_passes is not None and not sc.note_passes(note.frontmatter if note is not None else {}):
            return False
        if sc.excluded and note is not None:
            for nid in self._more_paths.get(note.path, ()):
                toks = self._more_tokens.get(nid, Counter())
                if any(ex and all(t in toks for t in tokenize(ex)) for ex in sc.excluded):
                    return False
        return True

    # -- rows ---------------------------------------------------------------------------------
    def _read(self, rows: Iterable[dict[str, Any]]) -> list[str]:
        """The node_ids of the rows this view reads, this vault's and the others' alike, in the engine's
        order. The other vaults' shards among them not read yet are read first, in one query of the
        text collection: by key (their texts, headings, source types, frontmatter and words), and with
        them whole (every shard) the notes the name ranking will open (`named_files`); other notes are
        read whole only when shown or opened (`prefetch`, `note`, `shard_ids`). A `-word` filter, which
        reads every shard of a note, reads their notes whole at once."""
        own = self._owner.vault_name
        flat = [dict(r.get("entity", r)) for r in rows]
        theirs = [r for r in flat if r.get("vault") != own]
        if self._scope.excluded:
            self._load({(str(r["vault"]), str(r["path"])) for r in theirs} - self._whole)
        else:
            keys = {
                (str(r["vault"]), str(r["node_id"]))
                for r in theirs
                if foreign_key(str(r["vault"]), str(r["node_id"])) not in self._more_shards
                and (str(r["vault"]), str(r["path"])) not in self._whole
            }
            named = named_files(self._asked, theirs, self._whole)
            for key in self._fetched.read(self._owner.engine, keys, named):
                self._build(key)
        out = []
        for r in flat:
            if r.get("vault") == own:
                nid = str(r.get("node_id", ""))
                shard = self._base.shards.get(nid)
                if shard is None or shard.hash != r.get("content_hash"):
                    continue  # another version of the shard than this view's, or one it does not know
            else:
                nid = foreign_key(r["vault"], r["node_id"])
                shard = self._more_shards.get(nid)
                if shard is None or shard.hash != r.get("content_hash"):
                    continue
                if not self._passes(shard, self._more_notes.get(shard.path)):
                    continue
            out.append(nid)
        return out

    def _load(self, wanted: set[tuple[str, str]]) -> None:
        """Read the notes of other vaults named in `wanted` whole: one query of the text collection for
        every vault's notes (`read_notes`); shards already read keep the version read first."""
        for key in self._fetched.read_whole(self._owner.engine, wanted):
            self._build(key)

    def _build(self, key: tuple[str, str]) -> None:
        """The note of `key` from the rows read of it so far (all of them once read whole)."""
        note, shards, words = foreign_parts(key[0], key[1], list(self._fetched.rows[key].values()))
        for sh in shards:
            self._more_shards[sh.node_id] = sh
        self._more_tokens.add(words)
        self._more_paths[note.path] = [sh.node_id for sh in shards]
        self._more_notes[note.path] = note

    # -- reads --------------------------------------------------------------------------------
    def shard_ids(self, path: str) -> Sequence[str]:
        """A note's shards known to this search: another vault's note is read whole only with the rows of
        the search (the notes its file name names, `named_files`) or when opened (`note`); otherwise
        the shards the rankings returned (the search asks the engine at most twice)."""
        more = self._more_paths.get(path)
        return more if more is not None else self._base.shard_ids(path)

    def shard_at(self, path: str, cursor: int) -> Shard | None:
        shards = self.shards
        return shard_at_cursor((shards.get(n) for n in self.shard_ids(path)), cursor)

    def links(self) -> LinkGraph:
        return self.local.links_over(self.notes)

    def counts(self) -> SnapshotCounts:
        """The sizes of this view, other vaults' notes read so far included."""
        own = self.local.counts()
        with_vectors = len(self.local.shards) - own.pending
        return SnapshotCounts(
            notes=len(self.notes),
            shards=len(self.shards),
            pending=len(self.shards) - with_vectors,
            version=self.version,
        )

    def modified(self, path: str) -> int | None:
        other = self._more_notes.get(path)
        if other is None:
            return self._base.modified(path)
        seconds = int(other.metadata.get("mtime") or 0) if isinstance(other.metadata, dict) else 0
        return seconds * 1_000_000_000 if seconds > 0 else None  # its file time, as its vault recorded it

    def scores_of(
        self, tokens: Sequence[str], ids: list[str], counts: Mapping[str, Mapping[str, int]] | None = None
    ) -> dict[str, float]:
        """BM25 of every vault's candidates alike, with the collection's statistics (explorer.index.milvus.stats).

        Milvus Lite keeps BM25 statistics per segment (a word in 1 of 515 rows, alone in a
        3-row segment of another vault, scored 0.9 there against 6.3 for common words in a
        big one), so the engine's scores of two vaults do not compare; nor would this vault's
        statistics mean the same from another vault. Every candidate is scored with the
        collection's document count, average length and document frequencies, whichever vault asks.
        """
        more = self._more_tokens if counts is None else counts  # `counts`: every candidate's, made already
        return collection_scores(self._owner.team_stats, self.local.lexical, more, tokens, ids)

    # -- rankings: one engine request per search ----------------------------------------------
    def expect_vectors(
        self, queries: np.ndarray, k: int, floor: float, allowed: Restriction | None = None
    ) -> None:
        """The dense rankings the retrieval asks for after its BM25 rankings: asked for with them (`_ask`)."""
        self._expected = (np.atleast_2d(np.asarray(queries, dtype=np.float32)), k, allowed)

    def bm25_top(self, tokens: Sequence[str], k: int, allowed: Restriction | None = None) -> list[Hit]:
        return self.bm25_top_many([tokens], k, allowed)[0]

    def bm25_top_spread(
        self, tokens: Sequence[str], k: int, spread: Spread, allowed: Restriction | None = None
    ) -> list[Hit]:
        # Turns read with their neighbours' words are this vault's alone: a team search ranks
        # every vault's own words, so that the vaults compare.
        return self.bm25_top(tokens, k, allowed)

    def bm25_top_many(
        self, queries: Sequence[Sequence[str]], k: int, allowed: Restriction | None = None
    ) -> list[list[Hit]]:
        """Every term's BM25 ranking, from the rows of the search's engine request (`_pool`): the first
        retrieval's request carries its BM25 queries with its dense ones (`expect_vectors`); later
        rankings (the second pass, a deeper one) rescore the rows it returned."""
        expected, self._expected = self._expected, None
        pool = self._pool_for(allowed, "lexical")
        if pool is None:
            dense, dense_k = np.zeros((0, 1), dtype=np.float32), 0
            if expected is not None and expected[2] == allowed:
                dense, dense_k = expected[0], expected[1]
            pool = self._ask(queries, k, dense, dense_k, allowed)
            self._pools.append((allowed, pool))
        return pool.bm25(queries, k)

    def vector_top(
        self,
        queries: np.ndarray,
        k: int,
        floor: float,
        allowed: Restriction | None = None,
        context: bool = False,
    ) -> list[list[Hit]]:
        """The cosine rankings of the rows the search's engine request returned (their vectors came with
        them): the retrieval's dense queries, the feedback vector and the second pass's alike."""
        q = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        if context:
            return [[] for _ in range(len(q))]  # dialog context is this vault's alone
        pool = self._pool_for(allowed, "dense")
        if pool is None:
            pool = self._ask([], k, q, k, allowed)
            self._pools.append((allowed, pool))
        return pool.dense(q, k, floor)

    def _pool_for(self, allowed: Restriction | None, kind: str) -> _Pool | None:
        """The rows of this search's engine request for the filter `allowed` that carried `kind` of query
        (`lexical` or `dense`; None: not asked yet)."""
        return next((pool for asked, pool in self._pools if asked == allowed and kind in pool.kinds), None)

    def _ask(
        self,
        queries: Sequence[Sequence[str]],
        k: int,
        dense: np.ndarray,
        dense_k: int,
        allowed: Restriction | None,
    ) -> _Pool:
        """One engine request carrying every BM25 query and every dense query (`request`), the filters
        as engine expressions, the rows' vectors returned: the union of every ranking's candidates as a
        `_Pool` that rescores them here. The shards of other vaults among them are read in one query
        of the text collection (`_read`)."""
        owner, engine = self._owner, self._owner.engine
        lexical_k, dense_k = min(max(k, 0), MAX_LIMIT), min(max(dense_k, 0), MAX_LIMIT)
        texts = [engine_terms(toks) for toks in queries if toks] if lexical_k > 0 else []
        for toks in queries:
            self._asked.update(toks)
        vectors = [r.tolist() for r in dense] if dense_k > 0 else []
        rows: list[dict[str, Any]] = []
        if texts or vectors:
            owner.wait_warm()
            try:
                res = engine.call(
                    "search",
                    partial(
                        request,
                        collection=engine.collection,
                        texts=texts,
                        lexical_k=lexical_k,
                        lexical_expr=self._filter(allowed),
                        vectors=vectors,
                        dense_k=dense_k,
                        dense_expr=self._filter(allowed, "has_vector == true"),
                        fields=[*self.FIELDS, *(("has_vector", "vector") if vectors else ())],
                    ),
                )
            except BackendError as exc:
                owner.engine_lost(
                    str(exc)
                )  # the index hears of it; other vaults' rows are the engine's alone
                raise
            rows = [dict(h.get("entity", h)) for hits in res for h in hits]
        ids = self._read(rows)
        own = owner.vault_name
        kept = set(ids)
        found: dict[str, np.ndarray] = {}
        for r in rows:
            if not r.get("has_vector") or r.get("vector") is None:
                continue
            nid = (
                str(r["node_id"])
                if r.get("vault") == own
                else foreign_key(str(r["vault"]), str(r["node_id"]))
            )
            if nid in kept:
                found.setdefault(nid, np.asarray(r["vector"], dtype=np.float32))
        kinds = {kind for kind, asked in (("lexical", texts), ("dense", vectors)) if asked}
        return _Pool(self, list(dict.fromkeys(ids)), found, kinds)


def request(
    client: Any,
    *,
    collection: str,
    texts: list[str],
    lexical_k: int,
    lexical_expr: str,
    vectors: list[list[float]],
    dense_k: int,
    dense_expr: str,
    fields: list[str],
) -> list[list[Any]]:
    """Every BM25 query (`texts`, `lexical_k` rows each) and every dense query (`vectors`, `dense_k` rows
    each) in one round trip: a `hybrid_search` of one request per query whose fused list is long enough
    to hold every request's rows (the union: the rankings are made here from the rows); one query alone
    is a plain search. Returns the hits in one list per request (the fused list once)."""
    asked = [("sparse", t, BM25_PARAMS, lexical_k, lexical_expr) for t in texts] + [
        ("vector", v, COSINE_PARAMS, dense_k, dense_expr) for v in vectors
    ]
    if len(asked) == 1:
        field, data, params, limit, expr = asked[0]
        return list(
            client.search(
                collection,
                data=[data],
                anns_field=field,
                search_params=params,
                limit=limit,
                filter=expr,
                output_fields=fields,
                consistency_level="Strong",
            )
        )
    from pymilvus import AnnSearchRequest, RRFRanker

    reqs = [
        AnnSearchRequest([data], field, params, limit, expr=expr or None)
        for field, data, params, limit, expr in asked
    ]
    total = min(sum(a[3] for a in asked), MAX_LIMIT)
    return list(
        client.hybrid_search(
            collection, reqs, RRFRanker(), limit=total, output_fields=fields, consistency_level="Strong"
        )
    )


class Cosines:
    """Rows' vectors, normalised once, ranked by their cosine with a query vector (a team search's rows,
    the reader's rows)."""

    def __init__(self, ids: Sequence[str], vectors: Mapping[str, np.ndarray]) -> None:
        self.names = [n for n in ids if n in vectors]
        """The rows that have a vector, in the order of `ids`."""
        matrix = (
            np.stack([vectors[n] for n in self.names]).astype(np.float32)
            if self.names
            else np.zeros((0, 1), dtype=np.float32)
        )
        norms = np.linalg.norm(matrix, axis=1) if len(matrix) else np.zeros(0, dtype=np.float32)
        norms[norms == 0] = 1.0
        self._matrix = matrix / norms[:, None]

    def ranking(self, row: np.ndarray) -> list[Hit]:
        """Every row with a vector by its cosine with `row`, best first (none for a zero vector or a
        vector of another length)."""
        norm = float(np.linalg.norm(row))
        if not self.names or norm == 0.0 or row.shape[0] != self._matrix.shape[1]:
            return []
        sims = self._matrix @ (row / norm)
        return sorted(zip(self.names, sims.tolist(), strict=True), key=lambda h: (-h[1], h[0]))


class _Pool:
    """The rows of a search's one engine request (`TeamSnapshot._ask`), with their vectors: every
    ranking of the search is made from them.

    A BM25 ranking is the rows holding one of its words, scored with the collection's statistics; a
    cosine ranking is the rows' cosines with its query vector. The engine returned each ranking of
    the request's top rows (exact: the vector index is probed whole), so those rankings are the
    engine's; a ranking the request did not carry (the feedback vector, the second pass's words and
    vector) ranks the rows it returned, which hold the head of every ranking of the first pass.
    """

    def __init__(
        self, view: TeamSnapshot, ids: list[str], vectors: dict[str, np.ndarray], kinds: AbstractSet[str]
    ) -> None:
        self._view, self._ids = view, ids
        self.kinds = kinds
        """The kinds of query the request carried (`lexical`, `dense`): the rankings it can answer."""
        self._bm25: dict[tuple[str, ...], list[Hit]] = {}
        self._kept: dict[str, Mapping[str, int]] = {}
        self._cos: dict[bytes, list[Hit]] = {}
        self._cosines = Cosines(ids, vectors)

    def _counts(self, nid: str) -> Mapping[str, int]:
        """A candidate's token counts, made once per pool (every term's ranking reads them)."""
        found = self._kept.get(nid)
        if found is None:
            found = self._kept[nid] = self._view.lexical.term_counts(nid)
        return found

    def bm25(self, queries: Sequence[Sequence[str]], k: int) -> list[list[Hit]]:
        """Each token list's ranking from these rows (its best `k`)."""
        out: list[list[Hit]] = []
        for toks in queries:
            if not toks:
                out.append([])
                continue
            key = tuple(toks)
            hits = self._bm25.get(key)
            if hits is None:
                wanted = set(toks)
                ids = [nid for nid in self._ids if not wanted.isdisjoint(self._counts(nid))]
                scores = self._view.scores_of(toks, ids, self._kept)
                hits = sorted(
                    ((nid, float(scores.get(nid, 0.0))) for nid in ids), key=lambda h: (-h[1], h[0])
                )
                self._bm25[key] = hits
            out.append(hits[:k])
        return out

    def dense(self, queries: np.ndarray, k: int, floor: float) -> list[list[Hit]]:
        """Each query row's cosine ranking of these rows (its best `k` at or above `floor`)."""
        out: list[list[Hit]] = []
        for row in queries:
            key = row.tobytes()
            hits = self._cos.get(key)
            if hits is None:
                hits = self._cos[key] = self._cosines.ranking(row)
            out.append([h for h in hits[:k] if h[1] >= floor])
        return out
