"""Typo tolerance: a query word that is neither in the vault nor a word of its language also searches
the vault's closest words.

A word is corrected only when its folded form is absent from the BM25 vocabulary (so a rare but
real word of the vault is never "corrected"), it is not a common word of the vault's languages (a
word frequency list shipped offline, `Lexicon`: `proof` is kept though no note says it), it has
at least 4 letters, and it is not a number. Candidates are within an edit distance that grows with
the word: 1 for 4-7 letters, 2 from 8 (optimal string alignment, by rapidfuzz: a swap of two
neighbouring letters is one edit). They come from two places: the vocabulary itself, the word
compared both folded (stemmed, as the vocabulary is) and as typed, since a typo can change what the
stemmer strips (`brewin` stems to itself, `brewing` to `brew`); and the English words near the word
as typed whose folded form the vault holds (`attachmnet` -> `attachment`, searched as the
vault's `attach`, which no edit of the typed word reaches). The closest candidates win, then the
most frequent in the vault; at most `MAX_CANDIDATES`.

The vault's languages are English and any other language of `SIGNATURES` whose commonest words the
vocabulary holds: a German vault keeps `brot` as a word. The lists load on first need, in the
searching thread (never at import), once per process.
"""

from __future__ import annotations

import gzip
import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources

from rapidfuzz import process
from rapidfuzz.distance import OSA

from explorer.text.tokenize import fold_word, is_stopword

MAX_CANDIDATES = 2
#: Closest vocabulary words looked at per query word (by distance, then vocabulary order).
EXTRACT_LIMIT = 50
#: A language is the vault's when the vocabulary holds at least this share of its `SIGNATURES`.
SIGNATURE_SHARE = 0.4
#: Common function words of each language shipped besides English, telling a vault written in it.
SIGNATURES: dict[str, tuple[str, ...]] = {
    "de": tuple("und nicht ist ich sie mit auf für dem den eine sich auch wird noch oder wenn dass".split()),
    "fr": tuple("les des est pas une que qui dans pour sur avec sont mais nous vous cette être aux".split()),
    "es": tuple("los las del que una por con para como pero más está son muy también hay esta".split()),
    "it": tuple("il che della per una sono con non gli nel anche come questo molto più alla".split()),
    "pt": tuple("que não uma com para por mais como dos das foi são também muito pelo isso".split()),
    "nl": tuple("het een van niet dat zijn voor met ook maar nog wel deze worden naar".split()),
}
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
    shown: tuple[str, ...] = ()
    """The candidates as a person reads them (`attachment` for the term `attach`), in their order."""


def max_edits(word: str) -> int:
    """Edits allowed for a word of this length (0: too short to correct)."""
    n = len(word)
    return 0 if n < 4 else 1 if n <= 7 else 2


class Lexicon:
    """The common words of one language; those near a word are found among the words of the same
    first letter and a close length (kept so on first need: people seldom miss a word's first
    letter, and that cuts the words compared about twentyfold)."""

    def __init__(self, words: Iterable[str]) -> None:
        self.words = frozenset(words)
        self._buckets: dict[tuple[str, int], list[str]] | None = None

    def __contains__(self, word: object) -> bool:
        return word in self.words

    def near(self, word: str, edits: int) -> list[tuple[int, str]]:
        """(distance, word) of the words within `edits` of `word` that begin with its first letter."""
        if self._buckets is None:
            buckets: dict[tuple[str, int], list[str]] = {}
            for w in self.words:
                if w:
                    buckets.setdefault((w[0], len(w)), []).append(w)
            self._buckets = buckets
        out: list[tuple[int, str]] = []
        for length in range(max(1, len(word) - edits), len(word) + edits + 1):
            bucket = self._buckets.get((word[:1], length))
            if bucket:
                for term, dist, _i in process.extract(
                    word, bucket, scorer=OSA.distance, score_cutoff=edits, limit=None
                ):
                    out.append((int(dist), term))
        return out


def read_words(lang: str) -> list[str]:
    """The words of language `lang` from pyspellchecker's lists (read as data: its code is not imported).

    The lists are JSON objects of plain words (`{"word": count, ...}`, no escapes): split on the
    quotes, several times faster than decoding the JSON (the counts are not needed)."""
    data = resources.files("spellchecker").joinpath("resources", f"{lang}.json.gz").read_bytes()
    text = gzip.decompress(data).decode("utf-8")
    if "\\" in text:  # an escaped word: decode the list as JSON
        return list(json.loads(text))
    return text.split('"')[1::2]


_lexicons: dict[str, Lexicon | None] = {}
_lexicons_lock = threading.Lock()


def lexicon(lang: str) -> Lexicon | None:
    """The common words of `lang` (loaded once per process); None when the list cannot be read."""
    with _lexicons_lock:
        if lang not in _lexicons:
            try:
                _lexicons[lang] = Lexicon(read_words(lang))
            except (OSError, ValueError, ModuleNotFoundError):
                _lexicons[lang] = None
        return _lexicons[lang]


def vault_languages(vocabulary: Mapping[str, float]) -> tuple[str, ...]:
    """English and every language of `SIGNATURES` whose function words the vocabulary holds."""
    found = ["en"]
    for lang, words in SIGNATURES.items():
        held = sum(1 for w in words if fold_word(w) in vocabulary)
        if held >= SIGNATURE_SHARE * len(words):
            found.append(lang)
    return tuple(found)


Lexicons = Callable[[Mapping[str, float]], Sequence[Lexicon]]
"""The word lists of a vocabulary's languages."""


def shipped_lexicons(vocabulary: Mapping[str, float]) -> list[Lexicon]:
    """The shipped lists of the vocabulary's languages (`vault_languages`) that could be read."""
    return [lex for lang in vault_languages(vocabulary) if (lex := lexicon(lang)) is not None]


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

    `lexicons` gives the word lists of a vocabulary's languages (`shipped_lexicons` by default);
    they are asked for once per vocabulary lineage, at the first word missing from the vault.
    """

    def __init__(self, lexicons: Lexicons | None = None) -> None:
        self._source: object | None = None
        self._count = 0
        self._by_length: dict[int, tuple[list[str], list[int]]] = {}
        """Length -> (words of that length, each one's position in the whole word list)."""
        self._lineage: object | None = None
        self._seen = 0
        self._lexicons_for = lexicons or shipped_lexicons
        self._languages: tuple[object, list[Lexicon]] | None = None
        """(the vocabulary lineage they were chosen for, the word lists of its languages)."""

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
            lexicons = self._lexicons(vocabulary)
            if any(low in lex for lex in lexicons):
                continue  # a word of the language, which this vault happens not to use
            found = self._closest((token, low), edits, vocabulary)
            spelled: dict[str, str] = {}
            for lex in lexicons[:1]:  # English: the other languages' words are not stemmed apart
                for dist, near in sorted(lex.near(low, edits)):
                    term = fold_word(near)
                    if len(term) >= 3 and term in vocabulary and dist <= found.get(term, edits + 1):
                        if dist < found.get(term, edits + 1):
                            spelled.pop(term, None)
                        found[term] = dist
                        spelled.setdefault(term, near)
            if found:
                dist = min(found.values())
                best = sorted((t for t, d in found.items() if d == dist), key=lambda t: (-doc_freq(t), t))
                best = best[:MAX_CANDIDATES]
                shown = tuple(spelled.get(t) or _spelled(t, low, token) for t in best)
                out.append(Correction(word, token, tuple(best), dist, shown))
        return out

    def _lexicons(self, vocabulary: Mapping[str, float]) -> list[Lexicon]:
        """The word lists of the vocabulary's languages, chosen once per vocabulary lineage."""
        lineage = getattr(vocabulary, "vocabulary", None)
        key = lineage if isinstance(getattr(lineage, "terms", None), list) else vocabulary
        if self._languages is None or self._languages[0] is not key:
            self._languages = (key, list(self._lexicons_for(vocabulary)))
        return self._languages[1]

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
                    form, words, scorer=OSA.distance, score_cutoff=edits, limit=None
                ):
                    hits.append((int(dist), position[i], term))
            hits.sort()
            for dist, _pos, term in hits[:EXTRACT_LIMIT]:
                if len(term) >= 3 and term in vocabulary:
                    found[term] = min(dist, found.get(term, edits + 1))
        return found


def _spelled(term: str, low: str, token: str) -> str:
    """`term` (a folded vocabulary word) as a person would read it beside the word typed: with the
    ending the stemmer took from the typed word when it folds back to `term` (`troubleshoot` for
    `trubleshooting` reads `troubleshooting`), else as it is."""
    ending = low[len(token) :] if low.startswith(token) else ""
    return term + ending if ending and fold_word(term + ending) == term else term


def corrected_tokens(tokens: Sequence[str], corrections: Sequence[Correction]) -> list[str]:
    """`tokens` with each corrected token replaced by its candidates."""
    swap = {c.token: c.candidates for c in corrections}
    out: list[str] = []
    for tok in tokens:
        out.extend(swap.get(tok, (tok,)))
    return out
