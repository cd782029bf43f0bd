"""Typo tolerance: a query word found nowhere in the vault also searches the vault's closest words.

A word is corrected only when its folded form is absent from the BM25 vocabulary (so a rare but
real word is never "corrected"), it has at least 4 letters, and it is not a number. Candidates are
vocabulary terms within an edit distance that grows with the word: 1 for 4-7 letters, 2 from 8
(Levenshtein, by rapidfuzz). The word is compared both folded (stemmed, as the vocabulary is) and
as typed, since a typo can change what the stemmer strips (`brewin` stems to itself, `brewing` to
`brew`). The closest candidates win, then the most frequent; at most `MAX_CANDIDATES`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

from explorer.text.tokenize import fold_word, is_stopword

MAX_CANDIDATES = 2
#: Closest vocabulary words looked at per query word (by distance, then vocabulary order).
EXTRACT_LIMIT = 50
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")


@dataclass(frozen=True, slots=True)
class Correction:
    """A query word absent from the vault and the vault words searched in its place."""

    word: str
    """As typed."""
    token: str
    """Its folded form (what BM25 would have looked up)."""
    candidates: tuple[str, ...]
    """Vocabulary terms searched instead, closest first."""
    distance: int
    """Their edit distance to the word."""


def max_edits(word: str) -> int:
    """Edits allowed for a word of this length (0: too short to correct)."""
    n = len(word)
    return 0 if n < 4 else 1 if n <= 7 else 2


class Speller:
    """Finds corrections against one vocabulary (its word list follows the vocabulary when it changes).

    An idf table that carries a `vocabulary` (an append-only `terms` list shared by the versions
    of one index: the local backend's) is read from that list, the first time whole (not by
    iterating the table, which would compute every term's idf), then only the terms added since
    the last version seen; any other mapping is read whole when it is another object than the last.
    Candidates that are no longer in the vocabulary are left out.

    The words are kept by length, so a word is compared only with those whose length is within
    its edit distance (no other can be close enough); the best `EXTRACT_LIMIT` of those, by
    distance and then by their order in the vocabulary, are the ones a scan of the whole list
    would keep.
    """

    def __init__(self) -> None:
        self._source: object | None = None
        self._count = 0
        self._by_length: dict[int, tuple[list[str], list[int]]] = {}
        """Length -> (words of that length, each one's position in the whole word list)."""
        self._lineage: object | None = None
        self._seen = 0

    def corrections(
        self, text: str, vocabulary: Mapping[str, float], doc_freq: Callable[[str], int]
    ) -> list[Correction]:
        """Corrections for the words of `text` missing from `vocabulary` (term -> anything)."""
        if isinstance(getattr(getattr(vocabulary, "vocabulary", None), "terms", None), list):
            # Followed at every query, not only at the first missing word: each version then
            # costs the terms it added, and the whole list is read once, at the first search
            # (not at the first search after a save, which the user is waiting on).
            self._follow(vocabulary)
        out: list[Correction] = []
        seen: set[str] = set()
        for word in _WORD.findall(text):
            low = word.casefold()
            token = fold_word(word)
            if low in seen or token in vocabulary or is_stopword(low) or not token.isascii():
                continue
            seen.add(low)
            edits = max_edits(low)
            if not edits:
                continue
            found = self._closest((token, low), edits, vocabulary)
            if found:
                dist = min(found.values())
                best = sorted((t for t, d in found.items() if d == dist), key=lambda t: (-doc_freq(t), t))
                out.append(Correction(word, token, tuple(best[:MAX_CANDIDATES]), dist))
        return out

    def _follow(self, vocabulary: Mapping[str, float]) -> None:
        """Bring the word list up to date with `vocabulary`."""
        if vocabulary is self._source:
            return
        lineage = getattr(vocabulary, "vocabulary", None)
        terms = getattr(lineage, "terms", None)
        listed = len(terms) if isinstance(terms, list) else 0
        if isinstance(terms, list):
            # The vocabulary's own term list, not the table: iterating a table computes every
            # term's idf (25-70 ms at 10k notes) only to read the words.
            if lineage is not self._lineage or listed < self._seen:
                self._count = 0
                self._by_length = {}
                self._seen = 0
            self._add_words(terms[self._seen : listed])
        else:
            self._count = 0
            self._by_length = {}
            self._add_words(vocabulary)
        self._lineage = lineage if isinstance(terms, list) else None
        self._seen = listed
        self._source = vocabulary

    def _add_words(self, words: Iterable[str]) -> None:
        by_length = self._by_length
        n = self._count
        for word in words:
            if not word.isalpha():
                continue
            bucket = by_length.get(len(word))
            if bucket is None:
                bucket = by_length[len(word)] = ([], [])
            bucket[0].append(word)
            bucket[1].append(n)
            n += 1
        self._count = n

    def _closest(self, forms: Sequence[str], edits: int, vocabulary: Mapping[str, float]) -> dict[str, int]:
        self._follow(vocabulary)
        found: dict[str, int] = {}
        for form in dict.fromkeys(forms):
            hits: list[tuple[int, int, str]] = []
            for length in range(max(1, len(form) - edits), len(form) + edits + 1):
                bucket = self._by_length.get(length)
                if bucket is None:
                    continue
                words, position = bucket
                for term, dist, i in process.extract(
                    form, words, scorer=Levenshtein.distance, score_cutoff=edits, limit=None
                ):
                    hits.append((int(dist), position[i], term))
            hits.sort()
            for dist, _pos, term in hits[:EXTRACT_LIMIT]:
                if len(term) >= 3 and term in vocabulary:
                    found[term] = min(dist, found.get(term, edits + 1))
        return found


def corrected_tokens(tokens: Sequence[str], corrections: Sequence[Correction]) -> list[str]:
    """`tokens` with each corrected token replaced by its candidates."""
    swap = {c.token: c.candidates for c in corrections}
    out: list[str] = []
    for tok in tokens:
        out.extend(swap.get(tok, (tok,)))
    return out
