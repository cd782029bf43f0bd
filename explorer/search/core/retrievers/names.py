"""The name retriever: notes whose title, file name or alias the query names, as one more ranked list.

Obsidian users find a note by typing its name. Body retrievers rank a note's name only as a few
words among many, so a short note named exactly what was typed can lose to a long one that
repeats the words ("Kimchi" against "Kimchi troubleshooting"). This stage matches the query
against each note's names alone (title, file name, frontmatter `title` and `aliases`) and scores
how completely a name and the query cover each other: score = (IDF share of the query's words
found in the name) x (share of the name's words found in the query), 1.0 for a name made of the
query's words. Only the best-named notes are listed (those within `TIER` of the best score): a
rank-based fusion would otherwise give "Kimchi troubleshooting" almost the boost of "Kimchi" for
the query `kimchi`. Scores under `MIN_SCORE` are left out, so a question that merely mentions one
word of a long name adds no list. The list is fused by RRF like the BM25 and dense lists
(retriever `name`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

from rapidfuzz.distance import Indel

from explorer.vault.model import Note

_WORD = re.compile(r"\w+", re.UNICODE)

NamesOf = Callable[[Note], tuple[frozenset[str], ...]]
"""A note's name token sets (explorer.index.backend.Snapshot.name_tokens)."""

#: A name must cover the query and be covered by it at least this much (product of both shares).
MIN_SCORE = 0.5
#: Notes listed: those scoring at least the best score minus this.
TIER = 0.01
#: A query word found in the headings of a named note (not in its name) covers the query this
#: much, against 1 for a name word: "the section on Diet in Hamsters" names the note Hamsters and
#: a part of it. Under 1, so a name made of the query's words still outranks a shorter name whose
#: note has a heading with the rest ("Docker setup" over "Docker" with its "## Setup").
#: Chosen by leave-one-vault-out on benchmarks.section_query (BENCHMARKS.md#section-queries).
PART_WEIGHT = 0.9


class NameIndex:
    """Notes by the words of their names, refreshed from the index's notes when they change."""

    def __init__(self) -> None:
        self._notes: dict[str, Note] = {}
        self._names: dict[str, tuple[frozenset[str], ...]] = {}
        self._postings: dict[str, set[str]] = {}
        self._version = -1

    @property
    def version(self) -> int:
        """The index version the table holds (-1 before the first refresh)."""
        return self._version

    def refresh(
        self,
        notes: Mapping[str, Note],
        version: int,
        names_of: NamesOf,
        changed: Iterable[str] | None = None,
    ) -> None:
        """Bring the name table up to date with `notes` (cheap when nothing changed); `names_of` gives a note's names.

        `changed`, when known, holds every path whose note differs from the version the table
        holds; only those are looked at. Otherwise every note is compared with the one the table has.
        """
        if version == self._version:
            return
        if not self._notes:  # the first build: nothing to drop
            for path, note in notes.items():
                self._add(path, note, names_of)
            self._version = version
            return
        if changed is not None:
            for path in changed:
                now = notes.get(path)
                if now is None:
                    self._drop(path)
                elif self._notes.get(path) is not now:
                    self._drop(path)
                    self._add(path, now, names_of)
            self._version = version
            return
        for path in [p for p in self._notes if p not in notes]:
            self._drop(path)
        for path, note in notes.items():
            if self._notes.get(path) is not note:
                self._drop(path)
                self._add(path, note, names_of)
        self._version = version

    def _add(self, path: str, note: Note, names_of: NamesOf) -> None:
        names = names_of(note)
        self._notes[path] = note
        self._names[path] = names
        postings = self._postings
        for name in names:
            for tok in name:
                hit = postings.get(tok)
                if hit is None:
                    postings[tok] = {path}
                else:
                    hit.add(path)

    def _drop(self, path: str) -> None:
        names = self._names.pop(path, ())
        self._notes.pop(path, None)
        for name in names:
            for tok in name:
                paths = self._postings.get(tok)
                if paths is not None:
                    paths.discard(path)
                    if not paths:
                        del self._postings[tok]

    def words(self, path: str) -> frozenset[str]:
        """Every word of the note's names (title, file name, aliases), as the query's tokens are written."""
        return frozenset().union(*self._names.get(path, ()))

    def search(
        self,
        tokens: Iterable[str],
        idf: Callable[[str], float],
        limit: int,
        allowed: Callable[[str], bool] | None = None,
        part_words: Callable[[str], frozenset[str]] | None = None,
    ) -> list[tuple[str, float]]:
        """(path, score) of the notes whose best name covers the query, best first, ties by path.

        `part_words(path)`, when given, are the words of the note's headings: a query word among
        them (and not in the name) covers the query at PART_WEIGHT. It is asked only for notes
        whose name is covered enough by the query to reach MIN_SCORE that way.
        """
        query = list(dict.fromkeys(tokens))
        if not query:
            return []
        weights = {t: max(idf(t), 0.1) for t in query}
        total = sum(weights.values())
        qset = set(query)
        candidates: set[str] = set()
        for tok in query:
            candidates |= self._postings.get(tok, set())
        scored: list[tuple[str, float]] = []
        for path in candidates:
            if allowed is not None and not allowed(path):
                continue
            best = 0.0
            parts: frozenset[str] | None = None
            for name in self._names.get(path, ()):
                matched = name & qset
                if not matched:
                    continue
                named = len(matched) / len(name)
                # Summed in a fixed order and rounded: set order varies between runs.
                covered = sum(weights[t] for t in sorted(matched))
                if part_words is not None and named >= MIN_SCORE and len(matched) < len(qset):
                    if parts is None:
                        parts = part_words(path)
                    covered += PART_WEIGHT * sum(weights[t] for t in sorted((qset & parts) - matched))
                score = round(covered / total * named, 6)
                best = max(best, score)
            if best >= MIN_SCORE:
                scored.append((path, best))
        if not scored:
            return []
        top = max(score for _, score in scored)
        scored = [p for p in scored if p[1] >= top - TIER]
        scored.sort(key=lambda p: (-p[1], p[0]))
        return scored[:limit]


def _name_words(text: str) -> tuple[str, ...]:
    """A name or query as its case-folded words (`hamster-diet`, `Hamster diet` and `hamster_diet` alike)."""
    return tuple(_WORD.findall(text.replace("_", " ").casefold()))


def names_note(query: str, note: Note) -> bool:
    """True when `query` is one of the note's names, word for word (its title, its file name or a
    frontmatter alias; case, hyphens and underscores aside). A conversation turn's file name
    (`context`) names no turn: it is the same in every turn folder."""
    words = _name_words(query)
    if not words:
        return False
    turn = note.source_type == "turn_summary"
    return any(_name_words(name) == words for name in note.names if not (turn and name == note.stem))


def name_likeness(query: str, note: Note) -> float:
    """How nearly `query` spells one of the note's names, 0-1: the best, over its names (as `names_note`
    reads them: case, hyphens and underscores aside), of 1 - (letters inserted and deleted to turn one
    into the other) / (their lengths summed). 1 for the name itself; one letter wrong in a ten-letter
    name about 0.9 (`GDScript For Lpoo`, `ch15-03-dro`); 0 for an empty query."""
    words = " ".join(_name_words(query))
    if not words:
        return 0.0
    turn = note.source_type == "turn_summary"
    return max(
        (
            Indel.normalized_similarity(words, " ".join(_name_words(name)))
            for name in note.names
            if not (turn and name == note.stem)
        ),
        default=0.0,
    )
