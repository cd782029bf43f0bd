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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

from explorer.text.tokenize import fold_word, is_stopword

MAX_CANDIDATES = 2
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
    """Finds corrections against one vocabulary (rebuilt when the vocabulary object changes)."""

    def __init__(self) -> None:
        self._source: object | None = None
        self._terms: list[str] = []

    def corrections(
        self, text: str, vocabulary: Mapping[str, float], doc_freq: Callable[[str], int]
    ) -> list[Correction]:
        """Corrections for the words of `text` missing from `vocabulary` (term -> anything)."""
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

    def _closest(self, forms: Sequence[str], edits: int, vocabulary: Mapping[str, float]) -> dict[str, int]:
        if vocabulary is not self._source:
            self._terms = [t for t in vocabulary if t.isalpha()]
            self._source = vocabulary
        found: dict[str, int] = {}
        for form in dict.fromkeys(forms):
            for term, dist, _ in process.extract(
                form, self._terms, scorer=Levenshtein.distance, score_cutoff=edits, limit=50
            ):
                if len(term) >= 3:
                    found[term] = min(int(dist), found.get(term, edits + 1))
        return found


def corrected_tokens(tokens: Sequence[str], corrections: Sequence[Correction]) -> list[str]:
    """`tokens` with each corrected token replaced by its candidates."""
    swap = {c.token: c.candidates for c in corrections}
    out: list[str] = []
    for tok in tokens:
        out.extend(swap.get(tok, (tok,)))
    return out
