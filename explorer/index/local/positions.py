"""The positional index under the classic cursor tools: each note's folded words as term ids with
their character spans, positional postings, document frequencies, and the vault's words as written
(for fuzzy matching), kept in step with the notes one note at a time."""

from __future__ import annotations

import math
import threading
import unicodedata
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate
from typing import Any

from explorer.text.tokenize import fold_word, tokenize_spans
from explorer.vault.model import Note

#: The most vocabulary terms one fuzzy keyword word expands to.
MAX_EXPANSIONS = 50
#: The least similarity (0..1) a fuzzy match needs.
FUZZY_MIN_SIMILARITY = 0.35

NoteSource = Callable[[], "tuple[int, Mapping[str, Note]]"]

_EMPTY = array("i")


@dataclass(slots=True)
class NotePositions:
    """One note's positional index, in flat integer arrays (a few bytes per word)."""

    note: Note
    ids: array
    """Term id (of the folded token) at each word position."""
    starts: array
    """Character start of each word position."""
    ends: array
    """Character end of each word position."""
    uniq: array
    """The note's distinct term ids, ascending."""
    offs: array
    """Term uniq[k] occurs at word positions order[offs[k]:offs[k + 1]]."""
    order: array
    """Word positions grouped by term id, ascending within a group."""
    surfaces: frozenset[str] | None = None
    """Distinct words as written, lower-cased and accent-stripped but not stemmed (for fuzzy
    matching; computed on the first fuzzy search)."""

    def positions(self, tid: int) -> array:
        """Word positions of a term id, ascending (empty when absent)."""
        k = bisect_left(self.uniq, tid)
        if k < len(self.uniq) and self.uniq[k] == tid:
            return self.order[self.offs[k] : self.offs[k + 1]]
        return _EMPTY

    def has(self, tid: int) -> bool:
        """True when the term id occurs in the note."""
        k = bisect_left(self.uniq, tid)
        return k < len(self.uniq) and self.uniq[k] == tid


class PositionalIndex:
    """Positional postings of every note's raw text, kept in step with the notes.

    Each note keeps its folded tokens (the tokenizer of the hybrid index) as term ids with their
    character spans in the raw text, and its positional postings (term -> word positions) as
    flat integer arrays searched by bisection; document frequencies are kept across notes.
    `add_note` / `remove_note` cost work proportional to one note (term ids are never reused,
    so a term that leaves the vault keeps its id). When built with `source`, every read first
    brings the index up to date with it: only notes whose object changed are re-tokenized.
    """

    def __init__(self, lock: threading.RLock | None = None, source: NoteSource | None = None) -> None:
        """Create an empty index.

        Args:
            lock: The lock that guards the notes (share the VaultIndex's so a search sees one batch).
            source: Returns (version, notes) of the owning index; reads sync to it first.
        """
        self.lock = lock or threading.RLock()
        self.version = -1
        self._source = source
        self._docs: dict[str, NotePositions] = {}
        self._ids: dict[str, int] = {}
        self._terms: list[str] = []
        self._df: Counter[int] = Counter()
        self._sdf: Counter[str] = Counter()
        self._vocab_dirty = True
        self._vocab_blob = ""
        self._vocab_by_len: dict[int, list[str]] = {}
        self._forms: dict[str, list[str]] = {}
        self._surfaces_on = False

    # -- updates ---------------------------------------------------------------------------
    def __len__(self) -> int:
        with self.lock:
            self.update()
            return len(self._docs)

    def __contains__(self, path: object) -> bool:
        with self.lock:
            self.update()
            return path in self._docs

    def add_note(self, note: Note) -> None:
        """Index a note, replacing any earlier version of the same path."""
        spans = tokenize_spans(note.text)
        tokens = [t for t, _, _ in spans]
        starts = array("i", [s for _, s, _ in spans])
        ends = array("i", [e for _, _, e in spans])
        with self.lock:
            ids, terms = self._ids, self._terms
            for term in set(tokens):
                if term not in ids:
                    ids[term] = len(terms)
                    terms.append(term)
            tids = array("i", map(ids.__getitem__, tokens))
            counts = Counter(tids)
            uniq = array("i", sorted(counts))
            offs = array("i", accumulate((counts[u] for u in uniq), initial=0))
            order = array("i", sorted(range(len(tids)), key=tids.__getitem__))
            doc = NotePositions(note, tids, starts, ends, uniq, offs, order)
            self.remove_note(note.path)
            self._docs[note.path] = doc
            self._df.update(uniq)
            if self._surfaces_on:
                self._add_surfaces(doc)

    def _add_surfaces(self, doc: NotePositions) -> None:
        text = doc.note.text
        doc.surfaces = frozenset(map(plain_word, {text[s:e] for s, e in zip(doc.starts, doc.ends)}))
        for word in doc.surfaces:
            if self._sdf[word] == 0:
                self._vocab_dirty = True
            self._sdf[word] += 1

    def remove_note(self, path: str) -> bool:
        """Drop a note; False when it was not indexed."""
        with self.lock:
            doc = self._docs.pop(path, None)
            if doc is None:
                return False
            _decrement(self._df, doc.uniq)
            if doc.surfaces is not None and _decrement(self._sdf, doc.surfaces):
                self._vocab_dirty = True
            return True

    def sync(self, notes: Mapping[str, Note], version: int) -> tuple[int, int]:
        """Bring the index in line with `notes`; returns (notes re-indexed, notes dropped).

        A note is re-indexed only when its object differs from the one indexed (a re-parsed note
        is a new object), so a sync after a one-note batch costs one note plus a dict walk.
        """
        with self.lock:
            gone = [p for p in self._docs if p not in notes]
            for path in gone:
                self.remove_note(path)
            changed = 0
            for path, note in notes.items():
                doc = self._docs.get(path)
                if doc is None or doc.note is not note:
                    self.add_note(note)
                    changed += 1
            self.version = version
            return changed, len(gone)

    def update(self) -> None:
        """Sync with the owning index when its version moved (no-op without a source)."""
        if self._source is None:
            return
        with self.lock:
            version, notes = self._source()
            if version != self.version:
                self.sync(notes, version)

    # -- reading ---------------------------------------------------------------------------
    def paths(self) -> list[str]:
        """Indexed note paths."""
        with self.lock:
            self.update()
            return sorted(self._docs)

    def note(self, path: str) -> Note | None:
        """The indexed version of a note."""
        with self.lock:
            self.update()
            doc = self._docs.get(path)
            return doc.note if doc else None

    def postings(self, path: str) -> dict[str, list[tuple[int, int]]]:
        """Folded token -> (char start, char end) of each occurrence in the note's raw text."""
        with self.lock:
            self.update()
            doc = self._docs.get(path)
            if doc is None:
                return {}
            return {
                self._terms[tid]: [
                    (doc.starts[p], doc.ends[p]) for p in doc.order[doc.offs[k] : doc.offs[k + 1]]
                ]
                for k, tid in enumerate(doc.uniq)
            }

    def df(self, term: str) -> int:
        """Number of notes that contain the folded term."""
        with self.lock:
            self.update()
            return self._df.get(self._ids.get(term, -1), 0)

    def _tids(self, terms: Iterable[str]) -> tuple[int, ...]:
        """Term ids of folded terms (-1 for a term no note has ever had)."""
        return tuple(self._ids.get(t, -1) for t in terms)

    def idf(self, df: int) -> float:
        """Smoothed inverse document frequency: ln(1 + N / df)."""
        return math.log(1.0 + len(self._docs) / max(df, 1))

    def _unit_occurrences(self, doc: NotePositions, tids: tuple[int, ...]) -> list[int]:
        """Word positions where the terms `tids` stand side by side in `doc`."""
        lists = [doc.positions(t) for t in tids]
        if not all(lists):
            return []
        if len(tids) == 1:
            return list(lists[0])
        j = min(range(len(tids)), key=lambda i: len(lists[i]))
        out = []
        n = len(doc.ids)
        for p0 in lists[j]:
            p = p0 - j
            if p >= 0 and p + len(tids) <= n and all(doc.ids[p + i] == t for i, t in enumerate(tids)):
                out.append(p)
        return out

    def _candidate_docs(self, tids: Iterable[int], require_all: bool) -> list[NotePositions]:
        wanted = set(tids)
        if require_all:
            if -1 in wanted:
                return []
            return [d for d in self._docs.values() if all(d.has(t) for t in wanted)]
        wanted.discard(-1)
        return [d for d in self._docs.values() if any(d.has(t) for t in wanted)]

    # -- the vault's words as written (fuzzy matching) ---------------------------------------
    def _expand(self, term: str, raw: str) -> dict[str, float]:
        """Words of the vault (as written, unstemmed) that fuzzily match one keyword word, with their similarity."""
        found: dict[str, float] = {}

        def offer(v: str, sim: float) -> None:
            if sim > found.get(v, 0.0):
                found[v] = sim

        for v in self._forms.get(term, ()):
            offer(v, 1.0)  # the same word, maybe inflected: it folds to the same term
        q = raw or term
        if q in self._sdf:
            offer(q, 1.0)
        if len(q) >= 3:
            # Words containing q (inflections, compounds): scan the joined vocabulary.
            blob = self._vocab_blob
            i = blob.find(q)
            while i != -1:
                s = blob.rfind("\n", 0, i) + 1
                e = blob.find("\n", i)
                v = blob[s:e]
                if v != q and len(q) / len(v) >= 0.3:
                    offer(v, 0.9 * len(q) / len(v))
                i = blob.find(q, e)
            # Words contained in q, at least half of it (a stem, a part of a compound).
            for size in range(max(3, (len(q) + 1) // 2), len(q)):
                for a in range(len(q) - size + 1):
                    v = q[a : a + size]
                    if v in self._sdf:
                        offer(v, 0.8 * size / len(q))
        # Typos are only looked for when the word is not in the vault as written.
        limit = (
            0 if found.get(q) == 1.0 or term in self._forms else 2 if len(q) >= 8 else 1 if len(q) >= 4 else 0
        )
        if limit:
            for n in range(len(q) - limit, len(q) + limit + 1):
                for v in self._vocab_by_len.get(n, ()):
                    if v[0] != q[0] and v[-1] != q[-1]:
                        continue
                    d = _edit_distance(q, v, limit)
                    if 0 < d <= limit:
                        offer(v, 1.0 - d / max(len(q), len(v)))
        if not found:
            return {}
        # Weak matches are noise next to a strong one: keep those at least 60% as similar.
        floor = max(FUZZY_MIN_SIMILARITY, 0.6 * max(found.values()))
        ranked = sorted(
            ((v, sim) for v, sim in found.items() if sim >= floor),
            key=lambda kv: (-kv[1], -self._sdf.get(kv[0], 0), kv[0]),
        )
        return dict(ranked[:MAX_EXPANSIONS])

    def _build_vocab(self) -> None:
        if not self._surfaces_on:
            # The words as written are only needed by fuzzy matching: gathered on its first use.
            self._surfaces_on = True
            for doc in self._docs.values():
                self._add_surfaces(doc)
        if not self._vocab_dirty:
            return
        vocab = sorted(self._sdf)
        self._vocab_blob = "\n" + "\n".join(vocab) + "\n"
        by_len: dict[int, list[str]] = {}
        forms: dict[str, list[str]] = {}
        for v in vocab:
            by_len.setdefault(len(v), []).append(v)
            forms.setdefault(fold_word(v), []).append(v)
        self._vocab_by_len = by_len
        self._forms = forms
        self._vocab_dirty = False


def _decrement(counter: Counter[Any], keys: Iterable[Any]) -> bool:
    """Count each key down by one, deleting those that reach zero; True when any was deleted."""
    dropped = False
    for key in keys:
        left = counter[key] - 1
        if left <= 0:
            del counter[key]
            dropped = True
        else:
            counter[key] = left
    return dropped


@lru_cache(maxsize=200_000)
def plain_word(word: str) -> str:
    """`word` lower-cased, accents and apostrophes stripped (not stemmed): a word as fuzzy matching compares it."""
    w = unicodedata.normalize("NFKD", word.casefold())
    return "".join(c for c in w if not unicodedata.combining(c)).replace("'", "").replace("’", "")


def _edit_distance(a: str, b: str, limit: int) -> int:
    """Optimal-string-alignment distance of `a` and `b` (adjacent swaps cost 1), or limit + 1 past limit."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        best = i
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            v = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                v = min(v, prev2[j - 2] + 1)
            cur[j] = v
            best = min(best, v)
        if best > limit:
            return limit + 1
        prev2, prev = prev, cur
    return prev[-1] if prev[-1] <= limit else limit + 1
